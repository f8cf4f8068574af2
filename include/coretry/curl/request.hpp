// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `request` and `response`: what `client::perform` sends and returns.

#include <coretry/export.hpp>
#include <coretry/http.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coretry::curl {

/// Header fields in the order they were given or received. Names compare case-insensitively.
using header_list = std::vector<std::pair<std::string, std::string>>;

/// ASCII case-insensitive comparison of header names.
CORETRY_CURL_API bool iequals(std::string_view a, std::string_view b) noexcept;

/// The value of the first field named `name` (case-insensitive), or `std::nullopt`.
CORETRY_CURL_API std::optional<std::string_view> find_header(const header_list& headers,
                                                             std::string_view name) noexcept;

/// The lowest TLS protocol version a connection may use (`CURLOPT_SSLVERSION`).
enum class tls_version : std::uint8_t { tls1_0, tls1_1, tls1_2, tls1_3 };

/// How a client trusts servers and proves who it is over TLS (https:// URLs). The defaults
/// verify the server's certificate chain and host name against the system's CA bundle
/// (`/etc/ssl/certs/ca-certificates.crt` on Debian) and offer TLS 1.2 or later.
///
/// Trust comes only from these fields: libcurl does not read `SSL_CERT_FILE` or
/// `CURL_CA_BUNDLE` from the environment (the curl command-line tool does). When any of
/// `ca_file`, `ca_path`, `ca_blob` is set, the CAs they give are the only ones trusted: the
/// system bundle and directory (libcurl's built-in `CAINFO` and `CAPATH`, on Debian
/// `/etc/ssl/certs/ca-certificates.crt` and `/etc/ssl/certs`) are then not used at all.
///
/// `client_options::tls` applies to every request of a client; `request::tls`, when set,
/// replaces it as a whole for that request (the fields are not merged). A connection is reused
/// only by requests with the same TLS settings.
struct CORETRY_CURL_API tls_options {
  /// A PEM file of CA certificates to trust instead of the system bundle (`CURLOPT_CAINFO`).
  std::string ca_file{};
  /// A directory of PEM CA certificates named by subject hash, as `openssl rehash` or
  /// `c_rehash` leave them (`<hash>.0`), trusted instead of the system directory, together
  /// with `ca_file` or `ca_blob` when those are set too (`CURLOPT_CAPATH`).
  std::string ca_path{};
  /// PEM CA certificates held in memory, trusted instead of `ca_file` and the system bundle
  /// (`CURLOPT_CAINFO_BLOB`).
  std::string ca_blob{};
  /// A PEM client certificate file, for servers that ask for one (`CURLOPT_SSLCERT`).
  std::string client_cert{};
  /// The PEM private key of `client_cert`, unencrypted (`CURLOPT_SSLKEY`); empty when the key
  /// is in the `client_cert` file. Requires `client_cert`.
  std::string client_key{};
  /// The lowest protocol version accepted; a server offering only older ones fails the
  /// handshake with `errc::ssl_connect_error`. Default TLS 1.2.
  tls_version min_version = tls_version::tls1_2;
  /// Skips verifying the server's certificate and host name (`CURLOPT_SSL_VERIFYPEER` and
  /// `CURLOPT_SSL_VERIFYHOST` off): anyone on the path can read and change the traffic. For
  /// tests against throw-away servers only. Default false.
  bool insecure_skip_verify = false;

  /// Throws `std::invalid_argument` naming the first bad field and its value: a file or
  /// directory field that does not name an existing file (directory for `ca_path`), contains a
  /// NUL character, a `ca_blob` without a PEM certificate in it, a `client_key` without a
  /// `client_cert`, a `min_version` out of range.
  void validate() const;
};

