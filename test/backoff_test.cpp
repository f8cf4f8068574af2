// SPDX-License-Identifier: BSL-1.0
#include <coretry/backoff.hpp>
#include <coretry/presets.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using coretry::backoff;
using coretry::fast_rng;
using coretry::jitter;
using std::chrono::nanoseconds;

namespace {

std::vector<nanoseconds> curve(const backoff& b, unsigned n) {
  std::vector<nanoseconds> out;
  for (unsigned i = 0; i < n; ++i)
    out.push_back(b.base_delay(i));
  return out;
}

struct sample_stats {
  double mean = 0;
  double stddev = 0;
  nanoseconds min = nanoseconds::max();
  nanoseconds max = nanoseconds::min();
};

sample_stats draw(const backoff& b, unsigned retry, int n, std::uint64_t seed = 7) {
  fast_rng rng(seed);
  sample_stats s;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const nanoseconds d = b.delay(retry, b.initial(), rng);
    s.min = std::min(s.min, d);
    s.max = std::max(s.max, d);
    const double x = static_cast<double>(d.count());
    sum += x;
    sum2 += x * x;
  }
  s.mean = sum / n;
  s.stddev = std::sqrt(sum2 / n - s.mean * s.mean);
  return s;
}

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

} // namespace

TEST_CASE("fixed backoff waits the same delay before every retry") {
  const auto b = backoff::fixed(250ms);
  CHECK(curve(b, 4) == std::vector<nanoseconds>{250ms, 250ms, 250ms, 250ms});
  fast_rng rng(1);
  CHECK(b.delay(1000, 0ns, rng) == 250ms);
}

