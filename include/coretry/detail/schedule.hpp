// SPDX-License-Identifier: BSL-1.0
#pragma once
// The retry loop's decisions, apart from any coroutine, timer or executor: given what an attempt
// did and what time it is, stop (and report what) or sleep (and for how long). Private: the
// loop in retry_loop.hpp and the hedge in hedge_op.hpp drive it; tests drive it directly.
//
// It reads no clock: every time is passed in. It makes the reservations (reservation.hpp) the
// loop holds: a breaker's grant (`begin_attempt`), a send token (`pace`), a retry charged to the
// budget (`after_failure`); and it classifies each attempt once (`classify`) and tells every
// listener that one verdict (`report`).

#include <coretry/detail/asio.hpp>
#include <coretry/detail/reservation.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>
#include <coretry/random.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
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
  /// The attempt's classification (`schedule::classify`), when the caller has it: then no
  /// predicate is asked again.
  std::optional<attempt_kind> kind{};
  /// A rate limiter invited the retry: the attempt's answer (its health code, else its error)
  /// is in `condition::pushback` (an HTTP 429) and carried `hint`, and no timer cut it.
  bool invited = false;
};

/// Where and when an operation started: read at the call (`retry_async`, `async_retry`), so
/// that the deadline counts from the call and the k-th operation started with a seeded policy
/// draws the k-th stream, however late its loop first runs.
struct op_origin {
  nanoseconds start{0};
  std::optional<fast_rng> rng{}; ///< drawn at the call when the policy is seeded
  /// The events the policy's observer listens to, asked once at the call (`make_origin`).
  observer_interest hears = observer_interest::none;
  bool clocked = false; ///< whether the loop reads its clock at all (`needs_clock`)
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
  /// `now` reads the loop's clock for a reservation settled by its destructor (null: the time
  /// it was made). A seeded policy's stream is drawn here unless `origin` brings it.
  schedule(const retry_policy& p, op_origin origin, now_fn now = nullptr) noexcept
      : p_(p), deadline_(deadline_after(origin.start, p.deadline)), previous_(p.backoff.initial()),
        now_(now), rng_(std::move(origin.rng)) {
    if (!rng_ && p_.seed.has_value())
      rng_.emplace(p_.seed.next_stream());
  }
  schedule(const retry_policy& p, nanoseconds start) noexcept : schedule(p, op_origin{start}) {}

  const retry_policy& policy() const noexcept { return p_; }
  unsigned attempts() const noexcept { return attempts_; }
  bool has_deadline() const noexcept { return deadline_ != no_deadline; }
  nanoseconds deadline() const noexcept { return deadline_; }

  /// Before an attempt: empty when it may start (it is counted, `grant` holds the breaker's
  /// grant and `charge` the retry it will spend), else why the loop stops without it. The
  /// caller settles `charge` (`used()`) only once the attempt is really sent: an attempt that a
  /// cancellation stops between here and its start (from the observer's `attempt_started`, the
  /// gate or a hook) gives it back. Nothing is counted or charged for an attempt that does not
  /// start: a refused attempt hands `charge` back.
  ///
  /// A retry whose charge went back while it waited for the breaker (`refused`) asks the budget
  /// again here, before the breaker (`errc::budget_exhausted` if it refuses).
  std::error_code begin_attempt(nanoseconds now, gate_grant& grant, retry_charge& charge) noexcept {
    gate_refused_ = false;
    budget_refused_ = false;
    if (has_deadline() && now >= deadline_)
      return errc::deadline_exceeded;
    if (recharge_) {
      if (p_.budget) {
        if (!p_.budget->try_retry(now)) {
          budget_refused_ = true; // still a retry: under on_open::wait it asks again later
          return errc::budget_exhausted;
        }
        charge = retry_charge(p_.budget.get(), now);
      }
      recharge_ = false;
    }
    if (p_.breaker) {
      if (!p_.breaker->try_acquire(now)) {
        recharge_ = static_cast<bool>(charge); // a retry: it asks again if it waits
        charge.returned();
        gate_refused_ = true;
        return p_.breaker->refusal();
      }
      grant = gate_grant(p_.breaker.get(), now_, now);
    }
    ++attempts_;
    return {};
  }
  /// As above, for a caller that reports to no breaker (the schedule's tests): a grant is
  /// reported as abandoned at once, and a charge is spent as if the attempt were sent.
  std::error_code begin_attempt(nanoseconds now) noexcept {
    gate_grant grant;
    retry_charge charge;
    const std::error_code why = begin_attempt(now, grant, charge);
    charge.used();
    return why;
  }

