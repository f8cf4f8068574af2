// SPDX-License-Identifier: BSL-1.0
#include <coretry/http.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

/// Spawns `a`, drives the manual clock until it completes, and returns its outcome.
template <class T> struct outcome {
  std::optional<T> value;
  std::error_code error;
  int completions = 0;
};

template <class T> outcome<T> run_on_manual_clock(asio::io_context& io, asio::awaitable<T> a) {
  outcome<T> out;
  asio::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
    ++out.completions;
    if (!e)
      out.value = std::move(v);
    else
      try {
        std::rethrow_exception(e);
      } catch (const std::system_error& se) {
        out.error = se.code();
      }
  });
  REQUIRE(drive(io, [&] { return out.completions > 0; }));
  io.restart();
  io.poll();
  return out;
}

retry_policy no_jitter(unsigned attempts, std::chrono::nanoseconds initial = 100ms) {
  return {.max_attempts = attempts, .backoff = coretry::backoff::exponential(initial, 2.0, 1s)};
}

} // namespace

TEST_CASE("succeeds after N failures with exactly N+1 calls, sleeping the backoff between them") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), fail(refused), fail(refused), succeed(7)}};
  std::vector<coretry::retry_event> events;
  auto policy = no_jitter(5);
  policy.on_retry = [&](const coretry::retry_event& e) { events.push_back(e); };
  coretry::retry_stats stats;
  auto out = run_on_manual_clock(
      io, coretry::retry_async<manual_timer>([&] { return op(); }, policy, stats));
  CHECK(out.value == 7);
  CHECK(out.completions == 1);
  CHECK(op.calls == 4);
  CHECK(op.started == std::vector<manual_clock::duration>{0ms, 100ms, 300ms, 700ms});
  REQUIRE(events.size() == 3);
  CHECK(events[0].attempt == 1);
  CHECK(events[0].delay == 100ms);
  CHECK(events[2].attempt == 3);
  CHECK(events[2].delay == 400ms);
  CHECK(events[1].error == refused);
  CHECK(stats.attempts == 4);
  CHECK(stats.slept == 700ms);
  CHECK(stats.elapsed == 700ms);
  CHECK_FALSE(stats.reason);
  CHECK_FALSE(stats.last_error);
}

TEST_CASE("stops at max attempts and reports the last attempt's error") {
  manual_clock::reset();
  asio::io_context io;
  const auto reset = make_error_code(std::errc::connection_reset);
  scripted_op op{{fail(refused), fail(refused), fail(reset)}};
  coretry::retry_stats stats;
  auto out = run_on_manual_clock(
      io, coretry::retry_async<manual_timer>([&] { return op(); }, no_jitter(3), stats));
  CHECK_FALSE(out.value);
  CHECK(out.error == reset);
  CHECK(op.calls == 3);
  CHECK(stats.reason == coretry::errc::attempts_exhausted);
  CHECK(stats.last_error == reset);
  CHECK(manual_clock::elapsed() == 300ms); // no sleep after the last attempt
}

TEST_CASE("final_error::policy_reason reports what the policy decided") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused)}};
  auto policy = no_jitter(2);
  policy.report = coretry::final_error::policy_reason;
  auto out =
      run_on_manual_clock(io, coretry::retry_async<manual_timer>([&] { return op(); }, policy));
  CHECK(out.error == coretry::errc::attempts_exhausted);
  CHECK(op.calls == 2);
}

TEST_CASE("a predicate stops at once on a permanent error") {
  manual_clock::reset();
  asio::io_context io;
  const auto denied = make_error_code(std::errc::permission_denied);
  scripted_op op{{fail(refused), fail(denied), succeed(1)}};
  auto policy = no_jitter(5);
  policy.retry_if = [&](const std::error_code& ec) { return ec != denied; };
  coretry::retry_stats stats;
  auto out = run_on_manual_clock(
      io, coretry::retry_async<manual_timer>([&] { return op(); }, policy, stats));
  CHECK(out.error == denied);
  CHECK(op.calls == 2);
  CHECK(stats.reason == denied);
}

