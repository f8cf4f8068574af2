// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Transport errors of the libcurl adapter: `CURLcode` values as `std::error_code`.

#include <coretry/export.hpp>
#include <coretry/http.hpp>

#include <system_error>

namespace coretry::curl {

/// The `CURLcode` values the adapter and its classifier name. Any other `CURLcode` may also
/// appear in `curl_category()`; the numeric value of an error code is always the `CURLcode`.
enum class errc {
  unsupported_protocol = 1, ///< CURLE_UNSUPPORTED_PROTOCOL (only http and https are enabled)
  failed_init = 2,          ///< CURLE_FAILED_INIT
  url_malformat = 3,        ///< CURLE_URL_MALFORMAT
  couldnt_resolve_host = 6, ///< CURLE_COULDNT_RESOLVE_HOST
  couldnt_connect = 7,      ///< CURLE_COULDNT_CONNECT (e.g. connection refused)
  weird_server_reply = 8,   ///< CURLE_WEIRD_SERVER_REPLY
  http2 = 16,               ///< CURLE_HTTP2 (HTTP/2 framing or connection error, e.g. GOAWAY)
  partial_file = 18,        ///< CURLE_PARTIAL_FILE (body shorter than Content-Length)
  /// CURLE_WRITE_ERROR: storing the response failed; with a detail starting "coretry:", an
  /// exception other than `std::bad_alloc` was caught inside one of libcurl's callbacks.
  write_error = 23,
  /// CURLE_OUT_OF_MEMORY; also a `std::bad_alloc` caught inside one of libcurl's callbacks
  /// (storing the body or a header, watching a socket), which aborts that transfer alone.
  out_of_memory = 27,
  operation_timedout = 28, ///< CURLE_OPERATION_TIMEDOUT (`request::timeout`/`connect_timeout`)
  /// CURLE_SSL_CONNECT_ERROR: the TLS handshake failed (no common protocol version, e.g. below
  /// `tls_options::min_version`, or cipher; a client certificate the server rejected).
  ssl_connect_error = 35,
  too_many_redirects = 47, ///< CURLE_TOO_MANY_REDIRECTS
  /// CURLE_FILESIZE_EXCEEDED: the response is larger than the client accepts: its body over
  /// `client_options::max_response_body` (announced or received), its header bytes over
  /// `client_options::max_response_headers`, or a header line or block over libcurl's own
  /// limits (100 KiB a line, 300 KiB a block in 7.88). Never retried.
  filesize_exceeded = 63,
  got_nothing = 52, ///< CURLE_GOT_NOTHING (connection closed without a reply)
  send_error = 55,  ///< CURLE_SEND_ERROR
  recv_error = 56,  ///< CURLE_RECV_ERROR (e.g. connection reset by peer)
  /// CURLE_SSL_CERTPROBLEM: the client certificate or key (`tls_options::client_cert`,
  /// `client_key`) could not be used.
  ssl_certproblem = 58,
  /// CURLE_PEER_FAILED_VERIFICATION: the server's certificate was not verified (unknown
  /// issuer, self-signed, expired, or not for this host name).
  peer_failed_verification = 60,
  /// CURLE_SSL_CACERT_BADFILE: the CA file, directory or blob could not be loaded.
  ssl_cacert_badfile = 77,
  http2_stream = 92, ///< CURLE_HTTP2_STREAM (one HTTP/2 stream reset, e.g. REFUSED_STREAM)
  /// CURLE_PROXY: the proxy refused to open the tunnel to the origin (its answer to `CONNECT`
  /// was not 2xx, e.g. 403 Forbidden or 407 Proxy Authentication Required; libcurl's detail
  /// names the status), or a SOCKS handshake failed. Never retried: the proxy answers the same
  /// way again.
  proxy_refused = 97,
};

/// Whether `ec` is a TLS failure in `curl_category()` (handshake, verification, certificate
/// or CA file): never worth retrying, the same configuration fails the same way.
CORETRY_CURL_API bool is_tls_error(const std::error_code& ec) noexcept;

/// The category of libcurl transfer errors (`CURLcode`); its name is "curl" and its messages
/// come from `curl_easy_strerror`, except for TLS failures, whose messages say what failed
/// ("TLS: the server's certificate was not verified ..."). Thread-safe.
CORETRY_CURL_API const std::error_category& curl_category() noexcept;

/// The category of HTTP statuses, `coretry::http::status_category()` itself (the same object,
/// so codes compare equal whichever name made them): "HTTP 503 Service Unavailable". A status is
/// never a transport error; `coretry::curl::retry` uses this category to tell a breaker what a
/// response says of the upstream (`attempt_context::health_code`) and its `on_retry` hook which
/// status caused a retry. Thread-safe.
CORETRY_CURL_API const std::error_category& http_status_category() noexcept;

/// `{status, http_status_category()}`, equal to `coretry::http::make_status_error(status)`.
inline std::error_code make_http_status_error(long status) noexcept {
  // Through libcoretry_curl's own export, so that a program linking it alone still links.
  return {static_cast<int>(status), http_status_category()};
}

/// `e` as a `std::error_code` of `curl_category()` (found by argument-dependent lookup).
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), curl_category()};
}

} // namespace coretry::curl

/// \cond
template <> struct std::is_error_code_enum<coretry::curl::errc> : std::true_type {};
/// \endcond
