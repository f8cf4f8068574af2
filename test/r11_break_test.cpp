// SPDX-License-Identifier: BSL-1.0
// Reviewer r11's reproducers against 4fa8ca3 ("a retry the server scheduled is asked only of a
// budget that limits those"). Each case says what it showed at b6904aa. Since then only a retry a
// rate limiter invited (an answer in condition::pushback, HTTP 429, with a hint, not cut by a
// timer) skips a ratio budget; the three failing cases hold.

#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/detail/schedule.hpp>
#include <coretry/http.hpp>
#include <coretry/presets.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::errc;
using coretry::detail::schedule;

namespace {

/// A ratio budget with nothing to spare: any retry it is asked for, it refuses.
std::shared_ptr<coretry::ratio_budget> empty_budget() {
  return std::make_shared<coretry::ratio_budget>(
      coretry::ratio_budget_options{.ratio = 0, .min_retries_per_second = 0});
}

} // namespace

// Failed at b6904aa; holds since (a refused connection with a hint is no invitation). Under the
// rule now, a 429 with a 1 ns hint and a 1 s backoff would still skip the budget: the rate
// limiter's "come back after 1 ns" covers any later time, and the backoff only makes the retry
// later. The exemption was meant for a retry whose time "the server, not the client,
// chose" (docs/overload.md, "A retry the server scheduled"; schedule.hpp: "the delay waits its
// hint in full"). But any hint above zero exempts the retry, even one far below the backoff
// delay: here the server's hint is 1 ns and the client's own backoff (1 s) decides when the
// retry comes, yet the budget is never asked. A server (or a custom attempt, or gRPC's
// `grpc-retry-pushback-ms: 1`) thereby switches the budget off for every retry.
TEST_CASE("r11: a hint far below the backoff still exempts the retry from the ratio budget") {
  coretry::retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(1s)};
  {
    // Without a budget: the retry sleeps the client's 1 s backoff; the hint chose nothing.
    schedule s(p, 0ns);
    REQUIRE_FALSE(s.begin_attempt(0ns));
    CHECK(s.after_failure({refused, false, 1ns}, 0ns).delay == 1s);
  }
  auto budget = empty_budget();
  p.budget = budget;
  schedule s(p, 0ns);
  REQUIRE_FALSE(s.begin_attempt(0ns));
  const auto v = s.after_failure({refused, false, 1ns}, 0ns);
  // Expected (the exemption's own rationale): the budget is asked, and it refuses.
  CHECK(v.stop == errc::budget_exhausted);
  CHECK(budget->refused() == 1);
}

// Failed at b6904aa; holds since (a 503's hint invites nothing). The storm:
// `presets::overload_safe()` against an overloaded upstream that sheds load the way RFC 9110
// suggests, 503 with `Retry-After: 1`, on every answer. The hint makes each failure a push-back, so
// the breaker never opens (a push-back is neutral), and the retry is "scheduled", so the ratio
// budget is never asked: each of 100 requests is sent 10 times within its 10 s deadline, 1,000
// attempts. The budget's documented bound (presets.hpp: "retries at most 10 % of the requests of
// the last 10 s, plus 1 a second"; docs/overload.md: "while the upstream is down, retries are at
// most `ratio` of the requests plus the reserve") allows 0.1 x 100 + 1 x 10 = 20 retries: 120
// attempts. At 794c43a (before 4fa8ca3) this case passes with exactly 120 attempts and 20 retries
// counted; at b6904aa: 1,000 attempts, 0 retries counted, breaker closed.
TEST_CASE("r11: overload_safe against 503 + Retry-After: 1 on every answer: a 10x storm") {
  manual_clock::reset();
  asio::io_context io;
  auto policy = coretry::presets::overload_safe(); // 2 s attempt timeout, 10 s deadline
  auto budget = std::dynamic_pointer_cast<coretry::ratio_budget>(policy.budget);
  auto breaker = std::dynamic_pointer_cast<coretry::circuit_breaker>(policy.breaker);
  REQUIRE(budget);
  REQUIRE(breaker);
  int attempts = 0;
  int done = 0;
  constexpr int requests = 100;
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    ++attempts;
    // What both adapters do with a 503 carrying "Retry-After: 1".
    ctx.health_code(coretry::http::make_status_error(503));
    ctx.retry_after(1s);
    throw std::system_error(refused);
    co_return 0;
  };
  for (int i = 0; i < requests; ++i)
    asio::co_spawn(io, coretry::retry_async<manual_timer>(op, policy),
                   [&](std::exception_ptr, int) { ++done; });
  REQUIRE(drive(io, [&] { return done == requests; }));
  MESSAGE("attempts: " << attempts << ", budget retries counted: "
                       << budget->retries(manual_clock::now().time_since_epoch())
                       << ", breaker pushbacks: " << breaker->pushbacks()
                       << ", breaker state: " << std::string(coretry::to_string(breaker->state())));
  CHECK(breaker->state() == coretry::breaker_state::closed); // holds: push-backs are neutral
  // Expected: the budget bounds the retries (20 in the window): at most 120 attempts.
  CHECK(attempts <= requests + 20);
}

