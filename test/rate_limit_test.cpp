// SPDX-License-Identifier: BSL-1.0
// The adaptive rate limiter on its own, with explicit times: measurement, the decrease on a
// throttle, the cubic climb back, and the waits of the token bucket.

#include <coretry/rate_limit.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using coretry::adaptive_rate_limiter;
using coretry::adaptive_rate_options;
using std::chrono::nanoseconds;

namespace {

std::string rejection(adaptive_rate_options o) {
  try {
    adaptive_rate_limiter l(o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "valid";
}

/// Successes every `step` from `from` (excluded) to `to` (included): 100 per second at 10 ms.
void succeed_until(adaptive_rate_limiter& l, nanoseconds from, nanoseconds to,
                   nanoseconds step = 10ms) {
  for (nanoseconds t = from + step; t <= to; t += step)
    l.on_success(t);
}

/// The rate on the default curve `t` seconds after a throttle at rate `w`.
double cubic(double w, double t) {
  const double k = std::cbrt(w * (1 - 0.7) / 0.4);
  return 0.4 * std::pow(t - k, 3) + w;
}

} // namespace

TEST_CASE("the limiter is unlimited and only measures until the first throttle") {
  adaptive_rate_limiter l;
  for (int i = 0; i < 1000; ++i)
    CHECK(l.acquire(0s) == 0ns);
  CHECK_FALSE(l.limiting());
  CHECK(l.rate() == std::numeric_limits<double>::infinity());
  succeed_until(l, -10ms, 2s);
  CHECK(l.rate() == std::numeric_limits<double>::infinity());
  CHECK(l.acquired() == 1000);
  CHECK(l.successes() == 201);
}

TEST_CASE("the measured rate counts responses per interval, smoothed") {
  adaptive_rate_limiter l;
  for (int i = 0; i < 10; ++i)
    l.on_success(100ms);         // interval 0
  CHECK(l.measured_rate() == 0); // no interval has ended yet
  l.on_success(500ms);           // interval 1 starts: 10 responses in 0.5 s
  CHECK(l.measured_rate() == doctest::Approx(20));
  for (int i = 0; i < 4; ++i)
    l.on_success(700ms); // interval 1 holds 5
  l.on_success(1000ms);  // 5 in 0.5 s = 10/s, smoothed: 0.8 * 10 + 0.2 * 20
  CHECK(l.measured_rate() == doctest::Approx(12));
  l.on_success(2000ms); // 1 response over two intervals (1 s): 1/s
  CHECK(l.measured_rate() == doctest::Approx(0.8 * 1 + 0.2 * 12));
}

TEST_CASE("a throttle cuts the rate to beta times the measured rate") {
  adaptive_rate_limiter l;
  succeed_until(l, 0s, 5s - 10ms); // 100 responses a second
  l.on_throttle(5s);
  CHECK(l.measured_rate() == doctest::Approx(100));
  CHECK(l.limiting());
  CHECK(l.rate() == doctest::Approx(70));
  CHECK(l.throttles() == 1);
}

TEST_CASE("after a throttle the rate climbs back along the cubic curve") {
  adaptive_rate_limiter l;
  succeed_until(l, 0s, 5s - 10ms);
  l.on_throttle(5s); // W = 100, K = cbrt(75) = 4.217 s
  const double k = std::cbrt(75.0);
  succeed_until(l, 5s, 6s);
  CHECK(l.rate() == doctest::Approx(cubic(100, 1)));
  CHECK(l.rate() == doctest::Approx(86.68).epsilon(1e-3));
  succeed_until(l, 6s, 7s);
  CHECK(l.rate() == doctest::Approx(95.64).epsilon(1e-3));
  // At K seconds the curve is back at W and flat.
  succeed_until(l, 7s, 9210ms);
  l.on_success(5s + nanoseconds(static_cast<std::int64_t>(k * 1e9)));
  CHECK(l.rate() == doctest::Approx(100).epsilon(1e-6));
  succeed_until(l, 9210ms, 15s);
  CHECK(l.rate() == doctest::Approx(cubic(100, 10)));
  CHECK(l.rate() == doctest::Approx(177.4).epsilon(1e-3));
  // Past twice the measured rate (100/s here) the cap holds.
  succeed_until(l, 15s, 20s);
  CHECK(cubic(100, 15) > 200);
  CHECK(l.rate() == doctest::Approx(200));
}

TEST_CASE("a throttle while limited starts from the lower of the rate and the measured rate") {
  adaptive_rate_limiter l;
  succeed_until(l, 0s, 5s - 10ms);
  l.on_throttle(5s);
  succeed_until(l, 5s, 6s); // rate 86.68, measured 100
  l.on_throttle(6s);
  CHECK(l.rate() == doctest::Approx(0.7 * cubic(100, 1)));
  // The new curve starts from there: W = 86.68.
  succeed_until(l, 6s, 7s);
  CHECK(l.rate() == doctest::Approx(cubic(cubic(100, 1), 1)));
}

TEST_CASE("throttles with no traffic drive the rate down to its floor, never below") {
  adaptive_rate_limiter l({.initial_rate = 8});
  CHECK(l.rate() == 8);
  double expected = 8;
  for (int i = 0; i < 20; ++i) {
    l.on_throttle(std::chrono::milliseconds(i)); // all in interval 0: no measure yet
    expected = std::max(0.5, expected * 0.7);
    CHECK(l.rate() == doctest::Approx(expected));
  }
  CHECK(l.rate() == 0.5);
}

TEST_CASE("a throttle before anything was measured or limited drops to the floor") {
  adaptive_rate_limiter l;
  l.on_throttle(1s);
  CHECK(l.rate() == doctest::Approx(0.5));
}

TEST_CASE("a fixed initial rate is kept until the first throttle") {
  adaptive_rate_limiter l({.initial_rate = 10});
  succeed_until(l, 0s, 10s);
  CHECK(l.rate() == 10);
}

TEST_CASE("acquire hands out a full bucket at once, then spaces tokens at the rate") {
  adaptive_rate_limiter l({.burst = 1s, .initial_rate = 10}); // 100 ms a token, 10 in the bucket
  for (int i = 0; i < 10; ++i)
    CHECK(l.acquire(0s) == 0ns);
  CHECK(l.acquire(0s) == 100ms);
  CHECK(l.acquire(0s) == 200ms);
  // Reserved tokens are kept: at 250 ms the next token is the one due at 300 ms.
  CHECK(l.acquire(250ms) == 50ms);
  // After a quiet spell the bucket is full again, never more than full.
  for (int i = 0; i < 10; ++i)
    CHECK(l.acquire(100s) == 0ns);
  CHECK(l.acquire(100s) == 100ms);
}

TEST_CASE("a throttle empties the bucket: the next send waits one interval at the new rate") {
  adaptive_rate_limiter l({.initial_rate = 10});
  l.on_throttle(5s); // nothing measured: from the current rate, 10 -> 7
  CHECK(l.rate() == doctest::Approx(7));
  CHECK(l.acquire(5s) == nanoseconds(142'857'143));
  CHECK(l.acquire(5s) == nanoseconds(2 * 142'857'143));
}

TEST_CASE("the bucket holds at least one token when the rate is below one a second") {
  adaptive_rate_limiter l({.burst = 100ms, .initial_rate = 0.5}); // 2 s a token
  CHECK(l.acquire(0s) == 0ns);
  CHECK(l.acquire(0s) == 2s);
  CHECK(l.acquire(100s) == 0ns);
  CHECK(l.acquire(100s) == 2s);
}

TEST_CASE("times at the ends of the clock saturate the bucket instead of overflowing") {
  // Found by the policy fuzz target: reserving a token far in the future overflowed int64.
  constexpr auto far = std::numeric_limits<nanoseconds::rep>::max();
  constexpr auto early = std::numeric_limits<nanoseconds::rep>::min();
  adaptive_rate_limiter l({.burst = 1s, .initial_rate = 0.5}); // 2 s a token
  for (int i = 0; i < 4; ++i)
    CHECK(l.acquire(nanoseconds(far - 10)) >= 0ns);
  CHECK(l.acquire(nanoseconds(far - 10)) <= nanoseconds(10));
  adaptive_rate_limiter m({.burst = 1s, .initial_rate = 0.5});
  // Before the bucket's own dawn the next token is ages away: refused, not a wrapped wait.
  CHECK(m.acquire(nanoseconds(early + 10)) == coretry::unlimited);
  CHECK(m.acquire(nanoseconds(early + 10)) == coretry::unlimited);
  CHECK(m.acquired() == 0);
}

TEST_CASE("bad rate limiter options name the field and its value") {
  CHECK(rejection({.beta = 1}) ==
        "coretry::adaptive_rate_options: beta = 1.000000 (must be in (0, 1))");
  CHECK(rejection({.scale = 0}).find("scale = 0") != std::string::npos);
  CHECK(rejection({.smoothing = 0}).find("smoothing = 0") != std::string::npos);
  CHECK(rejection({.measure_interval = 0s}).find("measure_interval (ns) = 0") != std::string::npos);
  CHECK(rejection({.min_rate = -1}).find("min_rate = -1") != std::string::npos);
  CHECK(rejection({.burst = -1ns}).find("burst (ns) = -1") != std::string::npos);
  CHECK(rejection({.initial_rate = std::nan("")}).find("initial_rate = nan") != std::string::npos);
  CHECK(rejection({}) == "valid");
}

TEST_CASE("two threads sharing one rate limiter keep every event and a sane rate") {
  adaptive_rate_limiter l({.initial_rate = 1000});
  std::atomic<std::uint64_t> negative{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const nanoseconds now = std::chrono::microseconds(i * 100 + t * 50);
        if (l.acquire(now) < 0ns)
          negative.fetch_add(1);
        if ((i + t) % 50 == 0)
          l.on_throttle(now);
        else
          l.on_success(now);
        (void)l.rate();
        (void)l.measured_rate();
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(negative.load() == 0);
  CHECK(l.acquired() + l.refused() == 40000); // waits past max_wait are refused
  CHECK(l.throttles() + l.successes() == 40000);
  CHECK(l.throttles() == 800);
  CHECK(l.rate() >= 0.5);
  CHECK(std::isfinite(l.rate()));
  CHECK(l.measured_rate() > 0);
}

TEST_CASE("a min_rate far below one a second does not overflow to a 1 ns interval") {
  adaptive_rate_limiter l({.min_rate = 1e-12, .burst = 1s, .initial_rate = 1e-12});
  (void)l.acquire(0s);
  const auto second = l.acquire(0s);
  CHECK(second >= 1s); // refused, or a long wait: anything but "now"
  int at_once = 0;
  for (int i = 0; i < 1000; ++i)
    at_once += l.acquire(0s) == 0ns;
  CHECK(at_once == 0);
}

TEST_CASE("at its floor rate the limiter refuses waits longer than max_wait") {
  adaptive_rate_limiter l({.burst = 100ms, .initial_rate = 1, .max_wait = 3s}); // 1 s a token
  CHECK(l.acquire(0s) == 0ns);
  CHECK(l.acquire(0s) == 1s);
  CHECK(l.acquire(0s) == 2s);
  CHECK(l.acquire(0s) == 3s);
  CHECK(l.acquire(0s) == coretry::unlimited); // 4 s: nothing reserved
  CHECK(l.refused() == 1);
  CHECK(l.acquire(1s) == 3s); // the bucket moved on by one token, not by the refused one
}

TEST_CASE("a token handed back shortens the next caller's wait by one interval") {
  adaptive_rate_limiter l({.burst = 100ms, .initial_rate = 10}); // 100 ms a token
  CHECK(l.acquire(0s) == 0ns);
  CHECK(l.acquire(0s) == 100ms);
  CHECK(l.acquire(0s) == 200ms);
  l.release(0s);
  l.release(0s);
  CHECK(l.acquire(0s) == 100ms);
  CHECK(l.released() == 2);
  // Never back past what a full bucket holds.
  for (int i = 0; i < 10; ++i)
    l.release(0s);
  CHECK(l.acquire(0s) == 0ns);
  CHECK(l.acquire(0s) == 100ms);
}

TEST_CASE("max_wait must be positive") {
  CHECK_THROWS_WITH_AS(adaptive_rate_limiter({.max_wait = 0s}),
                       doctest::Contains("max_wait (ns) = 0"), std::invalid_argument);
}
