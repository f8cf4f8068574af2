// coretry::curl::client: a libcurl multi handle driven by Asio (multi-socket API).
//
// Everything touching libcurl runs on strand_. libcurl's callbacks only record what libcurl
// wants and arm Asio waits; every curl_multi_* call is made from a handler on the strand,
// never from inside a callback (ASIO_CURL_NOTES.md). Each strand handler also holds mutex_,
// uncontended except against shutdown(), which the client's destructor may run on any thread
// while other threads run the strand.

#include <coretry/curl/classify.hpp>
#include <coretry/curl/client.hpp>

#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "client_impl.hpp"
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coretry::curl {
namespace detail {

namespace {

void raise_peak(std::atomic<std::size_t>& peak, std::size_t value) noexcept {
  std::size_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

std::size_t write_body(char* data, std::size_t size, std::size_t count, void* userp) {
  auto* t = static_cast<transfer*>(userp);
  t->resp.body.append(data, size * count);
  return size * count;
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

std::size_t write_header(char* data, std::size_t size, std::size_t count, void* userp) {
  auto* t = static_cast<transfer*>(userp);
  std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {
    // A new response begins (a redirect hop or an interim 1xx): keep only the last one's fields.
    t->resp.headers.clear();
  } else if (auto colon = line.find(':'); colon != std::string_view::npos && colon > 0) {
    t->resp.headers.emplace_back(std::string(trim(line.substr(0, colon))),
                                 std::string(trim(line.substr(colon + 1))));
  }
  return size * count;
}

// "scheme://" at the start (RFC 3986 scheme syntax). libcurl would guess a scheme for anything
// else ("example.com/x" becomes http, "ftp.example.com" ftp) and resolve it; a request's URL must
// be absolute, so a scheme-less one fails as malformed, at once and without a DNS lookup.
bool has_scheme(std::string_view url) noexcept {
  const auto end = url.find("://");
  if (end == std::string_view::npos || end == 0)
    return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(url[0]))
    return false;
  for (char c : url.substr(1, end - 1))
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.')
      return false;
  return true;
}

} // namespace

// --- Counters ---------------------------------------------------------------------------------

void counter::add(std::ptrdiff_t delta) noexcept {
  const std::size_t now =
      value.fetch_add(static_cast<std::size_t>(delta), std::memory_order_relaxed) +
      static_cast<std::size_t>(delta);
  if (delta > 0)
    raise_peak(peak, now);
}

// --- Construction and shutdown ---------------------------------------------------------------

client_impl::client_impl(asio::any_io_executor ex, const client_options& o)
    : strand_(asio::make_strand(ex)), timer_(strand_), options_(o) {
  if (options_.max_concurrent_requests == 0 && options_.max_total_connections > 0)
    options_.max_concurrent_requests = static_cast<std::size_t>(options_.max_total_connections);
  if (options_.max_idle_connections == 0)
    options_.max_idle_connections =
        options_.max_total_connections > 0 ? options_.max_total_connections : 64;

  // Once per process, before any handle, from whichever thread makes the first client.
  static const CURLcode global = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (global != CURLE_OK)
    throw std::system_error(make_error_code(errc::failed_init), "curl_global_init");
  multi_ = curl_multi_init();
  if (!multi_)
    throw std::system_error(make_error_code(errc::failed_init), "curl_multi_init");
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &client_impl::on_socket);
  curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &client_impl::on_timer);
  curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, options_.max_idle_connections);
  curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS, options_.max_total_connections);
  curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, options_.max_host_connections);
}

client_impl::~client_impl() {
  shutdown();
}

void client_impl::shutdown() {
  // The destructor's thread may differ from the threads running the strand: wait for the
  // handler in progress, if any; every later one sees shut_ and returns.
  std::lock_guard lock(mutex_);
  if (shut_)
    return;
  shut_ = true;
  timer_.cancel();
  // Abort what is in flight; removing an unfinished transfer closes its connection through
  // on_close_socket, which still finds the socket table.
  std::vector<std::shared_ptr<transfer>> aborted;
  for (auto& [easy, t] : active_) {
    curl_multi_remove_handle(multi_, easy);
    aborted.push_back(t);
  }
  active_.clear();
  stats_.active.value.store(0, std::memory_order_relaxed);
  for (auto& t : queue_)
    aborted.push_back(t);
  queue_.clear();
  stats_.queued.value.store(0, std::memory_order_relaxed);
  for (auto& t : aborted) {
    t->state = transfer_state::done;
    if (t->easy) {
      pool_.push_back(t->easy);
      t->easy = nullptr;
    }
    free_slist(*t);
    if (auto c = std::move(t->completion))
      c->complete(asio::error::operation_aborted, {});
  }
  // The multi first: its cache closes idle connections through on_close_socket.
  curl_multi_cleanup(multi_);
  multi_ = nullptr;
  for (CURL* e : pool_)
    curl_easy_cleanup(e);
  pool_.clear();
  stats_.pooled.value.store(0, std::memory_order_relaxed);
  // What remains: our dup()s of libcurl's own descriptors (closed here), and sockets libcurl
  // closed without the close callback (released, never closed: the number may be reused).
  for (auto& [fd, s] : sockets_) {
    std::error_code ec;
    if (s->foreign) {
      s->desc.close(ec);
    } else {
      s->desc.release();
      stats_.open.add(-1);
    }
    (void)fd;
  }
  sockets_.clear();
}

