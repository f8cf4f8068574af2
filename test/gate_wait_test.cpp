// SPDX-License-Identifier: BSL-1.0
// Waiting instead of failing (`retry_policy::when_open = on_open::wait`): an attempt the
// breaker refuses waits on the loop's timer until the breaker says it may pass, within the
// deadline; the real breaker spreads the waiters past the break and ramps them in after it
// closes. On the manual clock.

#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/hedge.hpp>
#include <coretry/overload.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::on_open;
using coretry::retry_policy;
using std::chrono::nanoseconds;

namespace {

/// Refuses until `open_until` and says so; logs grants and outcomes.
struct timed_gate final : coretry::attempt_gate {
  nanoseconds open_until{0};
  nanoseconds wait_step{0}; ///< nonzero: refuse for ever, asking for this wait each time
  int granted = 0, refused = 0, asked = 0;
  std::vector<std::string> log;
  bool try_acquire(nanoseconds now) noexcept override {
    if (wait_step > nanoseconds::zero() || now < open_until) {
      ++refused;
      return false;
    }
    ++granted;
    return true;
  }
  nanoseconds retry_after(nanoseconds now) noexcept override {
    ++asked;
    return wait_step > nanoseconds::zero() ? wait_step : open_until - now;
  }
  void on_success(nanoseconds) noexcept override { log.push_back("success"); }
  void on_failure(nanoseconds) noexcept override { log.push_back("failure"); }
  void on_abandoned(nanoseconds) noexcept override { log.push_back("abandoned"); }
};

/// A gate that refuses and cannot say when (the default `retry_after`).
struct closed_door final : coretry::attempt_gate {
  bool try_acquire(nanoseconds) noexcept override { return false; }
  void on_success(nanoseconds) noexcept override {}
  void on_failure(nanoseconds) noexcept override {}
  void on_abandoned(nanoseconds) noexcept override {}
};

struct counting_rate final : coretry::send_rate {
  int acquired = 0, released = 0;
  std::vector<nanoseconds> released_at;
  nanoseconds acquire(nanoseconds) noexcept override {
    ++acquired;
    return {};
  }
  void release(nanoseconds now) noexcept override {
    ++released;
    released_at.push_back(now);
  }
  void on_throttle(nanoseconds) noexcept override {}
  void on_success(nanoseconds) noexcept override {}
};

struct counting_budget final : coretry::retry_budget {
  int granted = 0, refunded = 0;
  std::vector<nanoseconds> granted_at;
  bool try_retry(nanoseconds now) noexcept override {
    ++granted;
    granted_at.push_back(now);
    return true;
  }
  void refund(nanoseconds) noexcept override { ++refunded; }
};

retry_policy waiting(std::shared_ptr<coretry::attempt_gate> gate) {
  retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(10ms)};
  p.breaker = std::move(gate);
  p.when_open = on_open::wait;
  return p;
}

} // namespace

TEST_CASE("wait: a refused first attempt waits until the breaker lets it through, then goes out") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<timed_gate>();
  gate->open_until = 5s;
  scripted_op op{{succeed(7)}};
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, waiting(gate), stats);
  CHECK(r.completions == 1);
  CHECK(!r.error);
  CHECK(r.value == 7);
  CHECK(op.started == std::vector<manual_clock::duration>{5s});
  CHECK(stats.attempts == 1); // the wait is no attempt
  CHECK(gate->refused == 1);
  CHECK(gate->asked == 1);
  CHECK(gate->log == std::vector<std::string>{"success"});
}

TEST_CASE("wait: a retry the breaker refuses waits too, and spends no attempt") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<timed_gate>();
  scripted_op op{{fail(refused), succeed(3)}};
  retry_policy p = waiting(gate);
  p.max_attempts = 2;
  p.on_retry = [&](const coretry::retry_event&) { gate->open_until = 4s; };
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.completions == 1);
  CHECK(r.value == 3);
  CHECK(op.started == std::vector<manual_clock::duration>{0s, 4s});
  CHECK(stats.attempts == 2);
}

