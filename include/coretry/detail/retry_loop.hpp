#pragma once
// The retry loop itself, and the initiation behind async_retry. Private: include <coretry/retry.hpp>.

#include <coretry/attempt.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>
#include <coretry/random.hpp>

#include <asio/associated_allocator.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/cancellation_state.hpp>
#include <asio/co_spawn.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

namespace coretry::detail {

// --- What an operation returns -------------------------------------------------------------

template <class Op> decltype(auto) call_op(Op& op, attempt_context& ctx) {
  if constexpr (std::is_invocable_v<Op&, attempt_context&>)
    return op(ctx);
  else
    return op();
}

template <class A> struct awaitable_traits {
  static_assert(sizeof(A) == 0, "coretry: the operation must return asio::awaitable<T>");
};
template <class T, class Executor> struct awaitable_traits<asio::awaitable<T, Executor>> {
  using value_type = T;
};

template <class Op>
using op_awaitable_t =
    std::decay_t<decltype(call_op(std::declval<Op&>(), std::declval<attempt_context&>()))>;
template <class Op> using op_result_t = typename awaitable_traits<op_awaitable_t<Op>>::value_type;

// --- Policies --------------------------------------------------------------------------------

template <class P> struct is_result_policy : std::false_type {};
template <class F> struct is_result_policy<result_policy<F>> : std::true_type {};

inline const retry_policy& base_policy(const retry_policy& p) noexcept {
  return p;
}
template <class F> const retry_policy& base_policy(const result_policy<F>& p) noexcept {
  return p.policy;
}

// --- One attempt's outcome -------------------------------------------------------------------

struct no_value {};
template <class T> using stored_t = std::conditional_t<std::is_void_v<T>, no_value, T>;

template <class T> struct attempt_outcome {
  std::error_code error;
  std::optional<stored_t<T>> value;
};

template <class T, class Policy> bool rejects(const Policy& policy, const stored_t<T>& value) {
  if constexpr (is_result_policy<Policy>::value) {
    static_assert(!std::is_void_v<T>, "coretry: retry_if_result needs an operation with a result");
    return static_cast<bool>(std::invoke(policy.retry_if_result, std::as_const(value)));
  } else {
    (void)policy;
    (void)value;
    return false;
  }
}

// What an operation that can be cancelled from outside, or whose attempts are timed, shares
// with the handlers that cancel it. Lives as long as the operation and any handler that may
// still reach it; every field is touched only on the operation's strand.
struct op_control : cancellation_registration, std::enable_shared_from_this<op_control> {
  /// Bound to the loop's co_spawn: emitting it cancels whatever the loop awaits.
  asio::cancellation_signal signal;
  unsigned attempt = 0; ///< Generation of the timed attempt in flight.
  bool in_attempt = false;
  bool timed_out = false; ///< The attempt timer, not the caller, emitted the signal.
  bool cancelled = false; ///< The caller's slot or the group token did.

  virtual ~op_control() = default;

  /// Cancels whatever the loop awaits. Call on the operation's strand only.
  void emit_cancel() {
    cancelled = true;
    signal.emit(asio::cancellation_type::terminal);
  }

  /// Cancels attempt number `generation` if it still runs. Call on the operation's strand only.
  void time_out(unsigned generation) {
    if (in_attempt && attempt == generation && !cancelled) {
      timed_out = true;
      signal.emit(asio::cancellation_type::terminal);
    }
  }