// --- Submitting and cancelling ---------------------------------------------------------------

void client_impl::start_or_queue(std::shared_ptr<transfer> t) {
  if (shut_) {
    t->state = transfer_state::done;
    if (auto c = std::move(t->completion))
      c->complete(asio::error::operation_aborted, {});
    return;
  }
  if (options_.max_concurrent_requests != 0 && active_.size() >= options_.max_concurrent_requests) {
    t->state = transfer_state::queued;
    queue_.push_back(std::move(t));
    stats_.queued.add(1);
    return;
  }
  start(std::move(t));
}

void client_impl::start(std::shared_ptr<transfer> t) {
  CURL* easy = nullptr;
  if (!pool_.empty()) {
    easy = pool_.back();
    pool_.pop_back();
    stats_.pooled.add(-1);
    curl_easy_reset(easy);
  } else {
    easy = curl_easy_init();
  }
  if (!easy) {
    finish(std::move(t), make_error_code(errc::failed_init));
    return;
  }
  t->easy = easy;
  const CURLcode rc = configure(*t);
  if (rc != CURLE_OK) {
    release_easy(*t);
    finish(std::move(t), std::error_code(rc, curl_category()));
    return;
  }
  if (curl_multi_add_handle(multi_, easy) != CURLM_OK) {
    release_easy(*t);
    finish(std::move(t), make_error_code(errc::failed_init));
    return;
  }
  t->state = transfer_state::active;
  active_.emplace(easy, std::move(t));
  stats_.active.add(1);
}

