// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Hedging: `co_await hedge_async(op, policy, hedge)` and
/// `async_hedge(executor, op, policy, hedge, token)`.
///
/// A hedged operation starts one attempt; when no attempt has succeeded `hedge.delay` after the
/// latest one started, it starts another one beside it, up to `hedge.max_copies` running at
/// once and `policy.max_attempts` in all. The first success wins; every other attempt still
/// running is then cancelled through Asio per-operation cancellation, and the operation
/// completes, once, when all of them have returned. A retryable failure starts the next attempt
/// at once (there is no backoff: the point of hedging is latency); a failure the policy does not
/// retry ends the operation like a success does. Use it for idempotent calls only: several copies
/// of the request may reach the upstream, and a cancelled one may already have been served.
///
/// **What it takes from `retry_policy`** (the same object a `retry_async` uses, so one policy
/// can serve both): `max_attempts` (attempts in all, the first included), `deadline` (the whole
/// operation: at the deadline every attempt is cancelled and it fails with
/// `errc::deadline_exceeded`), `attempt_timeout` (per attempt: a timed-out attempt is a
/// retryable failure, `errc::attempt_timeout`), `classify` (which failures are non-fatal,
/// push-backs and throttles; or the deprecated 0.2 predicates while it is empty; `hedge_async`
/// rethrows a retried exception the operation ends on, as `retry_async` does), `budget`,
/// `breaker`, `rate_limit`, `cancellation`, `report`,
/// `observer` and `label` (the events of a hedge: observer.hpp).
/// Not used: `backoff`, `seed` and `on_retry` (see `hedge_options::on_hedge`). A server's hint
/// (`attempt_context::retry_after`) delays no attempt, since no attempt waits on another, but it
/// makes that failure a push-back for the breaker, as `attempt_decision::pushback` does
/// (`attempt_gate::on_pushback`).
///
/// **Overload controls.** A hedge is a retry for the budget: `budget->on_request` once per
/// operation, `budget->try_retry` before every attempt but the first (a refusal means no further
/// attempt; the ones running go on), `on_success`/`on_failure` for each attempt that ended on
/// its own. The breaker grants every attempt (`try_acquire` before it is sent; a refusal means
/// it is not sent) and hears exactly one outcome for each: `on_success`, `on_failure` (a
/// retryable failure, a timeout, an attempt cut by the deadline) or `on_abandoned` (cancelled
/// because another attempt won or failed for good, or because the caller cancelled). When no
/// attempt runs any more and none may start, the operation fails as `retry_async` would
/// (`final_error`): with the last attempt's error, or `circuit_open`, `budget_exhausted`,
/// `attempts_exhausted`. With a `rate_limit`, every attempt first waits for its send token.
///
/// **Operations.** As for `retry_async`: `op()` or `op(attempt_context&)`, returning
/// `asio::awaitable<T>` (failing by throwing `std::system_error`) or
/// `asio::awaitable<std::tuple<std::error_code, T>>`. `op` is called once per attempt, and
/// several of the awaitables it returns run at once (interleaved on one strand: never two at the
/// same instant), so what they share needs no lock but must allow that interleaving. Every
/// attempt has returned before the operation completes, so `op` may capture references to the
/// caller's locals. An attempt that ignores cancellation delays the completion until it returns.
/// An attempt may fail without suspending: past a few such failures in a row the next start is
/// posted, so the stack stays bounded and the deadline's timer runs. `T` needs only to be
/// move-constructible.
///
/// **Cancellation.** Terminal cancellation of the awaiting coroutine, any cancellation type
/// through the handler's slot (`async_hedge`), and the policy's group token cancel every attempt
/// running; the operation completes once with `asio::error::operation_aborted` when they have
/// returned. Cancellation after a winner is known changes nothing: the winner is delivered.
///
/// **Threads.** The operation and all its attempts, timers and hooks run on one strand: the
/// caller's own when its executor is a strand, else a new strand of it; on an `io_context` made
/// with the concurrency hint 1, which runs one thread only, on its executor itself, as
/// `async_retry` does. The call may be made from any thread, and cancellation may come from any
/// thread.
///
/// **Memory.** `async_hedge` allocates its state with the handler's associated allocator and
/// frees it before the handler is called, as Asio's composed operations do. Its intermediate
/// handlers ask that allocator too, and the default heap when it throws: an allocator that has
/// run out ends neither the process nor the operation (docs/core.md, "One operation, step by
/// step").

#include <coretry/detail/asio.hpp>
#include <coretry/detail/braced_policy.hpp>
#include <coretry/detail/refuse.hpp>
#include <coretry/policy.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace coretry {

/// Passed to `hedge_options::on_hedge` when an attempt after the first starts.
struct hedge_event {
  unsigned attempt = 0;   ///< The attempt starting now, from 2.
  unsigned in_flight = 0; ///< Attempts running, this one included.
  /// Why it starts now: empty when `delay` passed; else the retryable error of an attempt that
  /// just failed (`errc::result_rejected` for a rejected result).
  std::error_code trigger{};
};

