// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `attempt_context`: what an attempt may learn from, and tell, the retry loop.

#include <chrono>
#include <string_view>
#include <system_error>

namespace coretry {

/// Passed to operations that take it (`op(attempt_context&)`), once per attempt.
class attempt_context {
public:
  /// The context of attempt `number` (from 1); the loop makes one per attempt.
  explicit attempt_context(unsigned number) noexcept : number_(number) {}

  /// This attempt's number, from 1.
  unsigned number() const noexcept { return number_; }

  /// Asks for at least `hint` before the next attempt, as a server does with `Retry-After`.
  /// The loop waits `max(backoff delay, hint)`, above the backoff's cap too; a hint above
  /// `retry_policy::max_retry_after` stops it with `errc::retry_after_too_long`, one that ends at
  /// or after the deadline with `errc::retry_after_past_deadline`. The largest hint wins;
  /// negative hints are ignored.
  void retry_after(std::chrono::nanoseconds hint) noexcept {
    if (hint > hint_)
      hint_ = hint;
  }

  /// The hint given so far (zero if none).
  std::chrono::nanoseconds retry_after() const noexcept { return hint_; }

  /// Tells observers (`retry_observer::on_attempt_finished`) this attempt's HTTP request method
  /// and response status (0: no response). `method` must stay valid until the attempt has
  /// returned. `coretry::curl` calls it; nothing else reads it.
  void http(std::string_view method, int status) noexcept {
    method_ = method;
    status_ = status;
  }
  /// The method given to `http`, or empty.
  std::string_view http_method() const noexcept { return method_; }
  /// The status given to `http`, or 0.
  int http_status() const noexcept { return status_; }

  /// Tells the breaker (`retry_policy::breaker`, through its health classification
  /// `attempt_gate::classify`) what this attempt's outcome says about the upstream, in place of
  /// the error the attempt returns: an attempt whose result is rejected reaches the loop as
  /// `errc::result_rejected`, which a gate cannot tell apart. `coretry::curl` and
  /// `coretry::beast` set the status of every response (`coretry::http::make_status_error`),
  /// whose category places it in `condition::answered` (1xx to 3xx, healthy even when
  /// rejected), `condition::client_error` or `condition::pushback`, or in neither (HTTP 5xx:
  /// unhealthy).
  /// Ignored for an attempt cut by the deadline or its timeout, or cancelled.
  void health_code(const std::error_code& ec) noexcept { health_code_ = ec; }
  /// The code given to `health_code`, or an empty one.
  const std::error_code& health_code() const noexcept { return health_code_; }

private:
  unsigned number_;
  int status_ = 0; // beside `number_`, in what would be padding: the context lives in the frame
  std::chrono::nanoseconds hint_{0};
  std::string_view method_{};
  std::error_code health_code_{};
};

} // namespace coretry
