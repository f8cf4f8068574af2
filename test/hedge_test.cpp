// SPDX-License-Identifier: BSL-1.0
// Hedged operations: on the manual clock, with scripted attempts that record when each started
// and how each ended; then a two-thread stress run on real (microsecond) timers.

#include <coretry/budget.hpp>
#include <coretry/cancellation.hpp>
#include <coretry/hedge.hpp>
#include <coretry/overload.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/fake_gate.hpp>
#include <support/run_on_manual_clock.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::testing;
using coretry::hedge_options;
using coretry::hedge_stats;
using coretry::retry_policy;

using coretry::test::fake_gate;
using coretry::test::outcome;
using coretry::test::run_hedge;

namespace {

const std::error_code refused = make_error_code(std::errc::connection_refused);
const std::error_code denied = make_error_code(std::errc::permission_denied);

/// What attempt k does: wait `after` on the manual clock (an hour when `hang`), then fail with
/// `error` or return `value`.
struct plan {
  std::chrono::nanoseconds after{0};
  std::error_code error{};
  int value = 0;
  bool hang = false;
};
plan ok(int v, std::chrono::nanoseconds after) {
  return {after, {}, v};
}
plan fails(std::error_code ec, std::chrono::nanoseconds after) {
  return {after, ec};
}
plan hangs() {
  return {0ns, {}, 0, true};
}

/// How one attempt went, as the operation saw it.
struct record {
  std::chrono::nanoseconds started{0};
  int finished = 0;  ///< ran to its planned end
  int cancelled = 0; ///< saw its wait cancelled
};

/// Plays plan k for attempt k (the last plan for any later one) and records every attempt.
struct hedged_op {
  std::vector<plan> plans;
  std::vector<record> records{};
  int running = 0;
  int peak = 0;

  asio::awaitable<int> operator()() {
    const std::size_t i = records.size();
    records.push_back({manual_clock::elapsed()});
    const plan p = plans.at(std::min(i, plans.size() - 1));
    peak = std::max(peak, ++running);
    manual_timer t(co_await asio::this_coro::executor);
    t.expires_after(p.hang ? std::chrono::nanoseconds(1h) : p.after);
    auto [ec] = co_await t.async_wait(coretry::detail::as_tuple(asio::use_awaitable));
    --running;
    if (ec) {
      ++records[i].cancelled;
      throw std::system_error(ec);
    }
    ++records[i].finished;
    if (p.error)
      throw std::system_error(p.error);
    co_return p.value;
  }

  std::vector<std::chrono::nanoseconds> starts() const {
    std::vector<std::chrono::nanoseconds> s;
    for (const auto& r : records)
      s.push_back(r.started);
    return s;
  }
  /// Every attempt ended exactly once, one way or the other.
  bool each_ended_once() const {
    return std::all_of(records.begin(), records.end(),
                       [](const record& r) { return r.finished + r.cancelled == 1; });
  }
  int cancelled() const {
    int n = 0;
    for (const auto& r : records)
      n += r.cancelled;
    return n;
  }
};

struct fake_budget final : coretry::retry_budget {
  int requests = 0, successes = 0, failures = 0, asked = 0;
  int grants_left = 1000;
  void on_request(std::chrono::nanoseconds) noexcept override { ++requests; }
  void on_success(std::chrono::nanoseconds) noexcept override { ++successes; }
  void on_failure(std::chrono::nanoseconds) noexcept override { ++failures; }
  bool try_retry(std::chrono::nanoseconds) noexcept override {
    ++asked;
    if (grants_left == 0)
      return false;
    --grants_left;
    return true;
  }
};

} // namespace