TEST_CASE("fail (the default), or a gate that cannot say when: stops at once with circuit_open") {
  manual_clock::reset();
  asio::io_context io;
  SUBCASE("on_open::fail") {
    auto gate = std::make_shared<timed_gate>();
    gate->open_until = 5s;
    retry_policy p = waiting(gate);
    p.when_open = on_open::fail;
    scripted_op op{{succeed(1)}};
    coretry::retry_stats stats;
    const auto r = run_retry(io, op, p, stats);
    CHECK(r.error == coretry::errc::circuit_open);
    CHECK(r.at == 0s);
    CHECK(gate->asked == 0);
    CHECK(op.calls == 0);
  }
  SUBCASE("a gate that cannot say when (coretry::unlimited)") {
    scripted_op op{{succeed(1)}};
    coretry::retry_stats stats;
    const auto r = run_retry(io, op, waiting(std::make_shared<closed_door>()), stats);
    CHECK(r.completions == 1);
    CHECK(r.error == coretry::errc::circuit_open);
    CHECK(r.at == 0s);
    CHECK(op.calls == 0);
  }
}

TEST_CASE("wait: a wait that would reach the deadline ends at once with circuit_open") {
  manual_clock::reset();
  asio::io_context io;
  SUBCASE("the break outlasts the deadline: no wait at all") {
    auto gate = std::make_shared<timed_gate>();
    gate->open_until = 10s;
    retry_policy p = waiting(gate);
    p.deadline = 3s;
    scripted_op op{{succeed(1)}};
    coretry::retry_stats stats;
    const auto r = run_retry(io, op, p, stats);
    CHECK(r.completions == 1);
    CHECK(r.error == coretry::errc::circuit_open);
    CHECK(stats.reason == coretry::errc::circuit_open);
    CHECK(r.at == 0s); // not at the deadline: waiting would not help
    CHECK(op.calls == 0);
  }
  SUBCASE("waits while they fit, stops when the next would not") {
    auto gate = std::make_shared<timed_gate>();
    gate->wait_step = 1s;
    retry_policy p = waiting(gate);
    p.deadline = 3500ms;
    scripted_op op{{succeed(1)}};
    coretry::retry_stats stats;
    const auto r = run_retry(io, op, p, stats);
    CHECK(r.completions == 1);
    CHECK(r.error == coretry::errc::circuit_open);
    CHECK(r.at == 3s); // waited 0-1, 1-2, 2-3; 3-4 would end past 3.5
    CHECK(gate->asked == 4);
    CHECK(stats.attempts == 0);
    CHECK(op.calls == 0);
  }
}

TEST_CASE("wait: cancelled while waiting, the operation completes once with operation_aborted") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<timed_gate>();
  gate->open_until = 1h;
  scripted_op op{{succeed(1)}};
  retry_policy p = waiting(gate);
  outcome o;
  coretry::retry_stats stats;
  SUBCASE("the caller's slot") {
    asio::cancellation_signal cancel;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, p, stats,
        asio::bind_cancellation_slot(cancel.slot(), record(o)));
    drive(io, [&] { return manual_clock::elapsed() >= 0s && gate->refused > 0; });
    manual_clock::advance(10s);
    io.restart();
    io.poll();
    REQUIRE(o.completions == 0);
    cancel.emit(asio::cancellation_type::terminal);
    drive(io, [&] { return o.completions > 0; });
    CHECK(stats.reason == coretry::test::operation_aborted);
  }
  SUBCASE("the group token") {
    coretry::cancellation_source source;
    p.cancellation = source.token();
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, p, stats, record(o));
    drive(io, [&] { return gate->refused > 0; });
    manual_clock::advance(10s);
    io.restart();
    io.poll();
    REQUIRE(o.completions == 0);
    source.cancel();
    drive(io, [&] { return o.completions > 0; });
    CHECK(stats.reason == coretry::errc::cancelled);
  }
  io.restart();
  io.poll();
  CHECK(o.completions == 1);
  CHECK(o.error == coretry::test::operation_aborted);
  CHECK(o.at == 10s);
  CHECK(op.calls == 0);
  CHECK(gate->log.empty()); // nothing was granted, nothing to report
  CHECK(manual_clock::pending() == 0);
}