TEST_CASE("linear backoff grows by its step up to the cap") {
  const auto b = backoff::linear(100ms, 150ms, 500ms);
  CHECK(curve(b, 6) == std::vector<nanoseconds>{100ms, 250ms, 400ms, 500ms, 500ms, 500ms});
  CHECK(b.base_delay(4'000'000'000u) == 500ms);
}

TEST_CASE("exponential backoff multiplies up to the cap and never overflows") {
  const auto b = backoff::exponential(100ms, 2.0, 10s);
  CHECK(curve(b, 9) ==
        std::vector<nanoseconds>{100ms, 200ms, 400ms, 800ms, 1600ms, 3200ms, 6400ms, 10s, 10s});
  CHECK(b.base_delay(100'000) == 10s);
  const auto huge = backoff::exponential(1s, 1000.0, nanoseconds::max());
  CHECK(huge.base_delay(50) == nanoseconds::max());
  const auto b3 = backoff::exponential(1s, 1.5, 5min);
  CHECK(b3.base_delay(2) == 2250ms);
}

TEST_CASE("the exponential curve agrees with initial * multiplier^n, capped, for any multiplier") {
  for (double m : {1.0, 1.0001, 1.05, 1.5, 2.0, 3.7, 10.0, 1000.0}) {
    for (nanoseconds cap :
         {nanoseconds(1s), nanoseconds(32s), nanoseconds(24h), nanoseconds::max()}) {
      const auto b = backoff::exponential(7ms, m, cap);
      for (unsigned n = 0; n < 400; n = n < 40 ? n + 1 : n * 2) {
        const double expected =
            std::min(static_cast<double>(cap.count()), 7e6 * std::pow(m, static_cast<double>(n)));
        const double got = static_cast<double>(b.base_delay(n).count());
        INFO("multiplier ", m, ", cap ", cap.count(), "ns, retry ", n);
        CHECK(std::abs(got - expected) <= 1.0 + expected * 1e-12); // whole nanoseconds
      }
    }
  }
  CHECK(backoff::exponential(7ms, 1.0001, 1s).base_delay(4'000'000'000u) == 1s);
  CHECK(backoff::exponential(7ms, 1.0, 1s).base_delay(4'000'000'000u) == 7ms);
}

TEST_CASE("no jitter returns the curve itself") {
  const auto b = backoff::exponential(10ms, 3.0, 1s).with_jitter(jitter::none());
  fast_rng rng(3);
  CHECK(b.delay(0, 0ns, rng) == 10ms);
  CHECK(b.delay(2, 0ns, rng) == 90ms);
  CHECK(b.delay(9, 0ns, rng) == 1s);
}

TEST_CASE("full jitter draws uniformly from zero to the curve") {
  const auto b = backoff::exponential(100ms, 2.0, 10s).with_jitter(jitter::full());
  const auto s = draw(b, 3, 20000); // d = 800 ms
  CHECK(s.min >= 0ns);
  CHECK(s.max <= 800ms);
  CHECK(s.mean == doctest::Approx(400e6).epsilon(0.02));
  CHECK(s.stddev == doctest::Approx(800e6 / std::sqrt(12.0)).epsilon(0.03));
  CHECK(s.min < 10ms); // the whole range is used
  CHECK(s.max > 790ms);
}

TEST_CASE("equal jitter keeps half the curve and randomises the other half") {
  const auto b = backoff::exponential(100ms, 2.0, 10s).with_jitter(jitter::equal());
  const auto s = draw(b, 2, 20000); // d = 400 ms
  CHECK(s.min >= 200ms);
  CHECK(s.max <= 400ms);
  CHECK(s.mean == doctest::Approx(300e6).epsilon(0.02));
}

TEST_CASE("decorrelated jitter draws between the base and three times the previous delay") {
  const auto b = backoff::exponential(100ms, 2.0, 2s).with_jitter(jitter::decorrelated());
  fast_rng rng(11);
  nanoseconds previous = b.initial();
  bool reached_cap = false;
  for (unsigned i = 0; i < 2000; ++i) {
    const nanoseconds d = b.delay(i, previous, rng);
    CHECK(d >= 100ms);
    CHECK(d <= std::min<nanoseconds>(2s, 3 * previous));
    reached_cap = reached_cap || d == 2s;
    previous = d;
  }
  CHECK(reached_cap);
  // The first draw is U(base, 3 * base): mean 2 * base.
  const auto s = draw(b, 0, 20000);
  CHECK(s.mean == doctest::Approx(200e6).epsilon(0.02));
}

TEST_CASE("normal jitter adds a proportional normal variate and is never negative") {
  const auto b = backoff::exponential(100ms, 2.0, 10s).with_jitter(jitter::normal(0.1));
  const auto s = draw(b, 1, 40000); // d = 200 ms, stddev 20 ms
  CHECK(s.mean == doctest::Approx(200e6).epsilon(0.01));
  CHECK(s.stddev == doctest::Approx(20e6).epsilon(0.05));
  const auto wide = backoff::fixed(100ms).with_jitter(jitter::normal(3.0));
  const auto w = draw(wide, 0, 20000);
  CHECK(w.min == 0ns); // clamped, not negative
}

TEST_CASE("additive jitter adds up to max_extra on top of the capped curve") {
  const auto b = backoff::exponential(1s, 2.0, 32s).with_jitter(jitter::additive(1s));
  const auto s = draw(b, 2, 20000); // d = 4 s
  CHECK(s.min >= 4s);
  CHECK(s.max <= 5s);
  CHECK(s.mean == doctest::Approx(4.5e9).epsilon(0.01));
  const auto capped = draw(b, 30, 1000);
  CHECK(capped.min >= 32s);
  CHECK(capped.max <= 33s);
}

TEST_CASE("truncated additive jitter: min(2^n s + U(0, 1 s), max), seeded") {
  const auto b = coretry::presets::truncated_exponential(1s, 32s, 1s);
  CHECK(b.jitter_spec().truncated);
  CHECK(b.to_string() == "exponential(1s, x2, max 32s) + truncated additive jitter");
  const auto s = draw(b, 2, 20000); // 4 s + U(0, 1 s), below the cap
  CHECK(s.min >= 4s);
  CHECK(s.max <= 5s);
  CHECK(s.mean == doctest::Approx(4.5e9).epsilon(0.01));
  // Near the cap the sum is cut at 32 s: 2^4 s = 16 s plus up to 1 s stays below; 31.5 s with
  // `initial` 31.5 s (one retry below the cap) lands on 32 s about half the time.
  const auto near =
      backoff::exponential(31500ms, 2.0, 32s).with_jitter(jitter::additive_truncated(1s));
  fast_rng rng(7);
  int at_cap = 0;
  for (int i = 0; i < 10000; ++i) {
    const auto d = near.delay(0, 0ns, rng);
    CHECK(d >= 31500ms);
    CHECK(d <= 32s);
    at_cap += d == 32s;
  }
  CHECK(at_cap == doctest::Approx(5000).epsilon(0.05));
  const auto capped = draw(b, 30, 1000); // past the cap: always the cap
  CHECK(capped.min == 32s);
  CHECK(capped.max == 32s);
  CHECK(message_of([] { (void)jitter::additive_truncated(-1s); }).find("max_extra") !=
        std::string::npos);
}

TEST_CASE("presets are ordinary policies a caller can adjust") {
  auto safe = coretry::presets::overload_safe();
  CHECK(safe.max_attempts == coretry::unlimited_attempts);
  CHECK(safe.attempt_timeout == 2s);
  REQUIRE(safe.breaker);
  REQUIRE(safe.budget);
  auto copy = safe;
  CHECK(copy.breaker == safe.breaker); // copies share one upstream's breaker
  safe.attempt_timeout = 500ms;        // and every field is still the caller's
  safe.validate();
  CHECK(coretry::presets::overload_safe_breaker().consecutive_failures == 10);
  CHECK(coretry::presets::overload_safe_budget().ratio == 0.1);
  // Without a registry it holds a placeholder breaker, which validate() refuses.
  CHECK_THROWS_AS(coretry::presets::overload_safe_per_endpoint().validate(), std::invalid_argument);

  const auto forever = coretry::presets::retry_forever(30s);
  CHECK(forever.max_attempts == coretry::unlimited_attempts);
  CHECK(forever.deadline == coretry::unlimited);
  CHECK(forever.backoff.max_delay() == 30s);
  CHECK(forever.backoff.jitter_spec().kind == coretry::jitter_kind::full);
  CHECK_THROWS_AS((void)coretry::presets::retry_forever(10ms, 1s), std::invalid_argument);

  const auto cloud = coretry::presets::cloud_storage(64s, 5min);
  CHECK(cloud.deadline == 5min);
  CHECK(cloud.backoff.initial() == 1s);
  CHECK(cloud.backoff.max_delay() == 64s);
  CHECK(cloud.backoff.jitter_spec().truncated);
  CHECK(message_of([] { (void)coretry::presets::cloud_storage(500ms); }).find("max_backoff") !=
        std::string::npos);
  CHECK(message_of([] { (void)coretry::presets::cloud_storage(32s, 0s); }).find("deadline") !=
        std::string::npos);
}

TEST_CASE("a seed makes the delays reproducible, different seeds give different streams") {
  const auto b = backoff::exponential(100ms, 2.0, 10s).with_jitter(jitter::full());
  fast_rng a(42), c(42), d(43);
  bool differs = false;
  for (unsigned i = 0; i < 10; ++i) {
    const auto x = b.delay(i, 0ns, a);
    CHECK(x == b.delay(i, 0ns, c));
    differs = differs || x != b.delay(i, 0ns, d);
  }
  CHECK(differs);
  CHECK(fast_rng::from_entropy()() != fast_rng::from_entropy()());
}

TEST_CASE("invalid parameters are rejected with the field and its value") {
  CHECK(message_of([] { (void)backoff::fixed(-1ms); }) ==
        "coretry::backoff::fixed: delay = -1000000ns (must not be negative)");
  CHECK(message_of([] { (void)backoff::exponential(0ms); }).find("initial = 0ns") !=
        std::string::npos);
  CHECK(message_of([] { (void)backoff::exponential(1ms, 0.5); }).find("multiplier = 0.5") !=
        std::string::npos);
  CHECK(message_of([] { (void)backoff::exponential(1s, 2.0, 1ms); }).find("max = 1000000ns") !=
        std::string::npos);
  CHECK(message_of([] { (void)backoff::linear(1ms, -1ms, 1s); }).find("step = -1000000ns") !=
        std::string::npos);
  CHECK(message_of([] { (void)jitter::normal(-0.1); }).find("relative_stddev = -0.1") !=
        std::string::npos);
  CHECK(message_of([] { (void)jitter::additive(-1s); }).find("max_extra") != std::string::npos);
  CHECK(message_of([] {
          (void)backoff::fixed(0ms).with_jitter(jitter::decorrelated());
        }).find("initial = 0ns") != std::string::npos);
  CHECK_THROWS_AS((void)backoff::exponential(1ms, std::nan("")), std::invalid_argument);
  CHECK_THROWS_AS((void)backoff::fixed(1ms).with_jitter(jitter{coretry::jitter_kind::normal, -2.0}),
                  std::invalid_argument);
}

TEST_CASE("jitter kinds have names that parse back") {
  for (auto k : {coretry::jitter_kind::none, coretry::jitter_kind::full,
                 coretry::jitter_kind::equal, coretry::jitter_kind::decorrelated,
                 coretry::jitter_kind::normal, coretry::jitter_kind::additive})
    CHECK(coretry::parse_jitter_kind(coretry::to_string(k)) == k);
  CHECK_FALSE(coretry::parse_jitter_kind("fulll").has_value());
  CHECK(backoff::exponential(100ms, 2.0, 32s).with_jitter(jitter::full()).to_string() ==
        "exponential(100ms, x2, max 32s) + full jitter");
  CHECK(backoff::fixed(1500us).to_string() == "fixed(1500us)");
}
