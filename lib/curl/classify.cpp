// SPDX-License-Identifier: BSL-1.0
#include <coretry/curl/classify.hpp>
#include <coretry/curl/error.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>

namespace coretry::curl {

bool is_retryable(const std::error_code& ec) noexcept {
  if (!ec)
    return false;
  if (ec.category() == curl_category()) {
    switch (static_cast<errc>(ec.value())) {
    case errc::couldnt_connect:
    case errc::operation_timedout:
    case errc::send_error:
    case errc::recv_error:
    case errc::got_nothing:
    case errc::partial_file:
    // HTTP/2: a connection torn down (GOAWAY, a framing error) or one stream reset, e.g.
    // REFUSED_STREAM beyond the server's stream limit. libcurl resends a refused stream on a
    // new connection itself, a few times; what it reports after that is retried like a reset.
    case errc::http2:
    case errc::http2_stream:
      return true;
    default:
      return false;
    }
  }
  if (ec == coretry::errc::attempt_timeout)
    return true;
  return ec == std::errc::connection_refused || ec == std::errc::connection_reset ||
         ec == std::errc::connection_aborted || ec == std::errc::timed_out;
}

bool is_dns_failure(const std::error_code& ec) noexcept {
  return ec.category() == curl_category() &&
         static_cast<errc>(ec.value()) == errc::couldnt_resolve_host;
}

bool is_retryable(const std::error_code& ec, const coretry::http::retry_rules& rules) noexcept {
  return is_retryable(ec) || (rules.retry_dns_failures && is_dns_failure(ec));
}

std::optional<coretry::http::failure_kind> failure_kind_of(const std::error_code& ec,
                                                           std::string_view error_detail) noexcept {
  using coretry::http::failure_kind;
  if (!ec)
    return std::nullopt;
  if (ec.category() == curl_category()) {
    switch (static_cast<errc>(ec.value())) {
    case errc::couldnt_connect:
    case errc::couldnt_resolve_host:
      return failure_kind::connect;
    // libcurl 7.88 says "Failed to connect to <host> port <n> after <t> ms: Timeout was
    // reached" or "Connection timed out after ..." while connecting, "Resolving timed out
    // after ..." while resolving, and "Operation timed out after ..." once the request may have
    // gone out. Any other account (none, the client's own "request::timeout expired during the
    // redirects") is taken as the latter: the request may have reached the server.
    case errc::operation_timedout:
      return error_detail.starts_with("Failed to connect") ||
                     error_detail.starts_with("Connection timed out") ||
                     error_detail.starts_with("Resolving timed out")
                 ? failure_kind::connect
                 : failure_kind::read;
    case errc::send_error:
    case errc::recv_error:
    case errc::got_nothing:
    case errc::partial_file:
    case errc::http2:
    case errc::http2_stream:
      return failure_kind::read;
    default:
      return std::nullopt;
    }
  }
  if (ec == std::errc::connection_refused)
    return failure_kind::connect;
  if (ec == std::errc::connection_reset || ec == std::errc::connection_aborted ||
      ec == std::errc::timed_out)
    return failure_kind::read;
  return std::nullopt;
}

bool breaks_connection(const std::error_code& ec) noexcept {
  if (!ec)
    return false;
  if (ec.category() == curl_category()) {
    switch (static_cast<errc>(ec.value())) {
    // libcurl closes an HTTP/1.x connection on any failed transfer, but keeps an HTTP/2 one in
    // its cache after a stream error or a framing error on that stream alone: a retry would
    // find the same connection.
    case errc::http2:
    case errc::http2_stream:
    case errc::weird_server_reply:
    case errc::send_error:
    case errc::recv_error:
    case errc::got_nothing:
    case errc::partial_file:
      return true;
    default:
      return false;
    }
  }
  return ec == std::errc::connection_reset || ec == std::errc::connection_aborted;
}

bool is_retryable_status(long status) noexcept {
  return coretry::http::is_retryable_status(status);
}

coretry::attempt_decision classify(const coretry::attempt_result& r,
                                   const coretry::http::retry_rules& rules) {
  coretry::attempt_decision d;
  if (r.error()) {
    d.retry = is_retryable(r.error(), rules);
    d.throttle = coretry::default_throttle_if(r.error()) || r.error() == errc::operation_timedout;
  } else if (const response* res = r.value<response>()) {
    // The status rules, as coretry::beast applies them: one function for both.
    d = coretry::http::classify_response(res->status, res->header("Retry-After").value_or(""),
                                         rules);
  }
  return d;
}

bool is_idempotent(std::string_view m) noexcept {
  return coretry::http::is_idempotent(m);
}

bool may_retry(const request& req) noexcept {
  return req.retry_non_idempotent || is_idempotent(req.method) ||
         req.header("Idempotency-Key").has_value();
}

bool may_retry(const request& req, const coretry::http::retry_rules& rules) noexcept {
  return req.retry_non_idempotent ||
         coretry::http::may_retry(req.method, req.header("Idempotency-Key").has_value(), rules);
}

} // namespace coretry::curl