TEST_CASE("wait: no send token and no retry budget is held while waiting") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<timed_gate>();
  auto rate = std::make_shared<counting_rate>();
  auto budget = std::make_shared<counting_budget>();
  scripted_op op{{fail(refused), succeed(5)}};
  retry_policy p = waiting(gate);
  p.rate_limit = rate;
  p.budget = budget;
  p.on_retry = [&](const coretry::retry_event&) { gate->open_until = 6s; };
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.value == 5);
  CHECK(op.started == std::vector<manual_clock::duration>{0s, 6s});
  // The retry's token and charge, taken at 10 ms, went back when the breaker refused; both were
  // taken again when it let the retry through at 6 s.
  CHECK(rate->released_at == std::vector<nanoseconds>{10ms});
  CHECK(rate->acquired == 3);
  CHECK(budget->refunded == 1);
  CHECK(budget->granted_at == std::vector<nanoseconds>{0s, 6s});
}

TEST_CASE("wait: a hedged operation waits for the breaker too") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<timed_gate>();
  gate->open_until = 2s;
  scripted_op op{{succeed(9, 100ms)}};
  outcome o;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); }, waiting(gate), {.delay = 50ms, .max_copies = 2},
      record(o));
  drive(io, [&] { return o.completions > 0; });
  CHECK(o.completions == 1);
  CHECK(!o.error);
  CHECK(o.value == 9);
  CHECK(op.started.front() == 2s);
  CHECK(gate->granted >= 1);
}

TEST_CASE("wait: a hedged operation cancelled while it waits completes once") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<timed_gate>();
  gate->open_until = 1h;
  auto rate = std::make_shared<counting_rate>();
  scripted_op op{{succeed(9)}};
  coretry::cancellation_source source;
  retry_policy p = waiting(gate);
  p.cancellation = source.token();
  p.rate_limit = rate;
  outcome o;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, {.delay = 50ms, .max_copies = 2}, record(o));
  drive(io, [&] { return gate->refused > 0; });
  manual_clock::advance(10s);
  io.restart();
  io.poll();
  REQUIRE(o.completions == 0);
  source.cancel();
  drive(io, [&] { return o.completions > 0; });
  io.restart();
  io.poll();
  CHECK(o.completions == 1);
  CHECK(o.error == coretry::test::operation_aborted);
  CHECK(o.at == 10s);
  CHECK(op.calls == 0);
  CHECK(rate->acquired == rate->released); // no token kept while waiting
  CHECK(gate->log.empty());
}

TEST_CASE("wait: the real breaker spreads waiters past the break and ramps them in") {
  // 100 operations find the breaker open (1 s break, no jitter). They come back spread over
  // `retry_interval` past the break; the first is the probe, and its success closes the
  // breaker. With a 1 s ramp they are let in gradually; without, all at once.
  constexpr int n = 100;
  for (const auto ramp : {nanoseconds(1s), nanoseconds(0)}) {
    CAPTURE(ramp.count());
    manual_clock::reset();
    asio::io_context io;
    std::optional<nanoseconds> closed_at;
    auto breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
        .consecutive_failures = 1,
        .break_duration = 1s,
        .break_jitter = 0,
        .ramp = ramp,
        .retry_interval = 50ms,
        .seed = 7,
        .on_transition = [&](coretry::breaker_state, coretry::breaker_state to, nanoseconds now) {
          if (to == coretry::breaker_state::closed)
            closed_at = now;
        }});
    REQUIRE(breaker->try_acquire(0s));
    breaker->on_failure(0s);
    REQUIRE(breaker->state() == coretry::breaker_state::open);
    scripted_op op{{succeed(1, 10ms)}};
    std::vector<outcome> outs(n);
    for (auto& o : outs)
      coretry::async_retry<manual_timer>(
          io.get_executor(), [&] { return op(); }, waiting(breaker), record(o));
    drive(io, [&] {
      return std::all_of(outs.begin(), outs.end(), [](const outcome& o) { return o.completions; });
    });
    for (const auto& o : outs) {
      CHECK(o.completions == 1);
      CHECK(!o.error);
    }
    REQUIRE(op.calls == n);
    REQUIRE(closed_at);
    CHECK(op.started.front() >= 1s);
    CHECK(op.started.front() <= 1050ms);
    // Starts after the close, per 100 ms.
    std::vector<int> per(30, 0);
    for (const auto t : op.started)
      if (t >= *closed_at)
        ++per[std::min<std::size_t>(29, static_cast<std::size_t>((t - *closed_at) / 100ms))];
    MESSAGE("starts per 100 ms after closing: " << per[0] << " " << per[1] << " " << per[2] << " "
                                                << per[3] << " " << per[4] << " " << per[5]);
    if (ramp > nanoseconds::zero()) {
      CHECK(per[0] <= n / 5);                                        // a trickle at first
      CHECK(*std::max_element(per.begin(), per.end()) <= 2 * n / 5); // never all at once
      CHECK(per[0] < per[2]);                                        // rising
      CHECK(op.started.back() - *closed_at <= 1100ms); // all in by the end of the ramp
      CHECK(breaker->ramp_refusals() > 0);
    } else {
      CHECK(per[0] >= n - 1); // everyone at once: what the ramp is for
    }
  }
}

