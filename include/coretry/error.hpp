// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// coretry's error codes. Cancellation is not one of them: a cancelled retry completes with
/// `asio::error::operation_aborted`, the code every Asio user already tests for.

#include <coretry/export.hpp>

#include <string>
#include <system_error>

namespace coretry {

/// What the retry policy itself decided, as opposed to what an attempt reported.
enum class errc {
  /// Every allowed attempt failed (`retry_policy::max_attempts`). By default the loop reports the
  /// last attempt's own error instead; this value is in `retry_stats::reason`, and is what
  /// `final_error::policy_reason` reports.
  attempts_exhausted = 1,
  /// The overall deadline (`retry_policy::deadline`) passed during an attempt, or no further
  /// attempt could start before it once the next delay was known.
  deadline_exceeded,
  /// One attempt ran longer than `retry_policy::attempt_timeout` and was cancelled. Retryable.
  attempt_timeout,
  /// The shared retry budget (`retry_policy::budget`) refused a retry.
  budget_exhausted,
  /// The attempt completed, but the policy's `classify` (or the deprecated result predicate)
  /// rejected its value, asking for a retry (for example HTTP 503). Seen by `on_retry` hooks and
  /// the observer; a loop that gives up after such a result returns the result itself.
  result_rejected,
  /// The group cancellation token was triggered. Operations complete with
  /// `asio::error::operation_aborted`; this value only appears in `retry_stats::reason`.
  cancelled,
  /// The circuit breaker (`retry_policy::breaker`) is open: the attempt was not sent. Under
  /// `retry_policy::when_open = on_open::wait`, the breaker would let an attempt through only
  /// at or after the deadline (`retry_policy::deadline`): the operation stops at once rather
  /// than wait in vain.
  circuit_open,
  /// An operation threw something other than `std::system_error`, or a hook or predicate of the
  /// policy threw. The loop stops at once; see `retry_stats::exception` for what was thrown.
  unexpected_exception,
  /// A server hint (`attempt_context::retry_after`, HTTP `Retry-After`) asked for a longer wait
  /// than `retry_policy::max_retry_after` allows; the loop stops rather than retry early.
  retry_after_too_long,
  /// A server hint asked for a wait that would end at or after the overall deadline
  /// (`retry_policy::deadline`): no attempt could be sent when the server allows one, so the loop
  /// stops at once instead of sleeping until the deadline. Reported like `retry_after_too_long`
  /// (see `final_error`), not as `deadline_exceeded`: the deadline has not passed.
  retry_after_past_deadline,
  /// The sending rate (`retry_policy::rate_limit`) refused to reserve a send token: the wait
  /// for one would be longer than it is willing to hold a reservation
  /// (`adaptive_rate_options::max_wait`). Nothing was sent for that attempt.
  rate_limited,
  /// The client's own adaptive throttle (`adaptive_throttle` as `retry_policy::breaker`)
  /// rejected the attempt locally: the upstream has lately refused much of what this client
  /// sent. Nothing was sent for that attempt.
  throttled_locally,
  /// An attempt threw an exception that the policy's `classify` retries (or the deprecated
  /// `retry_if_exception` accepts): a failed attempt like any other, retried under the policy's
  /// limits. It is
  /// the attempt's error for `retry_stats::last_error`, `retry_event`, the observer and the
  /// budget; `retry_stats::exception` holds what was thrown. When the loop gives up and reports
  /// this code (the last attempt threw, see `final_error`), `retry_async` and `hedge_async`
  /// rethrow that exception itself; the token front ends deliver this code.
  retryable_exception,
};

/// The category of `coretry::errc`; its name is "coretry". With Boost.Asio, a
/// `boost::system::error_code` carrying it wraps the `std::error_code`: Boost's
/// `ec.category().name()` then reads "std:unknown" and `ec.value()` is not the `errc` value;
/// convert first (`std::error_code(ec)`) to read them (docs/asio.md, "Errors").
CORETRY_API const std::error_category& retry_category() noexcept;

/// `e` as a `std::error_code` of `retry_category()` (found by argument-dependent lookup).
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), retry_category()};
}

/// Groups of outcomes a caller asks about without listing codes, as Beast's conditions do:
/// `if (ec == coretry::condition::refused_locally)`. A code may belong to several groups
/// (`errc::deadline_exceeded` is `gave_up` and `timed_out`). With Boost.Asio, compare the
/// `std::error_code` that the `boost::system::error_code` converts to.
enum class condition {
  /// The policy stopped retrying: `attempts_exhausted`, `budget_exhausted`,
  /// `deadline_exceeded`, `retry_after_too_long`, `retry_after_past_deadline`.
  gave_up = 1,
  /// Nothing was sent for the attempt: a local overload control refused it (`circuit_open`,
  /// `throttled_locally`, `rate_limited`, `budget_exhausted`).
  refused_locally,
  /// A time limit ran out: `attempt_timeout`, `deadline_exceeded`, and the system's
  /// `timed_out` (`std::errc::timed_out`, as Asio's sockets report it).
  timed_out,
  /// The operation was cancelled: `asio::error::operation_aborted`
  /// (`std::errc::operation_canceled`) or `errc::cancelled`.
  cancelled,
  /// The upstream answered and asked the client to slow down. No code of coretry's own belongs
  /// here; an adapter's category adds its codes (`coretry::curl`: HTTP 429). The default health
  /// classification (`default_health`) counts it as a push-back, not a failure.
  pushback,
  /// The upstream answered and refused the request for the request's own fault: it says nothing
  /// of the upstream's health. No code of coretry's own belongs here; an adapter's category adds
  /// its codes (`coretry::curl`: HTTP 4xx other than 408 and 429, a malformed URL, an unsupported
  /// protocol). The default health classification counts it as healthy.
  client_error,
  /// The upstream answered without failing, whether or not the policy accepted the answer (a
  /// "202 pending" polled again, a redirect the rules retry). No code of coretry's own belongs
  /// here; an adapter's category adds its codes (`coretry::http::status_category()`: HTTP 1xx
  /// to 3xx). The default health classification counts it as healthy.
  answered,
};

/// The category of `coretry::condition`; its name is "coretry.condition".
CORETRY_API const std::error_category& condition_category() noexcept;

/// `c` as a `std::error_condition` of `condition_category()`.
inline std::error_condition make_error_condition(condition c) noexcept {
  return {static_cast<int>(c), condition_category()};
}

} // namespace coretry

/// \cond
template <> struct std::is_error_code_enum<coretry::errc> : std::true_type {};
template <> struct std::is_error_condition_enum<coretry::condition> : std::true_type {};
/// \endcond
