// SPDX-License-Identifier: BSL-1.0
// The loop's decisions on their own (no coroutine, no timer), and the API's former traps.

#include <coretry/detail/schedule.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::errc;
using coretry::retry_policy;
using coretry::detail::attempt_end;
using coretry::detail::schedule;

namespace {

struct counting_budget final : coretry::retry_budget {
  int requests = 0, successes = 0, failures = 0, asked = 0;
  bool grant = true;
  bool limits = true;
  bool limits_scheduled_retries() const noexcept override { return limits; }
  void on_request(std::chrono::nanoseconds) noexcept override { ++requests; }
  void on_success(std::chrono::nanoseconds) noexcept override { ++successes; }
  void on_failure(std::chrono::nanoseconds) noexcept override { ++failures; }
  bool try_retry(std::chrono::nanoseconds) noexcept override {
    ++asked;
    return grant;
  }
};

retry_policy fixed_policy(unsigned attempts, std::chrono::nanoseconds delay) {
  return {.max_attempts = attempts, .backoff = coretry::backoff::fixed(delay)};
}

} // namespace

TEST_CASE("the schedule sleeps the backoff until the attempts run out") {
  const auto p = fixed_policy(3, 100ms);
  schedule s(p, 0ns);
  REQUIRE_FALSE(s.begin_attempt(0ns));
  auto v = s.after_failure({refused}, 0ns);
  CHECK_FALSE(v.stop);
  CHECK(v.delay == 100ms);
  REQUIRE_FALSE(s.begin_attempt(100ms));
  CHECK(s.after_failure({refused}, 100ms).delay == 100ms);
  REQUIRE_FALSE(s.begin_attempt(200ms));
  v = s.after_failure({refused}, 200ms);
  CHECK(v.stop == errc::attempts_exhausted);
  CHECK(v.report == refused); // final_error::last_error
  CHECK(s.attempts() == 3);
}

TEST_CASE("the schedule stops at once on a permanent error and on cancellation") {
  auto p = fixed_policy(5, 1ms);
  p.retry_if = [](const std::error_code& ec) { return ec != std::errc::permission_denied; };
  schedule s(p, 0ns);
  REQUIRE_FALSE(s.begin_attempt(0ns));
  const auto denied = make_error_code(std::errc::permission_denied);
  auto v = s.after_failure({denied}, 0ns);
  CHECK(v.stop == denied);
  CHECK(v.report == denied);
  // A predicate that would retry cancellation is overruled.
  p.retry_if = [](const std::error_code&) { return true; };
  schedule s2(p, 0ns);
  REQUIRE_FALSE(s2.begin_attempt(0ns));
  CHECK(s2.after_failure({coretry::test::operation_aborted}, 0ns).stop ==
        coretry::test::operation_aborted);
}

TEST_CASE("a deadline already passed starts no attempt, counts none and charges nothing") {
  auto budget = std::make_shared<counting_budget>();
  auto p = fixed_policy(5, 10ms);
  p.deadline = 100ms;
  p.budget = budget;
  schedule s(p, 0ns);
  REQUIRE_FALSE(s.begin_attempt(0ns));
  CHECK_FALSE(s.after_failure({refused}, 50ms).stop);
  CHECK(s.begin_attempt(100ms) == errc::deadline_exceeded);
  CHECK(s.attempts() == 1);
  CHECK(budget->asked == 1); // the one retry granted before, nothing for the refused start
  const auto v = s.stop(errc::deadline_exceeded, refused);
  CHECK(v.report == errc::deadline_exceeded); // a deadline always reports itself
}

TEST_CASE("a sleep that would end at or past the deadline stops the loop instead") {
  auto p = fixed_policy(5, 60ms);
  p.deadline = 100ms;
  schedule s(p, 0ns);
  REQUIRE_FALSE(s.begin_attempt(0ns));
  CHECK_FALSE(s.after_failure({refused}, 39ms).stop); // 39 + 60 < 100: sleep
  REQUIRE_FALSE(s.begin_attempt(99ms));
  schedule s2(p, 0ns);
  REQUIRE_FALSE(s2.begin_attempt(0ns));
  const auto v = s2.after_failure({refused}, 40ms); // 40 + 60 = 100: no attempt could follow
  CHECK(v.stop == errc::deadline_exceeded);
  CHECK(v.report == errc::deadline_exceeded);
}