TEST_CASE("the deadline is respected: no sleep is scheduled that ends past it") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused)}};
  retry_policy policy{
      .max_attempts = 100, .deadline = 250ms, .backoff = coretry::backoff::fixed(100ms)};
  std::vector<coretry::retry_event> events;
  policy.on_retry = [&](const coretry::retry_event& e) { events.push_back(e); };
  coretry::retry_stats stats;
  auto out = run_on_manual_clock(
      io, coretry::retry_async<manual_timer>([&] { return op(); }, policy, stats));
  // A deadline always reports itself, whatever `report` says; the attempt's error is kept.
  CHECK(out.error == coretry::errc::deadline_exceeded);
  CHECK(stats.reason == coretry::errc::deadline_exceeded);
  CHECK(stats.last_error == refused);
  CHECK(op.started == std::vector<manual_clock::duration>{0ms, 100ms, 200ms});
  CHECK(events.size() == 2);
  CHECK(manual_clock::elapsed() == 200ms); // gave up instead of sleeping to 300 ms
}

TEST_CASE("the deadline cancels an attempt still running when it passes") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), hang()}};
  retry_policy policy{
      .max_attempts = 10, .deadline = 1s, .backoff = coretry::backoff::fixed(100ms)};
  coretry::retry_stats stats;
  auto out = run_on_manual_clock(
      io, coretry::retry_async<manual_timer>([&] { return op(); }, policy, stats));
  CHECK(out.error == coretry::errc::deadline_exceeded);
  CHECK(stats.reason == coretry::errc::deadline_exceeded);
  CHECK(op.calls == 2);
  CHECK(op.aborted == 1);
  CHECK(manual_clock::elapsed() == 1s);
  CHECK(manual_clock::pending() == 0);
}

TEST_CASE("a per-attempt timeout cancels a hanging attempt and is retried") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{hang(), hang(), succeed(3, 5ms)}};
  auto policy = no_jitter(5, 10ms);
  policy.attempt_timeout = 50ms;
  std::vector<coretry::retry_event> events;
  policy.on_retry = [&](const coretry::retry_event& e) { events.push_back(e); };
  auto out =
      run_on_manual_clock(io, coretry::retry_async<manual_timer>([&] { return op(); }, policy));
  CHECK(out.value == 3);
  CHECK(op.calls == 3);
  CHECK(op.aborted == 2);
  REQUIRE(events.size() == 2);
  CHECK(events[0].error == coretry::errc::attempt_timeout);
  CHECK(op.started == std::vector<manual_clock::duration>{0ms, 60ms, 130ms});
  CHECK(manual_clock::elapsed() == 135ms);
}

TEST_CASE("an attempt that fails before its timeout reports its error at once") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused, 5ms), succeed(1)}};
  auto policy = no_jitter(3, 10ms);
  policy.attempt_timeout = 10s;
  std::vector<manual_clock::duration> seen_at;
  policy.on_retry = [&](const coretry::retry_event& e) {
    CHECK(e.error == refused);
    seen_at.push_back(manual_clock::elapsed());
  };
  auto out =
      run_on_manual_clock(io, coretry::retry_async<manual_timer>([&] { return op(); }, policy));
  CHECK(out.value == 1);
  CHECK(seen_at == std::vector<manual_clock::duration>{5ms}); // not 10 s later
  CHECK(manual_clock::elapsed() == 15ms);
}

TEST_CASE("the attempt timeout is retryable even when the predicate does not mention it") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{hang(), fail(refused)}};
  auto policy = no_jitter(2, 1ms);
  policy.attempt_timeout = 1s;
  policy.retry_if = [](const std::error_code& ec) { return ec == refused; };
  coretry::retry_stats stats;
  auto out = run_on_manual_clock(
      io, coretry::retry_async<manual_timer>([&] { return op(); }, policy, stats));
  CHECK(out.error == refused);
  CHECK(stats.reason == coretry::errc::attempts_exhausted);
}

