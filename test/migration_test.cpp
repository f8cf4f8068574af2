// SPDX-License-Identifier: BSL-1.0
// The 0.2 spellings issue 28 renamed still compile and still have their effect. This file is
// compiled with -Wno-error=deprecated-declarations: each use below warns, by design
// (test/migration/warns.cpp checks that each one does).

#include <coretry/attempt.hpp>
#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/hedge.hpp>
#include <coretry/http.hpp>
#include <coretry/observer.hpp>
#include <coretry/overload.hpp>
#include <coretry/rate_limit.hpp>
#include <coretry/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

std::string what(const auto& make) {
  try {
    make();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "valid";
}

// A gate written against 0.2: it answers "cannot say when" by the old name.
class gate_of_0_2 final : public coretry::attempt_gate {
public:
  bool try_acquire(nanoseconds) noexcept override { return false; }
  void on_success(nanoseconds) noexcept override {}
  void on_failure(nanoseconds) noexcept override {}
  void on_abandoned(nanoseconds) noexcept override {}
  nanoseconds retry_after(nanoseconds) noexcept override { return never; }
};

// Fails after 1 s on the manual clock.
asio::awaitable<int> slow_failure() {
  coretry::testing::manual_timer t(co_await asio::this_coro::executor);
  t.expires_after(1s);
  co_await t.async_wait(asio::use_awaitable);
  throw std::system_error(make_error_code(std::errc::connection_refused));
}

// How one operation ended, and what the breaker and the sending rate heard of it: what a 0.2
// predicate and the `classify` written for it must both give.
struct run_record {
  int completions, value, calls;
  std::error_code error, reason, last_error;
  std::uint64_t successes, failures, pushbacks;
  int throttles, rate_successes;
  bool operator==(const run_record&) const = default;
};

// A sending rate that grants at once and counts what it hears.
struct counting_rate final : coretry::send_rate {
  int throttles = 0, successes = 0;
  nanoseconds acquire(nanoseconds) noexcept override { return {}; }
  void on_throttle(nanoseconds) noexcept override { ++throttles; }
  void on_success(nanoseconds) noexcept override { ++successes; }
};

// Runs `script` once under `p` (a breaker that never opens and a counting rate added), on the
// manual clock.
run_record run_script(const std::vector<coretry::test::step>& script, coretry::retry_policy p) {
  coretry::testing::manual_clock::reset();
  asio::io_context io;
  auto breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
      .consecutive_failures = 1000, .failure_ratio = 0, .seed = 1});
  auto rate = std::make_shared<counting_rate>();
  p.max_attempts = 4;
  p.backoff = coretry::backoff::fixed(1ms);
  p.breaker = breaker;
  p.rate_limit = rate;
  coretry::test::scripted_op op{script};
  coretry::retry_stats stats;
  const coretry::test::outcome o = coretry::test::run_retry(io, op, p, stats);
  return {o.completions,
          o.value,
          op.calls,
          o.error,
          stats.reason,
          stats.last_error,
          breaker->successes(),
          breaker->failures(),
          breaker->pushbacks(),
          rate->throttles,
          rate->successes};
}

using coretry::attempt_decision;
using coretry::attempt_result;
using coretry::test::fail;
using coretry::test::refused;
using coretry::test::succeed;
const std::error_code denied = make_error_code(std::errc::permission_denied);

} // namespace

TEST_CASE("0.2's retry_if still decides which errors are retried, as classify does") {
  const std::vector<coretry::test::step> script{fail(refused), fail(denied), succeed(3)};
  coretry::retry_policy old;
  old.retry_if = [](const std::error_code& ec) { return ec == refused; };
  coretry::retry_policy now;
  now.classify = [](const attempt_result& r) {
    attempt_decision d = coretry::default_classify(r);
    d.retry = r.error() == refused;
    return d;
  };
  const run_record a = run_script(script, old);
  CHECK(a.error == denied); // not retried: final
  CHECK(a.calls == 2);
  CHECK(a.reason == denied);
  CHECK(a == run_script(script, now));
}

TEST_CASE("0.2's pushback_if still makes a retried error a push-back, as classify does") {
  const std::vector<coretry::test::step> script{fail(refused), succeed(1)};
  coretry::retry_policy old;
  old.pushback_if = [](const std::error_code& ec) { return ec == refused; };
  coretry::retry_policy now;
  now.classify = [](const attempt_result& r) {
    attempt_decision d = coretry::default_classify(r);
    d.pushback = r.error() == refused;
    return d;
  };
  const run_record a = run_script(script, old);
  CHECK(!a.error);
  CHECK(a.value == 1);
  CHECK(a.pushbacks == 1);
  CHECK(a.failures == 0);
  CHECK(a.successes == 1);
  CHECK(a == run_script(script, now));
  // Without it, the same refusal is a failure for the breaker.
  CHECK(run_script(script, {}).failures == 1);
}

