// SPDX-License-Identifier: BSL-1.0
// The shipped test clock: what a test may leave behind. A test may end with operations asleep on
// manual_timer; their waits go with their io_context, and reset() between tests never touches a
// context that is gone. Run under ASan to see the difference.

#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <chrono>
#include <memory>
#include <system_error>

using namespace std::chrono_literals;
using namespace coretry::testing;

namespace {

/// Counts its live instances: what a coroutine frame holds.
struct tracked {
  explicit tracked(int& n) : live(n) { ++live; }
  tracked(const tracked&) = delete;
  tracked& operator=(const tracked&) = delete;
  ~tracked() { --live; }
  int& live;
};

/// Sleeps on a timer in its own frame: destroying the frame destroys the timer, which cancels
/// its own wait in the clock's queue.
asio::awaitable<void> sleeper(int& live, int& woke, std::chrono::nanoseconds d) {
  tracked t(live);
  manual_timer timer(co_await asio::this_coro::executor);
  timer.expires_after(d);
  co_await timer.async_wait(asio::use_awaitable);
  ++woke;
}

} // namespace

TEST_CASE("a test may end while operations sleep on manual_timer: the waits go with the context") {
  manual_clock::reset();
  int live = 0;
  int woke = 0;
  {
    asio::io_context io;
    asio::co_spawn(io, sleeper(live, woke, 1s), asio::detached);
    asio::co_spawn(asio::make_strand(io), sleeper(live, woke, 2s), asio::detached);
    // A retry sleeping in its backoff, on a strand of its own.
    coretry::retry_policy p;
    p.backoff = coretry::backoff::fixed(1h);
    coretry::async_retry<manual_timer>(
        io.get_executor(),
        []() -> asio::awaitable<int> {
          throw std::system_error(make_error_code(std::errc::connection_refused));
          co_return 0;
        },
        p, [&](std::error_code, int) { ++woke; });
    io.poll();
    CHECK(live == 2);
    CHECK(manual_clock::pending() == 3);
  }                 // the context is destroyed with all three asleep
  CHECK(live == 0); // their frames were destroyed with the context ...
  CHECK(woke == 0); // ... and nothing ran
  CHECK(manual_clock::pending() == 0);
  manual_clock::advance(2h); // nothing is due, nothing is touched
  manual_clock::reset();
  CHECK(woke == 0);
}

TEST_CASE("reset() drops the waits of a live context, even those a destroyed frame cancels") {
  manual_clock::reset();
  int live = 0;
  int woke = 0;
  asio::io_context io;
  for (int i = 0; i < 3; ++i)
    asio::co_spawn(io, sleeper(live, woke, std::chrono::seconds(i + 1)), asio::detached);
  io.poll();
  REQUIRE(manual_clock::pending() == 3);
  manual_clock::reset(); // destroys each handler; Asio unwinds its frame through the context
  CHECK(manual_clock::pending() == 0);
  io.restart();
  io.poll(); // each frame's timer, destroyed, cancels into the queue: nothing is left in it
  CHECK(live == 0);
  CHECK(woke == 0);
  CHECK(manual_clock::pending() == 0);
}

TEST_CASE("the clock keeps working across contexts: a later test's waits fire as usual") {
  manual_clock::reset();
  int live = 0;
  int woke = 0;
  {
    asio::io_context gone;
    asio::co_spawn(gone, sleeper(live, woke, 5s), asio::detached);
    gone.poll();
  }
  asio::io_context io;
  asio::co_spawn(io, sleeper(live, woke, 3s), asio::detached);
  drive(io, [&] { return woke == 1; });
  CHECK(woke == 1);
  CHECK(manual_clock::elapsed() == 3s);
  CHECK(live == 0);
}