TEST_CASE("breaker: retry_after spreads waiters past the break, and re-waits briefly after") {
  coretry::circuit_breaker b({.consecutive_failures = 1,
                              .break_duration = 2s,
                              .break_jitter = 0,
                              .retry_interval = 100ms,
                              .seed = 3});
  REQUIRE(b.try_acquire(0s));
  b.on_failure(0s);
  REQUIRE(b.open_until() == 2s);
  nanoseconds lo = nanoseconds::max(), hi = nanoseconds::min();
  for (int i = 0; i < 200; ++i) {
    const nanoseconds w = b.retry_after(500ms); // open: the rest of the break, plus [0, 100 ms]
    lo = std::min(lo, w);
    hi = std::max(hi, w);
  }
  CHECK(lo >= 1500ms);
  CHECK(hi <= 1600ms);
  CHECK(hi - lo >= 80ms);     // spread, not one instant
  REQUIRE(b.try_acquire(2s)); // the probe
  REQUIRE_FALSE(b.try_acquire(2s));
  for (int i = 0; i < 200; ++i) { // half-open: [50, 150] ms
    const nanoseconds w = b.retry_after(2s);
    CHECK(w >= 50ms);
    CHECK(w <= 150ms);
  }
}

TEST_CASE("breaker: the ramp lets a rising share through after closing, then everything") {
  coretry::circuit_breaker b(
      {.consecutive_failures = 1, .break_duration = 1s, .break_jitter = 0, .ramp = 10s, .seed = 5});
  for (int i = 0; i < 1000; ++i) // closed since construction: no ramp
    REQUIRE(b.try_acquire(0s));
  REQUIRE(b.try_acquire(0s));
  b.on_failure(0s);
  REQUIRE(b.try_acquire(1s)); // the probe
  b.on_success(1s);           // closes at 1 s
  REQUIRE(b.state() == coretry::breaker_state::closed);
  auto share = [&](nanoseconds at) {
    int passed = 0;
    for (int i = 0; i < 2000; ++i)
      if (b.try_acquire(at)) {
        ++passed;
        b.on_success(at);
      }
    return passed / 2000.0;
  };
  CHECK(share(1s) == 0);
  CHECK(share(3s) == doctest::Approx(0.2).epsilon(0.2));
  CHECK(share(6s) == doctest::Approx(0.5).epsilon(0.1));
  CHECK(share(10s) == doctest::Approx(0.9).epsilon(0.05));
  CHECK(share(11s) == 1);
  CHECK(b.ramp_refusals() == b.refusals());
}

