// SPDX-License-Identifier: BSL-1.0
#pragma once
// The retry loop's body, as steps (`loop_core`), and the one coroutine that drives them directly:
// retry_async's path for an operation nothing outside can cancel. The composed operation
// (retry_op.hpp), behind async_retry and every controlled operation, drives the same steps from
// completion handlers. Private: include <coretry/retry.hpp>.
//
// The steps never throw on their own account: every way out sets a `loop_result` and ends in
// `next_step::done`. Exceptions are caught where they arise. What an attempt throws is its
// outcome by attempt_shape.hpp's one rule (a `std::system_error` is its code; an exception the
// policy's `retry_if_exception` accepts is `errc::retryable_exception`, retried); anything else
// an attempt throws, and anything a predicate or hook throws, ends the loop with
// `errc::unexpected_exception`. The awaitable front end turns a failure into its exception,
// once.

#include <coretry/attempt.hpp>
#include <coretry/detail/asio.hpp>
#include <coretry/detail/attempt_shape.hpp>
#include <coretry/detail/loaded_rule.hpp>
#include <coretry/detail/reservation.hpp>
#include <coretry/detail/schedule.hpp>
#include <coretry/error.hpp>
#include <coretry/observer.hpp>
#include <coretry/policy.hpp>

#include <cstddef>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace coretry::detail {

// The observer's outcome is the loop's verdict, value for value.
static_assert(static_cast<int>(attempt_kind::neutral) ==
                  static_cast<int>(attempt_outcome::not_retried) &&
              static_cast<int>(attempt_kind::abandoned) ==
                  static_cast<int>(attempt_outcome::abandoned));

struct no_value {};
template <class T> using stored_t = std::conditional_t<std::is_void_v<T>, no_value, T>;

/// What the loop hands back: a value, or the error to report (and what was thrown, if anything).
template <class T> struct loop_result {
  std::error_code error;
  std::optional<stored_t<T>> value;
  std::exception_ptr exception;
  std::error_code reason; ///< why the loop stopped (`retry_stats::reason`), for the observer
};

/// The policy's judgement of an attempt's outcome `out` (its `error`, `value` and `exception`),
/// before `schedule::classify` sees it: step 2 of attempt_shape.hpp's rule, for the retry loop
/// and the hedge alike. An attempt that did not `ran_its_course` (a timer cut it or a
/// cancellation abandoned it) has what it threw dropped (`judge_abandoned`) under either
/// spelling, and only the 0.2 `retry_if_result` is asked about its value, as 0.2 asked it.
/// Otherwise with `retry_policy::classify`, as it decides (the fields it leaves open completed
/// with `default_classify`), else as `retry_if_exception` and `retry_if_result` say
/// (`judge_attempt`, asked as 0.2 asked them); which of the two decides is
/// `classify_decides` (loaded_rule.hpp: a loaded policy with a 0.2 predicate added decides as
/// in 0.2). An exception retried
/// becomes `errc::retryable_exception` and moves into `retried`; a value rejected
/// becomes `errc::result_rejected` (the value stays: it is returned if the loop gives up); a
/// judge that throws puts what it threw in `out.exception` (a bug: the loop stops). `hint` is
/// raised to the decision's server hint. Returns the classifier's decision, for
/// `schedule::classify`.
template <class Out>
std::optional<attempt_decision> judge_outcome(const retry_policy& p, Out& out, unsigned attempt,
                                              bool ran_its_course, nanoseconds& hint,
                                              const std::error_code& health_code,
                                              std::exception_ptr& retried) noexcept {
  const bool by_classify = classify_decides(p);
  if (!ran_its_course) {
    judge_abandoned(out);
    if (!by_classify)
      judge_result(p, out);
    return std::nullopt;
  }
  if (!by_classify) {
    retried = judge_attempt(p, out);
    return std::nullopt;
  }
  attempt_result r(attempt, out.error, out.exception);
  if constexpr (!std::is_same_v<typename decltype(out.value)::value_type, no_value>)
    if (out.value && !out.error && !out.exception)
      r.with_value(*out.value);
  r.with_retry_after(hint).with_health_code(health_code);
  attempt_decision d;
  try {
    d = p.classify(r);
  } catch (...) {
    out.exception = std::current_exception();
    return std::nullopt;
  }
  if (!d.gives(decision_fields::all)) // what the classifier leaves, the default decides
    d = coretry::complete(d, default_classify(r));
  if (d.retry_after > hint)
    hint = d.retry_after;
  if (d.retry) {
    if (out.exception) {
      out.error = errc::retryable_exception;
      retried = std::exchange(out.exception, nullptr);
    } else if (!out.error) {
      out.error = errc::result_rejected;
    }
  }
  return d;
}

