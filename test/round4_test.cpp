// SPDX-License-Identifier: BSL-1.0
// Regression tests for the core findings of review round four (issue 32: 12 to 17 and 21; 15 and
// 18 are in deadline_queue_test.cpp, 20 in test/package/braced_policy.cpp). Each failed before
// its fix.
#include <coretry/breaker.hpp>
#include <coretry/cancellation.hpp>
#include <coretry/hedge.hpp>
#include <coretry/presets.hpp>
#include <coretry/registry.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

/// Counts the events a finding is about.
struct counting_observer : coretry::retry_observer {
  std::atomic<int> refusals{0};
  std::atomic<int> attempts_started{0};
  std::atomic<int> attempts_finished{0};
  std::error_code last_refusal;
  coretry::cancellation_source* cancel_on_attempt = nullptr;
  void on_attempt_started(const coretry::attempt_started_event&) override {
    ++attempts_started;
    if (cancel_on_attempt)
      cancel_on_attempt->cancel();
  }
  void on_attempt_finished(const coretry::attempt_finished_event&) override { ++attempts_finished; }
  void on_refused(const coretry::refusal_event& e) override {
    ++refusals;
    last_refusal = e.reason;
  }
};

} // namespace

// --- Finding 14: a cancellation arriving inline just before an attempt starts ----------------

TEST_CASE("a group cancellation from the observer's attempt_started stops the attempt before "
          "it is sent") {
  manual_clock::reset();
  asio::io_context io;
  coretry::cancellation_source source;
  auto obs = std::make_shared<counting_observer>();
  obs->cancel_on_attempt = &source;
  scripted_op op{{succeed(7)}};
  retry_policy p{.max_attempts = 3, .cancellation = source.token(), .observer = obs};
  coretry::retry_stats stats;
  const auto out = run_retry(io, op, p, stats, drive_until::idle);
  CHECK(out.completions == 1);
  CHECK(coretry::detail::is_aborted(out.error));
  CHECK(op.calls == 0); // never sent
  CHECK(obs->attempts_started == 1);
  CHECK(obs->attempts_finished == 1); // its end is heard, as abandoned
}

TEST_CASE("a token attempt whose initiating function emits the caller's slot is cancelled") {
  // The attempt emits the caller's signal before it starts its timer wait (which connects to
  // the attempt's slot): the operation must still end cancelled, not deliver the wait's success.
  manual_clock::reset();
  asio::io_context io;
  asio::cancellation_signal caller;
  auto timer = std::make_shared<manual_timer>(io.get_executor());
  int calls = 0;
  auto op = [&](auto&& token) {
    ++calls;
    caller.emit(asio::cancellation_type::terminal);
    timer->expires_after(1s);
    return timer->async_wait(std::forward<decltype(token)>(token));
  };
  int completions = 0;
  std::error_code error;
  coretry::async_retry<manual_timer>(
      io.get_executor(), op, retry_policy{.max_attempts = 3},
      asio::bind_cancellation_slot(caller.slot(), [&](std::error_code ec) {
        ++completions;
        error = ec;
      }));
  drive(io, [] { return false; });
  CHECK(completions == 1);
  CHECK(coretry::detail::is_aborted(error));
  CHECK(calls == 1);
  CHECK(manual_clock::elapsed() < 1s); // the wait was cancelled, not run out
}

// --- Finding 16: a deadline reached before an attempt can start is no refusal ----------------

TEST_CASE("a deadline reached before the first attempt ends the operation without a refusal") {
  manual_clock::reset();
  asio::io_context io;
  auto obs = std::make_shared<counting_observer>();
  scripted_op op{{succeed(1)}};
  const retry_policy p{.max_attempts = 3, .deadline = 10ms, .observer = obs};
  SUBCASE("retry") {
    coretry::retry_stats stats;
    outcome o;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, p, stats, record(o));
    manual_clock::advance(20ms); // a busy executor: the operation first runs after its deadline
    drive(io, [&] { return o.completions > 0; });
    CHECK(o.error == coretry::errc::deadline_exceeded);
    CHECK(stats.reason == coretry::errc::deadline_exceeded);
  }
  SUBCASE("hedge") {
    coretry::hedge_stats stats;
    outcome o;
    coretry::async_hedge<manual_timer>(
        io.get_executor(), [&] { return op(); }, p, coretry::hedge_options{}, stats, record(o));
    manual_clock::advance(20ms);
    drive(io, [] { return false; });
    CHECK(o.completions == 1);
    CHECK(o.error == coretry::errc::deadline_exceeded);
  }
  CHECK(op.calls == 0);
  CHECK(obs->refusals == 0);
}

