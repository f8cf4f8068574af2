#pragma once
/// \file
/// The retry loop: `co_await retry_async(op, policy)` and `async_retry(executor, op, policy, token)`.

#include <coretry/detail/retry_loop.hpp>
#include <coretry/policy.hpp>

#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>

#include <utility>

namespace coretry {

/// Retries `op` under `policy`, from inside a coroutine.
///
/// `op` is called once per attempt, as `op(attempt_context&)` when it accepts one and as `op()`
/// otherwise, and returns an `asio::awaitable<T>` (`T` may be `void` or move-only). An attempt
/// fails by throwing `std::system_error`; the error code goes to the policy's predicates. Other
/// exceptions are never retried and propagate unchanged.
///
/// Between attempts the coroutine waits on a `Timer` (by default `asio::steady_timer`) on its own
/// executor: no thread blocks and nothing of the operation is held but its coroutine frame.
///
/// \returns the first accepted result. When the policy rejected results
/// (`retry_policy::retry_if_result`) until it gave up, the last result.
/// \throws std::invalid_argument at the call when the policy is invalid; std::system_error with
/// the final error (see `final_error`), or with `asio::error::operation_aborted` when cancelled.
///
/// Cancellation: terminal cancellation of the awaiting coroutine (a bound slot on its `co_spawn`,
/// or an enclosing `||`) stops the operation in an attempt or in a sleep, as does the policy's
/// group token. A cancelled operation is never retried.
///
/// `Timer` needs `Timer(executor)`, `expires_after(duration)`, `async_wait(token)` honouring
/// per-operation cancellation, and `Timer::clock_type::now()`; tests use a manual clock.
template <class Timer = asio::steady_timer, class Op, class Policy>
asio::awaitable<detail::op_result_t<Op>> retry_async(Op op, Policy policy) {
  detail::base_policy(policy).validate();
  return detail::retry_entry<Timer, detail::op_result_t<Op>>(std::move(op), std::move(policy),
                                                             nullptr);
}

/// As above, and fills `stats` as the operation goes. `stats` must outlive the operation.
template <class Timer = asio::steady_timer, class Op, class Policy>
asio::awaitable<detail::op_result_t<Op>> retry_async(Op op, Policy policy, retry_stats& stats) {
  detail::base_policy(policy).validate();
  return detail::retry_entry<Timer, detail::op_result_t<Op>>(std::move(op), std::move(policy),
                                                             &stats);
}

/// Retries `op` under `policy` on `executor`, reporting through any completion token.
///
/// Completion signature: `void(std::error_code, T)`, or `void(std::error_code)` when `T` is
/// `void`; `T` must then be default constructible. The error is empty on success and when the
/// last result is returned after rejected results; otherwise it is the final error (see
/// `final_error`) or `asio::error::operation_aborted`. Exceptions other than `std::system_error`
/// thrown by `op` are not retried and are rethrown from the completion, as `co_spawn` does.
///
/// Cancellation: the handler's associated cancellation slot (terminal, partial or total) and the
/// policy's group token both stop the operation, during an attempt or a sleep; it then completes
/// once, with `operation_aborted`. When either is present the operation runs on a strand of
/// `executor`, so that a cancellation emitted from any thread is delivered safely.
///
/// Thread safety: the call itself may be made from any thread; the handler runs on its
/// associated executor (by default `executor`).
template <class Timer = asio::steady_timer, class Executor, class Op, class Policy,
          class CompletionToken>
auto async_retry(const Executor& executor, Op op, Policy policy, CompletionToken&& token) {
  detail::base_policy(policy).validate();
  using value_type = detail::op_result_t<Op>;
  return asio::async_initiate<CompletionToken, detail::error_signature_t<value_type>>(
      detail::initiate_retry<Timer, value_type, detail::deliver_error_code>{}, token, executor,
      std::move(op), std::move(policy), static_cast<retry_stats*>(nullptr));
}

/// As above, and fills `stats` as the operation goes. `stats` must outlive the operation.
template <class Timer = asio::steady_timer, class Executor, class Op, class Policy,
          class CompletionToken>
auto async_retry(const Executor& executor, Op op, Policy policy, retry_stats& stats,
                 CompletionToken&& token) {
  detail::base_policy(policy).validate();
  using value_type = detail::op_result_t<Op>;
  return asio::async_initiate<CompletionToken, detail::error_signature_t<value_type>>(
      detail::initiate_retry<Timer, value_type, detail::deliver_error_code>{}, token, executor,
      std::move(op), std::move(policy), &stats);
}

} // namespace coretry
