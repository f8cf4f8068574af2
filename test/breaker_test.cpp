// SPDX-License-Identifier: BSL-1.0
// The circuit breaker on its own, with explicit times: every transition and every count.

#include <coretry/breaker.hpp>
#include <coretry/presets.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using coretry::breaker_state;
using coretry::circuit_breaker;
using coretry::circuit_breaker_options;

namespace {

// Deterministic defaults for the tests: no jitter, one probe.
circuit_breaker_options exact(circuit_breaker_options o = {}) {
  o.break_jitter = 0;
  o.seed = 1;
  return o;
}

std::string rejection(circuit_breaker_options o) {
  try {
    circuit_breaker b(std::move(o));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "valid";
}

void fail_n(circuit_breaker& b, int n, std::chrono::nanoseconds now) {
  for (int i = 0; i < n; ++i) {
    REQUIRE(b.try_acquire(now));
    b.on_failure(now);
  }
}

} // namespace

TEST_CASE("a new breaker is closed and lets every attempt through") {
  circuit_breaker b(exact());
  CHECK(b.state() == breaker_state::closed);
  for (int i = 0; i < 100; ++i)
    CHECK(b.try_acquire(std::chrono::seconds(i)));
  CHECK(b.refusals() == 0);
  CHECK(b.times_opened() == 0);
  CHECK(std::string(coretry::to_string(breaker_state::half_open)) == "half_open");
}

TEST_CASE("the breaker opens after the configured run of failures, and a success resets the run") {
  circuit_breaker b(exact({.consecutive_failures = 3, .failure_ratio = 0, .break_duration = 5s}));
  fail_n(b, 2, 1s);
  CHECK(b.failure_run() == 2);
  REQUIRE(b.try_acquire(1s));
  b.on_success(1s);
  CHECK(b.failure_run() == 0);
  fail_n(b, 2, 2s);
  CHECK(b.state() == breaker_state::closed);
  fail_n(b, 1, 2s);
  CHECK(b.state() == breaker_state::open);
  CHECK(b.open_until() == 2s + 5s);
  CHECK(b.times_opened() == 1);
  CHECK(b.failures() == 5);
  CHECK(b.successes() == 1);
}

TEST_CASE("an open breaker refuses until its break is over, then lets one probe through") {
  circuit_breaker b(exact({.consecutive_failures = 1, .break_duration = 10s}));
  fail_n(b, 1, 0s);
  REQUIRE(b.state() == breaker_state::open);
  CHECK_FALSE(b.try_acquire(1s));
  CHECK_FALSE(b.try_acquire(10s - 1ns));
  CHECK(b.refusals() == 2);
  CHECK(b.state() == breaker_state::open); // the stored state moves only when asked
  CHECK(b.try_acquire(10s));
  CHECK(b.state() == breaker_state::half_open);
  CHECK(b.times_half_opened() == 1);
  CHECK(b.probes_in_flight() == 1);
  CHECK_FALSE(b.try_acquire(10s)); // one probe at a time
  CHECK(b.refusals() == 3);
}

TEST_CASE("a successful probe closes the breaker with a clean slate") {
  circuit_breaker b(exact({.consecutive_failures = 2,
                           .failure_ratio = 0.5,
                           .minimum_throughput = 4,
                           .break_duration = 1s}));
  fail_n(b, 2, 0s);
  REQUIRE(b.state() == breaker_state::open);
  REQUIRE(b.try_acquire(1s));
  b.on_success(1500ms);
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.times_closed() == 1);
  CHECK(b.failure_run() == 0);
  CHECK(b.window_failures(1500ms) == 0); // the failures that opened it are forgotten
  // One failure after closing does not reopen it.
  fail_n(b, 1, 2s);
  CHECK(b.state() == breaker_state::closed);
}

TEST_CASE("a failed probe opens the breaker again for a new break") {
  circuit_breaker b(exact({.consecutive_failures = 1, .break_duration = 4s}));
  fail_n(b, 1, 0s);
  REQUIRE(b.try_acquire(4s));
  b.on_failure(5s);
  CHECK(b.state() == breaker_state::open);
  CHECK(b.open_until() == 9s);
  CHECK(b.times_opened() == 2);
  CHECK_FALSE(b.try_acquire(8s));
  CHECK(b.try_acquire(9s));
  CHECK(b.times_half_opened() == 2);
}