/// One HTTP request. A plain aggregate; copy it freely.
///
/// `client::async_perform`, `client::perform`, `coretry::curl::retry` and `async_retry` check it
/// with `validate()` when called, so a malformed field is a `std::invalid_argument` at the call,
/// never a request on the wire. A URL libcurl cannot parse is not checked there: it completes
/// with `errc::url_malformat` (or `errc::unsupported_protocol`), like any transport error.
struct CORETRY_CURL_API request {
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
  /// Connection set-up limit (name lookup, TCP, proxy `CONNECT`, TLS handshake:
  /// `CURLOPT_CONNECTTIMEOUT`). Zero means the client's `client_options::stall_timeout` (60 s by
  /// default), or libcurl's default (300 s) when that is 0 too. Must not be negative.
  std::chrono::milliseconds connect_timeout{0};
  /// Limit on the whole transfer from the moment it starts on the network; zero means none.
  /// Must not be negative. Time spent waiting in the client's own queue
  /// (`client_options::max_concurrent_requests`) does not count. Expiry fails the transfer
  /// with `errc::operation_timedout`. It covers every redirect followed, by libcurl or by the
  /// client itself.
  std::chrono::milliseconds timeout{0};
  /// Follow 3xx redirects (at most `max_redirects`; beyond, `errc::too_many_redirects`). The
  /// client follows them itself, each hop a transfer of its own: a 303 (and a 301 or 302 of a
  /// POST) makes the request a GET without body or body fields (`Content-*`, ...); to another
  /// origin the caller's `Authorization`, `Cookie`, `Proxy-Authorization` and `Host` are
  /// dropped; a request that must not be sent twice goes out on a new connection at every hop.
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
  /// Send this request on a new connection, never on one from the client's cache
  /// (CURLOPT_FRESH_CONNECT); the new connection is cached afterwards as any other. Set by
  /// `coretry::curl::retry` and `hedge` on the attempt after one whose error
  /// `breaks_connection`. Under `client_options::max_total_connections` such a request is
  /// admitted as a whole connection.
  bool fresh_connection = false;
  /// TLS settings for this request alone, replacing `client_options::tls` as a whole.
  std::optional<tls_options> tls{};
  /// What `coretry::curl::retry`, `async_retry` and `hedge` retry for this request (statuses,
  /// methods, DNS failures, limits per kind of failure, `Retry-After` statuses: see
  /// `coretry::http::retry_rules`), replacing `client_options::retry_rules` as a whole. Unset
  /// (the default): the client's. `perform` and `async_perform` do not read it.
  std::optional<coretry::http::retry_rules> retry_rules{};

  /// The value of the first header field named `name`, or `std::nullopt`.
  std::optional<std::string_view> header(std::string_view name) const noexcept {
    return find_header(headers, name);
  }

  /// Throws `std::invalid_argument` naming the first bad field and its value (control
  /// characters escaped): an empty or non-token `method`, a NUL in `url`, a header name that
  /// is not a token or a value with CR/LF/NUL, a negative `connect_timeout`, `timeout` or
  /// `max_redirects`, a "HEAD" with a body, a bad `tls` (see `tls_options::validate`; the field
  /// is named `tls.ca_file`, ...), bad `retry_rules` (see `coretry::http::retry_rules::validate`;
  /// named `retry_rules.status_forcelist[0]`, ...).
  void validate() const;
};

/// The HTTP version a response came over (`CURLINFO_HTTP_VERSION`).
enum class http_version : std::uint8_t { unknown, http1_0, http1_1, http2, http3 };

/// "HTTP/1.0", "HTTP/1.1", "HTTP/2", "HTTP/3" or "unknown".
CORETRY_CURL_API const char* to_string(http_version v) noexcept;

/// What a completed transfer returned. Any status, 4xx and 5xx included, is a response, not an
/// error: only transport failures are errors.
struct response {
  long status = 0;       ///< The HTTP status code of the last response (after redirects).
  header_list headers{}; ///< The last response's header fields, names as sent by the server.
  std::string body{};    ///< The body, decoded from chunked transfer encoding.
  /// The version the response came over: `http2` when a request over TLS negotiated h2 (ALPN).
  http_version version = http_version::unknown;
  /// When a transfer fails: libcurl's own account of what went wrong (`CURLOPT_ERRORBUFFER`),
  /// more precise than the error code's message, e.g. "SSL certificate problem: unable to get
  /// local issuer certificate". Empty for a complete response; `client::async_perform` delivers
  /// it with the error in an otherwise empty response.
  std::string error_detail{};

  /// The value of the first header field named `name` (case-insensitive), or `std::nullopt`.
  /// The view points into `headers`.
  std::optional<std::string_view> header(std::string_view name) const noexcept {
    return find_header(headers, name);
  }
};

} // namespace coretry::curl