TEST_CASE("a server hint ending at or past the deadline stops the loop with its own reason") {
  auto p = fixed_policy(5, 1ms);
  p.deadline = 100ms;
  schedule s(p, 0ns);
  REQUIRE_FALSE(s.begin_attempt(0ns));
  CHECK_FALSE(s.after_failure({refused, false, 59ms}, 40ms).stop); // 40 + 59 < 100: sleep 59
  REQUIRE_FALSE(s.begin_attempt(99ms));
  schedule s2(p, 0ns);
  REQUIRE_FALSE(s2.begin_attempt(0ns));
  const auto v = s2.after_failure({refused, false, 60ms}, 40ms); // 40 + 60 = 100
  CHECK(v.stop == errc::retry_after_past_deadline);
  CHECK(v.report == refused); // final_error::last_error
  schedule s3(p, 0ns);
  REQUIRE_FALSE(s3.begin_attempt(0ns));
  // The deadline already reached: that, not the hint, is why the loop stops.
  CHECK(s3.after_failure({refused, false, 60ms}, 100ms).stop == errc::deadline_exceeded);
  // max_retry_after is checked first, whatever the deadline.
  p.max_retry_after = 10ms;
  schedule s4(p, 0ns);
  REQUIRE_FALSE(s4.begin_attempt(0ns));
  CHECK(s4.after_failure({refused, false, 60ms}, 40ms).stop == errc::retry_after_too_long);
}

TEST_CASE("the attempt limit is the timeout or what is left of the deadline") {
  auto p = fixed_policy(5, 10ms);
  p.deadline = 1s;
  p.attempt_timeout = 300ms;
  schedule s(p, 0ns);
  bool by_deadline = true;
  CHECK(s.attempt_limit(0ns, by_deadline) == 300ms);
  CHECK_FALSE(by_deadline);
  CHECK(s.attempt_limit(800ms, by_deadline) == 200ms);
  CHECK(by_deadline);
}

TEST_CASE("the budget is asked last, only for a retry that would otherwise happen") {
  auto budget = std::make_shared<counting_budget>();
  budget->grant = false;
  auto p = fixed_policy(2, 10ms);
  p.budget = budget;
  schedule s(p, 0ns);
  REQUIRE_FALSE(s.begin_attempt(0ns));
  auto v = s.after_failure({refused}, 0ns);
  CHECK(v.stop == errc::budget_exhausted);
  CHECK(budget->asked == 1);
  schedule s2(p, 0ns);
  REQUIRE_FALSE(s2.begin_attempt(0ns));
  budget->grant = true;
  CHECK_FALSE(s2.after_failure({refused}, 0ns).stop);
  REQUIRE_FALSE(s2.begin_attempt(0ns));
  CHECK(s2.after_failure({refused}, 0ns).stop == errc::attempts_exhausted);
  CHECK(budget->asked == 2); // not asked when the attempts had run out anyway
}

TEST_CASE("a retry a rate limiter invited asks only a budget that limits those") {
  auto budget = std::make_shared<counting_budget>();
  budget->grant = false;
  budget->limits = false;
  auto p = fixed_policy(4, 10ms);
  p.budget = budget;
  schedule s(p, 0ns);
  REQUIRE_FALSE(s.begin_attempt(0ns));
  const auto v = s.after_failure({refused, false, 50ms, std::nullopt, true}, 0ns);
  CHECK_FALSE(v.stop);
  CHECK(v.delay == 50ms);
  CHECK(budget->asked == 0);
  REQUIRE_FALSE(s.begin_attempt(50ms));
  // A hint alone (a 503 with Retry-After) is no invitation: asked, and refused.
  CHECK(s.after_failure({refused, false, 50ms}, 50ms).stop == errc::budget_exhausted);
  CHECK(budget->asked == 1);
  schedule s1(p, 0ns);
  REQUIRE_FALSE(s1.begin_attempt(0ns));
  // Neither is an invitation without a hint, nor one the deadline cut.
  CHECK(s1.after_failure({refused, false, 0ns, std::nullopt, true}, 0ns).stop ==
        errc::budget_exhausted);
  CHECK(budget->asked == 2);
  budget->limits = true;
  schedule s2(p, 0ns);
  REQUIRE_FALSE(s2.begin_attempt(0ns));
  CHECK(s2.after_failure({refused, false, 50ms, std::nullopt, true}, 0ns).stop ==
        errc::budget_exhausted);
  CHECK(budget->asked == 3);
}

TEST_CASE("giving up on a rejected result reports no error, so the result is returned") {
  const auto p = fixed_policy(1, 10ms);
  schedule s(p, 0ns);
  REQUIRE_FALSE(s.begin_attempt(0ns));
  const auto v = s.after_failure({errc::result_rejected}, 0ns);
  CHECK(v.stop == errc::attempts_exhausted);
  CHECK_FALSE(v.report);
}

