// SPDX-License-Identifier: BSL-1.0
// Compile-cost probe (.ci/compile-cost): the same job as curl_retry.cpp, a hand-written loop.
#include <coretry/curl/client.hpp>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include <chrono>

asio::awaitable<long> fetch(coretry::curl::client& c, coretry::curl::request req) {
  using namespace std::chrono_literals;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (int attempt = 1;; ++attempt) {
    try {
      auto r = co_await c.async_perform(req, asio::use_awaitable);
      if (r.status < 500 || attempt == 3)
        co_return r.status;
    } catch (const std::system_error&) {
      if (attempt == 3)
        throw;
    }
    timer.expires_after(100ms * attempt);
    co_await timer.async_wait(asio::use_awaitable);
  }
}