TEST_CASE("a result predicate retries a bad value and returns the last one when it gives up") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{succeed(503), succeed(503), succeed(200)}};
  std::vector<std::error_code> errors;
  auto policy = no_jitter(5, 1ms);
  policy.on_retry = [&](const coretry::retry_event& e) { errors.push_back(e.error); };
  auto out = run_on_manual_clock(
      io, coretry::retry_async<manual_timer>(
              [&] { return op(); }, policy.retry_if_result([](int s) { return s >= 500; })));
  CHECK(out.value == 200);
  CHECK(op.calls == 3);
  CHECK(errors == std::vector<std::error_code>(2, coretry::errc::result_rejected));

  manual_clock::reset();
  scripted_op always{{succeed(503)}};
  coretry::retry_stats stats;
  auto last = run_on_manual_clock(
      io, coretry::retry_async<manual_timer>(
              [&] { return always(); },
              no_jitter(3, 1ms).retry_if_result([](int s) { return s == 503; }), stats));
  CHECK(last.value == 503);
  CHECK_FALSE(last.error);
  CHECK(always.calls == 3);
  CHECK(stats.reason == coretry::errc::attempts_exhausted);
  CHECK(stats.last_error == coretry::errc::result_rejected);
}

TEST_CASE("a server hint raises the next delay, beyond the backoff's cap, up to max_retry_after") {
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    CHECK(ctx.number() == static_cast<unsigned>(++calls));
    if (calls == 1)
      ctx.retry_after(300ms); // above the 10 ms backoff: honoured
    if (calls == 2)
      ctx.retry_after(3s); // above the backoff's 1 s cap, within max_retry_after: honoured
    if (calls < 3)
      throw std::system_error(refused);
    co_return calls;
  };
  std::vector<coretry::retry_event> events;
  auto policy = no_jitter(3, 10ms);
  policy.max_retry_after = 5s;
  policy.on_retry = [&](const coretry::retry_event& e) { events.push_back(e); };
  auto out = run_on_manual_clock(io, coretry::retry_async<manual_timer>(op, policy));
  CHECK(out.value == 3);
  REQUIRE(events.size() == 2);
  CHECK(events[0].delay == 300ms);
  CHECK(events[0].server_hint == 300ms);
  CHECK(events[1].delay == 3s);
  CHECK(manual_clock::elapsed() == 3300ms);
}

// Before: the budget was asked for every retry, so a ratio budget refused the retries a
// rate-limiting server had invited with 429 and Retry-After, and the request failed (the storm
// lab's 429 shape: `safe` failed a tenth of its requests). A 503 with Retry-After stays within
// the budget (reviewer r11: exempting every hint let an overloaded upstream's retries run
// unbounded).
TEST_CASE("a retry a rate limiter invited is not asked of a ratio budget unless it limits those") {
  auto run = [](bool hinted, bool limit, int status = 429) {
    manual_clock::reset();
    asio::io_context io;
    int calls = 0;
    auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
      if (++calls < 3) {
        ctx.health_code(coretry::http::make_status_error(status));
        if (hinted)
          ctx.retry_after(100ms);
        throw std::system_error(refused);
      }
      co_return calls;
    };
    // No retry to spare: no share of requests, no reserve.
    auto budget = std::make_shared<coretry::ratio_budget>(coretry::ratio_budget_options{
        .ratio = 0, .min_retries_per_second = 0, .limit_scheduled_retries = limit});
    auto policy = no_jitter(5, 10ms);
    policy.budget = budget;
    coretry::retry_stats stats;
    auto out = run_on_manual_clock(io, coretry::retry_async<manual_timer>(op, policy, stats));
    return std::tuple{out, stats, budget->refused(), budget->granted(), calls};
  };
  {
    [[maybe_unused]] auto [out, stats, refused_n, granted_n, calls] = run(true, false);
    CHECK(out.value == 3);
    CHECK(calls == 3);
    CHECK(refused_n == 0);
    CHECK(granted_n == 0); // never asked, so nothing granted
    CHECK(manual_clock::elapsed() == 200ms);
  }
  {
    [[maybe_unused]] auto [out, stats, refused_n, granted_n, calls] = run(true, false, 503);
    CHECK(stats.reason == coretry::errc::budget_exhausted);
    CHECK(calls == 1);
    CHECK(refused_n == 1);
  }
  {
    [[maybe_unused]] auto [out, stats, refused_n, granted_n, calls] = run(true, true);
    CHECK(out.error == refused);
    CHECK(stats.reason == coretry::errc::budget_exhausted);
    CHECK(calls == 1);
    CHECK(refused_n == 1);
  }
  {
    [[maybe_unused]] auto [out, stats, refused_n, granted_n, calls] = run(false, false);
    CHECK(stats.reason == coretry::errc::budget_exhausted);
    CHECK(calls == 1);
    CHECK(refused_n == 1);
  }
  CHECK_FALSE(coretry::ratio_budget().limits_scheduled_retries());
  CHECK(coretry::token_bucket_budget().limits_scheduled_retries()); // gRFC A6 throttles them
}