TEST_CASE("the fastest attempt wins and every other running attempt is cancelled once") {
  manual_clock::reset();
  asio::io_context io;
  // Attempt 1 is slow (500 ms), attempt 2 quick (150 ms), attempt 3 would hang.
  hedged_op op{{ok(1, 500ms), ok(2, 150ms), hangs()}};
  const retry_policy p{.max_attempts = 3};
  hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 3}, stats);
  CHECK(r.completions == 1);
  CHECK_FALSE(r.error);
  CHECK(r.value == 2);
  CHECK(op.starts() == std::vector<std::chrono::nanoseconds>{0ms, 100ms, 200ms});
  REQUIRE(op.records.size() == 3);
  CHECK(op.records[0].cancelled == 1);
  CHECK(op.records[1].finished == 1);
  CHECK(op.records[2].cancelled == 1);
  CHECK(op.each_ended_once());
  CHECK(stats.attempts == 3);
  CHECK(stats.abandoned == 2);
  CHECK(stats.winner == 2);
  CHECK(stats.peak_in_flight == 3);
  CHECK(stats.elapsed == 250ms);
  CHECK_FALSE(stats.reason);
}

TEST_CASE("no hedge starts after the winner completed") {
  manual_clock::reset();
  asio::io_context io;
  // The first attempt wins at 90 ms, 10 ms before the hedge is due: the hedge must not start.
  hedged_op op{{ok(7, 90ms), ok(8, 10ms)}};
  const retry_policy p{.max_attempts = 5};
  hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 5}, stats);
  CHECK(r.value == 7);
  CHECK(op.records.size() == 1);
  CHECK(stats.attempts == 1);
  CHECK(manual_clock::pending() == 0);

  SUBCASE("nor after a winner with hedges running") {
    manual_clock::reset();
    hedged_op op2{{ok(1, 130ms), ok(2, 10ms), ok(3, 10ms)}};
    hedge_stats s2;
    const auto r2 = run_hedge(io, op2, p, {.delay = 50ms, .max_copies = 5}, s2);
    // 0: #1 (ends 130), 50: #2 (ends 60, wins): nothing starts at 100 ms or later.
    CHECK(r2.value == 2);
    CHECK(op2.starts() == std::vector<std::chrono::nanoseconds>{0ms, 50ms});
    CHECK(op2.each_ended_once());
  }
}

TEST_CASE("at most max_copies attempts run at once; a due hedge waits for a failure") {
  manual_clock::reset();
  asio::io_context io;
  // Every attempt fails after 1 s; a hedge is due every 10 ms.
  hedged_op op{{fails(refused, 1s)}};
  const retry_policy p{.max_attempts = 5};
  hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = 10ms, .max_copies = 2}, stats);
  CHECK(r.completions == 1);
  CHECK(r.error == refused);
  CHECK(op.peak == 2);
  CHECK(stats.peak_in_flight == 2);
  // Two at 0 and 10 ms; each failure starts the next at once.
  CHECK(op.starts() == std::vector<std::chrono::nanoseconds>{0ms, 10ms, 1000ms, 1010ms, 2000ms});
  CHECK(stats.attempts == 5);
  CHECK(stats.reason == coretry::errc::attempts_exhausted);
  CHECK(op.each_ended_once());
}

TEST_CASE("a retryable failure starts the next attempt without waiting for the delay") {
  manual_clock::reset();
  asio::io_context io;
  hedged_op op{{fails(refused, 10ms), ok(5, 10ms)}};
  const retry_policy p{.max_attempts = 3};
  hedge_stats stats;
  std::vector<coretry::hedge_event> events;
  hedge_options h{.delay = 1s, .max_copies = 2};
  h.on_hedge = [&](const coretry::hedge_event& e) { events.push_back(e); };
  const auto r = run_hedge(io, op, p, h, stats);
  CHECK(r.value == 5);
  CHECK(op.starts() == std::vector<std::chrono::nanoseconds>{0ms, 10ms});
  CHECK(stats.elapsed == 20ms);
  REQUIRE(events.size() == 1);
  CHECK(events[0].attempt == 2);
  CHECK(events[0].in_flight == 1);
  CHECK(events[0].trigger == refused);
}

