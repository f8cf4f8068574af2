// SPDX-License-Identifier: BSL-1.0
// Reviewer r6's reproducers against the slow-call breaker's count window (issue 31 item 3) and
// the fallback (issue 31 item 4). Each failed at a98f738. (Two more findings are documented
// rather than tested: a 0.2 gate hears the gates' own health classification (CHANGELOG); the
// fallback path does not carry the handler's allocator (docs/core.md). A third, a token attempt
// whose initiating function throws, is tested in round6_test.cpp.)
#include <coretry/breaker.hpp>
#include <coretry/overload.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <system_error>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::health;
using coretry::retry_policy;

TEST_CASE("a count-based window smaller than minimum_throughput is refused or still lets the "
          "failure ratio open the breaker") {
  // window_calls = 10 with the default minimum_throughput of 20: the ring never holds 20
  // outcomes, so failure_ratio never applied, and 100 failures in a row left the breaker closed.
  // A full count window is now judged, as resilience4j clamps minimumNumberOfCalls to it.
  coretry::circuit_breaker_options o{.consecutive_failures = 0,
                                     .failure_ratio = 0.5,
                                     .window_type = coretry::sliding_window::count_based,
                                     .window_calls = 10,
                                     .seed = 1};
  bool refused = false;
  std::shared_ptr<coretry::circuit_breaker> b;
  try {
    b = std::make_shared<coretry::circuit_breaker>(o);
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  if (refused)
    return; // acceptable: the bad combination is named
  const std::chrono::nanoseconds now = 1s;
  for (int i = 0; i < 9; ++i) { // the window is not full yet: no ratio is judged
    REQUIRE(b->try_acquire(now));
    b->on_failure(now);
  }
  CHECK(b->state() == coretry::breaker_state::closed);
  REQUIRE(b->try_acquire(now));
  b->on_failure(now); // the tenth fills the window: 10 failures of 10
  CHECK(b->state() == coretry::breaker_state::open);
}

TEST_CASE("the slow-call ratio is judged when a fast outcome or a failure brings the window to "
          "its minimum") {
  // minimum_throughput 4, slow_call_ratio 0.5: two slow calls then two fast ones is 2 slow of 4,
  // the threshold, but slow_tripped() is only asked by a slow success; the breaker stays closed
  // until the next slow call (resilience4j checks both rates on every recorded call).
  for (int tail = 0; tail < 2; ++tail) {
    CAPTURE(tail); // 0: two fast successes; 1: two failures
    auto b = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
        .consecutive_failures = 0,
        .failure_ratio = 0,
        .minimum_throughput = 4,
        .window_type =
            tail == 0 ? coretry::sliding_window::time_based : coretry::sliding_window::count_based,
        .slow_call_duration = 1s,
        .slow_call_ratio = 0.5,
        .seed = 1});
    const std::chrono::nanoseconds now = 10s;
    for (int i = 0; i < 2; ++i) {
      REQUIRE(b->try_acquire(now));
      b->on_outcome(health::healthy, now, 2s); // slow
    }
    REQUIRE(b->state() == coretry::breaker_state::closed); // 2 outcomes: below the minimum
    for (int i = 0; i < 2; ++i) {
      REQUIRE(b->try_acquire(now));
      b->on_outcome(tail == 0 ? health::healthy : health::unhealthy, now, 1ms);
    }
    CHECK(b->window_slow_calls(now) == 2);
    CHECK(b->window_successes(now) + b->window_failures(now) == 4);
    CHECK(b->state() == coretry::breaker_state::open);
  }
}

TEST_CASE("an async_retry with a fallback whose caller's slot is cancelled before it starts "
          "sends nothing and calls no fallback") {
  // round5's rule for async_retry, through the fallback path (co_spawn, then
  // reset_cancellation_state in retry_then_fallback): a terminal emit before the io_context runs
  // anything must end the operation with operation_aborted, send no attempt and skip the
  // fallback.
  manual_clock::reset();
  asio::io_context io;
  asio::cancellation_signal caller;
  scripted_op op{{fail(refused), fail(refused), fail(refused)}};
  int called = 0;
  auto fb = coretry::fallback([&](const coretry::fallback_info&) {
    ++called;
    return 1;
  });
  outcome o;
  coretry::retry_stats stats;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); },
      retry_policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(10ms)}, stats, fb,
      asio::bind_cancellation_slot(caller.slot(), record(o)));
  caller.emit(asio::cancellation_type::terminal); // before the io_context runs anything
  drive(io, [] { return false; });
  CHECK(o.completions == 1);
  CAPTURE(o.error.message());
  CAPTURE(stats.reason.message());
  CHECK(coretry::detail::is_aborted(o.error));
  CHECK(op.calls == 0);
  CHECK(called == 0);
}
