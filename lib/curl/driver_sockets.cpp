// SPDX-License-Identifier: BSL-1.0
// The sockets libcurl opens and closes through the driver (CURLOPT_OPENSOCKETFUNCTION,
// CURLOPT_CLOSESOCKETFUNCTION), and those it closes behind the driver's back. libcurl callbacks:
// they record and never call curl_multi_* (the serialization rule is at the top of driver.cpp).

#include <coretry/detail/asio.hpp>

#include <memory>

#include "driver.hpp"
#include "transfer.hpp"
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coretry::curl::detail {

// Whether `s`, a socket opened in on_open_socket, is still the open file it was. libcurl 7.88
// closes some of them without CURLOPT_CLOSESOCKETFUNCTION (a connect that timed out, measured),
// after which the number may name another file (one of libcurl's own descriptors, another
// socket, anything the process opened).
bool multi_driver::still_open(const socket_entry& s) noexcept {
  struct stat st {};
  return ::fstat(s.fd, &st) == 0 && st.st_dev == s.dev && st.st_ino == s.ino;
}

// Drops the entry of a socket libcurl closed behind our back. Its number is closed already, or
// belongs to someone else now; what we watch is our own dup(), which we close: that ends the
// socket, and its epoll deregistration names our number, which nobody else can hold.
void multi_driver::forget_closed(socket_table::iterator it) {
  coretry::detail::asio_error_code ec;
  it->second->desc.close(ec);
  sockets_.erase(it);
  open_.add(-1);
}

curl_socket_t multi_driver::on_open_socket(void* clientp, curlsocktype, curl_sockaddr* addr) {
  // A socket that cannot be set up (an exception here) is a connect that failed:
  // CURLE_COULDNT_CONNECT for that transfer.
  try {
    return static_cast<multi_driver*>(clientp)->open_socket(addr);
  } catch (...) {
    return CURL_SOCKET_BAD;
  }
}

curl_socket_t multi_driver::open_socket(curl_sockaddr* addr) {
  auto* self = this;
  const int fd = ::socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
  if (fd < 0)
    return CURL_SOCKET_BAD;
  if (auto old = self->sockets_.find(fd); old != self->sockets_.end()) {
    // A stale entry for a descriptor libcurl closed without telling us (the number was free for
    // socket() to return): close our dup of it.
    if (old->second->foreign) {
      coretry::detail::asio_error_code ec;
      old->second->desc.close(ec);
      self->sockets_.erase(old);
    } else {
      self->forget_closed(old);
    }
  }
  // libcurl gets `fd`; we watch a dup() of it. libcurl may close its number without telling us
  // (see still_open), and the number may then go to another socket of this process: whatever
  // we do to our own number afterwards (a close, an epoll deregistration) cannot touch it.
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) {
    ::close(fd);
    return CURL_SOCKET_BAD;
  }
  std::unique_ptr<socket_entry> s;
  bool failed = false;
  try {
    s = std::make_unique<socket_entry>(self->ex_);
    coretry::detail::asio_error_code ec;
    s->desc.assign(copy, ec);
    failed = static_cast<bool>(ec);
  } catch (...) {
    failed = true; // out of memory: the connect fails, nothing crosses libcurl
  }
  if (failed) {
    ::close(copy);
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
  try {
    self->sockets_.emplace(fd, std::move(s));
  } catch (...) {
    ::close(fd); // `s` (not moved from on failure) closes our dup
    return CURL_SOCKET_BAD;
  }
  self->open_.add(1);
  self->connects_.add(1);
  return fd;
}

int multi_driver::on_close_socket(void* clientp, curl_socket_t fd) {
  auto* self = static_cast<multi_driver*>(clientp);
  auto it = self->sockets_.find(fd);
  if (it == self->sockets_.end() || it->second->foreign)
    return ::close(fd);
  coretry::detail::asio_error_code ec;
  it->second->desc.close(ec); // cancels its waits and closes our dup
  self->sockets_.erase(it);
  self->open_.add(-1);
  return ::close(fd);
}

} // namespace coretry::curl::detail
