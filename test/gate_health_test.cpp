// SPDX-License-Identifier: BSL-1.0
// Issue 28: a gate hears its own health classification of each attempt, apart from what the
// policy retries; through the retry loop and the hedge alike, on the manual clock.

#include <coretry/breaker.hpp>
#include <coretry/hedge.hpp>
#include <coretry/overload.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>
#include <coretry/throttle.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/counters.hpp>
#include <support/fake_gate.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::health;
using coretry::retry_policy;

namespace {

const std::error_code denied = make_error_code(std::errc::permission_denied);
const std::error_code timed_out = make_error_code(std::errc::timed_out);

// A stand-in for an adapter's status category (coretry::curl's http_status_category): it places
// 429 in condition::pushback and the other 4xx in condition::client_error; 5xx in neither.
class status_category_t final : public std::error_category {
public:
  const char* name() const noexcept override { return "test-status"; }
  std::string message(int v) const override { return "status " + std::to_string(v); }
  bool equivalent(int v, const std::error_condition& c) const noexcept override {
    if (c == coretry::condition::pushback)
      return v == 429;
    if (c == coretry::condition::client_error)
      return v >= 400 && v < 500 && v != 429;
    return false;
  }
};
const status_category_t status_category{};
std::error_code status(int v) {
  return {v, status_category};
}

// One attempt per operation, each ending as `script` says: refused, timed out by the system, cut
// by the attempt timeout, a permanent error, a success.
std::vector<step> one_of_each() {
  return {fail(refused), fail(timed_out), hang(), fail(denied), succeed(1)};
}

bool timeouts_only(const std::error_code& ec) {
  return ec == coretry::condition::timed_out;
}

} // namespace

TEST_CASE("default_health counts failures, push-backs, blamed requests and cancellations apart") {
  CHECK(coretry::default_health({}) == health::healthy);
  CHECK(coretry::default_health(refused) == health::unhealthy);
  CHECK(coretry::default_health(timed_out) == health::unhealthy);
  CHECK(coretry::default_health(coretry::errc::attempt_timeout) == health::unhealthy);
  CHECK(coretry::default_health(coretry::errc::deadline_exceeded) == health::unhealthy);
  CHECK(coretry::default_health(coretry::errc::result_rejected) == health::unhealthy);
  CHECK(coretry::default_health(denied) == health::unhealthy);
  CHECK(coretry::default_health(make_error_code(std::errc::operation_canceled)) == health::ignored);
  CHECK(coretry::default_health(coretry::errc::cancelled) == health::ignored);
  CHECK(coretry::default_health(status(503)) == health::unhealthy);
  CHECK(coretry::default_health(status(404)) == health::healthy);
  CHECK(coretry::default_health(status(429)) == health::pushback);
  CHECK(std::string(coretry::to_string(health::pushback)) == "pushback");
}

TEST_CASE("narrowing the retry classifier does not change what the breaker hears") {
  auto run_all = [](bool narrow) {
    manual_clock::reset();
    asio::io_context io;
    auto breaker = counting_breaker();
    for (const step& s : one_of_each()) {
      scripted_op op{{s}};
      retry_policy p{.max_attempts = 1, .attempt_timeout = 10ms, .breaker = breaker};
      if (narrow)
        p.retry_if = timeouts_only;
      coretry::retry_stats stats;
      const auto r = run_retry(io, op, p, stats);
      CHECK(r.completions == 1);
    }
    return counts_of(*breaker);
  };
  const counts wide = run_all(false);
  const counts narrow = run_all(true);
  CHECK(wide == narrow);
  // refused, timed_out, the attempt timeout and the permanent error are failures.
  CHECK(wide == counts{1, 4, 0, 0});
}

TEST_CASE("narrowing the retry classifier does not change what the breaker hears from a hedge") {
  auto run_all = [](bool narrow) {
    manual_clock::reset();
    asio::io_context io;
    auto breaker = counting_breaker();
    for (const step& s : one_of_each()) {
      scripted_op op{{s}};
      retry_policy p{.max_attempts = 1, .attempt_timeout = 10ms, .breaker = breaker};
      if (narrow)
        p.retry_if = timeouts_only;
      coretry::hedge_stats stats;
      const auto r = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 2}, stats);
      CHECK(r.completions == 1);
    }
    return counts_of(*breaker);
  };
  const counts wide = run_all(false);
  const counts narrow = run_all(true);
  CHECK(wide == narrow);
  CHECK(wide == counts{1, 4, 0, 0});
}

TEST_CASE("the breaker's own classifier decides what it counts, whatever is retried") {
  manual_clock::reset();
  asio::io_context io;
  auto breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
      .consecutive_failures = 1000, .failure_ratio = 0, .classify = [](const std::error_code& ec) {
        return ec == denied ? health::healthy : coretry::default_health(ec);
      }});
  // Every error retried: denied twice, then refused, then a success.
  scripted_op op{{fail(denied), fail(denied), fail(refused), succeed(4)}};
  retry_policy p{.max_attempts = 4, .backoff = coretry::backoff::fixed(1ms), .breaker = breaker};
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.value == 4);
  CHECK(counts_of(*breaker) == counts{3, 1, 0, 0});

  SUBCASE("and a classifier that throws abandons the attempt and ends the operation") {
    auto throwing = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
        .classify = [](const std::error_code&) -> health { throw std::runtime_error("no"); }});
    scripted_op op2{{fail(refused), succeed(1)}};
    retry_policy p2{.max_attempts = 3, .breaker = throwing};
    coretry::retry_stats s2;
    const auto r2 = run_retry(io, op2, p2, s2);
    CHECK(r2.error == coretry::errc::unexpected_exception);
    CHECK(op2.calls == 1);
    CHECK(counts_of(*throwing) == counts{0, 0, 0, 1});
  }
}

