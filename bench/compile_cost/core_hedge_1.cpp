// SPDX-License-Identifier: BSL-1.0
// Compile-cost probe: 1 call site of the hedge, each with an operation of its own type (a
// lambda), half awaited with hedge_async, half started with async_hedge and a callback.
// core_hedge_8 minus core_hedge_1, over seven, is what one more call site costs.
#include <coretry/hedge.hpp>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <system_error>

asio::awaitable<int> site0(const coretry::retry_policy& p, const coretry::hedge_options& h) {
  co_return co_await coretry::hedge_async([]() -> asio::awaitable<int> { co_return 0; }, p, h);
}
