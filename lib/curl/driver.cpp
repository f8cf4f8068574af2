// SPDX-License-Identifier: BSL-1.0
// Drives one libcurl multi handle from Asio: socket and timer callbacks, waits, done messages.
//
// Serialization rule (the whole client follows it): one lock, no strand. Every piece of a
// client's state, the driver's below and the transfer queue above it, is touched only with the
// client's mutex held: by the handlers of the waits and the timer armed here, by the posted
// submit and cancel handlers, and by shutdown(), which the client's destructor may run on any
// thread while other threads run the executor. Every handler first locks the owner's weak
// reference (a handler that outlives the client does nothing), then the mutex, then checks
// `shut_`. The lock is uncontended except between io threads running this client's handlers at
// once and against a destructor; it is never held while a completion handler runs (those are
// posted to their own executors). libcurl's callbacks run inside curl_multi_* calls made with
// the lock held: they record what libcurl wants and arm waits, and never call curl_multi_*
// (libcurl refuses recursive calls); finished handles are removed after
// curl_multi_socket_action returns. The sockets' own lifetime (opened and closed through the
// driver, or behind its back): driver_sockets.cpp.

#include "driver.hpp"

#include <coretry/curl/error.hpp>
#include <coretry/detail/asio.hpp>

#include <chrono>
#include <system_error>

#include "transfer.hpp"
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coretry::curl::detail {

multi_driver::multi_driver(asio::any_io_executor ex, std::mutex& mutex, owner& o, counter& open,
                           counter& connects, const multi_limits& limits)
    : ex_(std::move(ex)), mutex_(mutex), owner_(o), open_(open), connects_(connects), timer_(ex_) {
  multi_ = curl_multi_init();
  if (!multi_)
    throw std::system_error(make_error_code(errc::failed_init), "curl_multi_init");
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &multi_driver::on_socket);
  curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &multi_driver::on_timer);
  curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, limits.max_idle_connections);
  curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS, limits.max_total_connections);
  curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, limits.max_host_connections);
  if (limits.max_concurrent_streams > 0)
    curl_multi_setopt(multi_, CURLMOPT_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
}

multi_driver::~multi_driver() {
  if (multi_)
    curl_multi_cleanup(multi_);
}

template <class F> auto multi_driver::locked(F f) const {
  return [life = life_, self = const_cast<multi_driver*>(this), f](auto&&... args) {
    if (auto keep = life.lock()) {
      std::lock_guard lock(self->mutex_);
      if (!self->shut_)
        f(*self, args...);
    }
  };
}

CURLcode multi_driver::install_socket_callbacks(CURL* easy) {
  CURLcode rc = curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, &multi_driver::on_open_socket);
  if (rc == CURLE_OK)
    rc = curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, static_cast<void*>(this));
  if (rc == CURLE_OK)
    rc = curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, &multi_driver::on_close_socket);
  if (rc == CURLE_OK)
    rc = curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, static_cast<void*>(this));
  return rc;
}

CURLMcode multi_driver::add(CURL* easy) {
  const CURLMcode rc = curl_multi_add_handle(multi_, easy);
  after_callbacks();
  return rc;
}

void multi_driver::remove(CURL* easy) {
  curl_multi_remove_handle(multi_, easy);
}

void multi_driver::shutdown() {
  if (shut_)
    return;
  shut_ = true;
  timer_.cancel();
  // The multi first: its cache closes idle connections through on_close_socket.
  curl_multi_cleanup(multi_);
  multi_ = nullptr;
  // What remains: our dup()s of libcurl's own descriptors, and of sockets libcurl closed
  // without the close callback. Every descriptor we watch is our own dup: close them all.
  for (auto& [fd, s] : sockets_) {
    coretry::detail::asio_error_code ec; // the out-parameter of Asio's own calls
    s->desc.close(ec);
    if (!s->foreign)
      open_.add(-1);
    (void)fd;
  }
  sockets_.clear();
}

void multi_driver::socket_action(curl_socket_t fd, int events) {
  int running = 0;
  curl_multi_socket_action(multi_, fd, events, &running);
  drain_messages();
  after_callbacks();
}

