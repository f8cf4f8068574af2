// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// The retry loop: `co_await retry_async(op, policy)` and `async_retry(executor, op, policy, token)`.
///
/// **Operations.** `op` is called once per attempt, as `op(attempt_context&)` when it accepts
/// one and as `op()` otherwise. It returns either
/// - `asio::awaitable<T>` (`T` may be `void` or move-only) and fails by throwing
///   `std::system_error`, whose code goes to the policy's predicates; or
/// - `asio::awaitable<std::tuple<std::error_code, T>>` (or `std::tuple<std::error_code>`), the
///   `as_tuple` idiom, and fails by returning a non-empty code: no exception is thrown anywhere,
///   which is much cheaper when failures are common. The operation's result type is then `T`;
/// - or, without a coroutine: an initiating function taking a completion token, called as
///   `op(attempt_context&, token)` or `op(token)` and returning what the initiation returns
///   (`[&](auto&& token) { return sock.async_read_some(buf, std::move(token)); }`), or a function
///   returning a `deferred` operation. It fails by completing with a non-empty error code; its
///   completion signature `void(error_code, T...)`, `void(std::exception_ptr, T...)` or
///   `void(T...)` gives the result type (several values: `std::tuple<T...>`). Timeouts and
///   cancellation reach it through its bound cancellation slot (docs/core.md, "Attempts of every
///   shape").
///
/// **Exceptions: one rule for every front end.** A `std::system_error` thrown by an attempt is
/// that attempt's error, like a returned code. An exception the policy's `classify` retries
/// (`coretry::retry_on<my_transient_error>()` tests for one) is a failed attempt with
/// `errc::retryable_exception`, retried like any other; when the loop gives up after it,
/// `retry_async` rethrows that exception and `async_retry` delivers the code, with the exception
/// in `retry_stats::exception`. Anything else thrown by an attempt, and anything
/// at all thrown by `classify` (or a deprecated predicate) or a hook (`on_retry`), is a bug
/// rather than a failure worth retrying: the loop stops at once (no further attempt, no sleep),
/// the operation completes exactly once with `errc::unexpected_exception`, and
/// `retry_stats::exception` holds what was thrown. `retry_async` rethrows that exception itself;
/// `async_retry` delivers the error code (a completion handler never throws out of `run()`).
/// Results must move without throwing: a move that throws after the loop ended escapes `run()`.
///
/// **Cancellation.** Terminal cancellation of the awaiting coroutine (an enclosing `||`, a bound
/// slot), the handler's slot for `async_retry` (any cancellation type), and the policy's group
/// token stop the operation in an attempt or in a sleep; it completes once, with
/// `asio::error::operation_aborted`, and a cancelled operation is never retried. An operation
/// that may be cancelled from outside, or whose attempts are timed, runs on a strand of its
/// executor (unless that executor's context was made with the concurrency hint 1, one thread), so
/// that a cancellation emitted from any thread reaches it safely.
///
/// **Time.** Between attempts the operation waits on a `Timer` (by default `asio::steady_timer`)
/// on its executor: no thread blocks and nothing is held but the operation's state (or, on
/// retry_async's direct path, its coroutine frame) and the timer's one pending wait.
/// `Timer` needs `Timer(executor)`, `expires_after(duration)`, `async_wait(token)` honouring
/// per-operation cancellation, `cancel()`, `rebind_executor`, and a `clock_type` with a static
/// `now()`; `coretry::testing::manual_timer` (coretry/testing/manual_clock.hpp) runs the loop
/// on a clock that a test moves.

#include <coretry/detail/asio.hpp>
#include <coretry/detail/braced_policy.hpp>
#include <coretry/detail/fallback_op.hpp>
#include <coretry/detail/retry_op.hpp>
#include <coretry/policy.hpp>

#include <type_traits>
#include <utility>