TEST_CASE("several probes are let through and all must succeed to close") {
  circuit_breaker b(
      exact({.consecutive_failures = 1, .break_duration = 1s, .half_open_probes = 3}));
  fail_n(b, 1, 0s);
  CHECK(b.try_acquire(1s));
  CHECK(b.try_acquire(1s));
  CHECK(b.try_acquire(1s));
  CHECK_FALSE(b.try_acquire(1s));
  CHECK(b.probes_in_flight() == 3);
  b.on_success(2s);
  b.on_success(2s);
  CHECK(b.state() == breaker_state::half_open);
  CHECK(b.probes_in_flight() == 1);
  CHECK(b.try_acquire(2s)); // a freed slot admits another probe
  b.on_success(3s);
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.times_closed() == 1);
}

TEST_CASE("an abandoned probe frees its slot and decides nothing") {
  circuit_breaker b(exact({.consecutive_failures = 1, .break_duration = 1s}));
  fail_n(b, 1, 0s);
  REQUIRE(b.try_acquire(1s));
  b.on_abandoned(1s);
  CHECK(b.state() == breaker_state::half_open);
  CHECK(b.probes_in_flight() == 0);
  CHECK(b.abandoned() == 1);
  CHECK(b.try_acquire(1s));
  b.on_success(2s);
  CHECK(b.state() == breaker_state::closed);
}

TEST_CASE("abandoned attempts while closed change nothing but their count") {
  circuit_breaker b(exact({.consecutive_failures = 2}));
  fail_n(b, 1, 0s);
  REQUIRE(b.try_acquire(0s));
  b.on_abandoned(0s);
  CHECK(b.failure_run() == 1);
  CHECK(b.abandoned() == 1);
  CHECK(b.state() == breaker_state::closed);
}

TEST_CASE("outcomes reported while open change only the counts") {
  circuit_breaker b(exact({.consecutive_failures = 1, .break_duration = 10s}));
  fail_n(b, 1, 0s);
  b.on_success(1s); // an attempt granted before it opened
  b.on_failure(2s);
  CHECK(b.state() == breaker_state::open);
  CHECK(b.open_until() == 10s);
  CHECK(b.successes() == 1);
  CHECK(b.failures() == 2);
  CHECK(b.times_opened() == 1);
}

TEST_CASE("the failure ratio opens the breaker only with the minimum throughput in the window") {
  circuit_breaker b(exact({.consecutive_failures = 0,
                           .failure_ratio = 0.5,
                           .minimum_throughput = 10,
                           .window = 10s,
                           .window_buckets = 10}));
  // 4 successes, 5 failures, alternating: 9 outcomes, below the minimum.
  for (int i = 0; i < 4; ++i) {
    fail_n(b, 1, 1s);
    REQUIRE(b.try_acquire(1s));
    b.on_success(1s);
  }
  fail_n(b, 1, 1s);
  CHECK(b.window_failures(1s) == 5);
  CHECK(b.window_successes(1s) == 4);
  CHECK(b.state() == breaker_state::closed);
  // The 10th outcome, a success: 5 / 10 failed, but only a failure can open the breaker.
  REQUIRE(b.try_acquire(1s));
  b.on_success(1s);
  CHECK(b.state() == breaker_state::closed);
  // The 11th, a failure: 6 / 11 >= 0.5.
  fail_n(b, 1, 2s);
  CHECK(b.state() == breaker_state::open);
}