TEST_CASE("0.2's throttle_if still slows the sending rate down, as classify does") {
  const std::vector<coretry::test::step> script{fail(refused), fail(denied), succeed(1)};
  coretry::retry_policy old;
  old.throttle_if = [](const std::error_code& ec) { return ec == denied; };
  coretry::retry_policy now;
  now.classify = [](const attempt_result& r) {
    attempt_decision d = coretry::default_classify(r);
    d.throttle = r.error() == denied;
    return d;
  };
  const run_record a = run_script(script, old);
  CHECK(!a.error);
  CHECK(a.calls == 3);
  CHECK(a.throttles == 1);
  CHECK(a.rate_successes == 2);
  CHECK(a == run_script(script, now));
  CHECK(run_script(script, {}).throttles == 0);
}

TEST_CASE("0.2's retry_if_result still rejects values, the last one returned, as classify does") {
  const auto zero_rejected = [](const attempt_result& r) {
    attempt_decision d = coretry::default_classify(r);
    if (const int* v = r.value<int>())
      d.retry = *v == 0;
    return d;
  };
  coretry::retry_policy now;
  now.classify = zero_rejected;
  const coretry::retry_policy old =
      coretry::retry_policy{}.retry_if_result([](int v) { return v == 0; });
  SUBCASE("accepted at the third attempt") {
    const std::vector<coretry::test::step> script{succeed(0), succeed(0), succeed(7)};
    const run_record a = run_script(script, old);
    CHECK(!a.error);
    CHECK(a.value == 7);
    CHECK(a.calls == 3);
    CHECK(a == run_script(script, now));
  }
  SUBCASE("rejected every time") {
    const std::vector<coretry::test::step> script{succeed(0)};
    const run_record a = run_script(script, old);
    CHECK(!a.error);
    CHECK(a.value == 0);
    CHECK(a.calls == 4);
    CHECK(a.reason == coretry::errc::attempts_exhausted);
    CHECK(a.last_error == coretry::errc::result_rejected);
    CHECK(a == run_script(script, now));
  }
  SUBCASE("a filter on another type is still refused at the call") {
    const coretry::retry_policy other =
        coretry::retry_policy{}.retry_if_result([](long v) { return v == 0; });
    coretry::test::scripted_op op{{succeed(1)}};
    asio::io_context io;
    CHECK_THROWS_AS(
        coretry::async_retry<coretry::testing::manual_timer>(
            io.get_executor(), [&] { return op(); }, other, [](std::error_code, int) {}),
        std::invalid_argument);
  }
}

TEST_CASE("0.2's retry_if_exception still retries the exceptions it names, as classify does") {
  struct flaky : std::runtime_error {
    flaky() : std::runtime_error("flaky") {}
  };
  const auto run = [](const coretry::retry_policy& p) {
    coretry::testing::manual_clock::reset();
    asio::io_context io;
    int calls = 0;
    auto op = [&calls]() -> asio::awaitable<int> {
      if (++calls < 3)
        throw flaky();
      co_return 5;
    };
    coretry::retry_stats stats;
    const coretry::test::outcome o = coretry::test::run_retry(io, op, p, stats);
    return std::tuple{o.error, o.value, calls, stats.attempts};
  };
  coretry::retry_policy old{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms)};
  old.retry_if_exception = coretry::retry_on<flaky>();
  coretry::retry_policy now{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms)};
  now.classify = [](const attempt_result& r) {
    attempt_decision d = coretry::default_classify(r);
    d.retry = d.retry || (r.exception() && coretry::retry_on<flaky>()(r.exception()));
    return d;
  };
  const auto a = run(old);
  CHECK(!std::get<0>(a));
  CHECK(std::get<1>(a) == 5);
  CHECK(std::get<2>(a) == 3);
  CHECK(a == run(now));
  // Without it, the exception is a bug: the first attempt ends the operation.
  const auto none = run(coretry::retry_policy{.max_attempts = 3});
  CHECK(std::get<0>(none) == coretry::errc::unexpected_exception);
  CHECK(std::get<2>(none) == 1);
}

