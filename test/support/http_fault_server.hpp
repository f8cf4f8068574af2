// SPDX-License-Identifier: BSL-1.0
#pragma once
// A small HTTP/1.1 server on 127.0.0.1 for the curl adapter's tests. Each request takes the next
// scripted action (then the default action): a response, a reset, a close without reply, a hang,
// a slow body or a truncated body. Runs on the executor it is given (the tests' single-threaded
// io_context); not thread-safe.

// A standard header before the first Asio one: Asio 1.22 chooses between aligned_alloc/free and
// operator new/delete for its handler memory from a libstdc++ macro (_GLIBCXX_HAVE_ALIGNED_ALLOC)
// that only exists once some standard header was included. A translation unit that starts with
// Asio gets the other pair than one that does not, and ASan then reports malloc vs operator
// delete for memory recycled across the two.
#include <cstddef>
// (kept apart from the block below, which clang-format orders Asio first)
#include <support/asio.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace coretry::test {

/// What the server does with one request.
struct http_action {
  enum class kind {
    respond,   ///< send `status`, `headers`, `body` after `delay`
    reset,     ///< close with SO_LINGER 0 (the client sees a connection reset), no reply
    close,     ///< close cleanly without a reply
    hang,      ///< never reply; keep the connection until the client (or stop()) closes it
    slow_body, ///< send the headers, then `body` one `chunk` bytes at a time, `delay` apart
    truncate,  ///< declare `body.size() + chunk` bytes, send `body`, close (a partial read)
    raw,       ///< send `body` as the whole response, byte for byte (status line included)
  };
  kind what = kind::respond;
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers{};
  std::string body = "ok";
  std::chrono::milliseconds delay{0};
  std::size_t chunk = 1;
  bool keep_alive = true;
  /// Answer as soon as the request's header block arrived, without reading its body, then
  /// close (unread bytes make the close a reset): a server rejecting an upload early.
  bool early = false;

  static http_action ok(std::string body = "ok") { return {.body = std::move(body)}; }
  static http_action with_status(int status, std::string body = "") {
    return {.status = status, .body = std::move(body)};
  }
  static http_action retry_after(int status, std::string value) {
    return {.status = status, .headers = {{"Retry-After", std::move(value)}}, .body = ""};
  }
  static http_action reset() { return {.what = kind::reset}; }
  static http_action close() { return {.what = kind::close}; }
  static http_action hang() { return {.what = kind::hang}; }
  static http_action slow_body(std::string body, std::chrono::milliseconds delay,
                               std::size_t chunk = 1) {
    return {.what = kind::slow_body, .body = std::move(body), .delay = delay, .chunk = chunk};
  }
  /// Announces `missing` more bytes than `body` holds, sends `body`, then closes.
  static http_action truncated(std::string body, std::size_t missing = 10) {
    return {.what = kind::truncate, .body = std::move(body), .chunk = missing};
  }
  /// Sends `bytes` as the whole response (status line, fields, body as given).
  static http_action raw(std::string bytes, bool keep_alive = false) {
    return {.what = kind::raw, .body = std::move(bytes), .keep_alive = keep_alive};
  }
  static http_action delayed(std::chrono::milliseconds delay, std::string body = "ok") {
    return {.body = std::move(body), .delay = delay};
  }
};

/// A request as the server saw it.
struct received_request {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  /// The first header named `name` (case-insensitive), or "".
  std::string header(const std::string& name) const;
};

class http_fault_server {
public:
  /// Listens on 127.0.0.1, on an ephemeral port, and starts accepting at once.
  explicit http_fault_server(asio::any_io_executor ex);
  ~http_fault_server();
  http_fault_server(const http_fault_server&) = delete;
  http_fault_server& operator=(const http_fault_server&) = delete;

  unsigned short port() const;
  /// "http://127.0.0.1:<port><path>"
  std::string url(const std::string& path = "/") const;

  /// Appends to the script (`count` copies).
  void push(http_action action, std::size_t count = 1);
  /// The action once the script is empty (initially `http_action::ok()`).
  void set_default(http_action action);
  /// Chooses every action (the script is then ignored): called with the request's index from 0.
  void set_chooser(std::function<http_action(std::size_t index, const received_request&)> f);

  std::size_t requests() const;         ///< requests received so far
  std::size_t open_connections() const; ///< connections currently open
  std::size_t peak_connections() const;
  std::size_t accepted() const;                     ///< connections accepted so far
  const std::vector<received_request>& log() const; ///< every request, in order

  /// Closes the listener and every connection.
  void stop();

  struct state;

private:
  std::shared_ptr<state> state_;
  unsigned short port_ = 0;
};

} // namespace coretry::test
