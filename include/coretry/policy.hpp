#pragma once
/// \file
/// `retry_policy`: everything a retry loop needs to know, as one aggregate.

#include <coretry/backoff.hpp>
#include <coretry/budget.hpp>
#include <coretry/cancellation.hpp>
#include <coretry/error.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <system_error>

namespace coretry {

/// "No limit" for `retry_policy::deadline` and `retry_policy::attempt_timeout`.
inline constexpr nanoseconds unlimited = nanoseconds::max();

/// Passed to `retry_policy::on_retry` after a failed attempt, before the loop sleeps.
struct retry_event {
  unsigned attempt = 0;       ///< The attempt that just failed, from 1.
  std::error_code error{};    ///< Its error (`errc::result_rejected` when the result was rejected).
  nanoseconds delay{0};       ///< The sleep chosen before the next attempt.
  nanoseconds server_hint{0}; ///< What the attempt asked for through `attempt_context`, or 0.
};

/// What one retry operation did; filled in as it goes and final when it completes.
struct retry_stats {
  unsigned attempts = 0;        ///< Attempts started.
  nanoseconds slept{0};         ///< Sum of the delays slept (as chosen, not as measured).
  nanoseconds elapsed{0};       ///< From the start of the operation to its completion.
  std::error_code last_error{}; ///< The last attempt's error; empty if it succeeded.
  /// Why the loop stopped: empty on success; an `errc` when the policy gave up;
  /// the attempt's error when it was not retryable; `errc::cancelled` or
  /// `asio::error::operation_aborted` when cancelled.
  std::error_code reason{};
};

/// What the operation reports as its final failure.
enum class final_error : std::uint8_t {
  /// The last attempt's own error (the default: the caller sees `connection_refused`, not a wrapper;
  /// `retry_stats::reason` still tells why the loop stopped). When the policy stopped before any
  /// attempt error existed (a budget or deadline with no attempt made) the `errc` is reported.
  last_error,
  /// Always the policy's reason (`errc::attempts_exhausted`, `deadline_exceeded`, ...) when the
  /// loop gave up; non-retryable errors are still reported as themselves.
  policy_reason,
};

/// The default retry predicate: everything is retryable except cancellation.
bool default_retry_if(const std::error_code& ec) noexcept;

template <class Predicate> struct result_policy;

/// A retry policy. An aggregate meant for designated initializers; every field has a default.
///
/// ```
/// coretry::retry_policy policy{
///     .max_attempts = 5,
///     .deadline = 10s,
///     .attempt_timeout = 2s,
///     .backoff = coretry::backoff::exponential(100ms, 2.0, 5s).with_jitter(coretry::jitter::full()),
/// };
/// ```
///
/// Defaults: 3 attempts, no deadline, no per-attempt timeout, exponential backoff from 100 ms
/// doubling up to 32 s with full jitter (the recommendation of articles 001 and 002), every error
/// but cancellation retried, no hook, no budget, no group token, a fresh random seed per operation,
/// the last attempt's error reported. `validate()` runs when an operation starts, before anything
/// else, and throws `std::invalid_argument` naming the bad field.
struct retry_policy {
  /// Attempts in total, the first included (1 = never retry). Must be at least 1.
  unsigned max_attempts = 3;
  /// Overall time limit from the start, covering attempts and sleeps: an attempt still running at
  /// the deadline is cancelled, and the loop never sleeps when no attempt could start before it.
  nanoseconds deadline = unlimited;
  /// Limit for each attempt; an attempt over it is cancelled and fails with
  /// `errc::attempt_timeout`, which is retryable.
  nanoseconds attempt_timeout = unlimited;
  /// The delays between attempts.
  coretry::backoff backoff =
      coretry::backoff::exponential(std::chrono::milliseconds(100), 2.0, std::chrono::seconds(32))
          .with_jitter(coretry::jitter::full());
  /// Which attempt errors to retry; empty means `default_retry_if`. Cancellation is never retried,
  /// whatever this says.
  std::function<bool(const std::error_code&)> retry_if{};
  /// Called after each failed attempt that will be retried, with the delay chosen. Runs on the
  /// operation's executor; it must not throw.
  std::function<void(const retry_event&)> on_retry{};
  /// A budget shared with other operations; none by default.
  std::shared_ptr<retry_budget> budget{};
  /// A group token; see `cancellation_source`.
  cancellation_token cancellation{};
  /// Seed for this operation's jitter; by default a fresh one per operation.
  std::optional<std::uint64_t> seed{};
  /// What a failed operation reports.
  final_error report = final_error::last_error;

  /// Throws `std::invalid_argument` when a field is out of range (`max_attempts` of 0, a
  /// non-positive `deadline` or `attempt_timeout`).
  void validate() const;

  /// This policy plus a predicate on successful results: when `pred(result)` is true the result
  /// is treated as a retryable failure (`errc::result_rejected`). When the loop then gives up, the
  /// last result is returned rather than an error, so the caller can still read it (e.g. the last
  /// HTTP 503 response); `retry_stats::reason` tells why.
  template <class Predicate> result_policy<Predicate> retry_if_result(Predicate pred) const& {
    return {*this, std::move(pred)};
  }
  template <class Predicate> result_policy<Predicate> retry_if_result(Predicate pred) && {
    return {std::move(*this), std::move(pred)};
  }
};

/// A `retry_policy` with a predicate on results; made by `retry_policy::retry_if_result`.
template <class Predicate> struct result_policy {
  retry_policy policy{};
  Predicate retry_if_result;
};

} // namespace coretry