TEST_CASE("old outcomes leave the breaker's window") {
  circuit_breaker b(exact({.consecutive_failures = 0,
                           .failure_ratio = 0.5,
                           .minimum_throughput = 4,
                           .window = 10s,
                           .window_buckets = 10}));
  fail_n(b, 3, 0s); // 3 failures in bucket 0
  CHECK(b.window_failures(9s) == 3);
  CHECK(b.window_failures(10s) == 0);
  // At 10 s those are gone: 3 more failures and a success do not reach 4 outcomes... until the
  // failure that makes 4.
  REQUIRE(b.try_acquire(10s));
  b.on_success(10s);
  fail_n(b, 2, 10s);
  CHECK(b.state() == breaker_state::closed);
  fail_n(b, 1, 10s);
  CHECK(b.state() == breaker_state::open); // 3 of 4
}

TEST_CASE("the break is jittered within its bounds, reproducibly for a seed") {
  auto open_for = [](std::uint64_t seed) {
    circuit_breaker b(
        {.consecutive_failures = 1, .break_duration = 10s, .break_jitter = 0.2, .seed = seed});
    fail_n(b, 1, 0s);
    return b.open_until();
  };
  std::vector<std::chrono::nanoseconds> seen;
  for (std::uint64_t s = 0; s < 50; ++s) {
    const auto d = open_for(s);
    CHECK(d >= 8s);
    CHECK(d <= 12s);
    seen.push_back(d);
  }
  CHECK(open_for(7) == open_for(7));
  CHECK(std::count(seen.begin(), seen.end(), seen.front()) < 50);
}

TEST_CASE("a break too long for the clock ends at its last instant, not before it began") {
  // Found by the policy fuzz target: a jittered break near the limit of nanoseconds overflowed.
  circuit_breaker b({.consecutive_failures = 1,
                     .break_duration = std::chrono::nanoseconds::max(),
                     .break_jitter = 0.5,
                     .seed = 3});
  fail_n(b, 1, 1h);
  CHECK(b.state() == breaker_state::open);
  CHECK(b.open_until() >= 1h);
  CHECK_FALSE(b.try_acquire(std::chrono::hours(24 * 365 * 100)));
}

TEST_CASE("the transition hook sees every change of state once, in order") {
  std::vector<std::tuple<breaker_state, breaker_state, std::chrono::nanoseconds>> log;
  circuit_breaker b(exact(
      {.consecutive_failures = 1,
       .break_duration = 1s,
       .on_transition = [&](breaker_state from, breaker_state to, std::chrono::nanoseconds now) {
         log.emplace_back(from, to, now);
       }}));
  fail_n(b, 1, 0s);
  REQUIRE(b.try_acquire(1s));
  b.on_failure(1s);
  REQUIRE(b.try_acquire(2s));
  b.on_success(3s);
  using S = breaker_state;
  REQUIRE(log.size() == 5);
  CHECK(log[0] == std::tuple(S::closed, S::open, 0s));
  CHECK(log[1] == std::tuple(S::open, S::half_open, 1s));
  CHECK(log[2] == std::tuple(S::half_open, S::open, 1s));
  CHECK(log[3] == std::tuple(S::open, S::half_open, 2s));
  CHECK(log[4] == std::tuple(S::half_open, S::closed, 3s));
  CHECK(b.times_opened() == 2);
  CHECK(b.times_half_opened() == 2);
  CHECK(b.times_closed() == 1);
}

TEST_CASE("bad breaker options name the field and its value") {
  CHECK(rejection({.failure_ratio = 1.5}) ==
        "coretry::circuit_breaker_options: failure_ratio = 1.500000 (must be in [0, 1])");
  CHECK(rejection({.consecutive_failures = 0, .failure_ratio = 0}).find("consecutive_failures") !=
        std::string::npos);
  CHECK(rejection({.minimum_throughput = 0}).find("minimum_throughput = 0") != std::string::npos);
  CHECK(rejection({.window = -1s}).find("window (ns) = -1000000000") != std::string::npos);
  CHECK(rejection({.window_buckets = 0}).find("window_buckets = 0") != std::string::npos);
  CHECK(rejection({.break_duration = 0s}).find("break_duration (ns) = 0") != std::string::npos);
  CHECK(rejection({.break_jitter = 1}).find("break_jitter = 1") != std::string::npos);
  CHECK(rejection({.half_open_probes = 0}).find("half_open_probes = 0") != std::string::npos);
  CHECK(rejection({}) == "valid");
}