  /// After `begin_attempt` refused an attempt at `now` for `why`: stop (reporting as `stop`
  /// does), or, when the breaker refused it and the policy waits (`on_open::wait`), sleep
  /// `delay` and ask again. A wait the gate cannot bound, or that would end at or after the
  /// deadline, stops at once with the gate's refusal.
  ///
  /// Under `on_open::wait` a retry the budget refused (asked again after a wait) waits too, for
  /// `retry_budget::retry_after`, jittered.
  verdict refused(errc why, nanoseconds now, const std::error_code& last) noexcept {
    if (budget_refused_ && p_.when_open == on_open::wait) {
      const nanoseconds wait = budget_wait(now);
      if (wait == nanoseconds::zero())
        return stop(why, last);
      return {{}, {}, wait};
    }
    if (!gate_refused_ || p_.when_open != on_open::wait)
      return stop(why, last);
    const nanoseconds wait = p_.breaker->retry_after(now);
    if (wait == unlimited || wait <= nanoseconds::zero() ||
        (has_deadline() && wait >= deadline_ - now))
      return stop(why, last);
    return {{}, {}, wait};
  }

  /// Before an attempt, with a `rate_limit`: reserves a send token into `token` and says how
  /// long to wait for it, or why the loop stops instead: the rate refused (`rate_limited`), or
  /// the wait would end at or past the deadline (`deadline_exceeded`, the token handed back).
  verdict pace(nanoseconds now, send_token& token) noexcept {
    const nanoseconds wait = p_.rate_limit->acquire(now);
    if (wait == unlimited)
      return {errc::rate_limited, errc::rate_limited};
    token = send_token(p_.rate_limit.get(), now_, now);
    if (wait > nanoseconds::zero() && has_deadline() &&
        (now >= deadline_ || wait >= deadline_ - now)) {
      token.returned();
      return {errc::deadline_exceeded, errc::deadline_exceeded};
    }
    return {{}, {}, wait};
  }

  CORETRY_ALLOW_DEPRECATED_BEGIN // the 0.2 predicates decide when `classify` is empty
  /// Whether the policy would retry after `ec` (cancellation never): as `said` (the policy's
  /// `classify`) decided, or else as `retry_if` says.
  bool retryable(const std::error_code& ec, const attempt_decision* said = nullptr) const {
    if (coretry::detail::is_aborted(ec))
      return false;
    // One look at the category (an out-of-line call), not one per code compared.
    if (ec.category() == retry_category()) {
      switch (static_cast<errc>(ec.value())) {
      case errc::cancelled:
        return false;
      case errc::result_rejected:
      case errc::attempt_timeout:
      case errc::retryable_exception:
        return true;
      default:
        break;
      }
    }
    return said ? said->retry : p_.retry_if ? p_.retry_if(ec) : default_retry_if(ec);
  }