CORETRY_ALLOW_DEPRECATED_BEGIN // the 0.2 result filter, checked at the call
/// Refuses, at the call, a result predicate written for another type than the operation's.
template <class T> void check_result_filter(const retry_policy& p) {
  if (p.result_filter && (std::is_void_v<T> || *p.result_filter->type != typeid(stored_t<T>)))
    throw std::invalid_argument(std::string("coretry::retry_policy: result_filter takes ") +
                                p.result_filter->type->name() + ", but the operation returns " +
                                (std::is_void_v<T> ? "void" : typeid(stored_t<T>).name()));
}
CORETRY_ALLOW_DEPRECATED_END

/// Whether an operation needs the controlled path (a strand, and a state shared with the
/// handlers that cancel it): something may cancel it from outside, or its attempts are timed.
inline bool needs_control(const retry_policy& p, bool caller_slot) noexcept {
  return caller_slot || p.cancellation.can_be_cancelled() || p.deadline != unlimited ||
         p.attempt_timeout != unlimited;
}

/// The events an operation run with `p` builds for its observer: none without one.
inline observer_interest heard_by(const retry_policy& p) noexcept {
  return p.observer ? p.observer->interests() : observer_interest::none;
}

/// Whether the loop reads the clock at all, given what its observer `hears`: a call that
/// succeeds at once should cost little more than awaiting the operation.
inline bool needs_clock(const retry_policy& p, bool stats, observer_interest hears) noexcept {
  return stats || p.deadline != unlimited || p.budget || p.breaker || p.rate_limit ||
         hears != observer_interest::none;
}

// --- The loop --------------------------------------------------------------------------------

/// How the loop ends, written into the result and the caller's stats (when asked for). Plain
/// functions rather than lambdas: every closure a coroutine names takes room in its frame, and
/// the frame is what a sleeping operation costs.
template <class T> struct loop_exit {
  static void fail(loop_result<T>& r, retry_stats* s, std::error_code reason,
                   std::error_code report) {
    r.error = report;
    r.reason = reason;
    // Else: gave up on a rejected result, which is returned. A gate's refusal reports itself
    // (circuit_open, throttled_locally) and keeps the last rejected result, delivered with it
    // where the completion carries a value.
    if (report && reason != errc::circuit_open && reason != errc::throttled_locally)
      r.value.reset();
    if (s)
      s->reason = reason;
  }
  static void abort(loop_result<T>& r, retry_stats* s, const retry_policy& p) {
    fail(r, s,
         p.cancellation.cancelled() ? std::error_code(errc::cancelled)
                                    : coretry::detail::aborted_error(),
         coretry::detail::aborted_error());
  }
  static void thrown(loop_result<T>& r, retry_stats* s, std::exception_ptr e) {
    r.value.reset();
    fail(r, s, errc::unexpected_exception, errc::unexpected_exception);
    if (s)
      s->exception = e;
    r.exception = std::move(e);
  }
};

template <class Clock> nanoseconds read_clock(bool clocked) noexcept {
  return clocked ? since_epoch(Clock::now()) : nanoseconds{0};
}