// Failed at b6904aa; holds since (a cut attempt invites nothing). A retry after an attempt the
// attempt timeout cut is the client's own
// decision (docs/retry_storm.md: "the retries a client decides on its own (503 without
// Retry-After, refused connections, timeouts) are still counted and refused"), and the loop
// classifies the cut attempt as a plain failure, not a push-back (schedule::classify: `cut`).
// Yet retry_loop.hpp passes `ctx_.retry_after()` to `after_failure` even for a cut attempt, so
// an attempt that had set a hint before it hung (an adapter that reads the head, then stalls
// in the body) is exempted from the budget, and its hint is waited too. At 794c43a: 1 call,
// budget_exhausted; at b6904aa: 3 calls, attempts_exhausted.
TEST_CASE("r11: a timed-out attempt that had set a hint is exempted from the budget") {
  manual_clock::reset();
  asio::io_context io;
  auto budget = empty_budget();
  coretry::retry_policy policy{
      .max_attempts = 3, .attempt_timeout = 1s, .backoff = coretry::backoff::fixed(10ms)};
  policy.budget = budget;
  int calls = 0;
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    ++calls;
    ctx.retry_after(50ms); // the head said Retry-After...
    manual_timer t(co_await asio::this_coro::executor);
    t.expires_after(1h); // ...then the body stalls
    co_await t.async_wait(asio::use_awaitable);
    co_return 1;
  };
  coretry::retry_stats stats;
  bool finished = false;
  std::error_code error;
  asio::co_spawn(io, coretry::retry_async<manual_timer>(op, policy, stats),
                 [&](std::exception_ptr e, int) {
                   finished = true;
                   try {
                     if (e)
                       std::rethrow_exception(e);
                   } catch (const std::system_error& se) {
                     error = se.code();
                   }
                 });
  REQUIRE(drive(io, [&] { return finished; }));
  MESSAGE("calls: " << calls << ", reason: " << stats.reason.message());
  // Expected: a timeout's retry is asked of the budget, which refuses it.
  CHECK(calls == 1);
  CHECK(stats.reason == errc::budget_exhausted);
}

namespace {

using error_code = coretry::detail::asio_error_code;

/// Posts its handler (an error: the loop retries) to the io_context, then throws a retryable
/// error on every attempt: each attempt is ended by whichever side claims it first.
struct always_posts_then_throws {
  asio::io_context* io;
  std::atomic<int> calls{0};
  template <class Token> auto operator()(Token&& token) {
    ++calls;
    return asio::async_initiate<Token, void(error_code, int)>(
        [this](auto handler) {
          auto ex = asio::get_associated_executor(handler, io->get_executor());
          asio::post(ex, [h = std::move(handler)]() mutable {
            std::move(h)(error_code(asio::error::connection_refused), 0);
          });
          throw std::system_error(refused);
        },
        token);
  }
};

} // namespace

// Passed at b6904aa (what held). 814bddf's claim over several attempts in a row on a two-thread
// io_context without a strand: every attempt is ended once, by its handler or by the catch
// block, whichever wins, so that seq stays claimed + 1 and the operation neither hangs nor
// completes twice, and sends exactly max_attempts attempts.
TEST_CASE("r11: async_retry, two threads, every attempt posts then throws: 5 attempts, 1 end") {
  int bad = 0;
  for (int round = 0; round < 2000; ++round) {
    asio::io_context io;
    always_posts_then_throws op{&io};
    std::atomic<int> completions{0};
    coretry::async_retry(
        io.get_executor(), std::ref(op),
        coretry::retry_policy{.max_attempts = 5, .backoff = coretry::backoff::fixed(0ms)},
        [&](error_code, int) { ++completions; });
    std::thread t([&io] { io.run(); });
    io.run();
    t.join();
    if (completions != 1 || op.calls != 5)
      ++bad;
  }
  CHECK(bad == 0);
}