TEST_CASE("an attempt's health code replaces its rejected result for the breaker") {
  manual_clock::reset();
  asio::io_context io;
  // Each attempt answers with a status; the policy rejects (retries) every status of 400 or
  // more, as a result filter does. The breaker hears the status: 503 and 500 are failures, 404 is
  // healthy, 429 a push-back; 200 a success.
  const std::vector<int> statuses{503, 404, 429, 500, 200};
  std::size_t calls = 0;
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    const int st = statuses.at(calls++);
    if (st >= 400)
      ctx.health_code(status(st));
    co_return st;
  };
  auto breaker = counting_breaker();
  auto p = retry_policy{.max_attempts = 5, .backoff = coretry::backoff::fixed(1ms)}.retry_if_result(
      [](int st) { return st >= 400; });
  p.breaker = breaker;
  int value = 0, completions = 0;
  asio::co_spawn(io, coretry::retry_async<manual_timer>(op, p), [&](std::exception_ptr e, int v) {
    ++completions;
    CHECK_FALSE(e);
    value = v;
  });
  REQUIRE(drive(io, [&] { return completions > 0; }));
  CHECK(value == 200);
  CHECK(counts_of(*breaker) == counts{2, 2, 1, 0});
}

TEST_CASE("a hedge's attempts are classified by the breaker as the loop's are") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  // Every attempt starts at once (max_copies 1: one after another, on each failure): a
  // permanent error the policy does not retry ends the operation but is a failure to the gate.
  scripted_op op{{fail(refused), fail(denied), succeed(3)}};
  retry_policy p{.max_attempts = 3};
  p.retry_if = [](const std::error_code& ec) { return ec != denied; };
  p.breaker = gate;
  coretry::hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 1}, stats);
  CHECK(r.error == denied);
  CHECK(gate->log == std::vector<std::string>{"failure", "failure"});
}

TEST_CASE("the adaptive throttle hears its own classification too") {
  manual_clock::reset();
  asio::io_context io;
  auto throttle = std::make_shared<coretry::adaptive_throttle>(coretry::adaptive_throttle_options{
      .k = 2.0,
      .classify =
          [](const std::error_code& ec) {
            return ec == refused ? health::healthy : coretry::default_health(ec);
          },
      .seed = 1});
  scripted_op op{{fail(refused), fail(denied), succeed(3)}};
  retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms), .breaker = throttle};
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.value == 3);
  const auto now = manual_clock::now().time_since_epoch();
  CHECK(throttle->requests(now) == 3);
  CHECK(throttle->accepts(now) == 2); // refused (as classified) and the success
}

namespace {
struct timing_gate final : coretry::attempt_gate {
  std::vector<std::pair<health, std::chrono::nanoseconds>> heard;
  bool try_acquire(std::chrono::nanoseconds) noexcept override { return true; }
  void on_success(std::chrono::nanoseconds) noexcept override {}
  void on_failure(std::chrono::nanoseconds) noexcept override {}
  void on_abandoned(std::chrono::nanoseconds) noexcept override {}
  void on_outcome(health h, std::chrono::nanoseconds,
                  std::chrono::nanoseconds duration) noexcept override {
    heard.emplace_back(h, duration);
  }
};
} // namespace

TEST_CASE("a hedge hands the gate each attempt's health and duration as the loop does") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<timing_gate>();
  scripted_op op{{fail(refused, 30ms), succeed(2, 70ms)}};
  retry_policy p{.max_attempts = 2, .breaker = gate};
  coretry::hedge_stats stats;
  const auto r = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 1}, stats);
  CHECK(r.value == 2);
  REQUIRE(gate->heard.size() == 2);
  CHECK(gate->heard[0] == std::pair{health::unhealthy, std::chrono::nanoseconds(30ms)});
  CHECK(gate->heard[1] == std::pair{health::healthy, std::chrono::nanoseconds(70ms)});
}

TEST_CASE("a gate that overrides on_outcome hears the health and the attempt's duration") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<timing_gate>();
  scripted_op op{{fail(refused, 30ms), succeed(2, 70ms)}};
  retry_policy p{.max_attempts = 2, .backoff = coretry::backoff::fixed(5ms), .breaker = gate};
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.value == 2);
  REQUIRE(gate->heard.size() == 2);
  CHECK(gate->heard[0] == std::pair{health::unhealthy, std::chrono::nanoseconds(30ms)});
  CHECK(gate->heard[1] == std::pair{health::healthy, std::chrono::nanoseconds(70ms)});
}