TEST_CASE("time conversions saturate for clocks coarser than nanoseconds") {
  using coarse = std::chrono::time_point<std::chrono::system_clock, std::chrono::hours>;
  const coarse far(std::chrono::hours(std::chrono::hours::max().count() / 2));
  CHECK(coretry::detail::since_epoch(far) == std::chrono::nanoseconds::max());
  CHECK(coretry::detail::since_epoch(coarse(std::chrono::hours(2))) == 2h);
  CHECK(coretry::detail::deadline_after(std::chrono::nanoseconds::max() - 1ns, 1h) ==
        coretry::detail::no_deadline);
  CHECK(coretry::detail::deadline_after(1s, coretry::unlimited) == coretry::detail::no_deadline);
}

TEST_CASE("operations sharing a seeded policy draw different jitter, reproducibly") {
  auto draws = [](const retry_policy& p, int ops) {
    std::vector<std::vector<std::chrono::nanoseconds>> all;
    for (int i = 0; i < ops; ++i) {
      schedule s(p, 0ns);
      std::vector<std::chrono::nanoseconds> d;
      for (int k = 0; k < 4; ++k) {
        REQUIRE_FALSE(s.begin_attempt(0ns));
        d.push_back(s.after_failure({refused}, 0ns).delay);
      }
      all.push_back(d);
    }
    return all;
  };
  auto make = [] {
    retry_policy p{
        .max_attempts = 10,
        .backoff =
            coretry::backoff::exponential(100ms, 2.0, 10s).with_jitter(coretry::jitter::full())};
    p.seed = 42;
    return p;
  };
  const auto first = draws(make(), 3);
  CHECK(first[0] != first[1]); // not one sequence for every operation: that is no jitter
  CHECK(first[1] != first[2]);
  CHECK(draws(make(), 3) == first); // a fresh policy with the same seed replays them
  auto copy = make();
  const auto a = draws(copy, 1);
  const auto b = draws(copy, 1); // copies share the counter: the next operation, a new stream
  CHECK(a != b);
}

TEST_CASE("a policy with a result predicate is still a retry_policy and is checked at the call") {
  std::map<std::string, retry_policy> table;
  table["http"] = retry_policy{.max_attempts = 2}.retry_if_result([](int s) { return s == 503; });
  table["plain"] = retry_policy{};
  CHECK(table.at("http").result_filter != nullptr);

  manual_clock::reset();
  asio::io_context io;
  auto returns_string = []() -> asio::awaitable<std::string> { co_return "x"; };
  CHECK_THROWS_AS(coretry::retry_async<manual_timer>(returns_string, table.at("http")),
                  std::invalid_argument);
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> { co_return ++calls == 1 ? 503 : 200; };
  auto fut = asio::co_spawn(
      io, coretry::retry_async<manual_timer>(op, table.at("http").retry_if_result<int>([](auto s) {
        return s == 503;
      })),
      asio::use_future);
  drive(io, [&] { return calls >= 2; });
  io.restart();
  io.run();
  CHECK(fut.get() == 200);
}

TEST_CASE("results that are not default constructible work on every path") {
  struct only_from_int {
    explicit only_from_int(int v) : value(v) {}
    int value;
  };
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto op = [&]() -> asio::awaitable<only_from_int> {
    if (++calls < 2)
      throw std::system_error(refused);
    co_return only_from_int(calls);
  };
  auto p = fixed_policy(3, 1ms);
  p.deadline = 1h; // the controlled path, which once needed a default-constructed T
  std::optional<only_from_int> got;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        got.emplace(co_await coretry::retry_async<manual_timer>(op, p));
      },
      asio::detached);
  drive(io, [&] { return got.has_value(); });
  REQUIRE(got);
  CHECK(got->value == 2);

  calls = 0;
  got.reset();
  std::error_code error;
  coretry::async_retry<manual_timer>(io.get_executor(), op, fixed_policy(1, 1ms),
                                     [&](std::error_code ec, std::optional<only_from_int> v) {
                                       error = ec;
                                       got = std::move(v);
                                     });
  io.restart();
  io.run();
  CHECK(error == refused);
  CHECK_FALSE(got);
}