  /// The executor under the strand. The attempt timer lives there, so that a wait cancelled at
  /// the end of an attempt (nearly every one) completes without a trip through the strand.
  virtual asio::any_io_executor timer_executor() const = 0;
  /// Calls `time_out(generation)` on the strand. Safe from any thread.
  virtual void time_out_on_strand(unsigned generation) = 0;
};

// The attempt timer's handler. It runs outside the strand and so touches nothing of `control`
// but what is safe from any thread: a wait that was cancelled only drops its reference, and a
// timer that fired hands the check over to the strand.
struct attempt_timeout_handler {
  std::shared_ptr<op_control> control;
  unsigned attempt;
  void operator()(std::error_code ec) const {
    if (!ec)
      control->time_out_on_strand(attempt);
  }
};

template <class Clock>
typename Clock::time_point deadline_after(typename Clock::time_point start, nanoseconds limit) {
  using tp = typename Clock::time_point;
  if (limit == unlimited || start > tp::max() - limit)
    return tp::max();
  return start + std::chrono::duration_cast<typename Clock::duration>(limit);
}

// Records the elapsed time however the loop ends, when someone asked for stats.
template <class Clock> struct elapsed_guard {
  retry_stats* stats;
  typename Clock::time_point start;
  ~elapsed_guard() {
    if (stats)
      stats->elapsed = Clock::now() - start;
  }
};

// --- The loop --------------------------------------------------------------------------------

// What the loop returns: the value to hand back, or the error to report.
template <class T> using loop_result = attempt_outcome<T>;

// The loop never throws on its own account: every exit sets `result` and leaves the for loop,
// and only the awaitable front end (`Throwing`) turns an error into an exception, once. The
// completion-token path thus costs no exception at all, even when cancelling a million
// sleeping operations. Exceptions other than std::system_error from `op` pass through.
//
// A timed attempt (per-attempt timeout or deadline) needs `control`: the loop then runs in a
// coroutine of its own whose cancellation slot is `control->signal`, on a strand. The attempt
// is awaited in place, with a timer armed beside it; if the timer fires first it emits the
// signal, the attempt is cancelled like any Asio operation, and the loop resets its
// cancellation state and carries on. An attempt that fails early reports its own error at once,
// and no child coroutine or parallel_group is needed per attempt.
template <class Timer, class T, bool Throwing, class Op, class Policy>
asio::awaitable<std::conditional_t<Throwing, T, loop_result<T>>>
retry_loop(Op op, Policy policy, retry_stats* stats_out, op_control* control) {
  using clock = typename Timer::clock_type;
  const retry_policy& p = base_policy(policy);
  retry_stats local_stats;
  retry_stats& stats = stats_out ? *stats_out : local_stats;
  stats = retry_stats{};
  // The clock is read only when a deadline or the caller's stats need it: the common case, a
  // call that succeeds at once, should cost little more than awaiting the operation.
  const bool timed = p.deadline != unlimited || stats_out;
  const auto start = timed ? clock::now() : typename clock::time_point{};
  elapsed_guard<clock> elapsed{stats_out, start};
  const auto deadline = deadline_after<clock>(start, p.deadline);
  const bool bounded = p.deadline != unlimited || p.attempt_timeout != unlimited;

  // Created on first use: an operation that succeeds at once pays for none of these.
  std::optional<Timer> sleep_timer;
  std::optional<Timer> attempt_timer;
  std::optional<fast_rng> rng;
  nanoseconds previous = p.backoff.initial();
  loop_result<T> result;

  if (p.budget)
    p.budget->on_request();

  for (unsigned attempt = 1;; ++attempt) {
    if (p.cancellation.cancelled()) {
      stats.reason = errc::cancelled;
      result.error = asio::error::operation_aborted;
      break;
    }
    attempt_context ctx(attempt);
    stats.attempts = attempt;
    attempt_outcome<T> out;

    const auto now = bounded ? clock::now() : typename clock::time_point{};
    const nanoseconds remaining =
        deadline == clock::time_point::max() ? unlimited : nanoseconds(deadline - now);
    const bool by_deadline = remaining <= p.attempt_timeout;
    if (bounded && remaining <= nanoseconds::zero()) {
      out.error = errc::deadline_exceeded;
    } else {
      if (bounded) {
        if (!attempt_timer)
          attempt_timer.emplace(control->timer_executor());
        attempt_timer->expires_after(by_deadline ? remaining : p.attempt_timeout);
        attempt_timer->async_wait(
            attempt_timeout_handler{control->shared_from_this(), ++control->attempt});
        control->in_attempt = true;
        control->timed_out = false;
      }
      try {
        if constexpr (std::is_void_v<T>) {
          co_await call_op(op, ctx);
          out.value.emplace();
        } else {
          out.value.emplace(co_await call_op(op, ctx));
        }
      } catch (const std::system_error& e) {
        out.error = e.code();
      }
      if (bounded) {
        control->in_attempt = false;
        attempt_timer->cancel();
        if (control->timed_out && !control->cancelled) {
          // The timer's emit marked this coroutine cancelled; clear that before awaiting again.
          co_await asio::this_coro::reset_cancellation_state();
          if (!out.value)
            out.error = by_deadline ? errc::deadline_exceeded : errc::attempt_timeout;
        }
      }
    }

    if (!out.error) {
      if (!rejects<T>(policy, *out.value)) {
        if (p.budget)
          p.budget->on_success();
        stats.last_error = {};
        stats.reason = {};
        result = std::move(out);
        break;
      }
      out.error = errc::result_rejected;
    }

    // A failed attempt. Cancellation wins over whatever the attempt reported.
    stats.last_error = out.error;
    asio::cancellation_state cancel_state = co_await asio::this_coro::cancellation_state;
    if (cancel_state.cancelled() != asio::cancellation_type::none || p.cancellation.cancelled() ||
        (control && control->cancelled)) {
      stats.reason = p.cancellation.cancelled() ? std::error_code(errc::cancelled)
                                                : std::error_code(asio::error::operation_aborted);
      result.error = asio::error::operation_aborted;
      break;
    }
    if (p.budget)
      p.budget->on_failure();

    const bool retryable = out.error == errc::result_rejected ||
                           out.error == errc::attempt_timeout ||
                           (p.retry_if ? p.retry_if(out.error) : default_retry_if(out.error));
    std::error_code reason;
    nanoseconds delay{0};
    if (!retryable || out.error == errc::deadline_exceeded) {
      reason = out.error;
    } else if (attempt >= p.max_attempts) {
      reason = errc::attempts_exhausted;
    } else if (p.budget && !p.budget->try_retry()) {
      reason = errc::budget_exhausted;
    } else {
      if (!rng)
        rng.emplace(p.seed ? fast_rng(*p.seed) : fast_rng::from_entropy());
      delay = p.backoff.delay(attempt - 1, previous, *rng);
      previous = delay;
      if (ctx.retry_after() > delay)
        delay = std::max(delay, std::min(ctx.retry_after(), p.backoff.max_delay()));
      if (deadline != clock::time_point::max() &&
          (deadline - clock::now()) <= std::chrono::duration_cast<typename clock::duration>(delay))
        reason = errc::deadline_exceeded;
    }

    if (reason) {
      stats.reason = reason;
      if (out.error == errc::result_rejected) {
        out.error = {}; // give up with the last result, not an error
        result = std::move(out);
      } else {
        const bool own_error = p.report == final_error::last_error || !retryable;
        result.error = own_error ? out.error : reason;
      }
      break;
    }

    if (p.on_retry)
      p.on_retry(retry_event{attempt, out.error, delay, ctx.retry_after()});
    stats.slept += delay;

    if (delay == nanoseconds::zero()) {
      // An expired timer would cost a timerfd round trip; a post yields just as well.
      co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    } else {
      if (!sleep_timer)
        sleep_timer.emplace(co_await asio::this_coro::executor);
      sleep_timer->expires_after(std::chrono::duration_cast<typename clock::duration>(delay));
      auto [sleep_error] =
          co_await sleep_timer->async_wait(asio::experimental::as_tuple(asio::use_awaitable));
      if (sleep_error) {
        stats.reason = p.cancellation.cancelled() ? std::error_code(errc::cancelled)
                                                  : std::error_code(asio::error::operation_aborted);
        result.error = asio::error::operation_aborted;
        break;
      }
    }
  }

  if constexpr (Throwing) {
    if (result.error)
      throw std::system_error(result.error);
    if constexpr (!std::is_void_v<T>)
      co_return std::move(*result.value);
  } else {
    co_return result;
  }
}

// --- async_retry's initiation ----------------------------------------------------------------

template <class T> struct signatures {
  using exception = void(std::exception_ptr, T);
  using error = void(std::error_code, T);
};
template <> struct signatures<void> {
  using exception = void(std::exception_ptr);
  using error = void(std::error_code);
};
template <class T> using exception_signature_t = typename signatures<T>::exception;
template <class T> using error_signature_t = typename signatures<T>::error;

// The value to hand over with an error: the completion signatures carry a T either way.
template <class T> T value_or_default(loop_result<T>& r) {
  if (r.value)
    return std::move(*r.value);
  static_assert(std::is_default_constructible_v<T>,
                "coretry: async_retry (and retry_async with a group token) deliver a T with every "
                "error, so T must be default constructible");
  return T{};
}

// Delivers the loop's result to a handler taking (exception_ptr[, T]): retry_async's.
struct deliver_exception {
  template <class T, class Handler>
  static void deliver(Handler& h, std::exception_ptr e, loop_result<T>& r) {
    if (!e && r.error)
      e = std::make_exception_ptr(std::system_error(r.error));
    if constexpr (std::is_void_v<T>)
      std::move(h)(std::move(e));
    else
      std::move(h)(std::move(e), value_or_default(r));
  }
};

// Delivers the loop's result to a handler taking (error_code[, T]): async_retry's.
struct deliver_error_code {
  template <class T, class Handler>
  static void deliver(Handler& h, std::exception_ptr e, loop_result<T>& r) {
    std::error_code ec = r.error;
    if (e) {
      // Only when the operation was cancelled before the coroutine first ran, or when the
      // operation threw something other than std::system_error: that propagates from here,
      // as it does from co_spawn's own completion.
      try {
        std::rethrow_exception(e);
      } catch (const std::system_error& error) {
        ec = error.code();
      }
    }
    if constexpr (std::is_void_v<T>)
      std::move(h)(ec);
    else
      std::move(h)(ec, value_or_default(r));
  }
};

/// Calls `f` with the io_context executor inside `ex` when there is one, else with `ex`. A
/// strand of the concrete executor fits in `any_io_executor`'s small buffer, so every copy of the
/// loop's executor (each post, each handler's work guard) is a copy instead of a heap allocation
/// through two layers of type erasure; a strand of an `any_io_executor` does not fit.
template <class Executor, class F> void with_concrete_executor(const Executor& ex, F&& f) {
  if constexpr (std::is_same_v<Executor, asio::any_io_executor>) {
    using untracked = asio::io_context::executor_type;
    using tracked = std::decay_t<decltype(asio::prefer(std::declval<const untracked&>(),
                                                       asio::execution::outstanding_work.tracked))>;
    if (const auto* t = ex.template target<tracked>())
      return f(*t);
    if (const auto* t = ex.template target<untracked>())
      return f(*t);
  }
  f(ex);
}

// op_control plus the strand the operation runs on and the group token it is linked to.
template <class Strand> struct cancellable_op final : op_control {
  explicit cancellable_op(Strand s, cancellation_token t)
      : strand(std::move(s)), token(std::move(t)) {
    notify = &cancellable_op::on_group_cancel;
  }

  // From the caller's slot: dispatch, as the emitting thread may already be on the strand.
  void cancel_on_strand() {
    asio::dispatch(strand, [self = shared_from_this()] { self->emit_cancel(); });
  }

  // From a group token: always post. The source calls this under its lock, possibly on this
  // very strand (an `on_retry` hook may cancel its own group), and an inline emit could then
  // complete the operation and re-enter the source through `detach` while it is locked.
  static void on_group_cancel(cancellation_registration& r) noexcept {
    auto& self = static_cast<cancellable_op&>(r);
    asio::post(self.strand, [s = self.shared_from_this()] { s->emit_cancel(); });
  }

  asio::any_io_executor timer_executor() const override { return strand.get_inner_executor(); }

  void time_out_on_strand(unsigned generation) override {
    asio::dispatch(strand, [self = shared_from_this(), generation] { self->time_out(generation); });
  }

  Strand strand;
  cancellation_token token;
};

template <class T, class Handler, class State, class Executor, class Deliver>
class retry_completion {
public:
  retry_completion(Handler h, std::shared_ptr<State> s, Executor ex)
      : handler_(std::move(h)), state_(std::move(s)), executor_(std::move(ex)) {}

