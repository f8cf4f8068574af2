// SPDX-License-Identifier: BSL-1.0
// `retry_observer::interests`: an operation asks its observer once which events it listens to,
// and builds and delivers no other, on the retry loop's paths and the hedge's alike; an observed
// breaker's transitions follow the same rule.
#include <coretry/breaker.hpp>
#include <coretry/hedge.hpp>
#include <coretry/observer.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <system_error>

using namespace std::chrono_literals;
using coretry::observer_interest;
using coretry::retry_policy;
using coretry::testing::manual_clock;
using coretry::testing::manual_timer;

namespace {

/// Counts each event it hears, and how often it was asked what it listens to.
struct picky_observer final : coretry::retry_observer {
  explicit picky_observer(observer_interest i) : wanted(i) {}
  observer_interest wanted;
  mutable std::atomic<int> asked{0};
  int started = 0, attempt_started = 0, attempt_finished = 0, scheduled = 0, refused = 0,
      hedged = 0, abandoned = 0, finished = 0, transitions = 0;
  observer_interest interests() const noexcept override {
    ++asked;
    return wanted;
  }
  void on_operation_started(const coretry::operation_started_event&) override { ++started; }
  void on_attempt_started(const coretry::attempt_started_event&) override { ++attempt_started; }
  void on_attempt_finished(const coretry::attempt_finished_event&) override { ++attempt_finished; }
  void on_retry_scheduled(const coretry::retry_scheduled_event&) override { ++scheduled; }
  void on_refused(const coretry::refusal_event&) override { ++refused; }
  void on_hedge_started(const coretry::hedge_started_event&) override { ++hedged; }
  void on_hedge_abandoned(const coretry::hedge_abandoned_event&) override { ++abandoned; }
  void on_operation_finished(const coretry::operation_finished_event&) override { ++finished; }
  void on_breaker_transition(const coretry::breaker_transition_event&) override { ++transitions; }
};

/// Fails twice (connection refused), then succeeds with 7.
struct fails_twice {
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  asio::awaitable<int> operator()() const {
    if (++*calls <= 2)
      throw std::system_error(make_error_code(std::errc::connection_refused));
    co_return 7;
  }
};

int run_retry(const std::shared_ptr<picky_observer>& o, bool composed) {
  asio::io_context io;
  retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms), .observer = o};
  coretry::cancellation_source group; // a group token: the composed path
  if (composed)
    p.cancellation = group.token();
  int value = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        // Named, not braced inside the co_await: g++ 12 destroys such a temporary twice
        // (docs/core.md, "g++ 12").
        const fails_twice op;
        value = co_await coretry::retry_async<manual_timer>(op, p);
      },
      asio::detached);
  manual_clock::reset();
  coretry::testing::drive(io, [&] { return value != 0; });
  return value;
}

} // namespace

TEST_CASE("an observer hears only the events it listens to, on both paths of the retry loop") {
  for (const bool composed : {false, true}) {
    CAPTURE(composed);
    SUBCASE("all (the default)") {
      auto o = std::make_shared<picky_observer>(observer_interest::all);
      CHECK(run_retry(o, composed) == 7);
      CHECK(o->started == 1);
      CHECK(o->attempt_started == 3);
      CHECK(o->attempt_finished == 3);
      CHECK(o->scheduled == 2);
      CHECK(o->finished == 1);
    }
    SUBCASE("the retries and the end only") {
      auto o = std::make_shared<picky_observer>(observer_interest::retry_scheduled |
                                                observer_interest::operation_finished);
      CHECK(run_retry(o, composed) == 7);
      CHECK(o->started == 0);
      CHECK(o->attempt_started == 0);
      CHECK(o->attempt_finished == 0);
      CHECK(o->scheduled == 2);
      CHECK(o->finished == 1);
    }
    SUBCASE("none: asked, and never called") {
      auto o = std::make_shared<picky_observer>(observer_interest::none);
      CHECK(run_retry(o, composed) == 7);
      CHECK(o->asked.load() >= 1);
      CHECK(o->asked.load() <= 3); // when the operation is made, not per event
      CHECK(o->started + o->attempt_started + o->attempt_finished + o->scheduled + o->finished ==
            0);
    }
  }
}

TEST_CASE("a hedge's observer hears only the events it listens to") {
  auto run = [](observer_interest wanted) {
    manual_clock::reset();
    asio::io_context io;
    auto o = std::make_shared<picky_observer>(wanted);
    retry_policy p{.max_attempts = 2, .observer = o};
    coretry::hedge_options h{.delay = 10ms};
    auto calls = std::make_shared<int>(0);
    int value = 0;
    coretry::async_hedge<manual_timer>(
        io.get_executor(),
        [calls]() -> asio::awaitable<int> {
          // The first copy hangs until it is cut; the hedge answers.
          if (++*calls == 1) {
            asio::steady_timer never(co_await asio::this_coro::executor, 1h);
            co_await never.async_wait(asio::use_awaitable);
          }
          co_return 5;
        },
        p, h, [&](std::error_code, int v) { value = v; });
    coretry::testing::drive(io, [&] { return value != 0; });
    CHECK(value == 5);
    return o;
  };
  const auto all = run(observer_interest::all);
  CHECK(all->hedged == 1);
  CHECK(all->attempt_started == 2);
  CHECK(all->abandoned == 1);
  CHECK(all->finished == 1);
  const auto some = run(observer_interest::hedge_started | observer_interest::hedge_abandoned);
  CHECK(some->hedged == 1);
  CHECK(some->abandoned == 1);
  CHECK(some->started + some->attempt_started + some->attempt_finished + some->finished == 0);
}

TEST_CASE("an observed breaker's transitions reach an observer that listens to them") {
  for (const bool listening : {true, false}) {
    CAPTURE(listening);
    auto o = std::make_shared<picky_observer>(
        listening ? observer_interest::breaker_transition
                  : observer_interest::all & ~observer_interest::breaker_transition);
    auto b = coretry::make_observed_breaker({.consecutive_failures = 1}, o, "up");
    REQUIRE(b->try_acquire(0ns));
    b->on_failure(0ns); // closed -> open
    CHECK(o->transitions == (listening ? 1 : 0));
  }
}

TEST_CASE("observer_interest combines as flags") {
  using oi = observer_interest;
  CHECK(coretry::listens(oi::all, oi::refused));
  CHECK(!coretry::listens(oi::none, oi::refused));
  CHECK(!coretry::listens(oi::all, oi::none));
  CHECK(coretry::listens(oi::refused | oi::hedge_started, oi::hedge_started));
  CHECK(!coretry::listens(~oi::refused, oi::refused));
  CHECK((~oi::none) == oi::all);
  CHECK((oi::all & oi::attempt_started) == oi::attempt_started);
}
