// SPDX-License-Identifier: BSL-1.0
#pragma once
// The retry loop: runs attempts and sleeps as the schedule (schedule.hpp) decides. Private:
// include <coretry/retry.hpp>.
//
// One coroutine per operation. It never throws on its own account: every way out sets a
// `loop_result` and leaves through the single exit at the bottom, where the awaitable front end
// (`Throwing`) turns a failure into its exception, once. Exceptions are caught where they arise
// (an attempt, a predicate, a hook) and end the loop with `errc::unexpected_exception`.

#include <coretry/attempt.hpp>
#include <coretry/detail/asio.hpp>
#include <coretry/detail/attempt_shape.hpp>
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

/// Refuses, at the call, a result predicate written for another type than the operation's.
template <class T> void check_result_filter(const retry_policy& p) {
  if (p.result_filter && (std::is_void_v<T> || *p.result_filter->type != typeid(stored_t<T>)))
    throw std::invalid_argument(std::string("coretry::retry_policy: result_filter takes ") +
                                p.result_filter->type->name() + ", but the operation returns " +
                                (std::is_void_v<T> ? "void" : typeid(stored_t<T>).name()));
}

/// Whether an operation needs the controlled path (a strand, and a state shared with the
/// handlers that cancel it): something may cancel it from outside, or its attempts are timed.
inline bool needs_control(const retry_policy& p, bool caller_slot) noexcept {
  return caller_slot || p.cancellation.can_be_cancelled() || p.deadline != unlimited ||
         p.attempt_timeout != unlimited;
}

/// Whether the loop reads the clock at all: a call that succeeds at once should cost little
/// more than awaiting the operation.
inline bool needs_clock(const retry_policy& p, bool stats) noexcept {
  return stats || p.deadline != unlimited || p.budget || p.breaker || p.rate_limit || p.observer;
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
  op_origin o{read_clock<Clock>(needs_clock(p, stats))};
  if (p.seed.has_value())
    o.rng.emplace(p.seed.next_stream());
  return o;
}

/// Tells the operation's state that the loop sleeps on a timer, until the sleep ends or the
/// frame is destroyed in it.
template <class Control> struct sleep_guard {
  const Control& control;
  ~sleep_guard() { control->woke(); }
};