// A callback that failed (an exception caught inside libcurl) left a note; act on it here,
// where curl_multi_* may be called. A lost timer is re-armed from curl_multi_timeout; when even
// that fails, nothing would drive the transfers any more, so every one is aborted.
void multi_driver::after_callbacks() {
  if (shut_)
    return;
  if (timer_lost_) {
    timer_lost_ = false;
    long ms = -1;
    curl_multi_timeout(multi_, &ms);
    try {
      ++timer_generation_;
      arm_timer(ms);
    } catch (...) {
      owner_.abort_failed(true, make_error_code(errc::out_of_memory));
    }
  }
  if (callback_failed_) {
    callback_failed_ = false;
    owner_.abort_failed(false, make_error_code(errc::out_of_memory));
  }
}

void multi_driver::drain_messages() {
  int left = 0;
  bool freed = false;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE)
      continue;
    owner_.transfer_done(msg->easy_handle, msg->data.result);
    freed = true;
  }
  if (freed)
    owner_.transfers_freed();
}

// Arms the waits libcurl wants on `s` that are not armed yet. A wait armed after data already
// arrived (libcurl reads at most one buffer per call) must not sleep until the next packet,
// although Asio's reactors register descriptors edge-triggered. Asio's epoll reactor arms
// every `async_wait` with `EPOLL_CTL_MOD`, and the kernel reports a descriptor that is ready
// already at that moment (Asio 1.22 to 1.38, Boost 1.81: a wait is never speculative), so
// there the wait alone is enough. Elsewhere (another reactor, or io_uring as the default) the
// descriptor's readiness is tested with a poll of our own first, and a ready one gets its
// event posted. On epoll that poll would be one system call more per attempt (6.6 in all
// instead of 5.6: docs/benchmarks.md, "Where the HTTP client's CPU goes").
#if CORETRY_ASIO_BOOST
#if defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)
#define CORETRY_CURL_WAIT_TESTS_READINESS 1
#endif
#elif defined(ASIO_HAS_EPOLL) && !defined(ASIO_HAS_IO_URING_AS_DEFAULT)
#define CORETRY_CURL_WAIT_TESTS_READINESS 1
#endif
#ifndef CORETRY_CURL_WAIT_TESTS_READINESS
#define CORETRY_CURL_WAIT_TESTS_READINESS 0
#endif

void multi_driver::arm(socket_entry& s) {
  if (shut_)
    return;
  const bool want_read = (s.want & CURL_POLL_IN) != 0 && !s.reading;
  const bool want_write = (s.want & CURL_POLL_OUT) != 0 && !s.writing;
  if (!want_read && !want_write)
    return;
  pollfd p{s.desc.native_handle(),
           static_cast<short>((want_read ? POLLIN : 0) | (want_write ? POLLOUT : 0)), 0};
  const int ready = CORETRY_CURL_WAIT_TESTS_READINESS ? 0 : ::poll(&p, 1, 0);
  const bool error = ready > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0;
  auto arm_one = [&](bool write) {
    (write ? s.writing : s.reading) = true;
    const bool now = ready > 0 && (error || (p.revents & (write ? POLLOUT : POLLIN)) != 0);
    auto handler = locked([fd = s.fd, id = s.id, write](multi_driver& d, std::error_code ec) {
      d.on_wait(fd, id, write, ec);
    });
    if (now)
      asio::post(ex_, [handler] { handler(std::error_code()); });
    else
      s.desc.async_wait(write ? asio::posix::descriptor_base::wait_write
                              : asio::posix::descriptor_base::wait_read,
                        handler);
  };
  if (want_read)
    arm_one(false);
  if (want_write)
    arm_one(true);
}

void multi_driver::on_wait(curl_socket_t fd, std::uint64_t id, bool write, std::error_code ec) {
  auto it = sockets_.find(fd);
  if (it == sockets_.end() || it->second->id != id)
    return; // the socket was closed (or its number reused) since the wait was armed
  socket_entry& s = *it->second;
  (write ? s.writing : s.reading) = false;
  const int direction = write ? CURL_POLL_OUT : CURL_POLL_IN;
  if (coretry::detail::is_aborted(ec) || (s.want & direction) == 0) {
    arm(s); // cancelled by a CURL_POLL_REMOVE or a change of interest: re-arm what is wanted
    return;
  }
  // Report every direction that is ready, not only the one whose wait completed: libcurl
  // reads before it writes when told both. A server that answers an upload early (a 413) and
  // closes leaves its reply readable and the socket reset; told only "writable", libcurl
  // would fail the send and never see the reply.
  int events = ec ? CURL_CSELECT_ERR : (write ? CURL_CSELECT_OUT : CURL_CSELECT_IN);
  if (!ec && write && (s.want & CURL_POLL_IN) != 0) {
    pollfd p{s.desc.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0)
      events |= CURL_CSELECT_IN;
  }
  socket_action(fd, events);
  // Look the socket up again: libcurl may have closed it, or reopened the same number.
  auto again = sockets_.find(fd);
  if (again != sockets_.end())
    arm(*again->second);
}