TEST_CASE("two threads sharing one breaker keep its counts and states consistent") {
  circuit_breaker b({.consecutive_failures = 3,
                     .failure_ratio = 0.5,
                     .minimum_throughput = 10,
                     .window = 1s,
                     .break_duration = 10ms,
                     .half_open_probes = 2,
                     .seed = 3});
  std::atomic<std::uint64_t> granted{0}, refused{0}, reported{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const std::chrono::nanoseconds now = std::chrono::microseconds(i * 10 + t);
        if (!b.try_acquire(now)) {
          refused.fetch_add(1);
          continue;
        }
        granted.fetch_add(1);
        reported.fetch_add(1);
        // Failing in bursts: a run of failures every 64 attempts, else success.
        switch ((i + t) % 64 < 8 ? 0 : (i % 97 == 0 ? 1 : 2)) {
        case 0:
          b.on_failure(now);
          break;
        case 1:
          b.on_abandoned(now);
          break;
        default:
          b.on_success(now);
        }
        (void)b.state();
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(granted + refused == 40000);
  CHECK(b.refusals() == refused.load());
  CHECK(b.successes() + b.failures() + b.abandoned() == reported.load());
  CHECK(b.times_opened() > 0);
  // Every half-opening follows an opening; every closing follows a half-opening.
  CHECK(b.times_half_opened() <= b.times_opened());
  CHECK(b.times_closed() <= b.times_half_opened());
  CHECK(b.times_opened() <= b.times_half_opened() + 1);
}

TEST_CASE("isolate refuses everything until reset; reset closes with the counts cleared") {
  std::vector<std::tuple<breaker_state, breaker_state>> seen;
  auto o = exact();
  o.consecutive_failures = 3;
  o.on_transition = [&](breaker_state from, breaker_state to, std::chrono::nanoseconds) {
    seen.emplace_back(from, to);
  };
  circuit_breaker b(o);
  fail_n(b, 2, 0s);
  CHECK(b.failure_run() == 2);

  b.isolate(1s);
  CHECK(b.state() == breaker_state::isolated);
  CHECK(std::string(coretry::to_string(breaker_state::isolated)) == "isolated");
  CHECK(!b.try_acquire(1s));
  CHECK(!b.try_acquire(1000s)); // no break ends an isolation
  CHECK(b.refusals() == 2);
  b.on_success(2s); // an attempt granted before: counts in the totals only
  b.on_failure(2s);
  CHECK(b.state() == breaker_state::isolated);
  b.isolate(3s); // again: no second transition
  CHECK(b.times_isolated() == 1);

  b.reset(4s);
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.failure_run() == 0);
  CHECK(b.window_failures(4s) == 0);
  CHECK(b.try_acquire(4s));
  CHECK(seen == std::vector<std::tuple<breaker_state, breaker_state>>{
                    {breaker_state::closed, breaker_state::isolated},
                    {breaker_state::isolated, breaker_state::closed}});

  SUBCASE("reset of an open or half-open breaker closes it at once") {
    fail_n(b, 3, 5s);
    CHECK(b.state() == breaker_state::open);
    b.reset(5s);
    CHECK(b.state() == breaker_state::closed);
    fail_n(b, 3, 6s);
    REQUIRE(b.try_acquire(100s)); // the break is over: a probe
    CHECK(b.state() == breaker_state::half_open);
    b.reset(100s);
    CHECK(b.state() == breaker_state::closed);
    CHECK(b.probes_in_flight() == 0);
    CHECK(seen.back() == std::tuple{breaker_state::half_open, breaker_state::closed});
  }
  SUBCASE("reset of a closed breaker clears its counts, with no transition") {
    fail_n(b, 2, 5s);
    b.reset(5s);
    CHECK(b.failure_run() == 0);
    CHECK(b.window_failures(5s) == 0);
    CHECK(seen.size() == 2);
  }
  SUBCASE("isolate of an open breaker, from any thread") {
    fail_n(b, 3, 5s);
    std::thread t([&] { b.isolate(6s); });
    t.join();
    CHECK(b.state() == breaker_state::isolated);
    CHECK(seen.back() == std::tuple{breaker_state::open, breaker_state::isolated});
  }
}