TEST_CASE("when every attempt fails the operation completes once with the last error") {
  manual_clock::reset();
  asio::io_context io;
  const auto reset = make_error_code(std::errc::connection_reset);
  hedged_op op{{fails(refused, 300ms), fails(refused, 300ms), fails(reset, 10ms)}};
  retry_policy p{.max_attempts = 3};
  hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 3}, stats);
  CHECK(r.completions == 1);
  // #1 fails at 300, #2 at 400, #3 (started at 200) at 210: #2 fails last.
  CHECK(r.error == refused);
  CHECK(stats.last_error == refused);
  CHECK(stats.reason == coretry::errc::attempts_exhausted);
  CHECK(stats.winner == 0);
  CHECK(op.each_ended_once());
  CHECK(op.cancelled() == 0);

  SUBCASE("or the policy's reason when asked") {
    manual_clock::reset();
    hedged_op op2{{fails(refused, 10ms)}};
    p.report = coretry::final_error::policy_reason;
    hedge_stats s2;
    const auto r2 = run_hedge(io, op2, p, {.delay = 100ms}, s2);
    CHECK(r2.completions == 1);
    CHECK(r2.error == coretry::errc::attempts_exhausted);
    CHECK(op2.records.size() == 3);
  }
}

TEST_CASE("a failure the policy does not retry ends the operation and cancels the rest") {
  manual_clock::reset();
  asio::io_context io;
  hedged_op op{{hangs(), fails(denied, 10ms), hangs()}};
  retry_policy p{.max_attempts = 3};
  p.retry_if = [](const std::error_code& ec) { return ec != denied; };
  hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 3}, stats);
  CHECK(r.completions == 1);
  CHECK(r.error == denied);
  CHECK(stats.reason == denied);
  CHECK(op.records.size() == 2); // #3 never starts
  CHECK(op.records[0].cancelled == 1);
  CHECK(op.each_ended_once());
  CHECK(stats.abandoned == 1);
}

TEST_CASE("cancelling the caller's slot during hedges completes once with operation_aborted") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  hedged_op op{{hangs()}};
  retry_policy p{.max_attempts = 5};
  p.breaker = gate;
  hedge_stats stats;
  asio::cancellation_signal cancel;
  outcome r;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, {.delay = 100ms, .max_copies = 3}, stats,
      asio::bind_cancellation_slot(cancel.slot(), coretry::test::record(r)));
  io.poll();
  for (int i = 0; i < 2; ++i) { // three attempts running
    manual_clock::advance(100ms);
    io.poll();
  }
  REQUIRE(op.records.size() == 3);
  cancel.emit(asio::cancellation_type::terminal);
  drive(io, [&] { return r.completions > 0; });
  drive(io, [] { return false; });
  CHECK(r.completions == 1);
  CHECK(r.error == coretry::test::operation_aborted);
  CHECK(stats.reason == coretry::test::operation_aborted);
  CHECK(op.records.size() == 3);
  CHECK(op.cancelled() == 3);
  CHECK(op.each_ended_once());
  CHECK(gate->granted == 3);
  CHECK(gate->log == std::vector<std::string>(3, "abandoned"));
}

TEST_CASE("the policy's group token cancels every attempt, and a late cancel changes nothing") {
  manual_clock::reset();
  asio::io_context io;
  coretry::cancellation_source source;
  hedged_op op{{hangs()}};
  retry_policy p{.max_attempts = 3};
  p.cancellation = source.token();
  hedge_stats stats;
  outcome r;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, {.delay = 10ms}, stats, coretry::test::record(r));
  io.poll();
  manual_clock::advance(10ms);
  io.poll();
  REQUIRE(op.records.size() == 2);
  source.cancel();
  drive(io, [&] { return r.completions > 0; });
  drive(io, [] { return false; });
  CHECK(r.completions == 1);
  CHECK(r.error == coretry::test::operation_aborted);
  CHECK(stats.reason == coretry::errc::cancelled);
  CHECK(op.cancelled() == 2);
  CHECK(op.each_ended_once());

  SUBCASE("an already cancelled token sends nothing") {
    manual_clock::reset();
    hedged_op op2{{ok(1, 1ms)}};
    outcome r2;
    coretry::async_hedge<manual_timer>(
        io.get_executor(), [&] { return op2(); }, p, {}, coretry::test::record(r2));
    CHECK(r2.completions == 0); // never inline
    drive(io, [] { return false; });
    CHECK(r2.completions == 1);
    CHECK(r2.error == coretry::test::operation_aborted);
    CHECK(op2.records.empty());
  }
}