namespace coretry {

/// A fallback, Polly's Fallback strategy: what an operation completes with when it gave up,
/// instead of its error. Pass it after the policy (and the stats):
/// `co_await coretry::retry_async(op, policy, coretry::fallback(cached))`, or
/// `coretry::async_retry(ex, op, policy, coretry::fallback(f), token)`. `f` is
/// - a value (anything not callable with a `const fallback_info&`), converting to the
///   operation's result type `T`;
/// - `f(const fallback_info&)` returning that value (`void` for an operation returning `void`);
/// - `f(const fallback_info&)` returning `asio::awaitable<T>` (failing by throwing
///   `std::system_error`), `asio::awaitable<std::tuple<std::error_code, T>>`, or a `deferred`
///   operation;
/// - `f(const fallback_info&, token)` initiating an asynchronous operation with the completion
///   token and returning what the initiation returns, as a token-based attempt does.
///
/// It runs once, on the operation's executor, when the operation would fail: after the policy
/// gave up (the last error, `attempts_exhausted`, `deadline_exceeded`, `circuit_open`, ...),
/// after an error the policy does not retry, and after an exception it retried
/// (`errc::retryable_exception`). Not on success; not when the loop returns the last result
/// rejected by `retry_if_result` (a result, not a failure); not on cancellation
/// (`asio::error::operation_aborted`, the group token's `errc::cancelled`: the operation
/// completes cancelled; a cancellation through the caller's slot while the fallback runs reaches
/// the fallback, the group token does not); and not for a
/// bug (`errc::unexpected_exception`: an exception the policy does not retry, a hook that threw),
/// which propagates as without a fallback. `fallback_info` tells it the error and the
/// `retry_stats`, which keep saying why the loop stopped when the fallback succeeds. A fallback
/// that fails completes the operation once with its failure: the error code it completes with
/// or throws as `std::system_error`; anything else it throws is rethrown by `retry_async` and
/// delivered as `errc::unexpected_exception` by `async_retry` (the exception in
/// `retry_stats::exception`).
///
/// Cost: an operation with a fallback is awaited in one more coroutine frame (the fallback's
/// state) and always takes the composed operation's path; one without a fallback is untouched.
template <class F> fallback_t<std::decay_t<F>> fallback(F&& f) {
  return {std::forward<F>(f)};
}

/// Retries `op` under `policy`, from inside a coroutine. `policy` is a `retry_policy`, which
/// the operation copies (or moves), or a `shared_policy`, which it shares.
///
/// \returns the first accepted result; when the policy rejected results
/// (`retry_policy::retry_if_result`) until it gave up, the last result.
/// \throws std::invalid_argument at the call when the policy is invalid (or an empty
/// `shared_policy`) or its result predicate does not take `T`; std::system_error with the final
/// error (see `final_error`; a deadline always reports `errc::deadline_exceeded`), or with
/// `asio::error::operation_aborted` when cancelled; what an operation or hook threw, as itself
/// (see the file comment).
///
/// \p Op's result type `T` is the value an attempt yields: `X` for `asio::awaitable<X>`, `X` for
/// `asio::awaitable<std::tuple<std::error_code, X>>`, or what a token attempt's completion
/// signature carries (see the file comment).
///
/// @par Per-Operation Cancellation
/// Terminal cancellation of the awaiting coroutine (an enclosing `||`, a bound slot; the
/// coroutine's filter lets only terminal through by default) stops the operation: an attempt in
/// flight is cancelled (terminal, through the slot it is bound to) and counts as abandoned, a
/// sleep ends at once, and no further attempt starts. The policy's group token
/// (`retry_policy::cancellation`) does the same from any thread. Either way the call throws
/// `std::system_error(asio::error::operation_aborted)`, once; with the group token
/// `retry_stats::reason` says `errc::cancelled`.
template <class Timer = asio::steady_timer, class Op, class Policy CORETRY_DEFAULT_POLICY>
requires detail::policy_argument<Policy> asio::awaitable<detail::op_result_t<Op>>
retry_async(Op op, Policy&& policy) {
  detail::check_policy(policy);
  detail::check_result_filter<detail::op_result_t<Op>>(detail::policy_of(policy));
  return detail::retry_entry<Timer, detail::op_result_t<Op>>(std::move(op),
                                                             std::forward<Policy>(policy), nullptr);
}

/// As above, and fills `stats` as the operation goes. `stats` must outlive the operation.
///
/// @par Per-Operation Cancellation
/// As above.
template <class Timer = asio::steady_timer, class Op, class Policy CORETRY_DEFAULT_POLICY>
requires detail::policy_argument<Policy> asio::awaitable<detail::op_result_t<Op>>
retry_async(Op op, Policy&& policy, retry_stats& stats) {
  detail::check_policy(policy);
  detail::check_result_filter<detail::op_result_t<Op>>(detail::policy_of(policy));
  return detail::retry_entry<Timer, detail::op_result_t<Op>>(std::move(op),
                                                             std::forward<Policy>(policy), &stats);
}

/// Retries `op` under `policy` (a `retry_policy` or a `shared_policy`) on `executor`, reporting
/// through any completion token (callbacks, `use_future`, `use_awaitable`,
/// `as_tuple(...)`, ...).
///
/// The handler is called exactly once, through its associated executor (by default
/// `executor`), never from inside this call; if the execution context is destroyed first, it
/// is destroyed uncalled.
///
/// Throws `std::invalid_argument` at the call when the policy is invalid (or an empty
/// `shared_policy`); nothing starts then. Thread safety: the call may be made from any thread.
///
/// The token may be left out: it is then the executor's default completion token, as for
/// Asio's own operations (`asio::deferred` from Asio 1.30; before, only an executor that names
/// one, such as `asio::use_awaitable_t<>::executor_with_default<E>`, has one). A token that does not
/// fit the completion signature is refused at the call (`asio::completion_token_for`).
///
/// @par Completion Signature
/// `void(error_code, T)`; `void(error_code)` when `T` is `void`;
/// `void(error_code, std::optional<T>)` when `T` is not default constructible (empty with an
/// error). `error_code` is `std::error_code`, or with Boost.Asio `boost::system::error_code`,
/// here and in every token-based coretry operation (docs/asio.md). The error is empty on
/// success and when the last result is returned after rejected results; otherwise the final
/// error (see `final_error`), `asio::error::operation_aborted`, or
/// `errc::unexpected_exception` (`errc::retryable_exception` when the last attempt threw an
/// exception the policy retries).
///
/// @par Per-Operation Cancellation
/// Terminal, partial and total cancellation through the handler's associated slot, emitted from
/// any thread, all do the same: an attempt in flight is cancelled (terminal, through the slot it
/// is bound to) and counts as abandoned, a sleep ends at once, and no further attempt starts;
/// the handler then gets `asio::error::operation_aborted`, once, and a cancelled operation is
/// never retried. The policy's group token (`retry_policy::cancellation`) does the same, with
/// `retry_stats::reason` saying `errc::cancelled`. An attempt that succeeds while a
/// cancellation is on its way is delivered as a success.
template <class Timer = asio::steady_timer, class Executor, class Op, class Policy = retry_policy,
          class CompletionToken = asio::default_completion_token_t<Executor>>
requires detail::policy_argument<Policy> && detail::token_for<CompletionToken, Op>
auto async_retry(const Executor& executor, Op op, Policy&& policy,
                 CompletionToken&& token = CompletionToken()) {
  using value_type = detail::op_result_t<Op>;
  detail::check_policy(policy);
  detail::check_result_filter<value_type>(detail::policy_of(policy));
  // Read at the call: the deadline counts from here, and a seeded stream follows call order.
  auto origin = detail::make_origin<typename Timer::clock_type>(detail::policy_of(policy), false);
  return asio::async_initiate<CompletionToken, detail::error_signature_t<value_type>>(
      detail::initiate_retry<Timer, value_type, detail::deliver_error_code>{}, token, executor,
      std::move(op), std::forward<Policy>(policy), static_cast<retry_stats*>(nullptr),
      std::move(origin));
}

/// As above, and fills `stats` as the operation goes. `stats` must outlive the operation.
///
/// @par Completion Signature
/// As above.
///
/// @par Per-Operation Cancellation
/// As above.
template <class Timer = asio::steady_timer, class Executor, class Op, class Policy = retry_policy,
          class CompletionToken = asio::default_completion_token_t<Executor>>
requires detail::policy_argument<Policy> && detail::token_for<CompletionToken, Op>
auto async_retry(const Executor& executor, Op op, Policy&& policy, retry_stats& stats,
                 CompletionToken&& token = CompletionToken()) {
  using value_type = detail::op_result_t<Op>;
  detail::check_policy(policy);
  detail::check_result_filter<value_type>(detail::policy_of(policy));
  auto origin = detail::make_origin<typename Timer::clock_type>(detail::policy_of(policy), true);
  return asio::async_initiate<CompletionToken, detail::error_signature_t<value_type>>(
      detail::initiate_retry<Timer, value_type, detail::deliver_error_code>{}, token, executor,
      std::move(op), std::forward<Policy>(policy), &stats, std::move(origin));
}

/// Retries `op` under `policy`, then, when it gave up, completes with `fb` (see `fallback`).
/// \returns the operation's result, or the fallback's. \throws as `retry_async` without a
/// fallback, for a cancellation or a bug; or what the fallback failed with.
///
/// @par Per-Operation Cancellation
/// As `retry_async` without a fallback while the retry runs, and a cancelled retry runs no
/// fallback: the call throws `std::system_error(asio::error::operation_aborted)`. Terminal
/// cancellation of the awaiting coroutine while the fallback runs reaches the fallback (as its
/// bound slot, for an asynchronous one); the group token does not.
template <class Timer = asio::steady_timer, class Op, class Policy CORETRY_DEFAULT_POLICY, class F>
requires detail::policy_argument<Policy> asio::awaitable<detail::op_result_t<Op>>
retry_async(Op op, Policy&& policy, fallback_t<F> fb) {
  using value_type = detail::op_result_t<Op>;
  detail::check_policy(policy);
  detail::check_result_filter<value_type>(detail::policy_of(policy));
  auto origin = detail::make_origin<typename Timer::clock_type>(detail::policy_of(policy), true);
  return detail::fallback_entry<Timer, value_type>(
      std::move(op), detail::held_policy_t<Policy>(std::forward<Policy>(policy)), std::move(fb.f),
      nullptr, std::move(origin));
}

/// As above, and fills `stats` as the operation goes (the fallback sees the same object).
/// `stats` must outlive the operation.
///
/// @par Per-Operation Cancellation
/// As above.
template <class Timer = asio::steady_timer, class Op, class Policy CORETRY_DEFAULT_POLICY, class F>
requires detail::policy_argument<Policy> asio::awaitable<detail::op_result_t<Op>>
retry_async(Op op, Policy&& policy, retry_stats& stats, fallback_t<F> fb) {
  using value_type = detail::op_result_t<Op>;
  detail::check_policy(policy);
  detail::check_result_filter<value_type>(detail::policy_of(policy));
  auto origin = detail::make_origin<typename Timer::clock_type>(detail::policy_of(policy), true);
  return detail::fallback_entry<Timer, value_type>(
      std::move(op), detail::held_policy_t<Policy>(std::forward<Policy>(policy)), std::move(fb.f),
      &stats, std::move(origin));
}

/// `async_retry` with a fallback (see `fallback`). The handler is called exactly once through
/// its associated executor. `executor` must convert to `asio::any_io_executor` (the fallback
/// runs in a coroutine on it).
///
/// @par Completion Signature
/// `async_retry`'s (`void(error_code, T)`, `void(error_code)` for `void`,
/// `void(error_code, std::optional<T>)` when `T` is not default constructible), carrying the
/// fallback's result, or the error it failed with, when the operation gave up.
///
/// @par Per-Operation Cancellation
/// Terminal, partial and total cancellation through the handler's slot reach the retry (as for
/// `async_retry`: the handler gets `asio::error::operation_aborted`, and no fallback runs) and,
/// while it runs, the fallback (as its bound slot, for an asynchronous one). The policy's group
/// token reaches the retry only.
template <class Timer = asio::steady_timer, class Executor, class Op, class Policy = retry_policy,
          class F, class CompletionToken>
requires detail::policy_argument<Policy>
auto async_retry(const Executor& executor, Op op, Policy&& policy, fallback_t<F> fb,
                 CompletionToken&& token) {
  using value_type = detail::op_result_t<Op>;
  detail::check_policy(policy);
  detail::check_result_filter<value_type>(detail::policy_of(policy));
  auto origin = detail::make_origin<typename Timer::clock_type>(detail::policy_of(policy), true);
  return asio::async_initiate<CompletionToken, detail::error_signature_t<value_type>>(
      detail::initiate_fallback<Timer, value_type>{}, token, executor, std::move(op),
      detail::held_policy_t<Policy>(std::forward<Policy>(policy)), std::move(fb.f),
      static_cast<retry_stats*>(nullptr), std::move(origin));
}

/// As above, and fills `stats` as the operation goes. `stats` must outlive the operation.
///
/// @par Completion Signature
/// As above.
///
/// @par Per-Operation Cancellation
/// As above.
template <class Timer = asio::steady_timer, class Executor, class Op, class Policy = retry_policy,
          class F, class CompletionToken>
requires detail::policy_argument<Policy>
auto async_retry(const Executor& executor, Op op, Policy&& policy, retry_stats& stats,
                 fallback_t<F> fb, CompletionToken&& token) {
  using value_type = detail::op_result_t<Op>;
  detail::check_policy(policy);
  detail::check_result_filter<value_type>(detail::policy_of(policy));
  auto origin = detail::make_origin<typename Timer::clock_type>(detail::policy_of(policy), true);
  return asio::async_initiate<CompletionToken, detail::error_signature_t<value_type>>(
      detail::initiate_fallback<Timer, value_type>{}, token, executor, std::move(op),
      detail::held_policy_t<Policy>(std::forward<Policy>(policy)), std::move(fb.f), &stats,
      std::move(origin));
}

#if CORETRY_REFUSE_BRACED_POLICY
// g++ 12: a braced policy fails to compile here, with a message saying what to write.
template <class Timer = asio::steady_timer, class Op, class G = Op>
asio::awaitable<detail::op_result_t<Op>> retry_async(Op, detail::braced_policy) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(G);
  return {};
}
template <class Timer = asio::steady_timer, class Op, class G = Op>
asio::awaitable<detail::op_result_t<Op>> retry_async(Op, detail::braced_policy, retry_stats&) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(G);
  return {};
}
#endif

} // namespace coretry