TEST_CASE("a server hint above max_retry_after ends the operation at once, saying so") {
  manual_clock::reset();
  asio::io_context io;
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    ctx.retry_after(61s);
    throw std::system_error(refused);
    co_return 0;
  };
  for (auto report : {coretry::final_error::last_error, coretry::final_error::policy_reason}) {
    auto policy = no_jitter(5, 10ms);
    policy.report = report;
    coretry::retry_stats stats;
    auto out = run_on_manual_clock(io, coretry::retry_async<manual_timer>(op, policy, stats));
    CHECK(stats.reason == coretry::errc::retry_after_too_long);
    CHECK(stats.attempts == 1);
    CHECK(out.error == (report == coretry::final_error::last_error
                            ? refused
                            : std::error_code(coretry::errc::retry_after_too_long)));
    CHECK(manual_clock::elapsed() == 0ms);
  }
}

TEST_CASE("a server hint past the deadline ends the operation at once, saying so") {
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    ctx.retry_after(5s);
    throw std::system_error(refused);
    co_return 0;
  };
  for (auto report : {coretry::final_error::last_error, coretry::final_error::policy_reason}) {
    manual_clock::reset();
    asio::io_context io;
    auto policy = retry_policy{.max_attempts = 5,
                               .deadline = 2s,
                               .backoff = coretry::backoff::exponential(10ms, 2, 10s),
                               .report = report};
    coretry::retry_stats stats;
    auto out = run_on_manual_clock(io, coretry::retry_async<manual_timer>(op, policy, stats));
    CHECK(out.error == (report == coretry::final_error::last_error
                            ? refused
                            : std::error_code(coretry::errc::retry_after_past_deadline)));
    CHECK(stats.reason == coretry::errc::retry_after_past_deadline);
    CHECK(stats.last_error == refused);
    CHECK(stats.attempts == 1);
    CHECK(manual_clock::elapsed() == 0ms);
  }
}

TEST_CASE("a backoff delay past the deadline is the deadline's doing, not the server's") {
  manual_clock::reset();
  asio::io_context io;
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    ctx.retry_after(1s); // within the deadline; the 5 s backoff is not
    throw std::system_error(refused);
    co_return 0;
  };
  auto policy =
      retry_policy{.max_attempts = 5, .deadline = 2s, .backoff = coretry::backoff::fixed(5s)};
  coretry::retry_stats stats;
  auto out = run_on_manual_clock(io, coretry::retry_async<manual_timer>(op, policy, stats));
  CHECK(out.error == coretry::errc::deadline_exceeded);
  CHECK(stats.reason == coretry::errc::deadline_exceeded);
  CHECK(stats.attempts == 1);
}

TEST_CASE("a shared budget stops retries once exhausted") {
  manual_clock::reset();
  asio::io_context io;
  auto budget = std::make_shared<coretry::token_bucket_budget>(4, 1);
  scripted_op op{{fail(refused)}};
  auto policy = no_jitter(10, 1ms);
  policy.budget = budget;
  coretry::retry_stats stats;
  auto out = run_on_manual_clock(
      io, coretry::retry_async<manual_timer>([&] { return op(); }, policy, stats));
  CHECK(out.error == refused);
  CHECK(stats.reason == coretry::errc::budget_exhausted);
  CHECK(op.calls == 2); // 4 tokens: one failure leaves 3 (> 2), the second leaves 2 (not > 2)
}

