// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// The HTTP retry classification used by `coretry::curl::retry`, public for other retry loops.

#include <coretry/classify.hpp>
#include <coretry/curl/request.hpp>
#include <coretry/export.hpp>
#include <coretry/http.hpp>

#include <optional>
#include <string_view>
#include <system_error>

namespace coretry::curl {

/// Whether a transport error is worth retrying: in `curl_category()`, `couldnt_connect`,
/// `operation_timedout`, `send_error`, `recv_error` (connection reset), `got_nothing` (closed
/// without a reply), `partial_file`, `http2` (an HTTP/2 connection closed, GOAWAY),
/// `http2_stream` (a stream reset or refused); `coretry::errc::attempt_timeout`; the generic
/// `connection_refused`, `connection_reset`, `connection_aborted`, `timed_out`. Never
/// `asio::error::operation_aborted` (cancellation), TLS failures (`is_tls_error`: an
/// untrusted certificate or a failed handshake fails the same way again), invalid or
/// unsupported URLs, resolution failures, redirect loops or anything else.
CORETRY_CURL_API bool is_retryable(const std::error_code& ec) noexcept;

/// Whether a transport error says the connection it came from may be unusable, so that the
/// next attempt should not go out on it (`request::fresh_connection`): in `curl_category()`,
/// `http2` (a framing or connection error), `http2_stream` (a stream reset), `weird_server_reply`,
/// `send_error`, `recv_error`, `got_nothing`, `partial_file`; the generic `connection_reset`
/// and `connection_aborted`. Not timeouts (a slow server is not a broken connection) nor
/// errors before a connection exists (`couldnt_connect`, resolution, TLS).
CORETRY_CURL_API bool breaks_connection(const std::error_code& ec) noexcept;

/// Whether a transport error is worth retrying under `rules`: `is_retryable(ec)`, or a failed
/// name resolution (`errc::couldnt_resolve_host`) when `rules.retry_dns_failures` is set.
CORETRY_CURL_API bool is_retryable(const std::error_code& ec,
                                   const coretry::http::retry_rules& rules) noexcept;

/// Whether a transport error is a failed name resolution (`errc::couldnt_resolve_host`).
CORETRY_CURL_API bool is_dns_failure(const std::error_code& ec) noexcept;

/// The kind of failure a transport error is, as urllib3 counts them (see
/// `coretry::http::retry_rules::connect_retries` and `read_retries`); `std::nullopt` for any
/// other error.
///
/// - `connect`, the request never reached the server: `errc::couldnt_connect`,
///   `errc::couldnt_resolve_host`, the generic `connection_refused`, and
///   `errc::operation_timedout` while connecting or resolving (libcurl's account,
///   `error_detail`, starts with "Failed to connect", "Connection timed out" or "Resolving
///   timed out").
/// - `read`, it may have: `send_error`, `recv_error`, `got_nothing`, `partial_file`, `http2`,
///   `http2_stream`, `operation_timedout` otherwise (any other `error_detail`, none included), the
///   generic `connection_reset`, `connection_aborted` and `timed_out`.
CORETRY_CURL_API std::optional<coretry::http::failure_kind>
failure_kind_of(const std::error_code& ec, std::string_view error_detail = {}) noexcept;

/// What `coretry::curl::retry` decides for one attempt by default, as a `retry_policy::classify`
/// to start from. A transport error is retried when `is_retryable(ec, rules)`, and slows the
/// sending rate when it is a time-out. A response (`r.value<response>()`) is retried when the
/// rules retry its status (`coretry::http::is_retryable_status(status, rules)`); a 429 is a
/// push-back; a 429 or 503 slows the sending rate; and its `Retry-After` is the decision's hint
/// when the rules honour it for that status. Anything else is accepted. The rules' limits per
/// kind of failure (`connect_retries`, `status_retries`, ...) are counted by `curl::retry`
/// itself, whichever classifier decides; pass the same `rules` as the request or client has.
///
/// ```
/// coretry::retry_policy policy{.max_attempts = 4};
/// policy.classify = [](const coretry::attempt_result& r) {
///   coretry::attempt_decision d = coretry::curl::classify(r);
///   if (const auto* res = r.value<coretry::curl::response>(); res && res->status == 409)
///     d.retry = true; // this service answers 409 while a write settles
///   return d;
/// };
/// ```
CORETRY_CURL_API coretry::attempt_decision classify(const coretry::attempt_result& r,
                                                    const coretry::http::retry_rules& rules = {});

/// Whether an HTTP status is worth retrying by default: 408, 429, 500, 502, 503 and 504. Every
/// other status, other 4xx in particular, is final. `coretry::http::is_retryable_status`.
CORETRY_CURL_API bool is_retryable_status(long status) noexcept;

/// Whether a method is idempotent (RFC 9110): GET, HEAD, OPTIONS, PUT, DELETE, TRACE.
/// Compared case-sensitively, as methods are. `coretry::http::is_idempotent`.
CORETRY_CURL_API bool is_idempotent(std::string_view method) noexcept;

/// Whether `coretry::curl::retry` may send `req` more than once: its method is idempotent, it
/// carries an `Idempotency-Key` header, or `req.retry_non_idempotent` is set.
CORETRY_CURL_API bool may_retry(const request& req) noexcept;

/// Whether `coretry::curl::retry` may send `req` more than once under `rules`: its method is in
/// `rules.allowed_methods`, it carries an `Idempotency-Key` header, or
/// `req.retry_non_idempotent` is set.
CORETRY_CURL_API bool may_retry(const request& req,
                                const coretry::http::retry_rules& rules) noexcept;

/// Whether the server's `Retry-After` should be honoured for this status by default (429 and
/// 503). `coretry::http::honours_retry_after`.
inline bool honours_retry_after(long status) noexcept {
  return coretry::http::honours_retry_after(status);
}

} // namespace coretry::curl
