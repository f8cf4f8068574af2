// SPDX-License-Identifier: BSL-1.0
// Compile-cost probe (.ci/compile-cost): 8 call sites of the core loop, each with an operation
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

void site1(asio::io_context& io, asio::steady_timer& t, const coretry::retry_policy& p) {
  coretry::async_retry(
      io.get_executor(), [&t](auto token) { return t.async_wait(std::move(token)); }, p,
      [](std::error_code) {});
}

asio::awaitable<int> site2(const coretry::retry_policy& p) {
  co_return co_await coretry::retry_async([]() -> asio::awaitable<int> { co_return 2; }, p);
}

void site3(asio::io_context& io, asio::steady_timer& t, const coretry::retry_policy& p) {
  coretry::async_retry(
      io.get_executor(), [&t](auto token) { return t.async_wait(std::move(token)); }, p,
      [](std::error_code) {});
}

asio::awaitable<int> site4(const coretry::retry_policy& p) {
  co_return co_await coretry::retry_async([]() -> asio::awaitable<int> { co_return 4; }, p);
}

void site5(asio::io_context& io, asio::steady_timer& t, const coretry::retry_policy& p) {
  coretry::async_retry(
      io.get_executor(), [&t](auto token) { return t.async_wait(std::move(token)); }, p,
      [](std::error_code) {});
}

asio::awaitable<int> site6(const coretry::retry_policy& p) {
  co_return co_await coretry::retry_async([]() -> asio::awaitable<int> { co_return 6; }, p);
}

void site7(asio::io_context& io, asio::steady_timer& t, const coretry::retry_policy& p) {
  coretry::async_retry(
      io.get_executor(), [&t](auto token) { return t.async_wait(std::move(token)); }, p,
      [](std::error_code) {});
}