TEST_CASE("an open breaker sends nothing; a hedge it refuses is not sent") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  gate->open = true;
  hedged_op op{{ok(1, 10ms)}};
  retry_policy p{.max_attempts = 3};
  p.breaker = gate;
  hedge_stats stats;
  const auto r = run_hedge(io, op, p, {}, stats);
  CHECK(r.completions == 1);
  CHECK(r.error == coretry::errc::circuit_open);
  CHECK(stats.reason == coretry::errc::circuit_open);
  CHECK(op.records.empty());
  CHECK(gate->log.empty());

  SUBCASE("the attempt running goes on when the breaker refuses its hedge") {
    manual_clock::reset();
    auto gate2 = std::make_shared<fake_gate>();
    hedged_op op2{{ok(3, 250ms)}};
    p.breaker = gate2;
    hedge_options h{.delay = 100ms};
    h.on_hedge = [](const coretry::hedge_event&) { FAIL("no hedge may start"); };
    coretry::async_hedge<manual_timer>(
        io.get_executor(), [&] { return op2(); }, p, h, stats, [](std::error_code, int) {});
    io.restart();
    io.poll();
    gate2->open = true; // opens while the first attempt runs
    drive(io, [] { return false; });
    CHECK(op2.records.size() == 1);
    CHECK(op2.records[0].finished == 1);
    CHECK(stats.winner == 1);
    CHECK(gate2->log == std::vector<std::string>{"success"});
  }
}

TEST_CASE("the breaker hears exactly one outcome for each attempt it granted") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  // #1 fails at 50 ms (failure), #2 starts then and hangs, #3 starts at 150 ms and wins at
  // 160 ms; #2 is abandoned.
  hedged_op op{{fails(refused, 50ms), hangs(), ok(9, 10ms)}};
  retry_policy p{.max_attempts = 3};
  p.breaker = gate;
  hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 2}, stats);
  CHECK(r.value == 9);
  CHECK(gate->granted == 3);
  CHECK(gate->log == std::vector<std::string>{"failure", "success", "abandoned"});
}

TEST_CASE("a hedge's failure carrying Retry-After is a push-back for the breaker, not a failure") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  // #1 answers at once with a hint (a 429), #2 fails plainly, #3 with an error pushback_if
  // names, #4 wins. The hint delays nothing: every attempt starts at 0.
  int calls = 0;
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    switch (++calls) {
    case 1:
      ctx.retry_after(1s);
      throw std::system_error(refused);
    case 2:
      throw std::system_error(make_error_code(std::errc::connection_reset));
    case 3:
      throw std::system_error(make_error_code(std::errc::host_unreachable));
    default:
      co_return 4;
    }
  };
  retry_policy p{.max_attempts = 4};
  p.breaker = gate;
  p.pushback_if = [](const std::error_code& ec) {
    return ec == make_error_code(std::errc::host_unreachable);
  };
  hedge_stats stats;
  const auto start = manual_clock::elapsed();
  const auto r = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 1}, stats);
  CHECK(r.value == 4);
  CHECK(manual_clock::elapsed() == start);
  CHECK(gate->log == std::vector<std::string>{"pushback", "failure", "pushback", "success"});
}