TEST_CASE("classify beside any 0.2 predicate is refused, naming it") {
  const auto judge = [](const attempt_result& r) { return coretry::default_classify(r); };
  const auto refusal = [&](coretry::retry_policy p) {
    p.classify = judge;
    return what([&] { p.validate(); });
  };
  coretry::retry_policy a;
  a.retry_if = [](const std::error_code&) { return true; };
  CHECK(refusal(a).find("retry_if is set too") != std::string::npos);
  coretry::retry_policy b;
  b.pushback_if = [](const std::error_code&) { return true; };
  CHECK(refusal(b).find("pushback_if is set too") != std::string::npos);
  coretry::retry_policy c;
  c.throttle_if = [](const std::error_code&) { return true; };
  CHECK(refusal(c).find("throttle_if is set too") != std::string::npos);
  CHECK(refusal(coretry::retry_policy{}.retry_if_result([](int) {
          return true;
        })).find("result_filter (retry_if_result) is set too") != std::string::npos);
  coretry::retry_policy e;
  e.retry_if_exception = coretry::retry_on<std::runtime_error>();
  CHECK(refusal(e).find("retry_if_exception is set too") != std::string::npos);
  CHECK(refusal({}) == "valid");
}

TEST_CASE("0.2's three names of the sentinel are coretry::unlimited") {
  CHECK(coretry::attempt_gate::never == coretry::unlimited);
  CHECK(coretry::retry_budget::never == coretry::unlimited);
  CHECK(coretry::send_rate::refused == coretry::unlimited);
  gate_of_0_2 gate;
  CHECK(gate.retry_after(0s) == coretry::unlimited);
  // What the library returns is still equal to the old names.
  coretry::ratio_budget budget({.ratio = 0, .min_retries_per_second = 0});
  CHECK(budget.retry_after(0s) == coretry::retry_budget::never);
  coretry::adaptive_rate_limiter limiter({.burst = 100ms, .initial_rate = 1, .max_wait = 1s});
  CHECK(limiter.acquire(0s) == 0ns);
  CHECK(limiter.acquire(0s) == 1s);
  CHECK(limiter.acquire(0s) == coretry::send_rate::refused); // 2 s: nothing reserved
}

TEST_CASE("a breaker built with 0.2's max_in_flight = 2 refuses the third concurrent grant") {
  coretry::circuit_breaker_options o;
  o.max_in_flight = 2;
  coretry::circuit_breaker b(o);
  CHECK(b.try_acquire(0s));
  CHECK(b.try_acquire(0s));
  CHECK_FALSE(b.try_acquire(0s));
  CHECK(b.in_flight_refusals() == 1);
  b.on_success(1s); // frees a slot
  CHECK(b.try_acquire(1s));
  // Both names read the limit in effect.
  CHECK(b.options().max_concurrent_calls == 2);
  CHECK(b.options().max_in_flight == 2);
  // Designated, as 0.2 code wrote it.
  coretry::circuit_breaker d({.max_in_flight = 1});
  CHECK(d.try_acquire(0s));
  CHECK_FALSE(d.try_acquire(0s));
}

TEST_CASE("max_concurrent_calls and max_in_flight: the new name wins when set; both set apart is "
          "refused naming both") {
  coretry::circuit_breaker_options same;
  same.max_concurrent_calls = 3;
  same.max_in_flight = 3;
  CHECK(what([&] { coretry::circuit_breaker b(same); }) == "valid");
  coretry::circuit_breaker_options apart;
  apart.max_concurrent_calls = 3;
  apart.max_in_flight = 2;
  CHECK(what([&] { coretry::circuit_breaker b(apart); }) ==
        "coretry::circuit_breaker_options: max_concurrent_calls = 3 (and max_in_flight = 2, its "
        "deprecated name: set one)");
  coretry::circuit_breaker_options only_new;
  only_new.max_concurrent_calls = 1;
  coretry::circuit_breaker b(only_new);
  CHECK(b.try_acquire(0s));
  CHECK_FALSE(b.try_acquire(0s));
  CHECK(b.options().max_in_flight == 1);
}

TEST_CASE("a ratio budget built with 0.2's buckets slides by window / buckets") {
  coretry::ratio_budget_options o{.ratio = 0, .min_retries_per_second = 1, .window = 1s};
  o.buckets = 4;
  coretry::ratio_budget b(o);
  CHECK(b.options().window_buckets == 4);
  CHECK(b.options().buckets == 4);
  CHECK(b.try_retry(0s));            // the reserve: one retry a window
  CHECK_FALSE(b.try_retry(0s));      // spent
  CHECK(b.retry_after(0s) == 250ms); // 1 s / 4, not 1 s / 10
  coretry::ratio_budget d({.window = 1s, .buckets = 5});
  CHECK(d.options().window_buckets == 5);
}

TEST_CASE("window_buckets and buckets set apart are refused naming both") {
  coretry::ratio_budget_options o;
  o.window_buckets = 20;
  o.buckets = 5;
  CHECK(what([&] { coretry::ratio_budget b(o); }) ==
        "coretry::ratio_budget: window_buckets = 20 (and buckets = 5, its deprecated name: set "
        "one)");
  o.buckets = 20;
  CHECK(what([&] { coretry::ratio_budget b(o); }) == "valid");
}