TEST_CASE("a push-back is neither a failure nor a success: no run, no window, no trip") {
  circuit_breaker b(
      exact({.consecutive_failures = 3, .failure_ratio = 0.5, .minimum_throughput = 3}));
  for (int i = 0; i < 10; ++i) {
    REQUIRE(b.try_acquire(1ms * i));
    b.on_pushback(1ms * i);
  }
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.failure_run() == 0);
  CHECK(b.window_failures(10ms) == 0);
  CHECK(b.window_successes(10ms) == 0);
  CHECK(b.pushbacks() == 10);
  CHECK(b.failures() == 0);
  CHECK(b.successes() == 0);
  // Between two failures it neither resets the run nor adds to it.
  b.on_failure(20ms);
  b.on_pushback(21ms);
  b.on_failure(22ms);
  CHECK(b.failure_run() == 2);
}

TEST_CASE("a push-back frees a half-open probe slot and leaves the breaker half-open") {
  circuit_breaker b(exact({.consecutive_failures = 1, .break_duration = 1s}));
  REQUIRE(b.try_acquire(0s));
  b.on_failure(0s);
  REQUIRE(b.state() == breaker_state::open);
  REQUIRE(b.try_acquire(1s)); // the probe
  CHECK_FALSE(b.try_acquire(1s));
  b.on_pushback(1100ms);
  CHECK(b.state() == breaker_state::half_open);
  CHECK(b.probes_in_flight() == 0);
  CHECK(b.try_acquire(1200ms)); // the next probe
}

TEST_CASE("max_concurrent_calls refuses attempts beyond the cap until an outcome frees a slot") {
  circuit_breaker b(exact({.max_concurrent_calls = 3}));
  CHECK(b.try_acquire(0s));
  CHECK(b.try_acquire(0s));
  CHECK(b.try_acquire(0s));
  CHECK(b.in_flight() == 3);
  CHECK_FALSE(b.try_acquire(0s));
  CHECK(b.in_flight_refusals() == 1);
  CHECK(b.refusals() == 1);
  CHECK(b.state() == breaker_state::closed); // the cap is no failure
  // Every kind of outcome frees its slot.
  b.on_success(1ms);
  CHECK(b.try_acquire(1ms));
  b.on_failure(2ms);
  CHECK(b.try_acquire(2ms));
  b.on_abandoned(3ms);
  CHECK(b.try_acquire(3ms));
  b.on_pushback(4ms);
  CHECK(b.try_acquire(4ms));
  CHECK_FALSE(b.try_acquire(4ms));
  CHECK(b.in_flight() == 3);
  // A waiter refused by the cap asks again after about retry_interval.
  const auto wait = b.retry_after(4ms);
  CHECK(wait >= 50ms);
  CHECK(wait <= 150ms);
}

TEST_CASE(
    "max_concurrent_calls: a refusal by the state takes no slot, and the cap holds open or not") {
  circuit_breaker b(
      exact({.consecutive_failures = 1, .break_duration = 1s, .max_concurrent_calls = 2}));
  REQUIRE(b.try_acquire(0s));
  REQUIRE(b.try_acquire(0s));
  b.on_failure(0s); // opens; one attempt still in flight
  CHECK(b.in_flight() == 1);
  CHECK_FALSE(b.try_acquire(500ms)); // the break
  CHECK(b.in_flight() == 1);
  CHECK(b.in_flight_refusals() == 0);
  CHECK(b.try_acquire(1s)); // the probe takes the last slot
  CHECK(b.in_flight() == 2);
  b.on_success(1100ms); // the probe closes it
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.try_acquire(1100ms));
  CHECK_FALSE(b.try_acquire(1100ms)); // the stale attempt still holds its slot
  CHECK(b.in_flight_refusals() == 1);
  b.on_abandoned(1200ms);
  CHECK(b.try_acquire(1200ms));
}