/// How a hedged operation spreads its attempts. With the defaults, a second attempt starts when
/// the first has not succeeded within 100 ms, and a third when neither has 100 ms later (with
/// `retry_policy`'s default of 3 attempts), two at most at once.
CORETRY_ALLOW_DEPRECATED_BEGIN // the implicit members copy `max_in_flight` without a warning
struct hedge_options {
  /// How long to wait, after an attempt starts, before starting the next one while none has
  /// succeeded. Set it near the upstream's usual high percentile of latency (p95, say): lower,
  /// and most calls are sent twice. Zero starts `max_copies` attempts at once;
  /// `coretry::unlimited` starts a new one only when one fails. Must not be negative.
  nanoseconds delay = std::chrono::milliseconds(100);
  /// 0.2's name of `max_copies`, in its 0.2 place (a 0.2 positional initializer keeps its
  /// meaning); read only while `max_copies` is left at its default (2), so it wins over a
  /// `max_copies` set to 2 too. Set both to different values other than 2 and `validate` refuses
  /// them (naming both).
  [[deprecated("use max_copies")]] unsigned max_in_flight = 2;
  /// Called when an attempt after the first starts, on the operation's strand. A hook that
  /// throws ends the operation with `errc::unexpected_exception`.
  std::function<void(const hedge_event&)> on_hedge{};
  /// Attempts running at once, the first included. A hedge due while this many run starts when
  /// one of them fails. At least 1 (1: attempts never overlap, and the next one starts as soon
  /// as the running one fails: a retry without backoff). Copies of this one operation, not a
  /// limit across operations (that is `circuit_breaker_options::max_concurrent_calls`); 0.2
  /// called it `max_in_flight`. Last, after the 0.2 fields: in a designated initializer it comes
  /// after `on_hedge`.
  unsigned max_copies = 2;

  /// Throws `std::invalid_argument` naming the field and its value when out of range.
  void validate() const {
    constexpr const char* where = "coretry::hedge_options";
    if (delay < nanoseconds::zero())
      detail::refuse(where, "delay", std::to_string(delay.count()) + "ns", "must not be negative");
    if (max_copies != 2 && max_in_flight != 2 && max_copies != max_in_flight)
      detail::refuse_both(where, "max_copies", std::to_string(max_copies), "max_in_flight",
                          std::to_string(max_in_flight));
    if ((max_copies != 2 ? max_copies : max_in_flight) == 0)
      detail::refuse(where, max_copies == 0 ? "max_copies" : "max_in_flight", "0",
                     "must be at least 1");
  }
};
CORETRY_ALLOW_DEPRECATED_END

namespace detail {
/// The copies of one operation `h` lets run at once: `max_copies`, or the deprecated
/// `max_in_flight` while `max_copies` is left at its default (2). The library's one read of
/// `max_in_flight`.
inline unsigned max_copies(const hedge_options& h) noexcept {
  CORETRY_ALLOW_DEPRECATED_BEGIN
  return h.max_copies != 2 ? h.max_copies : h.max_in_flight;
  CORETRY_ALLOW_DEPRECATED_END
}
} // namespace detail

/// What one hedged operation did; final when it completes.
struct hedge_stats {
  unsigned attempts = 0;  ///< Attempts started (one the policy refused is not one).
  unsigned abandoned = 0; ///< Attempts cancelled because the operation ended otherwise.
  unsigned winner = 0;    ///< The attempt whose result was delivered, from 1; 0 if none.
  /// The most attempts running at once.
  unsigned peak_in_flight = 0;
  nanoseconds elapsed{0};       ///< From the start of the operation to its completion.
  std::error_code last_error{}; ///< The last error of an attempt that ended on its own.
  /// Why it stopped, as `retry_stats::reason`: empty on success; an `errc` when the policy
  /// gave up; a non-retryable attempt error; `errc::cancelled` or
  /// `asio::error::operation_aborted` when cancelled; `errc::unexpected_exception`.
  std::error_code reason{};
  /// What was thrown, when `reason` says so; or, when `last_error` is
  /// `errc::retryable_exception`, what that attempt threw (`retry_policy::retry_if_exception`).
  std::exception_ptr exception{};
};

} // namespace coretry

// The machinery needs the types above.
#include <coretry/detail/hedge_op.hpp>