TEST_CASE("hedge options built with 0.2's max_in_flight run that many copies") {
  coretry::hedge_options h;
  h.max_in_flight = 3;
  CHECK(coretry::detail::max_copies(h) == 3);
  CHECK_NOTHROW(h.validate());
  coretry::hedge_options d{.delay = 0ns, .max_in_flight = 1};
  CHECK(coretry::detail::max_copies(d) == 1);
  coretry::hedge_options zero;
  zero.max_in_flight = 0;
  CHECK(what([&] { zero.validate(); }) ==
        "coretry::hedge_options: max_in_flight = 0 (must be at least 1)");
  coretry::hedge_options apart;
  apart.max_copies = 4;
  apart.max_in_flight = 3;
  CHECK(what([&] { apart.validate(); }) ==
        "coretry::hedge_options: max_copies = 4 (and max_in_flight = 3, its deprecated name: set "
        "one)");
  apart.max_in_flight = 4;
  CHECK_NOTHROW(apart.validate());
  CHECK(coretry::detail::max_copies(apart) == 4);
}

TEST_CASE("a hedge with 0.2's max_in_flight = 3 runs three copies at once (the default is 2)") {
  coretry::testing::manual_clock::reset();
  asio::io_context io;
  coretry::hedge_options h{.delay = 10ms};
  h.max_in_flight = 3;
  coretry::hedge_stats stats;
  auto op = [] { return slow_failure(); };
  const auto r =
      coretry::test::run_hedge(io, op, coretry::retry_policy{.max_attempts = 4}, h, stats);
  CHECK(r.completions == 1);
  CHECK(stats.peak_in_flight == 3);
  CHECK(stats.attempts == 4);
}

TEST_CASE("0.2's attempt_context::http, http_method and http_status are the HTTP attributes") {
  namespace attr = coretry::http::attribute;
  coretry::attempt_context ctx(1);
  CHECK(ctx.http_method().empty());
  CHECK(ctx.http_status() == 0);
  ctx.http("GET", 503);
  REQUIRE(ctx.attributes().find(attr::request_method) != nullptr);
  CHECK(ctx.attributes().find(attr::request_method)->text() == "GET");
  REQUIRE(ctx.attributes().find(attr::response_status_code) != nullptr);
  CHECK(ctx.attributes().find(attr::response_status_code)->integer() == 503);
  CHECK(ctx.http_method() == "GET");
  CHECK(ctx.http_status() == 503);
  // The other way: the new setters, read by the old getters; the last write wins.
  ctx.set_attribute(attr::request_method, "PUT");
  ctx.set_attribute(attr::response_status_code, 200);
  CHECK(ctx.http_method() == "PUT");
  CHECK(ctx.http_status() == 200);
  ctx.http("HEAD", 0); // 0.2's "no response"
  CHECK(ctx.http_status() == 0);
  CHECK(ctx.attributes().size() == 2);
}

TEST_CASE("0.2's attempt_finished_event::http_status and http_method are filled from the "
          "attributes") {
  struct reader : coretry::retry_observer {
    std::vector<std::string> lines;
    void on_attempt_finished(const coretry::attempt_finished_event& e) override {
      lines.push_back(std::string(e.http_method) + " " + std::to_string(e.http_status));
    }
  };
  coretry::testing::manual_clock::reset();
  asio::io_context io;
  auto log = std::make_shared<reader>();
  int calls = 0;
  int completions = 0;
  coretry::async_retry<coretry::testing::manual_timer>(
      io.get_executor(),
      [&](coretry::attempt_context& ctx) -> asio::awaitable<std::tuple<std::error_code, int>> {
        if (++calls == 1) {
          ctx.http("GET", 503); // 0.2
          co_return std::tuple{make_error_code(std::errc::connection_refused), 0};
        }
        ctx.set_attribute(coretry::http::attribute::request_method, "POST"); // new
        ctx.set_attribute(coretry::http::attribute::response_status_code, 201);
        co_return std::tuple{std::error_code{}, 1};
      },
      coretry::retry_policy{.max_attempts = 2, .observer = log},
      [&](std::error_code, int) { ++completions; });
  coretry::testing::drive(io, [&] { return completions > 0; });
  REQUIRE(completions == 1);
  CHECK(log->lines == std::vector<std::string>{"GET 503", "POST 201"});
  // A 0.2 observer that copies the event keeps the fields.
  coretry::attempt_finished_event e;
  e.http_status = 404;
  e.http_method = "GET";
  const coretry::attempt_finished_event copy = e;
  CHECK(copy.http_status == 404);
  CHECK(copy.http_method == "GET");
}