  using executor_type = asio::associated_executor_t<Handler, Executor>;
  executor_type get_executor() const noexcept {
    return asio::get_associated_executor(handler_, executor_);
  }
  using allocator_type = asio::associated_allocator_t<Handler>;
  allocator_type get_allocator() const noexcept { return asio::get_associated_allocator(handler_); }
  using cancellation_slot_type = asio::cancellation_slot;
  cancellation_slot_type get_cancellation_slot() const noexcept {
    return state_ ? state_->signal.slot() : asio::cancellation_slot();
  }

  void operator()(std::exception_ptr e, loop_result<T> r) {
    if (state_) {
      state_->token.detach(*state_);
      auto user_slot = asio::get_associated_cancellation_slot(handler_);
      if (user_slot.is_connected())
        user_slot.clear();
      state_.reset();
    }
    Deliver::template deliver<T>(handler_, std::move(e), r);
  }

private:
  Handler handler_;
  std::shared_ptr<State> state_;
  Executor executor_;
};

/// Tells `initiate_retry` to run on the handler's associated executor: for `use_awaitable`, the
/// awaiting coroutine's, known only once the initiation runs inside it.
struct handler_executor {};

template <class Timer, class T, class Deliver> struct initiate_retry {
  template <class Handler, class Op, class Policy>
  void operator()(Handler&& handler, handler_executor, Op op, Policy policy,
                  retry_stats* stats) const {
    const auto ex = asio::get_associated_executor(handler);
    (*this)(std::forward<Handler>(handler), ex, std::move(op), std::move(policy), stats);
  }

  template <class Handler, class Executor, class Op, class Policy>
  void operator()(Handler&& handler, const Executor& ex, Op op, Policy policy,
                  retry_stats* stats) const {
    using handler_type = std::decay_t<Handler>;
    auto user_slot = asio::get_associated_cancellation_slot(handler);
    const retry_policy& p = base_policy(policy);
    const cancellation_token& token = p.cancellation;
    const bool timed = p.deadline != unlimited || p.attempt_timeout != unlimited;

    if (!user_slot.is_connected() && !token.can_be_cancelled() && !timed) {
      using completion = retry_completion<T, handler_type, cancellable_op<asio::strand<Executor>>,
                                          Executor, Deliver>;
      asio::co_spawn(ex,
                     retry_loop<Timer, T, false>(std::move(op), std::move(policy), stats, nullptr),
                     completion(std::forward<Handler>(handler), nullptr, ex));
      return;
    }

    with_concrete_executor(ex, [&](const auto& inner) {
      start_on_strand(std::forward<Handler>(handler), ex, inner, std::move(op), std::move(policy),
                      stats, user_slot);
    });
  }

  template <class Handler, class Executor, class Inner, class Op, class Policy, class Slot>
  static void start_on_strand(Handler&& handler, const Executor& ex, const Inner& inner, Op op,
                              Policy policy, retry_stats* stats, Slot user_slot) {
    using handler_type = std::decay_t<Handler>;
    // From the policy moved in here, not the caller's: that one is moved from by now.
    const cancellation_token& token = base_policy(policy).cancellation;
    using state_type = cancellable_op<asio::strand<Inner>>;
    auto state = std::make_shared<state_type>(asio::make_strand(inner), token);
    if (user_slot.is_connected()) {
      // Any cancellation type stops the loop: a coroutine only heeds terminal ones.
      user_slot.assign([state](asio::cancellation_type) { state->cancel_on_strand(); });
    }
    // Already cancelled: nothing is linked and the loop aborts before its first attempt.
    token.attach(*state);
    auto strand = state->strand;
    op_control* control = state.get();
    asio::co_spawn(strand,
                   retry_loop<Timer, T, false>(std::move(op), std::move(policy), stats, control),
                   retry_completion<T, handler_type, state_type, Executor, Deliver>(
                       std::forward<Handler>(handler), std::move(state), ex));
  }
};

// Takes its arguments by reference: `retry_async` owns them until the loop's frame (or the
// initiation) moves them in, so each is moved once, not twice.
template <class Timer, class T, class Op, class Policy>
asio::awaitable<T> retry_entry(Op&& op, Policy&& policy, retry_stats* stats) {
  const retry_policy& p = base_policy(policy);
  if (p.cancellation.can_be_cancelled() || p.deadline != unlimited ||
      p.attempt_timeout != unlimited)
    // The initiation itself, awaited: no wrapper coroutine (and no extra frame) in between.
    return asio::async_initiate<const asio::use_awaitable_t<>&, exception_signature_t<T>>(
        initiate_retry<Timer, T, deliver_exception>{}, asio::use_awaitable, handler_executor{},
        std::move(op), std::move(policy), stats);
  return retry_loop<Timer, T, true>(std::move(op), std::move(policy), stats, nullptr);
}

} // namespace coretry::detail