TEST_CASE("the default breaker options are the recommended ones") {
  const circuit_breaker_options defaults{};
  const circuit_breaker_options recommended = coretry::presets::overload_safe_breaker();
  CHECK(defaults.consecutive_failures == 10);
  CHECK(defaults.break_duration == 1s);
  CHECK(defaults.consecutive_failures == recommended.consecutive_failures);
  CHECK(defaults.break_duration == recommended.break_duration);
  // A default breaker opens on the tenth failure in a row, for 1 s.
  circuit_breaker b(exact({.failure_ratio = 0}));
  fail_n(b, 9, 1s);
  CHECK(b.state() == breaker_state::closed);
  fail_n(b, 1, 1s);
  CHECK(b.state() == breaker_state::open);
  CHECK(b.open_until() == 2s);
}

TEST_CASE("max_concurrent_calls out of range is refused with its name") {
  CHECK(rejection({.max_concurrent_calls = 1'000'001}).find("max_concurrent_calls") !=
        std::string::npos);
}

// Part of issue 31: slow calls, a count-based window, the minimum number of calls.

namespace {

// A breaker that opens on slow calls only: its failure triggers are off.
circuit_breaker_options slow_only(unsigned minimum_calls = 4) {
  return exact({.consecutive_failures = 0,
                .failure_ratio = 0,
                .minimum_throughput = minimum_calls,
                .slow_call_duration = 100ms,
                .slow_call_ratio = 0.5});
}

// One granted attempt that took `took` and ended healthy at `now`.
void call(circuit_breaker& b, std::chrono::nanoseconds now, std::chrono::nanoseconds took,
          coretry::health h = coretry::health::healthy) {
  REQUIRE(b.try_acquire(now - took));
  b.on_outcome(h, now, took);
}

} // namespace

TEST_CASE("slow successes open the breaker once their ratio reaches the threshold") {
  circuit_breaker b(slow_only());
  call(b, 1s, 10ms);
  call(b, 2s, 150ms);
  call(b, 3s, 10ms);
  CHECK(b.state() == breaker_state::closed); // 1 slow of 3: under the minimum anyway
  call(b, 4s, 200ms);                        // 2 slow of 4: the ratio, with the minimum
  CHECK(b.state() == breaker_state::open);
  CHECK(b.times_opened() == 1);
  CHECK(b.slow_calls() == 2);
  CHECK(b.successes() == 4);
  CHECK(b.failures() == 0);
}

TEST_CASE("fast successes, and calls exactly at the slow duration, never open it") {
  circuit_breaker b(slow_only());
  for (int i = 1; i <= 50; ++i)
    call(b, std::chrono::milliseconds(i * 100), i % 2 ? 100ms : 5ms); // at it is not slower
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.slow_calls() == 0);
  CHECK(b.window_slow_calls(5s) == 0);
}

TEST_CASE("a slow failure is a failure, not a slow call") {
  circuit_breaker b(slow_only());
  for (int i = 1; i <= 4; ++i)
    call(b, std::chrono::seconds(i), 1s, coretry::health::unhealthy);
  CHECK(b.state() == breaker_state::closed); // the failure triggers are off
  CHECK(b.slow_calls() == 0);
  CHECK(b.failures() == 4);
}

TEST_CASE("the minimum number of calls holds the breaker closed, for either ratio") {
  circuit_breaker b(slow_only(10));
  for (int i = 1; i <= 9; ++i)
    call(b, std::chrono::milliseconds(i * 10), 500ms); // all slow, but only 9
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.window_slow_calls(100ms) == 9);
  call(b, 100ms, 500ms); // the tenth
  CHECK(b.state() == breaker_state::open);

  circuit_breaker f(
      exact({.consecutive_failures = 0, .failure_ratio = 0.5, .minimum_throughput = 5}));
  fail_n(f, 4, 1s);
  CHECK(f.state() == breaker_state::closed);
  fail_n(f, 1, 1s);
  CHECK(f.state() == breaker_state::open);
}

