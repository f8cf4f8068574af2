#pragma once
/// \file
/// `request` and `response`: what `client::perform` sends and returns.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coretry::curl {

/// Header fields in the order they were given or received. Names compare case-insensitively.
using header_list = std::vector<std::pair<std::string, std::string>>;

/// ASCII case-insensitive comparison of header names.
bool iequals(std::string_view a, std::string_view b) noexcept;

/// The value of the first field named `name` (case-insensitive), or `std::nullopt`.
std::optional<std::string_view> find_header(const header_list& headers,
                                            std::string_view name) noexcept;

/// One HTTP request. A plain aggregate; copy it freely.
///
/// `client::async_perform`, `client::perform`, `coretry::curl::retry` and `async_retry` check it
/// with `validate()` when called, so a malformed field is a `std::invalid_argument` at the call,
/// never a request on the wire. A URL libcurl cannot parse is not checked there: it completes
/// with `errc::url_malformat` (or `errc::unsupported_protocol`), like any transport error.
struct request {
  /// The method, sent as given ("GET", "HEAD", "POST", "PUT", "DELETE", ...): a non-empty HTTP
  /// token (letters, digits, ``!#$%&'*+-.^_`|~``). "HEAD" fetches no body and must not carry
  /// one; any other method may carry `body` and is sent with its own name.
  std::string method = "GET";
  /// An absolute http:// or https:// URL. Other schemes fail with `errc::unsupported_protocol`;
  /// unparsable ones, and those without a "scheme://" (libcurl would guess one and look the
  /// name up), with `errc::url_malformat`. Must not contain a NUL character.
  std::string url;
  /// Extra request header fields (for example `{"Idempotency-Key", "abc"}`). Names must be
  /// non-empty HTTP tokens; values must not contain CR, LF or NUL (no header injection). An
  /// empty value sends the field with an empty value.
  header_list headers{};
  /// The request body, sent as is (with a Content-Length).
  std::string body{};
  /// Connection set-up limit; zero means libcurl's default (300 s). Must not be negative.
  std::chrono::milliseconds connect_timeout{0};
  /// Limit on the whole transfer from the moment it starts on the network; zero means none.
  /// Must not be negative. Time spent waiting in the client's own queue
  /// (`client_options::max_concurrent_requests`) does not count. Expiry fails the transfer
  /// with `errc::operation_timedout`.
  std::chrono::milliseconds timeout{0};
  /// Follow 3xx redirects (at most `max_redirects`; beyond, `errc::too_many_redirects`).
  bool follow_redirects = false;
  /// Redirects followed at most when `follow_redirects` is set; 0 or more (default 10).
  long max_redirects = 10;
  /// Let `coretry::curl::retry` retry this request even though its method is not idempotent.
  /// A request with an `Idempotency-Key` header is retried without this.
  ///
  /// A request that may not be retried (see `may_retry`: e.g. a POST or PATCH with neither an
  /// `Idempotency-Key` header nor this flag) is also never sent on a reused keep-alive
  /// connection, by `perform` as by `retry`: libcurl silently resends a request whose reused
  /// connection dies before any reply, and that resend could repeat an action the server
  /// already took. It costs such requests a new connection each (left in the cache for others
  /// afterwards).
  bool retry_non_idempotent = false;

  /// The value of the first header field named `name`, or `std::nullopt`.
  std::optional<std::string_view> header(std::string_view name) const noexcept {
    return find_header(headers, name);
  }

  /// Throws `std::invalid_argument` naming the first bad field and its value (control
  /// characters escaped): an empty or non-token `method`, a NUL in `url`, a header name that
  /// is not a token or a value with CR/LF/NUL, a negative `connect_timeout`, `timeout` or
  /// `max_redirects`, a "HEAD" with a body.
  void validate() const;
};

/// What a completed transfer returned. Any status, 4xx and 5xx included, is a response, not an
/// error: only transport failures are errors.
struct response {
  long status = 0;       ///< The HTTP status code of the last response (after redirects).
  header_list headers{}; ///< The last response's header fields, names as sent by the server.
  std::string body{};    ///< The body, decoded from chunked transfer encoding.

  /// The value of the first header field named `name` (case-insensitive), or `std::nullopt`.
  /// The view points into `headers`.
  std::optional<std::string_view> header(std::string_view name) const noexcept {
    return find_header(headers, name);
  }
};

} // namespace coretry::curl