TEST_CASE("void and move-only results are supported") {
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto void_op = [&]() -> asio::awaitable<void> {
    if (++calls < 2)
      throw std::system_error(refused);
    co_return;
  };
  bool done = false;
  asio::co_spawn(io, coretry::retry_async<manual_timer>(void_op, no_jitter(3, 1ms)),
                 [&](std::exception_ptr e) { done = !e; });
  REQUIRE(drive(io, [&] { return done; }));
  CHECK(calls == 2);

  auto unique_op = [&]() -> asio::awaitable<std::unique_ptr<int>> {
    if (++calls < 4)
      throw std::system_error(refused);
    co_return std::make_unique<int>(calls);
  };
  auto out = run_on_manual_clock(
      io, coretry::retry_async<manual_timer>(
              unique_op, no_jitter(3, 1ms).retry_if_result(
                             [](const std::unique_ptr<int>& p) { return p == nullptr; })));
  REQUIRE(out.value);
  CHECK(**out.value == 4);
}

TEST_CASE("exceptions other than system_error are not retried and propagate unchanged") {
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> {
    ++calls;
    throw std::logic_error("bug");
    co_return 0;
  };
  std::string what;
  asio::co_spawn(io, coretry::retry_async<manual_timer>(op, no_jitter(5)),
                 [&](std::exception_ptr e, int) {
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::logic_error& le) {
                     what = le.what();
                   }
                 });
  REQUIRE(drive(io, [&] { return !what.empty(); }));
  CHECK(what == "bug");
  CHECK(calls == 1);
}

TEST_CASE("an invalid policy throws at the call, before anything starts") {
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> {
    ++calls;
    co_return 1;
  };
  CHECK_THROWS_AS((void)coretry::retry_async(op, retry_policy{.max_attempts = 0}),
                  std::invalid_argument);
  asio::io_context io;
  CHECK_THROWS_AS(coretry::async_retry(io.get_executor(), op, retry_policy{.deadline = -1s},
                                       [](std::error_code, int) {}),
                  std::invalid_argument);
  CHECK(io.poll() == 0);
  CHECK(calls == 0);
}

TEST_CASE("async_retry works with callbacks, as_tuple and use_future") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), succeed(9)}};
  std::error_code ec;
  int value = 0;
  int completions = 0;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, no_jitter(3, 1ms),
      [&](std::error_code e, int v) {
        ec = e;
        value = v;
        ++completions;
      });
  REQUIRE(drive(io, [&] { return completions > 0; }));
  CHECK_FALSE(ec);
  CHECK(value == 9);

  scripted_op failing{{fail(refused)}};
  completions = 0;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return failing(); }, no_jitter(2, 1ms),
      [&](std::error_code e, int) {
        ec = e;
        ++completions;
      });
  REQUIRE(drive(io, [&] { return completions > 0; }));
  CHECK(ec == refused);
  CHECK(completions == 1);

  // as_tuple(use_awaitable): no exception, the error comes back as a value.
  scripted_op in_coro{{fail(refused)}};
  std::error_code tuple_ec;
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        auto [e, v] = co_await coretry::async_retry<manual_timer>(
            ex, [&] { return in_coro(); }, no_jitter(2, 1ms),
            coretry::detail::as_tuple(asio::use_awaitable));
        tuple_ec = e;
        CHECK(v == 0);
      },
      [&](std::exception_ptr) { done = true; });
  REQUIRE(drive(io, [&] { return done; }));
  CHECK(tuple_ec == refused);

  // use_future, with the io_context run by another thread on real time.
  asio::io_context real;
  auto guard = asio::make_work_guard(real);
  std::thread runner([&] { real.run(); });
  int calls = 0;
  auto fut = coretry::async_retry(
      real.get_executor(),
      [&]() -> asio::awaitable<int> {
        if (++calls < 3)
          throw std::system_error(refused);
        co_return 5;
      },
      retry_policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms)}, asio::use_future);
  CHECK(fut.get() == 5);
  // The failure through use_future(fn), which delivers the code as a value: an exception_ptr
  // set on Asio's system thread and read here would race in TSan's eyes only (libstdc++'s
  // exception refcount is not instrumented).
  auto failed = coretry::async_retry(
      real.get_executor(),
      []() -> asio::awaitable<void> {
        throw std::system_error(refused);
        co_return;
      },
      retry_policy{.max_attempts = 1}, asio::use_future([](std::error_code e) { return e; }));
  CHECK(failed.get() == refused);
  guard.reset();
  runner.join();
}