TEST_CASE("a slow probe opens a half-open breaker again; a fast one closes it") {
  circuit_breaker b(slow_only());
  for (int i = 1; i <= 4; ++i)
    call(b, std::chrono::seconds(i), 1s);
  REQUIRE(b.state() == breaker_state::open);
  const auto until = b.open_until();
  REQUIRE(b.try_acquire(until));
  REQUIRE(b.state() == breaker_state::half_open);
  b.on_outcome(coretry::health::healthy, until + 300ms, 300ms);
  CHECK(b.state() == breaker_state::open);
  CHECK(b.times_opened() == 2);
  const auto again = b.open_until();
  REQUIRE(b.try_acquire(again));
  b.on_outcome(coretry::health::healthy, again + 10ms, 10ms);
  CHECK(b.state() == breaker_state::closed);
}

TEST_CASE("the count-based window forgets the (N+1)-th newest call, however recent") {
  circuit_breaker b(exact({.consecutive_failures = 0,
                           .failure_ratio = 0.5,
                           .minimum_throughput = 4,
                           .window_type = coretry::sliding_window::count_based,
                           .window_calls = 4}));
  // Two failures, then many successes at the same instant: once four successes are in, the
  // failures are out of the window although no time has passed.
  fail_n(b, 1, 1s);
  b.on_success(1s);
  fail_n(b, 1, 1s);
  CHECK(b.window_failures(1s) == 2);
  for (int i = 0; i < 4; ++i)
    b.on_success(1s);
  CHECK(b.window_failures(1s) == 0);
  CHECK(b.window_successes(1s) == 4);
  // Now one failure in the last four: 25 %, closed; a second: 50 %, open.
  fail_n(b, 1, 1s);
  CHECK(b.state() == breaker_state::closed);
  fail_n(b, 1, 1s);
  CHECK(b.state() == breaker_state::open);
}

TEST_CASE("the count-based window keeps old calls a time-based one forgets") {
  const circuit_breaker_options o{.consecutive_failures = 0,
                                  .failure_ratio = 0.5,
                                  .minimum_throughput = 2,
                                  .window = 10s,
                                  .window_calls = 10};
  circuit_breaker by_time(exact(o));
  auto counted = o;
  counted.window_type = coretry::sliding_window::count_based;
  circuit_breaker by_count(exact(counted));
  for (auto* b : {&by_time, &by_count})
    fail_n(*b, 1, 0s); // an hour apart: the time window forgets the first
  for (auto* b : {&by_time, &by_count}) {
    b->on_success(1h);
    b->on_success(1h);
  }
  fail_n(by_time, 1, 1h);
  fail_n(by_count, 1, 1h);
  CHECK(by_time.state() == breaker_state::closed); // 1 of 3 in the last 10 s
  CHECK(by_count.state() == breaker_state::open);  // 2 of 4 in the last 10 calls
}

TEST_CASE("the slow-call and count-window options are validated, naming field and value") {
  CHECK(rejection({.slow_call_duration = 0s}).find("slow_call_duration (ns) = 0") !=
        std::string::npos);
  CHECK(rejection({.slow_call_duration = -1s}).find("slow_call_duration (ns) = -1000000000") !=
        std::string::npos);
  CHECK(rejection({.slow_call_ratio = 0}) ==
        "coretry::circuit_breaker_options: slow_call_ratio = 0.000000 (must be in (0, 1])");
  CHECK(rejection({.slow_call_ratio = 1.5}).find("slow_call_ratio = 1.5") != std::string::npos);
  CHECK(rejection({.window_calls = 0}).find("window_calls = 0") != std::string::npos);
  CHECK(rejection({.window_calls = 100'001}).find("window_calls = 100001") != std::string::npos);
  CHECK(
      rejection({.window_type = static_cast<coretry::sliding_window>(7)}).find("window_type = 7") !=
      std::string::npos);
  // The slow-call trigger alone is a way to open: the failure triggers may both be off.
  CHECK(rejection({.consecutive_failures = 0, .failure_ratio = 0, .slow_call_duration = 1s}) ==
        "valid");
  CHECK(rejection({.consecutive_failures = 0, .failure_ratio = 0}).find("consecutive_failures") !=
        std::string::npos);
  CHECK(std::string(coretry::to_string(coretry::sliding_window::count_based)) == "count_based");
}