/// The loop's clock, for a reservation settled by its destructor (reservation.hpp).
template <class Clock> nanoseconds clock_now() noexcept {
  return since_epoch(Clock::now());
}

/// Read at the call: the start of the deadline, and the seeded stream of the k-th operation.
template <class Clock> op_origin make_origin(const retry_policy& p, bool stats) noexcept {
  const observer_interest hears = heard_by(p);
  const bool clocked = needs_clock(p, stats, hears);
  op_origin o{read_clock<Clock>(clocked), std::nullopt, hears, clocked};
  if (p.seed.has_value())
    o.rng.emplace(p.seed.next_stream());
  return o;
}

// --- The loop's steps ------------------------------------------------------------------------

/// What the loop does next.
enum class next_step : unsigned char {
  attempt, ///< run the attempt in `context()`, write its outcome into `result()`, then `ended`
  sleep,   ///< wait `delay()` (zero: yield once), then `top` again
  done,    ///< `result()` is the outcome: call `finish` and report it
};

/// The state of one retry loop and the decisions between its waits: what the coroutine below
/// holds in its frame and the composed operation (retry_op.hpp) in its heap state. Both drive it
/// the same way: `started()`, then `top` and, after each attempt, `ended`, each of which says
/// what comes next, until `done`; then `finish()`. Observer events, stats and reservations are
/// all handled here, in the same order on either path. `Ctx` is what the attempts are given:
/// `attempt_context`, or `context_free` for an operation that takes none (`context_for<Op>`),
/// which keeps the state 160 bytes smaller.
template <class Clock, class T, class Ctx = attempt_context> class loop_core {
  using exit = loop_exit<T>;

public:
  /// `p` must outlive the core (the operation's copy, or its `shared_policy`); `origin` comes
  /// from `make_origin` with the same policy, and `stats` set when it was made for stats.
  loop_core(const retry_policy& p, retry_stats* stats, op_origin origin)
      : policy_(p), stats_(stats), hears_(origin.hears), clocked_(origin.clocked),
        start_(origin.start), sched_(p, std::move(origin), &clock_now<Clock>) {
    if (stats_)
      *stats_ = retry_stats{};
  }
  loop_core(const loop_core&) = delete;
  loop_core& operator=(const loop_core&) = delete;

  const retry_policy& policy() const noexcept { return policy_; }
  loop_result<T>& result() noexcept { return result_; }
  Ctx& context() noexcept { return ctx_; }
  /// The wait `next_step::sleep` asks for.
  nanoseconds delay() const noexcept { return v_.delay; }
  /// How long the attempt `top` started may run (the attempt timeout, or the deadline).
  nanoseconds attempt_limit() noexcept {
    return sched_.attempt_limit(attempt_start_, by_deadline_);
  }

  /// The operation runs (after linking to its group): the budget and the observer hear of it.
  void started() {
    if (policy_.budget)
      policy_.budget->on_request(start_);
    if (hears(observer_interest::operation_started))
      emit(*policy_.observer, operation_started_event{policy_.label, operation_kind::retry});
  }

  /// At the top of the loop (first, and after every sleep): `cancelled` by anything outside.
  /// Waits for a send token or the breaker (`sleep`), starts an attempt (`attempt`: counted,
  /// its context made, the observer told), or stops (`done`).
  next_step top(bool cancelled) {
    if (cancelled) {
      exit::abort(result_, stats_, policy_);
      return next_step::done;
    }
    if (result_.error) {
      last_error_ = result_.error;
      result_.error = {};
    }
    attempt_start_ = read_clock<Clock>(clocked_);
    bool pacing = false; // this time round, only the wait for a send token or the breaker
    if (policy_.rate_limit && !token_) {
      v_ = sched_.pace(attempt_start_, token_);
      if (v_.stop) {
        if (hears(observer_interest::refused) && v_.stop == errc::rate_limited)
          emit(*policy_.observer, refusal_event{policy_.label, v_.stop, sched_.attempts() + 1});
        exit::fail(result_, stats_, v_.stop, v_.report);
        return next_step::done;
      }
      pacing = v_.delay > nanoseconds::zero();
    }
    if (!pacing) {
      if (const std::error_code why = sched_.begin_attempt(attempt_start_, grant_, charge_)) {
        token_.returned();
        v_ = sched_.refused(static_cast<errc>(why.value()), attempt_start_, last_error_);
        if (v_.stop) {
          // A refusal is an overload control's (the gate, or the budget asked again after a
          // wait for the gate); a deadline reached before the attempt could start is not one.
          if (hears(observer_interest::refused) && why != errc::deadline_exceeded)
            emit(*policy_.observer, refusal_event{policy_.label, why, sched_.attempts() + 1});
          exit::fail(result_, stats_, v_.stop, v_.report);
          return next_step::done;
        }
        pacing = true; // waiting for the breaker (on_open::wait): only the sleep
      }
    }
    if (pacing)
      return sleep();
    // The send token and the budget's charge stay reserved until the driver sends the attempt
    // (`sent`): a cancellation from the observer's hook below gives both back.
    if (stats_)
      stats_->attempts = sched_.attempts();
    ctx_ = Ctx(sched_.attempts());
    result_.value.reset();
    if (hears(observer_interest::attempt_started))
      emit(*policy_.observer, attempt_started_event{policy_.label, sched_.attempts()});
    return next_step::attempt;
  }

  /// After the attempt, its outcome in `result()`: `timed_out` when the attempt timer (or the
  /// deadline) cut it, `cancelled` when anything outside cancelled the operation meanwhile.
  /// Filters and classifies the result, tells every listener, and decides: `done` or `sleep`.
  next_step ended(bool timed_out, bool cancelled) {
    bool cut = false;       // by the deadline
    bool timer_cut = false; // by the deadline or the attempt timeout
    if (timed_out && !result_.value) {
      cut = by_deadline_;
      timer_cut = true;
      result_.error = by_deadline_ ? errc::deadline_exceeded : errc::attempt_timeout;
      result_.exception = nullptr;
    }
    // The policy's judgement: a rejected value or a retried exception is this attempt's failure.
    std::exception_ptr retried;
    nanoseconds hint = ctx_.retry_after();
    const std::optional<attempt_decision> decided =
        judge_outcome(policy_, result_, sched_.attempts(), !timer_cut && !cancelled, hint,
                      ctx_.health_code(), retried);
    ctx_.retry_after(hint);
    // The one verdict on this attempt, for the breaker, the sending rate, the budget and the
    // decision below alike; a predicate that throws makes it abandoned, and ends the loop.
    // Cancellation wins over whatever the attempt reported.
    std::exception_ptr thrown;
    const attempt_class verdict_of =
        sched_.classify(result_.error, timer_cut, cancelled || result_.exception, thrown,
                        ctx_.retry_after(), ctx_.health_code(), decided ? &*decided : nullptr);
    if (thrown && !result_.exception)
      result_.exception = std::move(thrown);
    if (policy_.breaker || policy_.rate_limit || policy_.budget)
      sched_.report(verdict_of, grant_, read_clock<Clock>(clocked_));
    if (hears(observer_interest::attempt_finished))
      emit(*policy_.observer,
           attempt_finished(
               policy_.label, sched_.attempts(), read_clock<Clock>(clocked_) - attempt_start_,
               result_.exception ? std::error_code(errc::unexpected_exception) : result_.error,
               static_cast<attempt_outcome>(verdict_of.kind), ctx_.attributes()));
    if (result_.exception) {
      exit::thrown(result_, stats_, std::move(result_.exception));
      return next_step::done;
    }
    if (!result_.error) {
      if (stats_) {
        stats_->last_error = {};
        stats_->exception = nullptr;
      }
      return next_step::done;
    }

    // A failed attempt.
    if (stats_) {
      stats_->last_error = result_.error;
      stats_->exception = retried;
    }
    if (retried)
      last_exception_ = std::move(retried);
    if (cancelled) {
      exit::abort(result_, stats_, policy_);
      return next_step::done;
    }
    try {
      const nanoseconds t = read_clock<Clock>(clocked_);
      // A retry a rate limiter invited: a push-back answer (HTTP 429) that named its time and
      // that no timer cut. Not a 503 with Retry-After: an overloaded upstream's retries stay
      // within the budget.
      const std::error_code& said = ctx_.health_code() ? ctx_.health_code() : result_.error;
      const bool invited =
          !timer_cut && ctx_.retry_after() > nanoseconds::zero() && said == condition::pushback;
      v_ = sched_.after_failure({result_.error, cut, ctx_.retry_after(), verdict_of.kind, invited},
                                t, &charge_);
      if (!v_.stop && policy_.on_retry)
        policy_.on_retry(
            retry_event{sched_.attempts(), result_.error, v_.delay, ctx_.retry_after()});
    } catch (...) {
      exit::thrown(result_, stats_, std::current_exception());
      return next_step::done;
    }
    if (!v_.stop) {
      if (hears(observer_interest::retry_scheduled))
        emit(*policy_.observer, retry_scheduled_event{policy_.label, sched_.attempts(),
                                                      result_.error, v_.delay, ctx_.retry_after()});
    } else if (v_.stop == errc::budget_exhausted && hears(observer_interest::refused)) {
      emit(*policy_.observer, refusal_event{policy_.label, v_.stop, sched_.attempts() + 1});
    }
    if (v_.stop) {
      exit::fail(result_, stats_, v_.stop, v_.report);
      return next_step::done;
    }
    return sleep();
  }

  /// The attempt `top` started is not sent after all: a cancellation arrived after `top` looked
  /// (from a hook it called: the observer, the gate) or while the attempt was being initiated.
  /// It ends as an abandoned attempt (the breaker's grant goes back, the observer hears its end)
  /// and the operation as cancelled: one rule, checked by every driver before it starts an
  /// attempt.
  next_step abandon_attempt() {
    token_.returned();
    charge_.returned();
    result_.value.reset();
    result_.exception = nullptr;
    result_.error = coretry::detail::aborted_error();
    return ended(false, true);
  }

  /// The attempt `top` started is being sent: its send token and its retry budget charge are
  /// spent. Every driver calls it after its last cancellation check, before it initiates.
  void sent() noexcept {
    token_.used();
    charge_.used();
  }

  /// A sleep that failed to start (its timer threw): the loop ends with what was thrown.
  void thrown(std::exception_ptr e) { exit::thrown(result_, stats_, std::move(e)); }

  /// The loop is over: the stats and the observer hear how it went.
  void finish() {
    surface_exception(result_, last_exception_); // the awaitable front ends rethrow it
    if (stats_)
      stats_->elapsed = read_clock<Clock>(clocked_) - start_;
    if (hears(observer_interest::operation_finished))
      emit(*policy_.observer,
           operation_finished_event{policy_.label, operation_kind::retry, sched_.attempts(),
                                    read_clock<Clock>(clocked_) - start_, slept_, result_.reason,
                                    result_.error});
  }

private:
  bool hears(observer_interest e) const noexcept { return listens(hears_, e); }

  next_step sleep() noexcept {
    slept_ += v_.delay;
    if (stats_)
      stats_->slept += v_.delay;
    return next_step::sleep;
  }

  const retry_policy& policy_;
  retry_stats* stats_;
  observer_interest hears_; ///< asked of the observer once
  bool clocked_;
  bool by_deadline_ = false; ///< the running attempt's limit is the deadline
  nanoseconds start_;        ///< read at the call
  schedule sched_;
  loop_result<T> result_; ///< the attempt in hand, and in the end what is reported
  std::error_code last_error_;
  std::exception_ptr last_exception_; ///< the last exception `retry_if_exception` accepted
  // The reservations (reservation.hpp): each settles once, on whatever path leaves the loop.
  send_token token_;    ///< from `rate_limit`, for the next attempt
  retry_charge charge_; ///< the retry the budget granted, until it is sent
  gate_grant grant_;    ///< the breaker's grant, until the attempt's outcome is reported
  nanoseconds slept_{0};
  nanoseconds attempt_start_{0};
  verdict v_;
  Ctx ctx_{0};
};