CURLcode client_impl::configure(transfer& t) {
  CURL* e = t.easy;
  const request& r = t.req;
  if (!has_scheme(r.url))
    return CURLE_URL_MALFORMAT;
  CURLcode rc = CURLE_OK;
  auto set = [&](CURLoption opt, auto value) {
    if (rc == CURLE_OK)
      rc = curl_easy_setopt(e, opt, value);
  };
  set(CURLOPT_PRIVATE, static_cast<void*>(&t));
  set(CURLOPT_URL, r.url.c_str());
  set(CURLOPT_PROTOCOLS_STR, "http,https");
  set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  set(CURLOPT_NOSIGNAL, 1L);
  // Removing a handle whose threaded name lookup still runs would otherwise wait for the lookup
  // (seconds, with a DNS server that does not answer), blocking every transfer and timer on the
  // io_context. With this the lookup thread is left to finish on its own.
  set(CURLOPT_QUICK_EXIT, 1L);
  set(CURLOPT_WRITEFUNCTION, &write_body);
  set(CURLOPT_WRITEDATA, static_cast<void*>(&t));
  set(CURLOPT_HEADERFUNCTION, &write_header);
  set(CURLOPT_HEADERDATA, static_cast<void*>(&t));
  set(CURLOPT_OPENSOCKETFUNCTION, &client_impl::on_open_socket);
  set(CURLOPT_OPENSOCKETDATA, static_cast<void*>(this));
  set(CURLOPT_CLOSESOCKETFUNCTION, &client_impl::on_close_socket);
  set(CURLOPT_CLOSESOCKETDATA, static_cast<void*>(this));
  if (r.connect_timeout.count() > 0)
    set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(r.connect_timeout.count()));
  if (r.timeout.count() > 0)
    set(CURLOPT_TIMEOUT_MS, static_cast<long>(r.timeout.count()));
  // libcurl resends a request by itself, on a fresh connection, when a reused keep-alive
  // connection dies before any byte of reply, and it does so for a POST too (it rewinds the
  // body). The server may have acted on the first copy, so a request that must not be sent
  // twice (see may_retry) never starts on a reused connection: then there is nothing to resend.
  if (!may_retry(r))
    set(CURLOPT_FRESH_CONNECT, 1L);
  if (r.follow_redirects) {
    set(CURLOPT_FOLLOWLOCATION, 1L);
    set(CURLOPT_MAXREDIRS, r.max_redirects);
  }
  for (const auto& [name, value] : r.headers) {
    std::string line = name;
    line += value.empty() ? ";" : ": "; // "Name;" sends an empty value in libcurl
    line += value;
    curl_slist* next = curl_slist_append(t.header_list, line.c_str());
    if (!next)
      return CURLE_OUT_OF_MEMORY;
    t.header_list = next;
  }
  if (t.header_list)
    set(CURLOPT_HTTPHEADER, t.header_list);

  // CURLOPT_POSTFIELDS turns the request into a POST, so any other method with a body is
  // named explicitly: a GET with a body must still go out as GET. A HEAD never has a body
  // (request::validate).
  const bool has_body =
      !r.body.empty() || r.method == "POST" || r.method == "PUT" || r.method == "PATCH";
  if (has_body) {
    set(CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    set(CURLOPT_POSTFIELDS, r.body.data());
    if (r.method != "POST")
      set(CURLOPT_CUSTOMREQUEST, r.method.c_str());
  } else if (r.method == "GET") {
    set(CURLOPT_HTTPGET, 1L);
  } else if (r.method == "HEAD") {
    set(CURLOPT_NOBODY, 1L);
  } else {
    set(CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  return rc;
}

void client_impl::cancel(const std::shared_ptr<transfer>& t) {
  switch (t->state) {
  case transfer_state::created:
  case transfer_state::done:
    // Not submitted yet: start_or_queue will see the flag. Done: too late, nothing to do.
    t->cancel_requested = true;
    return;
  case transfer_state::queued: {
    auto it = std::find(queue_.begin(), queue_.end(), t);
    if (it != queue_.end()) {
      queue_.erase(it);
      stats_.queued.add(-1);
    }
    finish(t, asio::error::operation_aborted);
    return;
  }
  case transfer_state::active:
    // On the strand and outside any libcurl callback: the removal is allowed here. An
    // unfinished connection is closed by libcurl; no done message follows.
    curl_multi_remove_handle(multi_, t->easy);
    active_.erase(t->easy);
    stats_.active.add(-1);
    release_easy(*t);
    finish(t, asio::error::operation_aborted);
    start_queued();
    return;
  }
}

void client_impl::finish(std::shared_ptr<transfer> t, std::error_code ec) {
  t->state = transfer_state::done;
  free_slist(*t);
  if (auto c = std::move(t->completion))
    c->complete(ec, ec ? response{} : std::move(t->resp));
}

void client_impl::free_slist(transfer& t) {
  if (t.header_list) {
    curl_slist_free_all(t.header_list);
    t.header_list = nullptr;
  }
}

void client_impl::release_easy(transfer& t) {
  if (!t.easy)
    return;
  if (pool_.size() < options_.pool_size) {
    pool_.push_back(t.easy);
    stats_.pooled.add(1);
  } else {
    curl_easy_cleanup(t.easy);
  }
  t.easy = nullptr;
}

void client_impl::start_queued() {
  while (!shut_ && !queue_.empty() &&
         (options_.max_concurrent_requests == 0 ||
          active_.size() < options_.max_concurrent_requests)) {
    auto t = std::move(queue_.front());
    queue_.pop_front();
    stats_.queued.add(-1);
    start(std::move(t));
  }
}

// --- Driving libcurl -------------------------------------------------------------------------

void client_impl::socket_action(curl_socket_t fd, int events) {
  if (shut_)
    return;
  int running = 0;
  curl_multi_socket_action(multi_, fd, events, &running);
  drain_messages();
}

void client_impl::drain_messages() {
  int left = 0;
  bool freed = false;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE)
      continue;
    CURL* easy = msg->easy_handle;
    const CURLcode result = msg->data.result;
    auto it = active_.find(easy);
    if (it == active_.end())
      continue;
    auto t = std::move(it->second);
    active_.erase(it);
    stats_.active.add(-1);
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    t->resp.status = status;
    curl_multi_remove_handle(multi_, easy);
    release_easy(*t);
    finish(std::move(t),
           result == CURLE_OK ? std::error_code() : std::error_code(result, curl_category()));
    freed = true;
  }
  if (freed)
    start_queued();
}

