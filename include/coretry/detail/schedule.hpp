#pragma once
// The retry loop's decisions, apart from any coroutine, timer or executor: given what an attempt
// did and what time it is, stop (and report what) or sleep (and for how long). Private: the
// loop in retry_loop.hpp drives it; tests drive it directly.

#include <coretry/detail/asio.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>
#include <coretry/random.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <ratio>
#include <system_error>

namespace coretry::detail {

/// "No time": the deadline of an operation without one.
inline constexpr nanoseconds no_deadline = nanoseconds::max();

/// `start + limit`, saturating at `no_deadline` instead of overflowing.
constexpr nanoseconds deadline_after(nanoseconds start, nanoseconds limit) noexcept {
  if (limit == unlimited || start > no_deadline - limit)
    return no_deadline;
  return start + limit;
}

/// A time point of any clock as nanoseconds since its epoch, saturating: a clock coarser than
/// nanoseconds (seconds, say) may hold values no `nanoseconds` can.
template <class TimePoint> constexpr nanoseconds since_epoch(TimePoint t) noexcept {
  using dur = typename TimePoint::duration;
  const auto d = t.time_since_epoch();
  if constexpr (std::ratio_less_equal_v<typename dur::period, std::nano>) {
    return std::chrono::duration_cast<nanoseconds>(d);
  } else {
    constexpr auto top = std::chrono::duration_cast<dur>(nanoseconds::max());
    constexpr auto bottom = std::chrono::duration_cast<dur>(nanoseconds::min());
    if (d >= top)
      return nanoseconds::max();
    if (d <= bottom)
      return nanoseconds::min();
    return std::chrono::duration_cast<nanoseconds>(d);
  }
}

/// How the attempt that just ended went, as the loop saw it.
struct attempt_end {
  std::error_code error; ///< Empty on success; `result_rejected` for a rejected result.
  /// The attempt was cut short by the deadline (its own error, if any, is moot).
  bool cut_by_deadline = false;
  nanoseconds hint{0}; ///< `attempt_context::retry_after`.
};

/// What to do after a failed attempt.
struct verdict {
  /// Set: stop, for this reason (`retry_stats::reason`). Empty: sleep `delay`, then retry.
  std::error_code stop;
  /// When stopping: the error the operation reports (empty when the last, rejected, result is
  /// returned instead).
  std::error_code report;
  nanoseconds delay{0};
};

/// One operation's schedule: attempt count, the deadline, the previous delay and the random
/// stream. Every time is nanoseconds since the epoch of the loop's clock.
class schedule {
public:
  schedule(const retry_policy& p, nanoseconds start) noexcept
      : p_(p), deadline_(deadline_after(start, p.deadline)), previous_(p.backoff.initial()) {}

  const retry_policy& policy() const noexcept { return p_; }
  unsigned attempts() const noexcept { return attempts_; }
  bool has_deadline() const noexcept { return deadline_ != no_deadline; }
  nanoseconds deadline() const noexcept { return deadline_; }

  /// Before an attempt: empty when it may start (and it is counted), else why the loop stops
  /// without it. Nothing is counted or charged for an attempt that does not start.
  std::error_code begin_attempt(nanoseconds now) noexcept {
    if (has_deadline() && now >= deadline_)
      return errc::deadline_exceeded;
    if (p_.breaker && !p_.breaker->try_acquire(now))
      return errc::circuit_open;
    ++attempts_;
    return {};
  }

  /// Before an attempt, with a `rate_limit`: how long to wait for a send token, or why the loop
  /// stops instead (a wait that would end at or past the deadline).
  verdict pace(nanoseconds now) noexcept {
    const nanoseconds wait = p_.rate_limit->acquire(now);
    if (wait > nanoseconds::zero() && has_deadline() &&
        (now >= deadline_ || wait >= deadline_ - now))
      return {errc::deadline_exceeded, errc::deadline_exceeded};
    return {{}, {}, wait};
  }