// --- Finding 17: an operator's reset closes through the ramp ---------------------------------

TEST_CASE("circuit_breaker::reset after an isolation starts the ramp afresh") {
  coretry::circuit_breaker b(coretry::circuit_breaker_options{.ramp = 10s, .seed = 3});
  const auto t0 = std::chrono::nanoseconds(100s);
  b.isolate(t0);
  b.reset(t0 + 1h); // long after any earlier closing: an old ramp would be over
  int admitted = 0;
  for (int i = 0; i < 1000; ++i)
    if (b.try_acquire(t0 + 1h + 1s)) { // 10 % into the ramp
      ++admitted;
      b.on_success(t0 + 1h + 1s);
    }
  CHECK(admitted > 0);
  CHECK(admitted < 300); // about 100 of 1000, not all
  // A closed breaker's reset keeps its ramp: at its end, everything passes.
  b.reset(t0 + 1h + 20s);
  for (int i = 0; i < 100; ++i)
    CHECK(b.try_acquire(t0 + 1h + 20s));
}

// --- Finding 21: the presets fail fast on their own ------------------------------------------

TEST_CASE("presets::overload_safe against an upstream that always fails gives up within its "
          "deadline") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(make_error_code(std::errc::connection_refused), 10ms)}};
  retry_policy p = coretry::presets::overload_safe();
  CHECK(p.deadline == 10s);
  CHECK(p.backoff.max_delay() <= 1s); // no sleep outlasts the break
  coretry::retry_stats stats;
  const auto out = run_retry(io, op, p, stats);
  CHECK(out.completions == 1);
  CHECK(out.error);
  CHECK(out.at <= 10s);
}

TEST_CASE("presets::overload_safe_per_endpoint refuses to run without a registry") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{succeed(1)}};
  retry_policy p = coretry::presets::overload_safe_per_endpoint();
  coretry::retry_stats stats;
  std::string what;
  try {
    (void)run_retry(io, op, p, stats);
  } catch (const std::invalid_argument& e) {
    what = e.what();
  }
  CHECK(what.find("breaker") != std::string::npos);
  CHECK(what.find("endpoint_registry") != std::string::npos);
  CHECK(op.calls == 0);

  // With a registry, the endpoint's own breaker and budget take the placeholder's place.
  coretry::endpoint_registry registry(coretry::presets::overload_safe_registry());
  registry.apply(p, coretry::endpoint{"tcp", "db.internal", 5432});
  REQUIRE(p.breaker);
  CHECK(dynamic_cast<coretry::circuit_breaker*>(p.breaker.get()) != nullptr);
  CHECK(p.budget);
  const auto out = run_retry(io, op, p, stats);
  CHECK(out.error == std::error_code{});
  CHECK(out.value == 1);
}

// --- Findings 12 and 13: async_hedge's completion and its handler's executor -----------------

TEST_CASE("async_hedge keeps its handler's executor busy until it completes") {
  asio::io_context ops(1);
  asio::io_context handlers(1);
  std::atomic<int> completions{0};
  auto slow = []() -> asio::awaitable<int> {
    asio::steady_timer t(co_await asio::this_coro::executor, 50ms);
    co_await t.async_wait(asio::use_awaitable);
    co_return 5;
  };
  coretry::async_hedge(ops.get_executor(), slow, retry_policy{.max_attempts = 2},
                       coretry::hedge_options{.delay = 1s},
                       asio::bind_executor(handlers.get_executor(), [&](std::error_code ec, int v) {
                         CHECK_FALSE(ec);
                         CHECK(v == 5);
                         ++completions;
                       }));
  std::thread runner([&] { ops.run(); });
  handlers.run(); // returns only once the handler has run there
  runner.join();
  CHECK(completions == 1);
}

