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

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/run_on_manual_clock.hpp>

#include <chrono>
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

} // namespace

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
