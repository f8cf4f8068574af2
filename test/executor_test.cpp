#include <coretry/retry.hpp>

#include <doctest/doctest.h>
#include <support/test_ops.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/strand.hpp>
#include <asio/thread_pool.hpp>
#include <asio/use_future.hpp>

#include <atomic>
#include <chrono>
#include <memory>

using namespace std::chrono_literals;
using coretry::retry_policy;
using coretry::test::refused;

namespace {

// Real time here, but only a few milliseconds of it: the point is the executors.
retry_policy quick() {
  return {.max_attempts = 4, .attempt_timeout = 5s, .backoff = coretry::backoff::fixed(1ms)};
}

template <class Executor> int retry_on(const Executor& ex, std::atomic<int>& calls) {
  auto fut = coretry::async_retry(
      ex,
      [&]() -> asio::awaitable<int> {
        if (calls.fetch_add(1) < 2)
          throw std::system_error(refused);
        co_return 11;
      },
      quick(), asio::use_future);
  return fut.get();
}

} // namespace

TEST_CASE("retries run on an io_context, a strand and a thread_pool") {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  std::atomic<int> calls{0};
  CHECK(retry_on(io.get_executor(), calls) == 11);
  calls = 0;
  CHECK(retry_on(asio::make_strand(io), calls) == 11);
  guard.reset();
  runner.join();

  asio::thread_pool pool(2);
  calls = 0;
  CHECK(retry_on(pool.get_executor(), calls) == 11);
  calls = 0;
  CHECK(retry_on(asio::make_strand(pool), calls) == 11);
  pool.join();
}

TEST_CASE("many concurrent retries on a multi-threaded pool each complete exactly once") {
  asio::thread_pool pool(2);
  constexpr int n = 500;
  std::atomic<int> completions{0}, ok{0}, total_calls{0};
  auto per_op = std::make_unique<std::atomic<int>[]>(n);
  for (int i = 0; i < n; ++i) {
    coretry::async_retry(
        pool.get_executor(),
        [&, calls = std::make_shared<int>(0)]() -> asio::awaitable<int> {
          total_calls.fetch_add(1);
          if (++*calls < 3)
            throw std::system_error(refused);
          co_return *calls;
        },
        quick(),
        [&, i](std::error_code ec, int v) {
          per_op[i].fetch_add(1);
          if (!ec && v == 3)
            ok.fetch_add(1);
          completions.fetch_add(1);
        });
  }
  pool.join();
  CHECK(completions.load() == n);
  CHECK(ok.load() == n);
  CHECK(total_calls.load() == 3 * n);
  for (int i = 0; i < n; ++i)
    CHECK(per_op[i].load() == 1);
}

TEST_CASE("retry_async inside a coroutine on a strand of a multi-threaded pool") {
  asio::thread_pool pool(2);
  auto strand = asio::make_strand(pool);
  auto fut = asio::co_spawn(
      strand,
      [&]() -> asio::awaitable<int> {
        int calls = 0;
        int sum = 0;
        for (int round = 0; round < 20; ++round)
          sum += co_await coretry::retry_async(
              [&]() -> asio::awaitable<int> {
                if (++calls % 2)
                  throw std::system_error(refused);
                co_return 1;
              },
              quick());
        co_return sum;
      },
      asio::use_future);
  CHECK(fut.get() == 20);
  pool.join();
}