  /// The one verdict on an attempt that was sent: `ec` empty on success; `cut` when the deadline
  /// or the attempt timer cut it (a failure and a throttle, whatever `retry_if` says);
  /// `abandoned` when the caller cancelled it or its outcome is lost; `hint` the attempt's
  /// `attempt_context::retry_after`; `health_code` its `attempt_context::health_code`. A
  /// retryable failure is a push-back (`attempt_class::pushback`) when it carries a hint or
  /// `pushback_if` says so. With a breaker, the breaker's own classification
  /// (`attempt_gate::classify`) of `health_code`, or of `ec` when it is empty, is
  /// `attempt_class::gate`, whatever `retry_if` says; an `unhealthy` one with a hint or
  /// `pushback_if` is a push-back. A predicate (or classifier) that throws makes the attempt
  /// abandoned and its exception is stored in `thrown`. With `said` (the decision of the
  /// policy's `classify`, `judge_outcome`), no predicate is asked: `said` replaces them all.
  attempt_class classify(const std::error_code& ec, bool cut, bool abandoned,
                         std::exception_ptr& thrown, nanoseconds hint = nanoseconds::zero(),
                         const std::error_code& health_code = {},
                         const attempt_decision* said = nullptr) const noexcept {
    if (abandoned)
      return {attempt_kind::abandoned, false, false, health::ignored};
    try {
      // `pushback_if` is asked once at most, by whichever rule needs it first.
      std::optional<bool> pushed;
      const auto pushback_said = [&] {
        if (!pushed)
          pushed = ec && (said ? said->pushback : p_.pushback_if && p_.pushback_if(ec));
        return *pushed;
      };
      attempt_class c;
      if (cut) {
        c = {attempt_kind::failure, true};
      } else if (ec) {
        const bool failure = retryable(ec, said); // user predicates: they may throw
        const bool throttled = p_.rate_limit && (said             ? said->throttle
                                                 : p_.throttle_if ? p_.throttle_if(ec)
                                                                  : default_throttle_if(ec));
        const bool pushback = failure && (hint > nanoseconds::zero() || pushback_said());
        c = {failure ? attempt_kind::failure : attempt_kind::neutral, throttled, pushback};
      }
      if (p_.breaker)
        c.gate = gate_health(ec, cut, hint, health_code, pushback_said);
      return c;
    } catch (...) {
      thrown = std::current_exception();
      return {attempt_kind::abandoned, false, false, health::ignored};
    }
  }
  CORETRY_ALLOW_DEPRECATED_END

