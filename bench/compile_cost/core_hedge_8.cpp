// SPDX-License-Identifier: BSL-1.0
// Compile-cost probe: 8 call sites of the hedge, each with an operation of its own type (a
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

void site1(asio::io_context& io, asio::steady_timer& t, const coretry::retry_policy& p,
           const coretry::hedge_options& h) {
  coretry::async_hedge(
      io.get_executor(), [&t](auto token) { return t.async_wait(std::move(token)); }, p, h,
      [](std::error_code) {});
}

asio::awaitable<int> site2(const coretry::retry_policy& p, const coretry::hedge_options& h) {
  co_return co_await coretry::hedge_async([]() -> asio::awaitable<int> { co_return 2; }, p, h);
}

void site3(asio::io_context& io, asio::steady_timer& t, const coretry::retry_policy& p,
           const coretry::hedge_options& h) {
  coretry::async_hedge(
      io.get_executor(), [&t](auto token) { return t.async_wait(std::move(token)); }, p, h,
      [](std::error_code) {});
}

asio::awaitable<int> site4(const coretry::retry_policy& p, const coretry::hedge_options& h) {
  co_return co_await coretry::hedge_async([]() -> asio::awaitable<int> { co_return 4; }, p, h);
}

void site5(asio::io_context& io, asio::steady_timer& t, const coretry::retry_policy& p,
           const coretry::hedge_options& h) {
  coretry::async_hedge(
      io.get_executor(), [&t](auto token) { return t.async_wait(std::move(token)); }, p, h,
      [](std::error_code) {});
}

asio::awaitable<int> site6(const coretry::retry_policy& p, const coretry::hedge_options& h) {
  co_return co_await coretry::hedge_async([]() -> asio::awaitable<int> { co_return 6; }, p, h);
}

void site7(asio::io_context& io, asio::steady_timer& t, const coretry::retry_policy& p,
           const coretry::hedge_options& h) {
  coretry::async_hedge(
      io.get_executor(), [&t](auto token) { return t.async_wait(std::move(token)); }, p, h,
      [](std::error_code) {});
}