  /// Whether the policy would retry after `ec` (cancellation never).
  bool retryable(const std::error_code& ec) const {
    if (coretry::detail::is_aborted(ec) || ec == errc::cancelled)
      return false;
    return ec == errc::result_rejected || ec == errc::attempt_timeout ||
           (p_.retry_if ? p_.retry_if(ec) : default_retry_if(ec));
  }

  /// Tells the breaker and the sending rate how a granted attempt ended: `ec` empty on
  /// success; `cancelled` when the caller stopped it.
  void record(const std::error_code& ec, bool cancelled, nanoseconds now) const {
    if (p_.breaker) {
      bool failure = false;
      if (ec && !cancelled) {
        try {
          failure = retryable(ec); // a user predicate: it may throw
        } catch (...) {
          p_.breaker->on_abandoned(now); // the breaker hears once, whatever happens
          throw;
        }
      }
      if (cancelled)
        p_.breaker->on_abandoned(now);
      else if (failure)
        p_.breaker->on_failure(now);
      else
        p_.breaker->on_success(now);
    }
    if (p_.rate_limit && !cancelled) {
      if (ec && (p_.throttle_if ? p_.throttle_if(ec) : default_throttle_if(ec)))
        p_.rate_limit->on_throttle(now);
      else
        p_.rate_limit->on_success(now);
    }
  }

  /// How long the attempt starting at `now` may run: the attempt timeout or what is left until
  /// the deadline, whichever is less. Sets `by_deadline` when the deadline is the limit.
  nanoseconds attempt_limit(nanoseconds now, bool& by_deadline) const noexcept {
    const nanoseconds left = has_deadline() ? deadline_ - now : unlimited;
    by_deadline = left <= p_.attempt_timeout;
    return by_deadline ? left : p_.attempt_timeout;
  }

  /// After a failed attempt (`end.error` set): stop or sleep. `now` is read only when the
  /// operation has a deadline (pass anything otherwise). Consults and charges the budget.
  verdict after_failure(const attempt_end& end, nanoseconds now) {
    const std::error_code& ec = end.error;
    if (end.cut_by_deadline)
      return stop(errc::deadline_exceeded, ec);
    if (!retryable(ec))
      return {ec, ec};
    if (attempts_ >= p_.max_attempts)
      return stop(errc::attempts_exhausted, ec);
    if (end.hint > p_.max_retry_after)
      return stop(errc::retry_after_too_long, ec);
    // A deadline already reached is the deadline's doing; a hint reaching it, the server's.
    if (has_deadline() && now >= deadline_)
      return stop(errc::deadline_exceeded, ec);
    if (has_deadline() && end.hint > nanoseconds::zero() && end.hint >= deadline_ - now)
      return stop(errc::retry_after_past_deadline, ec);

    if (!rng_)
      rng_.emplace(p_.seed.next_stream());
    nanoseconds delay = p_.backoff.delay(attempts_ - 1, previous_, *rng_);
    previous_ = delay;
    delay = std::max(delay, end.hint);
    if (has_deadline() && (now >= deadline_ || delay >= deadline_ - now))
      return stop(errc::deadline_exceeded, ec);
    // Last: a budget grants and spends in one step.
    if (p_.budget && !p_.budget->try_retry(now))
      return stop(errc::budget_exhausted, ec);
    return {{}, {}, delay};
  }

  /// The verdict for a loop stopped by `reason` after an attempt that ended with `last`:
  /// the deadline always reports itself; otherwise `final_error` decides, and a rejected
  /// result is returned rather than reported.
  verdict stop(errc reason, const std::error_code& last) const noexcept {
    if (last == errc::result_rejected)
      return {reason, {}};
    if (reason == errc::deadline_exceeded || p_.report == final_error::policy_reason || !last)
      return {reason, reason};
    return {reason, last};
  }

private:
  const retry_policy& p_;
  nanoseconds deadline_;
  nanoseconds previous_;
  unsigned attempts_ = 0;
  std::optional<fast_rng> rng_;
};

} // namespace coretry::detail