TEST_CASE("each hedge is a retry for the budget") {
  manual_clock::reset();
  asio::io_context io;
  auto budget = std::make_shared<fake_budget>();
  hedged_op op{{hangs(), fails(refused, 20ms), ok(4, 100ms)}};
  retry_policy p{.max_attempts = 3};
  p.budget = budget;
  hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = 50ms, .max_copies = 3}, stats);
  CHECK(r.value == 4);
  CHECK(budget->requests == 1); // one operation
  CHECK(budget->asked == 2);    // two hedges
  CHECK(budget->failures == 1); // #2; #1 was abandoned, which is no outcome
  CHECK(budget->successes == 1);

  SUBCASE("a budget that refuses stops the hedges, not the attempt running") {
    manual_clock::reset();
    auto tight = std::make_shared<fake_budget>();
    tight->grants_left = 0;
    hedged_op op2{{ok(6, 500ms)}};
    p.budget = tight;
    hedge_stats s2;
    const auto r2 = run_hedge(io, op2, p, {.delay = 50ms}, s2);
    CHECK(r2.value == 6);
    CHECK(op2.records.size() == 1);
    CHECK(tight->asked == 1);
  }

  SUBCASE("when nothing runs any more, the refusal is the reason") {
    manual_clock::reset();
    auto tight = std::make_shared<fake_budget>();
    tight->grants_left = 0;
    hedged_op op3{{fails(refused, 10ms)}};
    p.budget = tight;
    hedge_stats s3;
    const auto r3 = run_hedge(io, op3, p, {.delay = 50ms}, s3);
    CHECK(r3.error == refused);
    CHECK(s3.reason == coretry::errc::budget_exhausted);
    CHECK(op3.records.size() == 1);
  }
}

TEST_CASE("attempt timeouts start the next hedge; the deadline ends everything") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  hedged_op op{{hangs()}};
  retry_policy p{.max_attempts = 10, .deadline = 1s, .attempt_timeout = 300ms};
  p.breaker = gate;
  hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = coretry::unlimited, .max_copies = 2}, stats);
  CHECK(r.completions == 1);
  CHECK(r.error == coretry::errc::deadline_exceeded);
  CHECK(stats.reason == coretry::errc::deadline_exceeded);
  // No timed hedges: each timeout starts the next attempt; the deadline cuts the fourth.
  CHECK(op.starts() == std::vector<std::chrono::nanoseconds>{0ms, 300ms, 600ms, 900ms});
  CHECK(stats.elapsed == 1s);
  CHECK(op.each_ended_once());
  CHECK(gate->log == std::vector<std::string>(4, "failure"));
}

TEST_CASE("rejected results are hedged, and the last one is returned when all are") {
  manual_clock::reset();
  asio::io_context io;
  hedged_op op{{ok(503, 10ms), ok(503, 10ms), ok(200, 10ms)}};
  const auto p = retry_policy{.max_attempts = 3}.retry_if_result([](int v) { return v == 503; });
  hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = 1s}, stats);
  CHECK(r.value == 200);
  CHECK(op.starts() == std::vector<std::chrono::nanoseconds>{0ms, 10ms, 20ms});

  SUBCASE("all rejected") {
    manual_clock::reset();
    hedged_op op2{{ok(503, 10ms)}};
    hedge_stats s2;
    const auto r2 = run_hedge(io, op2, p, {.delay = 1s}, s2);
    CHECK_FALSE(r2.error);
    CHECK(r2.value == 503);
    CHECK(s2.reason == coretry::errc::attempts_exhausted);
    CHECK(s2.winner == 3);
  }
}

TEST_CASE("a breaker's refusal after a rejected result and a later failure returns no result") {
  // #1 returns a rejected 503 at 10 ms, #2 fails at 20 ms with a retryable error, then the
  // breaker refuses #3: the operation fails with circuit_open, and the result delivered with it
  // is not #1's (the last attempt did not return it), as curl::retry forgets an older 503.
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  hedged_op op{{ok(503, 10ms), fails(refused, 10ms)}};
  auto p = retry_policy{.max_attempts = 3}.retry_if_result([](int v) { return v == 503; });
  p.breaker = gate;
  hedge_stats stats;
  outcome r;
  coretry::async_hedge<manual_timer>(
      io.get_executor(),
      [&] {
        if (op.records.size() == 1)
          gate->open = true; // #2 is granted; the breaker refuses whatever comes after it
        return op();
      },
      p, {.delay = 1s}, stats, coretry::test::record(r));
  drive(io, [] { return false; });
  CHECK(r.completions == 1);
  CHECK(op.starts() == std::vector<std::chrono::nanoseconds>{0ms, 10ms});
  CHECK(gate->log == std::vector<std::string>{"failure", "failure"});
  CHECK(r.error == coretry::errc::circuit_open);
  CHECK(stats.reason == coretry::errc::circuit_open);
  CHECK(stats.last_error == refused);
  CHECK(r.value == 0);      // not #1's 503
  CHECK(stats.winner == 0); // no attempt's result is delivered
}

