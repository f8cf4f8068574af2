// SPDX-License-Identifier: BSL-1.0
// Reviewer r5's reproducers for the hedge's rule that a cancellation which came first sends
// nothing. Each fails at the commit it was written against (marked may_fail so the suite stays
// runnable).
#include <coretry/hedge.hpp>
#include <coretry/overload.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <atomic>
#include <chrono>
#include <memory>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

/// A gate that lets everything through and counts what it is asked and told.
struct asked_gate : coretry::attempt_gate {
  int granted = 0;
  int abandoned = 0;
  bool try_acquire(std::chrono::nanoseconds) noexcept override {
    ++granted;
    return true;
  }
  void on_success(std::chrono::nanoseconds) noexcept override {}
  void on_failure(std::chrono::nanoseconds) noexcept override {}
  void on_abandoned(std::chrono::nanoseconds) noexcept override { ++abandoned; }
};

struct started_counter : coretry::retry_observer {
  std::atomic<int> started{0};
  void on_attempt_started(const coretry::attempt_started_event&) override { ++started; }
};

} // namespace

TEST_CASE("a hedge whose caller's slot is cancelled before it starts asks no gate and starts "
          "no attempt" *
          doctest::may_fail()) {
  // The slot's handler sets cancel_seen_ and posts cancel() behind the initiation's posted
  // start(). start() reads only cancel_requested_ (set by cancel()), so it goes on: the gate is
  // asked (a half-open breaker spends its probe), the observer hears attempt 1 start, stats
  // count an attempt, and only then does launch() see cancel_seen_ and abandon it. A
  // cancellation that came first should end the operation in start(), as its comment says.
  manual_clock::reset();
  asio::io_context io;
  asio::cancellation_signal caller;
  auto gate = std::make_shared<asked_gate>();
  auto obs = std::make_shared<started_counter>();
  scripted_op op{{succeed(7)}};
  outcome o;
  coretry::hedge_stats stats;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); },
      retry_policy{.max_attempts = 3, .breaker = gate, .observer = obs},
      coretry::hedge_options{.delay = 10ms}, stats,
      asio::bind_cancellation_slot(caller.slot(), record(o)));
  caller.emit(asio::cancellation_type::terminal); // before the io_context runs anything
  drive(io, [] { return false; });
  CHECK(o.completions == 1);
  CHECK(coretry::detail::is_aborted(o.error));
  CHECK(op.calls == 0);
  CHECK(gate->granted == 0);
  CHECK(obs->started == 0);
  CHECK(stats.attempts == 0);
}

TEST_CASE("an async_retry whose caller's slot is cancelled before it starts sends nothing, as "
          "the hedge does" *
          doctest::may_fail()) {
  // The same cancellation as above, on the composed retry: its slot handler dispatches
  // cancel(), which from a thread outside io.run() is a post queued behind the initiation's
  // posted begin(); begin() finds no cancellation, the gate is asked and the attempt is sent.
  // The hedge, given the same cancellation, sends nothing (cancel_seen_): the two drivers
  // disagree on "a cancellation that came first".
  manual_clock::reset();
  asio::io_context io;
  asio::cancellation_signal caller;
  auto gate = std::make_shared<asked_gate>();
  scripted_op op{{succeed(7)}};
  outcome o;
  coretry::retry_stats stats;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, retry_policy{.max_attempts = 3, .breaker = gate},
      stats, asio::bind_cancellation_slot(caller.slot(), record(o)));
  caller.emit(asio::cancellation_type::terminal); // before the io_context runs anything
  drive(io, [] { return false; });
  CHECK(o.completions == 1);
  CHECK(coretry::detail::is_aborted(o.error));
  CHECK(op.calls == 0);
  CHECK(gate->granted == 0);
}