TEST_CASE("breaker: ramp and retry_interval are checked") {
  CHECK_THROWS_WITH_AS(coretry::circuit_breaker({.ramp = -1ns}),
                       doctest::Contains("ramp (ns) = -1"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(coretry::circuit_breaker({.retry_interval = 0ns}),
                       doctest::Contains("retry_interval (ns) = 0"), std::invalid_argument);
}

TEST_CASE("policy: when_open must be fail or wait") {
  retry_policy p;
  p.when_open = static_cast<on_open>(7);
  CHECK_THROWS_WITH_AS(p.validate(), doctest::Contains("when_open = 7"), std::invalid_argument);
}

namespace {
/// A budget of one retry per second of window (1 s, 10 buckets of 100 ms), nothing per request.
std::shared_ptr<coretry::ratio_budget> one_retry_per_second() {
  return std::make_shared<coretry::ratio_budget>(coretry::ratio_budget_options{
      .ratio = 0, .min_retries_per_second = 1, .window = 1s, .window_buckets = 10});
}
} // namespace

TEST_CASE("wait: a retry the budget refuses waits for the window to slide instead of failing") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), fail(refused), fail(refused), succeed(4)}};
  retry_policy p{.max_attempts = 10, .backoff = coretry::backoff::fixed(10ms), .seed = 1};
  p.budget = one_retry_per_second();
  p.when_open = on_open::wait;
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.completions == 1);
  CHECK(!r.error);
  CHECK(r.value == 4);
  CHECK(stats.attempts == 4);
  REQUIRE(op.started.size() == 4);
  CHECK(op.started[1] == 10ms); // the window's one retry
  // The next retries waited until the retry before them left the window (1 s later, asked at
  // a bucket's edge plus up to half a bucket), never sooner.
  CHECK(op.started[2] >= 1s);
  CHECK(op.started[2] < 1200ms);
  CHECK(op.started[3] >= 2s);
  CHECK(op.started[3] < 2200ms);
}

TEST_CASE("fail (the default): the same refusal ends the operation with budget_exhausted") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), fail(refused), succeed(4)}};
  retry_policy p{.max_attempts = 10, .backoff = coretry::backoff::fixed(10ms), .seed = 1};
  p.budget = one_retry_per_second();
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.error == refused);
  CHECK(stats.reason == coretry::errc::budget_exhausted);
  CHECK(stats.attempts == 2);
}

TEST_CASE("wait: a budget wait that would reach the deadline ends with budget_exhausted") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), fail(refused), succeed(4)}};
  retry_policy p{
      .max_attempts = 10, .deadline = 500ms, .backoff = coretry::backoff::fixed(10ms), .seed = 1};
  p.budget = one_retry_per_second();
  p.when_open = on_open::wait;
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(stats.reason == coretry::errc::budget_exhausted);
  CHECK(stats.attempts == 2);
  CHECK(r.at < 500ms);
}

TEST_CASE("ratio_budget::retry_after: until the next bucket's start") {
  auto b = one_retry_per_second();
  CHECK(b->retry_after(0ms) == 100ms);
  CHECK(b->retry_after(1234ms) == 66ms);
  CHECK(b->retry_after(1300ms) == 100ms);
}

TEST_CASE("wait: a ratio_budget that can never grant a retry says never; the wait ends at once") {
  // ratio 0 and a reserve below one retry per window: `try_retry` can never succeed, whatever
  // traffic comes. A waiting operation must not sleep bucket after bucket until its deadline
  // (or for ever, without one).
  for (const double reserve : {0.0, 0.5}) {
    CAPTURE(reserve);
    auto b = std::make_shared<coretry::ratio_budget>(coretry::ratio_budget_options{
        .ratio = 0, .min_retries_per_second = reserve, .window = 1s, .window_buckets = 10});
    CHECK(b->retry_after(0ms) == coretry::unlimited);
    manual_clock::reset();
    asio::io_context io;
    scripted_op op{{fail(refused), succeed(4)}};
    retry_policy p{
        .max_attempts = 10, .deadline = 10s, .backoff = coretry::backoff::fixed(10ms), .seed = 1};
    p.budget = b;
    p.when_open = on_open::wait;
    coretry::retry_stats stats;
    const auto r = run_retry(io, op, p, stats);
    CHECK(r.completions == 1);
    CHECK(stats.reason == coretry::errc::budget_exhausted);
    CHECK(stats.attempts == 1);
    CHECK(r.at < 1s); // at once, not at the deadline
  }
}