TEST_CASE("hedge_async in a coroutine: values, thrown errors, and the as_tuple form") {
  manual_clock::reset();
  asio::io_context io;
  int value = 0;
  std::error_code thrown;
  int tuple_calls = 0;
  std::error_code tuple_error;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        // Named arguments: g++ 12 miscompiles braced temporaries inside co_await expressions.
        retry_policy two;
        two.max_attempts = 2;
        hedge_options fast;
        fast.delay = 50ms;
        hedged_op quick{{ok(1, 500ms), ok(2, 10ms)}};
        value = co_await coretry::hedge_async<manual_timer>([&] { return quick(); }, two, fast);
        hedged_op failing{{fails(refused, 10ms)}};
        try {
          co_await coretry::hedge_async<manual_timer>([&] { return failing(); }, two);
        } catch (const std::system_error& e) {
          thrown = e.code();
        }
        // Errors as values: no exception anywhere.
        retry_policy three;
        three.max_attempts = 3;
        hedge_options slow;
        slow.delay = 1s;
        try {
          co_await coretry::hedge_async<manual_timer>(
              [&]() -> asio::awaitable<std::tuple<std::error_code>> {
                ++tuple_calls;
                co_return std::tuple{tuple_calls < 3 ? refused : std::error_code{}};
              },
              three, slow);
        } catch (const std::system_error& e) {
          tuple_error = e.code();
        }
      },
      [](std::exception_ptr e) {
        if (e)
          std::rethrow_exception(e);
      });
  drive(io, [] { return false; });
  CHECK(value == 2);
  CHECK(thrown == refused);
  CHECK(tuple_calls == 3);
  CHECK_FALSE(tuple_error);
}

TEST_CASE("invalid hedge options are refused at the call") {
  asio::io_context io;
  hedged_op op{{ok(1, 1ms)}};
  CHECK_THROWS_AS(coretry::async_hedge(
                      io.get_executor(), [&] { return op(); }, {}, {.max_copies = 0},
                      [](std::error_code, int) {}),
                  std::invalid_argument);
  CHECK_THROWS_AS(coretry::async_hedge(
                      io.get_executor(), [&] { return op(); }, {}, {.delay = -1ms},
                      [](std::error_code, int) {}),
                  std::invalid_argument);
  CHECK(op.records.empty());
}

TEST_CASE("a thread_pool executor and use_future: the attempts share one strand") {
  // Real time, a few milliseconds of it: the point is the executor.
  asio::thread_pool pool(2);
  auto inside = std::make_shared<std::atomic<int>>(0);
  auto overlapped = std::make_shared<std::atomic<bool>>(false);
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto op = [inside, overlapped, calls]() -> asio::awaitable<int> {
    const int n = ++*calls;
    asio::steady_timer t(co_await asio::this_coro::executor,
                         n == 1 ? std::chrono::milliseconds(2000) : std::chrono::milliseconds(1));
    // Between two awaits an attempt runs alone on the strand: no other attempt may be inside.
    for (int i = 0; i < 2; ++i) {
      if (++*inside != 1)
        *overlapped = true;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      --*inside;
      co_await asio::post(asio::use_awaitable);
    }
    co_await t.async_wait(asio::use_awaitable);
    co_return n;
  };
  std::future<int> f = coretry::async_hedge(pool.get_executor(), op, {.max_attempts = 2},
                                            {.delay = 0ns}, asio::use_future);
  CHECK(f.get() == 2);
  CHECK(*calls == 2);
  CHECK_FALSE(*overlapped);
  pool.join();
}

