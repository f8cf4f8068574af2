// SPDX-License-Identifier: BSL-1.0
// adaptive_throttle: client-side adaptive throttling as the Google SRE book's "Handling
// Overload" chapter gives it, with explicit times and seeded draws.

#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>
#include <coretry/throttle.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <thread>

using namespace std::chrono_literals;
using coretry::adaptive_throttle;
using coretry::adaptive_throttle_options;
using std::chrono::nanoseconds;

namespace {

void outcomes(adaptive_throttle& t, nanoseconds now, int accepted, int refused) {
  for (int i = 0; i < accepted; ++i)
    t.on_success(now);
  for (int i = 0; i < refused; ++i)
    t.on_failure(now);
}

/// Runs `n` draws at `now`, none of them answered; returns the rejections and, through
/// `expected` and `variance`, what the formula predicts draw by draw.
int draws(adaptive_throttle& t, nanoseconds now, int n, double& expected, double& variance) {
  int rejected = 0;
  expected = variance = 0;
  for (int i = 0; i < n; ++i) {
    const double p = t.rejection_probability(now);
    expected += p;
    variance += p * (1 - p);
    if (!t.try_acquire(now))
      ++rejected;
  }
  return rejected;
}

} // namespace

TEST_CASE("throttle: bad options are refused, naming the field and the value") {
  CHECK_THROWS_WITH_AS(adaptive_throttle({.k = 0.5}), doctest::Contains("k = 0.5"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(adaptive_throttle({.k = std::numeric_limits<double>::quiet_NaN()}),
                       doctest::Contains("k = nan"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(adaptive_throttle({.window = 0s}), doctest::Contains("window (ns) = 0"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(adaptive_throttle({.window_buckets = 0}),
                       doctest::Contains("window_buckets = 0"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(adaptive_throttle({.window_buckets = 1001}),
                       doctest::Contains("window_buckets = 1001"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(adaptive_throttle({.window = 5ns, .window_buckets = 10}),
                       doctest::Contains("window_buckets = 10"), std::invalid_argument);
  CHECK_NOTHROW(adaptive_throttle({.k = 1}));
}

TEST_CASE(
    "throttle: the rejection probability is max(0, (requests - K accepts) / (requests + 1))") {
  adaptive_throttle t({.seed = 1});
  CHECK(t.rejection_probability(0s) == 0);
  CHECK(t.try_acquire(0s)); // p = 0: never a draw against it
  outcomes(t, 1s, 2, 8);
  CHECK(t.requests(1s) == 10);
  CHECK(t.accepts(1s) == 2);
  CHECK(t.rejection_probability(1s) == doctest::Approx((10.0 - 2 * 2) / 11));
  outcomes(t, 1s, 3, 0); // 13 requests, 5 accepts: K * accepts = 10
  CHECK(t.rejection_probability(1s) == doctest::Approx(3.0 / 14));
  outcomes(t, 1s, 2, 0); // 15 requests, 7 accepts
  CHECK(t.rejection_probability(1s) == doctest::Approx(1.0 / 16));
  outcomes(t, 1s, 1, 0); // 16 requests, 8 accepts: no longer above K * accepts
  CHECK(t.rejection_probability(1s) == 0);

  adaptive_throttle k11({.k = 1.1, .seed = 1});
  outcomes(k11, 0s, 10, 2); // 12 requests, 10 accepts
  CHECK(k11.rejection_probability(0s) == doctest::Approx((12 - 11.0) / 13));
  CHECK(k11.refusal() == coretry::errc::throttled_locally);
}

TEST_CASE("throttle: seeded draws reject as often as the formula says, and count as requests") {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    adaptive_throttle t({.seed = seed});
    outcomes(t, 0s, 100, 200); // p = 100 / 301 to start with; every rejection raises it
    double expected = 0, variance = 0;
    const int rejected = draws(t, 1s, 2000, expected, variance);
    MESSAGE("rejected " << rejected << ", expected " << expected << " +- " << std::sqrt(variance));
    CHECK(std::abs(rejected - expected) <= 4 * std::sqrt(variance));
    CHECK(t.rejected() == static_cast<std::uint64_t>(rejected));
    CHECK(t.granted() == static_cast<std::uint64_t>(2000 - rejected));
    CHECK(t.requests(1s) == 300 + static_cast<std::uint64_t>(rejected)); // local rejections count
    // Deterministic: the same seed draws the same stream.
    adaptive_throttle again({.seed = seed});
    outcomes(again, 0s, 100, 200);
    double e2 = 0, v2 = 0;
    CHECK(draws(again, 1s, 2000, e2, v2) == rejected);
  }
}

TEST_CASE("throttle: the probability falls as accepts come back, and the window forgets") {
  adaptive_throttle t({.window = 2min, .window_buckets = 60, .seed = 9});
  outcomes(t, 0s, 0, 100); // the upstream refuses everything
  CHECK(t.rejection_probability(0s) == doctest::Approx(100.0 / 101));
  double expected = 0, variance = 0;
  const int rejected = draws(t, 1s, 1000, expected, variance);
  CHECK(rejected >= 980); // a trickle goes through to find out when the upstream is back
  CHECK(rejected < 1000);

  // The upstream is back: each accepted attempt lowers the probability.
  double before = t.rejection_probability(2s);
  for (int i = 0; i < 1200; ++i) {
    t.on_success(2s);
    const double p = t.rejection_probability(2s);
    CHECK(p <= before);
    before = p;
  }
  // requests = 100 + rejections + 1200 (< 2300), accepts = 1200: 2 x 1200 covers them all.
  CHECK(t.rejection_probability(2s) == 0);
  CHECK(t.try_acquire(2s));

  // Refusals again, then silence: after one window nothing is remembered.
  adaptive_throttle w({.window = 2min, .window_buckets = 60, .seed = 9});
  outcomes(w, 10s, 0, 1000);
  CHECK(w.rejection_probability(10s + 117s) > 0.99); // still in the window (2 s buckets)
  CHECK(w.rejection_probability(10s + 2min) == 0);   // gone
  CHECK(w.requests(10s + 2min) == 0);
  for (int i = 0; i < 100; ++i)
    CHECK(w.try_acquire(10s + 2min));
}

TEST_CASE("throttle: an abandoned attempt counts for nothing") {
  adaptive_throttle t({.seed = 4});
  CHECK(t.try_acquire(0s));
  t.on_abandoned(0s);
  CHECK(t.requests(0s) == 0);
  CHECK(t.accepts(0s) == 0);
}

TEST_CASE("throttle: in the loop, a local rejection stops the operation with throttled_locally") {
  using namespace coretry::test;
  manual_clock::reset();
  asio::io_context io;
  auto throttle = std::make_shared<adaptive_throttle>(adaptive_throttle_options{.seed = 5});
  outcomes(*throttle, 0s, 0, 100000); // p = 0.99999: the first draw rejects
  for (const auto mode : {coretry::on_open::fail, coretry::on_open::wait}) {
    scripted_op op{{succeed(1)}};
    coretry::retry_policy p{.max_attempts = 3};
    p.breaker = throttle;
    p.when_open = mode; // the throttle cannot say when: waiting stops too
    coretry::retry_stats stats;
    int completions = 0;
    std::error_code error;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, p, stats,
        [&](std::error_code ec, int) {
          ++completions;
          error = ec;
        });
    drive(io, [&] { return completions > 0; });
    CHECK(completions == 1);
    CHECK(error == coretry::errc::throttled_locally);
    CHECK(stats.reason == coretry::errc::throttled_locally);
    CHECK(op.calls == 0);
    CHECK(manual_clock::elapsed() == 0s);
  }
}

TEST_CASE("throttle: two threads drawing and reporting keep the counts exact") {
  // A clock that stands still: every event stays in the window. Each rejection is one request;
  // each reported outcome is one more.
  adaptive_throttle t({.seed = 11});
  const nanoseconds now = 5s;
  constexpr int n = 20000;
  std::atomic<std::uint64_t> reported{0};
  auto worker = [&](bool accepted) {
    for (int i = 0; i < n; ++i)
      if (t.try_acquire(now)) {
        if (accepted || i % 3 == 0)
          t.on_success(now);
        else
          t.on_failure(now);
        reported.fetch_add(1, std::memory_order_relaxed);
      }
  };
  std::thread a(worker, true);
  std::thread b(worker, false);
  a.join();
  b.join();
  CHECK(t.granted() + t.rejected() == 2 * n);
  CHECK(t.requests(now) == t.rejected() + reported.load());
  CHECK(t.accepts(now) <= t.requests(now));
  const double r = static_cast<double>(t.requests(now));
  const double acc = static_cast<double>(t.accepts(now));
  CHECK(t.rejection_probability(now) == doctest::Approx(std::max(0.0, (r - 2 * acc) / (r + 1))));
}
