// SPDX-License-Identifier: BSL-1.0
// Hedged operations at the extremes: attempts that fail without suspending, very many attempts,
// an operation that completes at once, a result type that cannot be assigned. On the manual
// clock, or on real executors with no timer at all.

#include <coretry/hedge.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <chrono>
#include <climits>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <system_error>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CORETRY_TEST_SANITIZER_HEAP 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CORETRY_TEST_SANITIZER_HEAP 1
#endif
#ifdef CORETRY_TEST_SANITIZER_HEAP
// From <sanitizer/allocator_interface.h>, which not every compiler installs.
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

using namespace std::chrono_literals;
using namespace coretry::testing;
using coretry::hedge_options;
using coretry::hedge_stats;
using coretry::retry_policy;

namespace {

const std::error_code refused = make_error_code(std::errc::connection_refused);

/// Bytes the process holds on its heap now.
std::size_t heap_in_use() {
#ifdef CORETRY_TEST_SANITIZER_HEAP
  return __sanitizer_get_current_allocated_bytes();
#else
  return mallinfo2().uordblks;
#endif
}

/// A result that can be moved into place but never assigned.
struct fixed {
  explicit fixed(int x) : v(x) {}
  fixed(fixed&&) = default;
  fixed& operator=(fixed&&) = delete;
  const int v;
};

} // namespace

TEST_CASE("attempts that fail without suspending never recurse, and the deadline still ends them") {
  // Each attempt fails inside its first resumption, 10 us of manual time after it started:
  // 50,000 attempts fit before the deadline, far more than a stack holds frames for.
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  std::chrono::nanoseconds last_start{-1};
  auto op = [&]() -> asio::awaitable<int> {
    ++calls;
    last_start = manual_clock::elapsed();
    manual_clock::advance(10us);
    throw std::system_error(refused);
    co_return 0;
  };
  retry_policy p;
  p.max_attempts = UINT_MAX;
  p.deadline = 500ms;
  hedge_stats stats;
  int completions = 0;
  std::error_code error;
  coretry::async_hedge<manual_timer>(io.get_executor(), op, p, {}, stats,
                                     [&](std::error_code ec, int) {
                                       ++completions;
                                       error = ec;
                                     });
  drive(io, [&] { return completions > 0; });
  drive(io, [] { return false; });
  CHECK(completions == 1);
  CHECK(error == coretry::errc::deadline_exceeded);
  CHECK(calls >= 49'990);
  CHECK(calls <= 50'000);
  CHECK(stats.attempts == static_cast<unsigned>(calls));
  CHECK(last_start < 500ms); // no attempt starts at or after the deadline
  CHECK(manual_clock::pending() == 0);

  SUBCASE("nor do many attempts started at once") {
    manual_clock::reset();
    int started = 0;
    auto quick = [&]() -> asio::awaitable<int> {
      ++started;
      co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      co_return 7;
    };
    retry_policy many;
    many.max_attempts = 20'000;
    int value = 0;
    coretry::async_hedge<manual_timer>(io.get_executor(), quick, many,
                                       {.delay = 0ns, .max_copies = 20'000},
                                       [&](std::error_code ec, int v) {
                                         CHECK_FALSE(ec);
                                         value = v;
                                       });
    drive(io, [] { return false; });
    CHECK(value == 7);
    CHECK(started == 20'000);
  }
}

TEST_CASE("a hedge that completes at once leaves nothing behind: no hedge timer, no state") {
  manual_clock::reset();
  asio::io_context io;
  auto held = std::make_shared<int>(0);
  int value = 0;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [held]() -> asio::awaitable<int> { co_return 42; }, {.max_attempts = 3},
      {.delay = 3s},
      [&](std::error_code ec, int v) {
        CHECK_FALSE(ec);
        value = v;
      });
  io.poll();
  CHECK(value == 42);
  CHECK(manual_clock::pending() == 0);
  CHECK(held.use_count() == 1); // the operation's state, which holds `op`, is gone
  drive(io, [] { return false; });
  CHECK(manual_clock::elapsed() == 0ns);
}

TEST_CASE("a hedge's deadline counts from the call, not from when its state first runs") {
  manual_clock::reset();
  asio::io_context io;
  std::vector<manual_clock::duration> started;
  std::error_code error;
  int completions = 0;
  coretry::async_hedge<manual_timer>(
      io.get_executor(),
      [&]() -> asio::awaitable<int> {
        started.push_back(manual_clock::elapsed());
        manual_timer t(co_await asio::this_coro::executor);
        t.expires_after(1s); // hangs past the deadline
        co_await t.async_wait(asio::use_awaitable);
        co_return 1;
      },
      {.max_attempts = 3, .deadline = 200ms}, {.delay = 1s},
      [&](std::error_code ec, int) {
        ++completions;
        error = ec;
      });
  manual_clock::advance(150ms); // a busy executor: the state first runs 150 ms after the call
  drive(io, [&] { return completions > 0; });
  CHECK(completions == 1);
  CHECK(error == coretry::errc::deadline_exceeded);
  CHECK(started == std::vector<manual_clock::duration>{150ms});
  CHECK(manual_clock::elapsed() == 200ms); // 350 ms when it counted from the first run
}

TEST_CASE("a long hedge holds memory for the attempts in flight, not for every attempt") {
  asio::io_context io;
  int calls = 0;
  std::size_t early = 0;
  std::size_t late = 0;
  auto op = [&]() -> asio::awaitable<int> {
    ++calls;
    if (calls == 2'000)
      early = heap_in_use();
    if (calls == 20'000)
      late = heap_in_use();
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    throw std::system_error(refused);
  };
  retry_policy p;
  p.max_attempts = 20'000;
  std::error_code error;
  coretry::async_hedge(io.get_executor(), op, p, {.delay = coretry::unlimited},
                       [&](std::error_code ec, int) { error = ec; });
  io.run();
  CHECK(error == refused);
  REQUIRE(calls == 20'000);
  // 18,000 attempts later: a slot each (over 200 bytes) would be more than 3 MB.
  CHECK(late < early + 256 * 1024);
}

TEST_CASE("hedge_async accepts a result type that is not move-assignable, as retry_async does") {
  manual_clock::reset();
  asio::io_context io;
  std::optional<int> hedged;
  std::optional<int> retried;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto op = []() -> asio::awaitable<fixed> { co_return fixed{7}; };
        retry_policy p;
        hedge_options h;
        h.delay = 1ms;
        const fixed a = co_await coretry::hedge_async<manual_timer>(op, p, h);
        hedged = a.v;
        const fixed b = co_await coretry::retry_async<manual_timer>(op, p);
        retried = b.v;
      },
      [](std::exception_ptr e) {
        if (e)
          std::rethrow_exception(e);
      });
  drive(io, [] { return false; });
  CHECK(hedged == 7);
  CHECK(retried == 7);
}