// --- The direct loop -------------------------------------------------------------------------

/// retry_async's loop for an operation that nothing but the awaiting coroutine cancels and
/// whose attempts are not timed: awaited in the caller's coroutine, which cancels it the usual
/// way (an enclosing `||`, a bound slot). `Policy` is `retry_policy` (the operation's own copy)
/// or `shared_policy`. Throws the failure, once, at its end.
template <class Timer, class T, class Op, class Policy>
asio::awaitable<T> retry_loop(Op op, Policy held, retry_stats* stats, op_origin origin) {
  using shape = attempt_shape<Op>; // how an attempt is started and awaited (attempt_shape.hpp)
  using clock = typename Timer::clock_type;

  loop_core<clock, T, context_for<Op>> core(policy_of(held), stats, std::move(origin));
  std::optional<Timer> sleep_timer; // made at the first sleep: a first success needs none
  core.started();
  asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
  for (next_step step = core.top(cs.cancelled() != asio::cancellation_type::none ||
                                 core.policy().cancellation.cancelled());
       step != next_step::done; step = core.top(cs.cancelled() != asio::cancellation_type::none ||
                                                core.policy().cancellation.cancelled())) {
    if (step == next_step::attempt) {
      if (cs.cancelled() != asio::cancellation_type::none ||
          core.policy().cancellation.cancelled()) { // cancelled by a hook `top` called
        if (core.abandon_attempt() == next_step::done)
          break;
        continue;
      }
      core.sent();
      try {
        if constexpr (shape::awaits_void) {
          co_await shape::start(op, core.context());
          core.result().value.emplace();
        } else {
          shape::take(core.result(), co_await shape::await_outcome(op, core.context()));
        }
      }
      CORETRY_DETAIL_CATCH_OUTCOME(core.result())
      if (core.ended(false, cs.cancelled() != asio::cancellation_type::none ||
                                core.policy().cancellation.cancelled()) == next_step::done)
        break;
    }
    try {
      if (core.delay() == nanoseconds::zero()) {
        // An expired timer would cost a timerfd round trip; a post yields just as well.
        co_await asio::post(asio::use_awaitable);
      } else {
        if (!sleep_timer)
          sleep_timer.emplace(co_await asio::this_coro::executor);
        sleep_timer->expires_after(std::chrono::ceil<typename clock::duration>(core.delay()));
        auto [ec] =
            co_await sleep_timer->async_wait(coretry::detail::as_tuple(asio::use_awaitable));
        (void)ec; // a cancelled sleep is seen at the top of the loop
      }
    } catch (const std::system_error&) {
      // Awaiting in a coroutine already cancelled throws; the top of the loop sees why.
#if CORETRY_ASIO_DISTINCT_SYSTEM_ERROR
    } catch (const asio_system_error&) {
#endif
    } catch (...) {
      core.thrown(std::current_exception());
      break;
    }
  }
  core.finish();

  loop_result<T>& result = core.result();
  if (result.exception)
    std::rethrow_exception(result.exception);
  if (result.error)
    throw std::system_error(result.error);
  if constexpr (!std::is_void_v<T>)
    co_return std::move(*result.value);
}

} // namespace coretry::detail