TEST_CASE("stress: hedged operations on two threads, random outcomes, cancelled from a third") {
  // Real timers, microseconds long. Every operation must complete exactly once, every attempt
  // must end exactly once, and the breaker must hear exactly one outcome per grant.
  struct counting_gate final : coretry::attempt_gate {
    std::atomic<int> granted{0}, reported{0};
    bool try_acquire(std::chrono::nanoseconds) noexcept override {
      ++granted;
      return true;
    }
    void on_success(std::chrono::nanoseconds) noexcept override { ++reported; }
    void on_failure(std::chrono::nanoseconds) noexcept override { ++reported; }
    void on_abandoned(std::chrono::nanoseconds) noexcept override { ++reported; }
  };
  constexpr int operations = 2000;
  asio::io_context io(2);
  auto gate = std::make_shared<counting_gate>();
  auto budget =
      std::make_shared<coretry::ratio_budget>(coretry::ratio_budget_options{.ratio = 0.5});
  coretry::cancellation_source group;
  std::atomic<int> started{0}, ended{0}, completions{0}, aborted{0}, hedges{0};
  std::vector<asio::strand<asio::io_context::executor_type>> strands;
  std::vector<std::unique_ptr<asio::cancellation_signal>> signals;
  std::vector<std::unique_ptr<std::atomic<int>>> done;
  for (int i = 0; i < operations; ++i) {
    strands.push_back(asio::make_strand(io));
    signals.push_back(std::make_unique<asio::cancellation_signal>());
    done.push_back(std::make_unique<std::atomic<int>>(0));
  }
  std::mt19937 seeds(12345);
  auto start = [&](int i) {
    retry_policy p{.max_attempts = 4, .attempt_timeout = 2ms};
    p.breaker = gate;
    p.budget = budget;
    if (i % 3 == 0)
      p.cancellation = group.token();
    auto op = [&, rng = std::make_shared<std::mt19937>(seeds())]() -> asio::awaitable<int> {
      ++started;
      struct end_once {
        std::atomic<int>& n;
        ~end_once() { ++n; }
      } guard{ended};
      const auto r = (*rng)();
      asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::microseconds(r % 3000));
      co_await t.async_wait(asio::use_awaitable);
      if (r % 4 == 0)
        throw std::system_error(refused);
      co_return static_cast<int>(r % 100);
    };
    hedge_options h{.delay = 200us, .max_copies = 3};
    h.on_hedge = [&](const coretry::hedge_event&) { ++hedges; };
    const auto k = static_cast<std::size_t>(i);
    coretry::async_hedge(
        strands[k], op, p, h,
        asio::bind_cancellation_slot(signals[k]->slot(), [&, k](std::error_code ec, int) {
          ++*done[k];
          ++completions;
          if (ec == coretry::test::operation_aborted)
            ++aborted;
        }));
  };
  auto work = asio::make_work_guard(io);
  std::thread t1([&] { io.run(); });
  std::thread t2([&] { io.run(); });
  // This thread starts the operations in waves while the two others run them, and cancels
  // some already started: each through a post to the strand its owner runs on (a cancellation
  // slot is not thread-safe), and a third of them through the group source, half-way.
  std::mt19937 pick(777);
  for (int i = 0; i < operations; ++i) {
    start(i);
    if (i % 4 == 3) {
      const auto k = static_cast<std::size_t>(pick() % static_cast<unsigned>(i + 1));
      asio::post(strands[k],
                 [&signals, k] { signals[k]->emit(asio::cancellation_type::terminal); });
    }
    if (i == operations / 2)
      group.cancel();
    if (i % 50 == 49)
      std::this_thread::sleep_for(std::chrono::microseconds(pick() % 1000));
  }
  work.reset();
  t1.join();
  t2.join();
  CHECK(completions == operations);
  for (const auto& d : done)
    CHECK(*d == 1);
  CHECK(started == ended);
  CHECK(gate->granted == gate->reported);
  CHECK(aborted > 0);
  CHECK(hedges > 0);
  CHECK(started <= operations + hedges); // every attempt but the first of each is a hedge
  MESSAGE("attempts: ", started.load(), ", hedges: ", hedges.load(),
          ", aborted operations: ", aborted.load());
}