/// `Policy` is `retry_policy` (the operation's own copy) or `shared_policy`. `Control` is
/// `std::nullptr_t` on the plain paths, or the `shared_ptr` owning the operation's state
/// (retry_op.hpp) on the controlled one, which provides: `arm()`, `cancelled`,
/// `start_attempt(limit)`, `end_attempt()` (true when the attempt timer cut the attempt),
/// `sleep_on(timer)` and `woke()` (a cancellation meanwhile cancels the timer), `disarm()`.
template <class Timer, class T, bool Throwing, class Op, class Policy, class Control>
asio::awaitable<std::conditional_t<Throwing, T, loop_result<T>>>
retry_loop(Op op, Policy held, retry_stats* stats, op_origin origin, Control control) {
  const retry_policy& policy = policy_of(held);
  constexpr bool controlled = !std::is_same_v<Control, std::nullptr_t>;
  using shape = attempt_shape<Op>; // how an attempt is started and awaited (attempt_shape.hpp)
  using clock = typename Timer::clock_type;
  using exit = loop_exit<T>;

  if (stats)
    *stats = retry_stats{};
  const bool clocked = needs_clock(policy, stats != nullptr);
  const nanoseconds start = origin.start; // read at the call
  schedule sched(policy, std::move(origin), &clock_now<clock>);
  std::optional<Timer> sleep_timer; // made at the first sleep: a first success needs none
  loop_result<T> result;            // the attempt in hand, and in the end what is reported
  std::error_code last_error;
  // The reservations (reservation.hpp): each settles once, on whatever path leaves the loop.
  send_token token;    // from `rate_limit`, for the next attempt
  retry_charge charge; // the retry the budget granted, until it is sent
  gate_grant grant;    // the breaker's grant, until the attempt's outcome is reported
  nanoseconds slept{0};

  bool armed = true;
  if constexpr (controlled)
    armed = control->arm(); // from here on, a cancellation emits into this coroutine
  if (policy.budget)
    policy.budget->on_request(start);
  if (policy.observer)
    emit(*policy.observer, operation_started_event{policy.label, operation_kind::retry});

  // The plain paths read the awaiting coroutine's cancellation; the controlled one is told
  // (`control->cancelled`), and spends no frame room on this.
  asio::cancellation_state cs;
  if constexpr (!controlled)
    cs = co_await asio::this_coro::cancellation_state;
  for (;;) {
    // Cancelled by the group, the caller's slot, or (plain path) the awaiting coroutine.
    bool cancelled = !armed || policy.cancellation.cancelled();
    if constexpr (controlled)
      cancelled = cancelled || control->cancelled;
    else
      cancelled = cancelled || cs.cancelled() != asio::cancellation_type::none;
    if (cancelled) {
      exit::abort(result, stats, policy);
      break;
    }
    // Between attempts: at the top of the loop again after a sleep, or for the first time.
    if (result.error) {
      last_error = result.error;
      result.error = {};
    }
    const nanoseconds attempt_start = read_clock<clock>(clocked);
    verdict v;
    bool pacing = false; // this time round, only the wait for a send token or the breaker
    if (policy.rate_limit && !token) {
      v = sched.pace(attempt_start, token);
      if (v.stop) {
        if (policy.observer && v.stop == errc::rate_limited)
          emit(*policy.observer, refusal_event{policy.label, v.stop, sched.attempts() + 1});
        exit::fail(result, stats, v.stop, v.report);
        break;
      }
      pacing = v.delay > nanoseconds::zero();
    }
    if (!pacing) {
      if (const std::error_code why = sched.begin_attempt(attempt_start, grant, charge)) {
        token.returned();
        v = sched.refused(static_cast<errc>(why.value()), attempt_start, last_error);
        if (v.stop) {
          if (policy.observer) // the gate, or the budget asked again after a wait for the gate
            emit(*policy.observer, refusal_event{policy.label, why, sched.attempts() + 1});
          exit::fail(result, stats, v.stop, v.report);
          break;
        }
        pacing = true; // waiting for the breaker (on_open::wait): only the sleep below
      }
    }
    if (!pacing) {
      token.used();
      if (stats)
        stats->attempts = sched.attempts();
      attempt_context ctx(sched.attempts());
      result.value.reset();
      if (policy.observer)
        emit(*policy.observer, attempt_started_event{policy.label, sched.attempts()});

      bool by_deadline = false;
      if constexpr (controlled)
        control->start_attempt(sched.attempt_limit(attempt_start, by_deadline));
      try {
        if constexpr (shape::awaits_void) {
          co_await shape::start(op, ctx);
          result.value.emplace();
        } else {
          shape::take(result, co_await shape::start(op, ctx));
        }
      } catch (const std::system_error& e) {
        result.error = e.code();
#if CORETRY_ASIO_DISTINCT_SYSTEM_ERROR
      } catch (const asio_system_error& e) {
        result.error = e.code();
#endif
      } catch (...) {
        result.exception = std::current_exception();
      }
      bool cut = false;       // by the deadline
      bool timer_cut = false; // by the deadline or the attempt timeout
      if constexpr (controlled) {
        if (control->end_attempt()) {
          // The attempt timer's emit marked this coroutine cancelled: clear that before awaiting.
          co_await asio::this_coro::reset_cancellation_state();
          if (!result.value) {
            cut = by_deadline;
            timer_cut = true;
            result.error = by_deadline ? errc::deadline_exceeded : errc::attempt_timeout;
            result.exception = nullptr;
          }
        }
      }
      if (!result.exception && !result.error && policy.result_filter) {
        try {
          if (policy.result_filter->call(&*result.value))
            result.error = errc::result_rejected;
        } catch (...) {
          result.exception = std::current_exception();
        }
      }
      // Cancellation wins over whatever the attempt reported.
      bool cancelled_now = policy.cancellation.cancelled();
      if constexpr (controlled)
        cancelled_now = cancelled_now || control->cancelled;
      else
        cancelled_now = cancelled_now || cs.cancelled() != asio::cancellation_type::none;
      // The one verdict on this attempt, for the breaker, the sending rate, the budget and the
      // decision below alike; a predicate that throws makes it abandoned, and ends the loop.
      std::exception_ptr thrown;
      const attempt_class verdict_of = sched.classify(
          result.error, timer_cut, cancelled_now || result.exception, thrown, ctx.retry_after());
      if (thrown && !result.exception)
        result.exception = std::move(thrown);
      if (policy.breaker || policy.rate_limit || policy.budget)
        sched.report(verdict_of, grant, read_clock<clock>(clocked));
      if (policy.observer)
        emit(*policy.observer,
             attempt_finished_event{
                 policy.label, sched.attempts(), read_clock<clock>(clocked) - attempt_start,
                 result.exception ? std::error_code(errc::unexpected_exception) : result.error,
                 static_cast<attempt_outcome>(verdict_of.kind), ctx.http_status(),
                 ctx.http_method()});
      if (result.exception) {
        exit::thrown(result, stats, std::move(result.exception));
        break;
      }
      if (!result.error) {
        if (stats)
          stats->last_error = {};
        break;
      }

      // A failed attempt.
      if (stats)
        stats->last_error = result.error;
      if (cancelled_now) {
        exit::abort(result, stats, policy);
        break;
      }
      try {
        const nanoseconds t = read_clock<clock>(clocked);
        v = sched.after_failure({result.error, cut, ctx.retry_after(), verdict_of.kind}, t,
                                &charge);
        if (!v.stop && policy.on_retry)
          policy.on_retry(retry_event{sched.attempts(), result.error, v.delay, ctx.retry_after()});
      } catch (...) {
        exit::thrown(result, stats, std::current_exception());
        break;
      }
      if (policy.observer) {
        if (!v.stop)
          emit(*policy.observer, retry_scheduled_event{policy.label, sched.attempts(), result.error,
                                                       v.delay, ctx.retry_after()});
        else if (v.stop == errc::budget_exhausted)
          emit(*policy.observer, refusal_event{policy.label, v.stop, sched.attempts() + 1});
      }
      if (v.stop) {
        exit::fail(result, stats, v.stop, v.report);
        break;
      }
    }

    slept += v.delay;
    if (stats)
      stats->slept += v.delay;
    try {
      if (v.delay == nanoseconds::zero()) {
        // An expired timer would cost a timerfd round trip; a post yields just as well.
        co_await asio::post(asio::use_awaitable);
      } else {
        if (!sleep_timer) {
          if constexpr (controlled)
            sleep_timer.emplace(control->strand); // the loop's executor: no awaiter in the frame
          else
            sleep_timer.emplace(co_await asio::this_coro::executor);
        }
        sleep_timer->expires_after(std::chrono::ceil<typename clock::duration>(v.delay));
        if constexpr (controlled) {
          // Not bound to the coroutine's slot: the state cancels the timer itself (retry_op.hpp).
          if (control->sleep_on(*sleep_timer)) {
            sleep_guard<Control> guard{control};
            auto [ec] = co_await sleep_timer->async_wait(asio::bind_cancellation_slot(
                asio::cancellation_slot(), coretry::detail::as_tuple(asio::use_awaitable)));
            (void)ec; // a cancelled sleep is seen at the top of the loop
          } else {
            control->woke();
          }
        } else {
          auto [ec] =
              co_await sleep_timer->async_wait(coretry::detail::as_tuple(asio::use_awaitable));
          (void)ec; // a cancelled sleep is seen at the top of the loop
        }
      }
    } catch (const std::system_error&) {
      // Awaiting in a coroutine already cancelled throws; the top of the loop sees why.
#if CORETRY_ASIO_DISTINCT_SYSTEM_ERROR
    } catch (const asio_system_error&) {
#endif
    } catch (...) {
      exit::thrown(result, stats, std::current_exception());
      break;
    }
  }

  if constexpr (controlled) {
    control->disarm();
    // Asio 1.26 (Boost 1.81): when the coroutine ends without having switched context, co_spawn
    // posts once and lets that post throw, out of io_context::run, if the operation was cancelled.
    // Nothing awaits after this point; 1.38's co_spawn does the same itself.
    co_await asio::this_coro::throw_if_cancelled(false);
  }
  if (stats)
    stats->elapsed = read_clock<clock>(clocked) - start;
  if (policy.observer)
    emit(*policy.observer,
         operation_finished_event{policy.label, operation_kind::retry, sched.attempts(),
                                  read_clock<clock>(clocked) - start, slept, result.reason,
                                  result.error});

  if constexpr (Throwing) {
    if (result.exception)
      std::rethrow_exception(result.exception);
    if (result.error)
      throw std::system_error(result.error);
    if constexpr (!std::is_void_v<T>)
      co_return std::move(*result.value);
  } else {
    co_return std::move(result);
  }
}

} // namespace coretry::detail