  /// Tells every listener the verdict `c`, once: the breaker (settling `grant`), the sending
  /// rate (nothing for an abandoned attempt), the budget (a success, or a failed attempt of any
  /// kind; nothing for an abandoned one).
  void report(const attempt_class& c, gate_grant& grant, nanoseconds now) const noexcept {
    grant.report(c.gate ? *c.gate : gate_health_of(c.kind, c.pushback), now);
    if (p_.rate_limit && c.kind != attempt_kind::abandoned) {
      if (c.throttled)
        p_.rate_limit->on_throttle(now);
      else
        p_.rate_limit->on_success(now);
    }
    if (p_.budget && c.kind != attempt_kind::abandoned) {
      if (c.kind == attempt_kind::success)
        p_.budget->on_success(now);
      else
        p_.budget->on_failure(now);
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
  /// operation has a deadline (pass anything otherwise). Asks the budget last: the retry it
  /// grants goes into `charge`, spent when the retry starts and refunded if it never does
  /// (without `charge`: spent at once).
  verdict after_failure(const attempt_end& end, nanoseconds now, retry_charge* charge = nullptr) {
    const std::error_code& ec = end.error;
    if (end.cut_by_deadline)
      return stop(errc::deadline_exceeded, ec);
    if (end.kind ? *end.kind != attempt_kind::failure : !retryable(ec))
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
    // Last: a budget grants and spends in one step. A caller that waits (on_open::wait) waits
    // for a refusing budget too, and asks it again before the retry (`begin_attempt`). A retry
    // a rate limiter invited (a 429 that named its time, which the delay waits) is asked only of
    // a budget that limits those too.
    const bool invited = end.invited && end.hint > nanoseconds::zero() && !end.cut_by_deadline;
    if (p_.budget && (!invited || p_.budget->limits_scheduled_retries())) {
      if (!p_.budget->try_retry(now)) {
        if (p_.when_open != on_open::wait)
          return stop(errc::budget_exhausted, ec);
        const nanoseconds wait = budget_wait(now);
        if (wait == nanoseconds::zero() ||
            (has_deadline() && std::max(delay, wait) >= deadline_ - now))
          return stop(errc::budget_exhausted, ec);
        recharge_ = true;
        return {{}, {}, std::max(delay, wait)};
      }
      if (charge)
        *charge = retry_charge(p_.budget.get(), now);
    }
    return {{}, {}, delay};
  }

  /// The verdict for a loop stopped by `reason` after an attempt that ended with `last`:
  /// the deadline and a gate's refusal (`circuit_open`, `throttled_locally`) always report
  /// themselves (even after a rejected result: one outcome per cause, whether or not an attempt
  /// ran before); otherwise
  /// `final_error` decides, and a rejected result is returned rather than reported.
  verdict stop(errc reason, const std::error_code& last) const noexcept {
    if (reason == errc::deadline_exceeded || reason == errc::circuit_open ||
        reason == errc::throttled_locally)
      return {reason, reason};
    if (last == errc::result_rejected)
      return {reason, {}};
    if (p_.report == final_error::policy_reason || !last)
      return {reason, reason};
    return {reason, last};
  }

private:
  /// The breaker's classification of an attempt that was sent (see `classify`). May throw.
  /// `pushback_said()` is `pushback_if`'s answer for `ec`.
  template <class Said>
  health gate_health(const std::error_code& ec, bool cut, nanoseconds hint,
                     const std::error_code& health_code, const Said& pushback_said) const {
    // A success's `answered` status (a 200) says no more than the success itself: the gate
    // hears no error for it, so a classifier that tests `!ec` counts it healthy.
    std::error_code code =
        health_code && (ec || health_code != condition::answered) ? health_code : ec;
    if (cut) // what the attempt said is moot: a timer cut it
      code = ec == condition::timed_out ? ec : std::error_code(errc::attempt_timeout);
    const health h = p_.breaker->classify(code);
    if (h == health::unhealthy && !cut && (hint > nanoseconds::zero() || pushback_said()))
      return health::pushback;
    return h;
  }

  /// How long a retry the budget refused at `now` waits before asking again: the budget's
  /// `retry_after` times a uniform draw in [1, 1.5), so that the waiters of one window do not
  /// all ask at its edge; zero when the budget cannot say or the wait would reach the deadline.
  nanoseconds budget_wait(nanoseconds now) noexcept {
    const nanoseconds wait = p_.budget->retry_after(now);
    if (wait == unlimited || wait <= nanoseconds::zero())
      return nanoseconds::zero();
    if (!rng_)
      rng_.emplace(p_.seed.next_stream());
    const double u = rng_->uniform(1.0, 1.5);
    const double scaled = static_cast<double>(wait.count()) * u;
    const nanoseconds jittered = scaled >= static_cast<double>(nanoseconds::max().count())
                                     ? nanoseconds::max()
                                     : nanoseconds(static_cast<std::int64_t>(scaled));
    if (has_deadline() && (now >= deadline_ || jittered >= deadline_ - now))
      return nanoseconds::zero();
    return jittered;
  }

  const retry_policy& p_;
  nanoseconds deadline_;
  nanoseconds previous_;
  unsigned attempts_ = 0;
  bool gate_refused_ = false;   ///< the last `begin_attempt` was refused by the breaker
  bool recharge_ = false;       ///< a retry's charge went back while it waited for the breaker
  bool budget_refused_ = false; ///< the last `begin_attempt` was refused by the budget
  now_fn now_;
  std::optional<fast_rng> rng_;
};

} // namespace coretry::detail