TEST_CASE("async_hedge clears the caller's slot on the handler's executor, where it emits") {
  // Under TSan: the caller emits from its own thread while operations complete on another; the
  // slot was cleared on the operation's strand (a data race with the emit).
  asio::io_context ops(2);
  asio::io_context caller(1);
  auto ops_work = asio::make_work_guard(ops);
  std::vector<std::thread> runners;
  for (int i = 0; i < 2; ++i)
    runners.emplace_back([&] { ops.run(); });
  constexpr int n = 200;
  std::atomic<int> completions{0};
  auto quick = []() -> asio::awaitable<int> { co_return 1; };
  asio::post(caller, [&] {
    std::mt19937 gen(12);
    for (int i = 0; i < n; ++i) {
      auto signal = std::make_shared<asio::cancellation_signal>();
      coretry::async_hedge(
          ops.get_executor(), quick, retry_policy{.max_attempts = 2},
          coretry::hedge_options{.delay = 1ms},
          asio::bind_cancellation_slot(
              signal->slot(), asio::bind_executor(caller.get_executor(),
                                                  [&completions, signal](std::error_code, int) {
                                                    ++completions;
                                                  })));
      auto t = std::make_shared<asio::steady_timer>(caller, std::chrono::microseconds(gen() % 200));
      t->async_wait(
          [t, signal](std::error_code) { signal->emit(asio::cancellation_type::terminal); });
    }
  });
  caller.run();
  ops_work.reset();
  for (auto& r : runners)
    r.join();
  CHECK(completions == n);
}

TEST_CASE("async_hedge takes a shared_policy, as async_retry does") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), succeed(4)}};
  const coretry::shared_policy shared{retry_policy{.max_attempts = 3}};
  coretry::hedge_stats stats;
  outcome o;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); }, shared, coretry::hedge_options{.delay = 10ms}, stats,
      record(o));
  drive(io, [] { return false; });
  CHECK(o.completions == 1);
  CHECK_FALSE(o.error);
  CHECK(o.value == 4);
  coretry::shared_policy moved{retry_policy{}};
  const coretry::shared_policy taken = std::move(moved);
  CHECK_THROWS_AS(coretry::async_hedge(
                      io.get_executor(), [&] { return op(); }, moved, coretry::hedge_options{},
                      [](std::error_code, int) {}),
                  std::invalid_argument);
}

TEST_CASE("async_retry and async_hedge take a handler bound to an io_context::strand") {
  // An older-style executor has no outstanding_work property: its work is an executor_work_guard.
  asio::io_context io;
  asio::io_context::strand legacy(io);
  int completions = 0;
  auto quick = []() -> asio::awaitable<int> { co_return 3; };
  coretry::async_retry(io.get_executor(), quick, retry_policy{.max_attempts = 2},
                       asio::bind_executor(legacy, [&](std::error_code ec, int v) {
                         CHECK_FALSE(ec);
                         CHECK(v == 3);
                         ++completions;
                       }));
  coretry::async_hedge(io.get_executor(), quick, retry_policy{.max_attempts = 2},
                       coretry::hedge_options{},
                       asio::bind_executor(legacy, [&](std::error_code ec, int v) {
                         CHECK_FALSE(ec);
                         CHECK(v == 3);
                         ++completions;
                       }));
  io.run();
  CHECK(completions == 2);
}

TEST_CASE("the hedge takes a type derived from retry_policy, as its 0.2 by-value parameter did") {
  struct named_policy : retry_policy {};
  named_policy p;
  p.max_attempts = 2;
  asio::io_context io;
  int completions = 0;
  auto quick = []() -> asio::awaitable<int> { co_return 5; };
  coretry::async_hedge(io.get_executor(), quick, p, coretry::hedge_options{},
                       [&](std::error_code ec, int v) {
                         CHECK_FALSE(ec);
                         CHECK(v == 5);
                         ++completions;
                       });
  io.run();
  CHECK(completions == 1);
}