TEST_CASE("operations that return their error as a value are retried without exceptions") {
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto op = [&]() -> asio::awaitable<std::tuple<std::error_code, int>> {
    ++calls;
    if (calls < 3)
      co_return std::tuple{std::error_code(refused), 0};
    co_return std::tuple{std::error_code{}, calls};
  };
  int value = 0;
  std::error_code error;
  coretry::retry_stats stats;
  coretry::async_retry<manual_timer>(io.get_executor(), op, fixed_policy(5, 10ms), stats,
                                     [&](std::error_code ec, int v) {
                                       error = ec;
                                       value = v;
                                     });
  drive(io, [&] { return value != 0 || error; });
  CHECK_FALSE(error);
  CHECK(value == 3);
  CHECK(stats.attempts == 3);
  CHECK(manual_clock::elapsed() == 20ms);

  // void form, failing for good: the error is the op's own.
  int void_calls = 0;
  auto void_op = [&]() -> asio::awaitable<std::tuple<std::error_code>> {
    ++void_calls;
    co_return std::tuple{std::error_code(refused)};
  };
  bool done = false;
  coretry::async_retry<manual_timer>(io.get_executor(), void_op, fixed_policy(2, 10ms),
                                     [&](std::error_code ec) {
                                       error = ec;
                                       done = true;
                                     });
  drive(io, [&] { return done; });
  CHECK(error == refused);
  CHECK(void_calls == 2);
}

TEST_CASE("a shared_policy is checked once, serves every front end, and refuses when empty") {
  using coretry::shared_policy;
  CHECK_THROWS_WITH_AS(shared_policy(retry_policy{.max_attempts = 0}),
                       doctest::Contains("max_attempts = 0"), std::invalid_argument);

  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> {
    if (++calls % 2 == 1)
      throw std::system_error(refused);
    co_return calls;
  };
  retry_policy base = fixed_policy(3, 10ms);
  base.seed = 7;
  const shared_policy plain(base);
  base.deadline = 1h; // the controlled path
  const shared_policy controlled(base);
  CHECK(controlled->deadline == 1h);
  CHECK(plain.get().deadline == coretry::unlimited);

  std::vector<int> got;
  coretry::retry_stats stats;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        got.push_back(co_await coretry::retry_async<manual_timer>(op, plain));
        got.push_back(co_await coretry::retry_async<manual_timer>(op, controlled, stats));
      },
      asio::detached);
  coretry::async_retry<manual_timer>(
      io.get_executor(), op, plain, [&](std::error_code ec, int v) { got.push_back(ec ? -1 : v); });
  drive(io, [&] { return got.size() == 3; });
  REQUIRE(got.size() == 3);
  CHECK(stats.attempts == 2);
  CHECK(std::count(got.begin(), got.end(), -1) == 0);
  CHECK(manual_clock::elapsed() >= 10ms);

  shared_policy moved = plain;
  const shared_policy taken = std::move(moved);
  CHECK(taken);
  CHECK_FALSE(moved); // NOLINT(bugprone-use-after-move): the case under test
  CHECK_THROWS_WITH_AS(coretry::retry_async<manual_timer>(op, moved),
                       doctest::Contains("shared_policy"), std::invalid_argument);
  CHECK_THROWS_AS(
      coretry::async_retry<manual_timer>(io.get_executor(), op, moved, [](std::error_code, int) {}),
      std::invalid_argument);
}

TEST_CASE(
    "retry_async keeps no reference to the policy it was given: it may die before the await") {
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> {
    if (++calls % 2 == 1)
      throw std::system_error(refused);
    co_return calls;
  };
  std::vector<int> got;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (const bool controlled : {false, true}) {
          std::optional<asio::awaitable<int>> pending;
          {
            auto policy = std::make_unique<retry_policy>(fixed_policy(3, 10ms));
            if (controlled)
              policy->deadline = 1h;
            policy->on_retry = [tag = std::string(64, 'x')](const coretry::retry_event&) {};
            pending.emplace(coretry::retry_async<manual_timer>(op, *policy));
            const coretry::shared_policy shared(*policy);
            policy.reset(); // the lvalue is gone (ASan would see a read of it)
            got.push_back(co_await coretry::retry_async<manual_timer>(op, shared));
          } // and so is the shared_policy the caller held
          got.push_back(co_await std::move(*pending));
        }
      },
      asio::detached);
  drive(io, [&] { return got.size() == 4; });
  CHECK(got == std::vector<int>{2, 4, 6, 8});
}

// The example of docs/core.md, kept compiling and passing here.
TEST_CASE("my policy gives up after three attempts, 300 ms in") {
  using coretry::testing::manual_clock;
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> {
    ++calls;
    throw std::system_error(refused);
    co_return 0;
  };
  coretry::retry_policy policy{.max_attempts = 3,
                               .backoff = coretry::backoff::fixed(std::chrono::milliseconds(150))};
  bool done = false;
  coretry::async_retry<coretry::testing::manual_timer>(io.get_executor(), op, policy,
                                                       [&](std::error_code, int) { done = true; });
  coretry::testing::drive(io, [&] { return done; });
  CHECK(calls == 3);
  CHECK(manual_clock::elapsed() == std::chrono::milliseconds(300));
}
