// SPDX-License-Identifier: BSL-1.0
// Compile-cost probe (.ci/compile-cost): 1 call site of the core loop, each with an operation
// of its own type (a lambda), half awaited with retry_async, half started with async_retry and a
// callback. core_retry_8 minus core_retry_1, over seven, is what one more call site costs.
#include <coretry/retry.hpp>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <system_error>

asio::awaitable<int> site0(const coretry::retry_policy& p) {
  co_return co_await coretry::retry_async([]() -> asio::awaitable<int> { co_return 0; }, p);
}
