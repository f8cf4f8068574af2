// SPDX-License-Identifier: BSL-1.0
#include <coretry/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

using namespace std::chrono_literals;
using coretry::retry_policy;
using coretry::test::refused;

namespace {

// Real time here, but only a few milliseconds of it: the point is the executors.
retry_policy quick() {
  return {.max_attempts = 4, .attempt_timeout = 5s, .backoff = coretry::backoff::fixed(1ms)};
}

/// What one operation saw: how many attempts ran, how many of them ran where they should, and
/// whether the completion handler did.
struct placement {
  int result = 0;
  int attempts = 0;
  int attempts_in_place = 0;
  bool completion_in_place = false;
};

/// Runs one operation on `ex` whose first two attempts fail, and records whether each attempt
/// and the completion handler ran inside `ex` (`running_in_this_thread()`).
template <class Executor> placement retry_on(const Executor& ex) {
  auto seen = std::make_shared<placement>();
  std::promise<void> completed;
  coretry::async_retry(
      ex,
      [ex, seen]() -> asio::awaitable<int> {
        const int n = ++seen->attempts;
        if (ex.running_in_this_thread())
          ++seen->attempts_in_place;
        if (n < 3)
          throw std::system_error(refused);
        co_return 11;
      },
      quick(),
      [ex, seen, &completed](std::error_code ec, int v) {
        seen->completion_in_place = ex.running_in_this_thread();
        seen->result = ec ? -1 : v;
        completed.set_value();
      });
  completed.get_future().wait();
  return *seen;
}

void check_in_place(const placement& p) {
  CHECK(p.result == 11);
  CHECK(p.attempts == 3);
  CHECK(p.attempts_in_place == 3);
  CHECK(p.completion_in_place);
}

} // namespace

TEST_CASE("on an io_context, every attempt and the completion run on that io_context") {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  check_in_place(retry_on(io.get_executor()));
  guard.reset();
  runner.join();
}

TEST_CASE("on a strand of an io_context, every attempt and the completion run on the strand") {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  check_in_place(retry_on(asio::make_strand(io)));
  guard.reset();
  runner.join();
}

TEST_CASE("on a thread_pool, every attempt and the completion run on the pool's threads") {
  asio::thread_pool pool(2);
  const placement p = retry_on(pool.get_executor());
  check_in_place(p);
  // And not on the test's own thread, which only waits.
  CHECK_FALSE(pool.get_executor().running_in_this_thread());
  pool.join();
}

TEST_CASE("on a strand of a thread_pool, every attempt and the completion run on the strand") {
  asio::thread_pool pool(2);
  check_in_place(retry_on(asio::make_strand(pool)));
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

/// A coroutine on a strand of a pool awaits 20 operations whose odd attempts fail, and counts
/// the attempts that ran on the strand and the resumptions that came back to it.
static void check_coroutine_on_strand(const retry_policy& policy) {
  asio::thread_pool pool(2);
  auto strand = asio::make_strand(pool);
  int calls = 0, calls_on_strand = 0, resumed_on_strand = 0;
  auto fut = asio::co_spawn(
      strand,
      [&]() -> asio::awaitable<int> {
        int sum = 0;
        for (int round = 0; round < 20; ++round) {
          sum += co_await coretry::retry_async(
              [&]() -> asio::awaitable<int> {
                if (strand.running_in_this_thread())
                  ++calls_on_strand;
                if (++calls % 2)
                  throw std::system_error(refused);
                co_return 1;
              },
              policy);
          if (strand.running_in_this_thread())
            ++resumed_on_strand;
        }
        co_return sum;
      },
      asio::use_future);
  CHECK(fut.get() == 20);
  pool.join();
  CHECK(calls == 40);
  CHECK(calls_on_strand == 40);
  CHECK(resumed_on_strand == 20);
}

TEST_CASE("retry_async in a coroutine on a strand of a pool runs its attempts and resumes there") {
  retry_policy untimed = quick();
  untimed.attempt_timeout = coretry::unlimited;
  check_coroutine_on_strand(untimed);
}

// The controlled path (a timed attempt) runs on the caller's strand itself. It once ran half
// its attempts off it: Asio 1.22's any_executor::target<T>() does not check T, and a strand of
// a pool was taken for an io_context executor.
TEST_CASE("timed retry_async in a coroutine on a strand of a pool runs its attempts there") {
  check_coroutine_on_strand(quick());
}

TEST_CASE("timed retry_async in a coroutine on a strand of a 2-thread io_context runs there") {
  asio::io_context io(2);
  auto strand = asio::make_strand(io);
  auto work = asio::make_work_guard(io);
  std::thread a([&] { io.run(); }), b([&] { io.run(); });
  int calls = 0, on_strand = 0;
  auto fut = asio::co_spawn(
      strand,
      [&]() -> asio::awaitable<int> {
        int sum = 0;
        for (int round = 0; round < 20; ++round)
          sum += co_await coretry::retry_async(
              [&]() -> asio::awaitable<int> {
                on_strand += strand.running_in_this_thread() ? 1 : 0;
                if (++calls % 2)
                  throw std::system_error(refused);
                co_return 1;
              },
              quick());
        co_return sum;
      },
      asio::use_future);
  CHECK(fut.get() == 20);
  work.reset();
  a.join();
  b.join();
  CHECK(calls == 40);
  CHECK(on_strand == 40);
}