namespace coretry {

/// Runs `op` hedged under `policy` (a `retry_policy`, or a `shared_policy`, whose policy the
/// operation copies) and `hedge`, from inside a coroutine.
///
/// \returns the first accepted result; when every attempt's result was rejected
/// (`retry_policy::retry_if_result`) and none may start, the last one.
/// \throws std::invalid_argument at the call when `policy`, `hedge` or the policy's result
/// predicate is invalid; std::system_error with the final error, or
/// `asio::error::operation_aborted` when cancelled; what an operation or hook threw, as itself.
///
/// @par Per-Operation Cancellation
/// Terminal cancellation of the awaiting coroutine and the policy's group token (from any
/// thread) cancel every copy in flight (terminal, each through its own signal; the breaker
/// hears them abandoned) and start no further one; the call throws
/// `std::system_error(asio::error::operation_aborted)` once they have all returned. A
/// cancellation after a winner is known changes nothing: the winner is returned.
template <class Timer = asio::steady_timer, class Op, class Policy CORETRY_DEFAULT_POLICY>
requires detail::policy_value<Policy> asio::awaitable<detail::op_result_t<Op>>
hedge_async(Op op, Policy&& policy, hedge_options hedge = hedge_options()) {
  return detail::hedge_entry<Timer, detail::op_result_t<Op>>(
      std::move(op), detail::hedge_policy(std::forward<Policy>(policy)), std::move(hedge), nullptr);
}

/// As above, and fills `stats`, which must outlive the operation.
///
/// @par Per-Operation Cancellation
/// As above.
template <class Timer = asio::steady_timer, class Op, class Policy CORETRY_DEFAULT_POLICY>
requires detail::policy_value<Policy> asio::awaitable<detail::op_result_t<Op>>
hedge_async(Op op, Policy&& policy, hedge_options hedge, hedge_stats& stats) {
  return detail::hedge_entry<Timer, detail::op_result_t<Op>>(
      std::move(op), detail::hedge_policy(std::forward<Policy>(policy)), std::move(hedge), &stats);
}

/// Runs `op` hedged on `executor`, reporting through any completion token. `policy` is a
/// `retry_policy` or a `shared_policy`, as for `hedge_async`.
///
/// @par Completion Signature
/// As `async_retry`'s: `void(std::error_code, T)` (`void(std::error_code)` for `void`,
/// `std::optional<T>` when `T` is not default constructible). The handler is called exactly
/// once, through its associated executor (by default `executor`), never from inside this call,
/// after every attempt has returned; destroyed uncalled if the execution context is destroyed
/// first. Until then the operation keeps the handler's executor busy (outstanding work).
///
/// @par Per-Operation Cancellation
/// Terminal, partial and total cancellation through the handler's slot (from any thread) all do
/// the same, and so does the policy's group token: every attempt in flight is cancelled
/// (terminal, each through its own signal; the breaker hears them abandoned), no further one
/// starts, and the handler gets `asio::error::operation_aborted` once they have all returned.
/// A cancellation after a winner is known changes nothing: the winner is delivered.
///
/// Throws `std::invalid_argument` at the call when an argument is invalid; nothing starts then.
/// The token may be left out, as for `async_retry`: the executor's default completion token.
template <class Timer = asio::steady_timer, class Executor, class Op, class Policy = retry_policy,
          class CompletionToken = asio::default_completion_token_t<Executor>>
requires detail::policy_value<Policy> && detail::token_for<CompletionToken, Op>
auto async_hedge(const Executor& executor, Op op, Policy&& policy, hedge_options hedge,
                 CompletionToken&& token = CompletionToken()) {
  using value_type = detail::op_result_t<Op>;
  auto p = detail::hedge_policy(std::forward<Policy>(policy));
  detail::check_hedge<value_type>(p, hedge);
  return asio::async_initiate<CompletionToken, detail::error_signature_t<value_type>>(
      detail::initiate_hedge<Timer, value_type, detail::deliver_error_code>{}, token, executor,
      std::move(op), std::move(p), std::move(hedge), static_cast<hedge_stats*>(nullptr));
}

/// As above, and fills `stats`, which must outlive the operation.
///
/// @par Completion Signature
/// As above.
///
/// @par Per-Operation Cancellation
/// As above.
template <class Timer = asio::steady_timer, class Executor, class Op, class Policy = retry_policy,
          class CompletionToken = asio::default_completion_token_t<Executor>>
requires detail::policy_value<Policy> && detail::token_for<CompletionToken, Op>
auto async_hedge(const Executor& executor, Op op, Policy&& policy, hedge_options hedge,
                 hedge_stats& stats, CompletionToken&& token = CompletionToken()) {
  using value_type = detail::op_result_t<Op>;
  auto p = detail::hedge_policy(std::forward<Policy>(policy));
  detail::check_hedge<value_type>(p, hedge);
  return asio::async_initiate<CompletionToken, detail::error_signature_t<value_type>>(
      detail::initiate_hedge<Timer, value_type, detail::deliver_error_code>{}, token, executor,
      std::move(op), std::move(p), std::move(hedge), &stats);
}

#if CORETRY_REFUSE_BRACED_POLICY
// g++ 12: a braced policy fails to compile here, with a message saying what to write
// (detail/braced_policy.hpp).
template <class Timer = asio::steady_timer, class Op, class G = Op>
asio::awaitable<detail::op_result_t<Op>> hedge_async(Op, detail::braced_policy,
                                                     hedge_options = {}) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(G);
  return {};
}
template <class Timer = asio::steady_timer, class Op, class G = Op>
asio::awaitable<detail::op_result_t<Op>> hedge_async(Op, detail::braced_policy, hedge_options,
                                                     hedge_stats&) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(G);
  return {};
}
#endif

} // namespace coretry