void multi_driver::on_timer_fired(std::uint64_t generation, std::error_code ec) {
  if (ec || generation != timer_generation_)
    return;
  socket_action(CURL_SOCKET_TIMEOUT, 0);
}

// --- libcurl callbacks: record and arm only, never call curl_multi_* -----------------------

// Every libcurl callback catches everything: an exception must never unwind through libcurl.
// A socket that cannot be watched fails the transfer libcurl named (after_callbacks aborts it);
// returning -1 instead would fail every transfer of the multi.
int multi_driver::on_socket(CURL* easy, curl_socket_t fd, int what, void* userp, void*) {
  auto* self = static_cast<multi_driver*>(userp);
  try {
    maybe_inject(fault_point::socket);
    return self->socket_changed(fd, what);
  } catch (...) {
    self->owner_.callback_failed(easy, make_error_code(errc::out_of_memory),
                                 "exception while watching a socket");
    self->callback_failed_ = true;
    if (auto it = self->sockets_.find(fd); it != self->sockets_.end()) {
      coretry::detail::asio_error_code ec;
      it->second->want = 0;
      it->second->desc.cancel(ec);
    }
    return 0;
  }
}

int multi_driver::socket_changed(curl_socket_t fd, int what) {
  auto* self = this;
  auto it = self->sockets_.find(fd);
  // The identity check costs an fstat(); it is needed only while libcurl may still close the
  // socket without telling us, during its connect (see still_open). Once libcurl waited for
  // nothing but input on it, the connection is up and every close comes through
  // on_close_socket: a kept-alive connection's REMOVE and reuse cost no system call.
  if (it != self->sockets_.end() && !it->second->foreign && !it->second->past_connect &&
      !still_open(*it->second)) {
    self->forget_closed(it);
    it = self->sockets_.end();
  }
  if (what == CURL_POLL_REMOVE) {
    if (it == self->sockets_.end())
      return 0;
    socket_entry& s = *it->second;
    s.want = 0;
    coretry::detail::asio_error_code ec;
    if (s.foreign) {
      s.desc.close(ec); // our dup() only; libcurl closes its own descriptor
      self->sockets_.erase(it);
    } else {
      s.desc.cancel(ec);
    }
    return 0;
  }
  if (it == self->sockets_.end()) {
    // A descriptor libcurl opened itself (the threaded resolver's socketpair): watch a dup so
    // that libcurl closing its number can never close or confuse ours.
    const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0)
      return 0; // cannot watch it; libcurl's timeouts still drive the transfer
    auto s = std::make_unique<socket_entry>(self->ex_);
    coretry::detail::asio_error_code ec;
    s->desc.assign(copy, ec);
    if (ec) {
      ::close(copy);
      return 0;
    }
    s->fd = fd;
    s->id = ++self->next_socket_id_;
    s->foreign = true;
    it = self->sockets_.emplace(fd, std::move(s)).first;
  }
  it->second->want = what;
  it->second->past_connect = it->second->past_connect || what == CURL_POLL_IN;
  self->arm(*it->second);
  return 0;
}

int multi_driver::on_timer(CURLM*, long timeout_ms, void* userp) {
  auto* self = static_cast<multi_driver*>(userp);
  ++self->timer_generation_;
  try {
    maybe_inject(fault_point::timer);
    self->arm_timer(timeout_ms);
  } catch (...) {
    // Not armed: after_callbacks re-arms it from curl_multi_timeout once libcurl returns.
    self->timer_lost_ = true;
  }
  return 0;
}

void multi_driver::arm_timer(long timeout_ms) {
  if (timeout_ms < 0) {
    timer_.cancel();
    return;
  }
  if (shut_)
    return;
  auto handler = locked([generation = timer_generation_](multi_driver& d, std::error_code ec) {
    d.on_timer_fired(generation, ec);
  });
  if (timeout_ms == 0) {
    // Never act synchronously (we are inside libcurl); a post is cheaper than an expired timer.
    timer_.cancel();
    asio::post(ex_, [handler] { handler(std::error_code()); });
  } else {
    timer_.expires_after(std::chrono::milliseconds(timeout_ms));
    timer_.async_wait(handler);
  }
}

} // namespace coretry::curl::detail