// Arms the waits libcurl wants on `s` that are not armed yet. A descriptor that is already
// ready gets its event posted: Asio's epoll reactor registers descriptors edge-triggered and
// does not test readiness for async_wait, so a wait armed after data already arrived (libcurl
// reads at most one buffer per call) would sleep until the next packet.
void client_impl::arm(socket_entry& s) {
  if (shut_)
    return;
  const bool want_read = (s.want & CURL_POLL_IN) != 0 && !s.reading;
  const bool want_write = (s.want & CURL_POLL_OUT) != 0 && !s.writing;
  if (!want_read && !want_write)
    return;
  pollfd p{s.desc.native_handle(),
           static_cast<short>((want_read ? POLLIN : 0) | (want_write ? POLLOUT : 0)), 0};
  const int ready = ::poll(&p, 1, 0);
  const bool error = ready > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0;
  auto self = weak_from_this();
  auto arm_one = [&](bool write) {
    (write ? s.writing : s.reading) = true;
    const bool now = ready > 0 && (error || (p.revents & (write ? POLLOUT : POLLIN)) != 0);
    auto handler = [self, fd = s.fd, id = s.id, write](std::error_code ec) {
      if (auto impl = self.lock()) {
        std::lock_guard lock(impl->mutex_);
        impl->on_wait(fd, id, write, ec);
      }
    };
    if (now)
      asio::post(strand_, [handler] { handler({}); });
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

void client_impl::on_wait(curl_socket_t fd, std::uint64_t id, bool write, std::error_code ec) {
  if (shut_)
    return;
  auto it = sockets_.find(fd);
  if (it == sockets_.end() || it->second->id != id)
    return; // the socket was closed (or its number reused) since the wait was armed
  socket_entry& s = *it->second;
  (write ? s.writing : s.reading) = false;
  const int direction = write ? CURL_POLL_OUT : CURL_POLL_IN;
  if (ec == asio::error::operation_aborted || (s.want & direction) == 0) {
    arm(s); // cancelled by a CURL_POLL_REMOVE or a change of interest: re-arm what is wanted
    return;
  }
  socket_action(fd, ec ? CURL_CSELECT_ERR : (write ? CURL_CSELECT_OUT : CURL_CSELECT_IN));
  // Look the socket up again: libcurl may have closed it, or reopened the same number.
  auto again = sockets_.find(fd);
  if (again != sockets_.end())
    arm(*again->second);
}

void client_impl::on_timer_fired(std::uint64_t generation, std::error_code ec) {
  if (ec || shut_ || generation != timer_generation_)
    return;
  socket_action(CURL_SOCKET_TIMEOUT, 0);
}

// --- libcurl callbacks: record and arm only, never call curl_multi_* -----------------------

// Whether `s`, a socket opened in on_open_socket, is still the open file it was. libcurl 7.88
// closes some of them without CURLOPT_CLOSESOCKETFUNCTION (a connect that timed out, measured),
// after which the number may name another file (one of libcurl's own descriptors, another
// socket, anything the process opened).
bool client_impl::still_open(const socket_entry& s) noexcept {
  struct stat st {};
  return ::fstat(s.fd, &st) == 0 && st.st_dev == s.dev && st.st_ino == s.ino;
}

// Drops the entry of a socket libcurl closed behind our back: releases the number without
// closing it (it is closed already, or belongs to someone else now), cancels its waits.
void client_impl::forget_closed(decltype(sockets_)::iterator it) {
  it->second->desc.release();
  sockets_.erase(it);
  stats_.open.add(-1);
}

int client_impl::on_socket(CURL*, curl_socket_t fd, int what, void* userp, void*) {
  auto* self = static_cast<client_impl*>(userp);
  auto it = self->sockets_.find(fd);
  if (it != self->sockets_.end() && !it->second->foreign && !self->still_open(*it->second)) {
    self->forget_closed(it);
    it = self->sockets_.end();
  }
  if (what == CURL_POLL_REMOVE) {
    if (it == self->sockets_.end())
      return 0;
    socket_entry& s = *it->second;
    s.want = 0;
    std::error_code ec;
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
    auto s = std::make_unique<socket_entry>(self->strand_);
    std::error_code ec;
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
  self->arm(*it->second);
  return 0;
}

int client_impl::on_timer(CURLM*, long timeout_ms, void* userp) {
  auto* self = static_cast<client_impl*>(userp);
  ++self->timer_generation_;
  if (timeout_ms < 0) {
    self->timer_.cancel();
    return 0;
  }
  if (self->shut_)
    return 0;
  auto weak = self->weak_from_this();
  auto handler = [weak, generation = self->timer_generation_](std::error_code ec) {
    if (auto impl = weak.lock()) {
      std::lock_guard lock(impl->mutex_);
      impl->on_timer_fired(generation, ec);
    }
  };
  if (timeout_ms == 0) {
    // Never act synchronously (we are inside libcurl); a post is cheaper than an expired timer.
    self->timer_.cancel();
    asio::post(self->strand_, [handler] { handler({}); });
  } else {
    self->timer_.expires_after(std::chrono::milliseconds(timeout_ms));
    self->timer_.async_wait(handler);
  }
  return 0;
}

curl_socket_t client_impl::on_open_socket(void* clientp, curlsocktype, curl_sockaddr* addr) {
  auto* self = static_cast<client_impl*>(clientp);
  const int fd = ::socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
  if (fd < 0)
    return CURL_SOCKET_BAD;
  if (auto old = self->sockets_.find(fd); old != self->sockets_.end()) {
    // A stale entry for a descriptor libcurl closed without telling us (the number was free for
    // socket() to return): close our dup of a foreign one; never close the number of one of
    // ours, which is the socket just opened.
    if (old->second->foreign) {
      std::error_code ec;
      old->second->desc.close(ec);
      self->sockets_.erase(old);
    } else {
      self->forget_closed(old);
    }
  }
  auto s = std::make_unique<socket_entry>(self->strand_);
  std::error_code ec;
  s->desc.assign(fd, ec);
  if (ec) {
    ::close(fd);
    return CURL_SOCKET_BAD;
  }
  s->fd = fd;
  s->id = ++self->next_socket_id_;
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    s->dev = st.st_dev;
    s->ino = st.st_ino;
  }
  self->sockets_.emplace(fd, std::move(s));
  self->stats_.open.add(1);
  return fd;
}

int client_impl::on_close_socket(void* clientp, curl_socket_t fd) {
  auto* self = static_cast<client_impl*>(clientp);
  auto it = self->sockets_.find(fd);
  if (it == self->sockets_.end() || it->second->foreign)
    return ::close(fd);
  std::error_code ec;
  it->second->desc.close(ec); // cancels its waits and closes the descriptor
  self->sockets_.erase(it);
  self->stats_.open.add(-1);
  return 0;
}

// --- Entry points used by the header ---------------------------------------------------------

std::shared_ptr<transfer> make_transfer(const std::shared_ptr<client_impl>& impl, request req,
                                        std::unique_ptr<perform_completion> completion) {
  auto t = std::make_shared<transfer>();
  t->owner = impl;
  t->req = std::move(req);
  t->completion = std::move(completion);
  return t;
}

void submit(const std::shared_ptr<client_impl>& impl, std::shared_ptr<transfer> t) {
  asio::post(impl->strand_, [impl, t = std::move(t)]() mutable {
    std::lock_guard lock(impl->mutex_);
    if (t->cancel_requested) {
      impl->finish(std::move(t), asio::error::operation_aborted);
      return;
    }
    impl->start_or_queue(std::move(t));
  });
}

void cancel_hook::operator()(asio::cancellation_type) const {
  auto t = target.lock();
  if (!t)
    return;
  auto impl = t->owner.lock();
  if (!impl)
    return;
  // Posted, never dispatched: the emit may come from inside a libcurl callback on the strand.
  asio::post(impl->strand_, [impl, weak = std::weak_ptr<transfer>(t)] {
    std::lock_guard lock(impl->mutex_);
    if (auto t = weak.lock())
      impl->cancel(t);
  });
}

} // namespace detail

// --- client ----------------------------------------------------------------------------------

client::client(executor_type executor, client_options options)
    : executor_(std::move(executor)), options_((options.validate(), options)),
      impl_(std::make_shared<detail::client_impl>(executor_, options_)) {}

client::~client() {
  impl_->shutdown();
}

client_stats client::stats() const noexcept {
  const auto& s = impl_->stats_;
  client_stats out;
  out.active_transfers = s.active.value.load(std::memory_order_relaxed);
  out.queued_requests = s.queued.value.load(std::memory_order_relaxed);
  out.open_connections = s.open.value.load(std::memory_order_relaxed);
  out.waiting_retries = s.waiting.value.load(std::memory_order_relaxed);
  out.pooled_handles = s.pooled.value.load(std::memory_order_relaxed);
  out.peak_active_transfers = s.active.peak.load(std::memory_order_relaxed);
  out.peak_queued_requests = s.queued.peak.load(std::memory_order_relaxed);
  out.peak_open_connections = s.open.peak.load(std::memory_order_relaxed);
  out.peak_waiting_retries = s.waiting.peak.load(std::memory_order_relaxed);
  return out;
}

} // namespace coretry::curl

namespace coretry::curl::detail {
const std::shared_ptr<client_impl>& client_access::impl(const client& c) noexcept {
  return c.impl_;
}
void add_waiting(client_impl& impl, std::ptrdiff_t delta) noexcept {
  impl.stats_.waiting.add(delta);
}
} // namespace coretry::curl::detail
