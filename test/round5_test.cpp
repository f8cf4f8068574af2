// SPDX-License-Identifier: BSL-1.0
// Regression tests for two gaps left by round four: the hedge did not apply retry_op's rule that
// a cancellation arriving from a hook just before an attempt starts sends nothing (its
// cancellation was posted, and the attempt was spawned meanwhile); and an attempt abandoned
// that way gave back its breaker grant but spent its retry budget charge and its send token.
// Each failed before its fix.
#include <coretry/budget.hpp>
#include <coretry/cancellation.hpp>
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
#include <string>
#include <system_error>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

/// Cancels, from `on_attempt_started` of attempt `at`, the caller's signal or a group.
struct cancelling_observer : coretry::retry_observer {
  unsigned at = 1;
  asio::cancellation_signal* signal = nullptr;
  coretry::cancellation_source* group = nullptr;
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  coretry::attempt_outcome last_outcome = coretry::attempt_outcome::success;
  void on_attempt_started(const coretry::attempt_started_event& e) override {
    ++started;
    if (e.attempt != at)
      return;
    if (signal)
      signal->emit(asio::cancellation_type::terminal);
    if (group)
      group->cancel();
  }
  void on_attempt_finished(const coretry::attempt_finished_event& e) override {
    ++finished;
    last_outcome = e.outcome;
  }
};

/// A budget that grants every retry and counts what it granted and what came back.
struct counting_budget : coretry::retry_budget {
  int granted = 0;
  int refunded = 0;
  bool try_retry(std::chrono::nanoseconds) noexcept override {
    ++granted;
    return true;
  }
  void refund(std::chrono::nanoseconds) noexcept override { ++refunded; }
};

/// A sending rate that never makes anyone wait and counts its tokens.
struct counting_rate : coretry::send_rate {
  int acquired = 0;
  int released = 0;
  std::chrono::nanoseconds acquire(std::chrono::nanoseconds) noexcept override {
    ++acquired;
    return 0ns;
  }
  void release(std::chrono::nanoseconds) noexcept override { ++released; }
  void on_throttle(std::chrono::nanoseconds) noexcept override {}
  void on_success(std::chrono::nanoseconds) noexcept override {}
};

/// A gate that lets everything through and counts what it hears.
struct counting_gate : coretry::attempt_gate {
  int granted = 0;
  int successes = 0;
  int failures = 0;
  int abandoned = 0;
  bool try_acquire(std::chrono::nanoseconds) noexcept override {
    ++granted;
    return true;
  }
  void on_success(std::chrono::nanoseconds) noexcept override { ++successes; }
  void on_failure(std::chrono::nanoseconds) noexcept override { ++failures; }
  void on_abandoned(std::chrono::nanoseconds) noexcept override { ++abandoned; }
};

/// A group cancelled from the second attempt's start, and counting overload controls.
struct cancelled_at_second {
  coretry::cancellation_source group;
  std::shared_ptr<cancelling_observer> obs = std::make_shared<cancelling_observer>();
  std::shared_ptr<counting_budget> budget = std::make_shared<counting_budget>();
  std::shared_ptr<counting_rate> rate = std::make_shared<counting_rate>();
  std::shared_ptr<counting_gate> gate = std::make_shared<counting_gate>();
  cancelled_at_second() {
    obs->at = 2;
    obs->group = &group;
  }
  retry_policy policy() const {
    return retry_policy{.max_attempts = 3,
                        .budget = budget,
                        .breaker = gate,
                        .rate_limit = rate,
                        .cancellation = group.token(),
                        .observer = obs};
  }
  /// The retry was not sent: its charge and its token came back.
  void check_given_back() const {
    CHECK(budget->granted == 1);
    CHECK(budget->refunded == 1);
    CHECK(rate->acquired == 2);
    CHECK(rate->released == 1);
    CHECK(gate->granted == 2);
  }
};

} // namespace

TEST_CASE("a hedge cancelled through the caller's slot from attempt_started sends nothing") {
  manual_clock::reset();
  asio::io_context io;
  asio::cancellation_signal caller;
  auto obs = std::make_shared<cancelling_observer>();
  obs->signal = &caller;
  auto gate = std::make_shared<counting_gate>();
  scripted_op op{{succeed(7)}};
  outcome o;
  coretry::hedge_stats stats;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); },
      retry_policy{.max_attempts = 3, .breaker = gate, .observer = obs},
      coretry::hedge_options{.delay = 10ms}, stats,
      asio::bind_cancellation_slot(caller.slot(), record(o)));
  drive(io, [] { return false; });
  CHECK(o.completions == 1);
  CHECK(coretry::detail::is_aborted(o.error));
  CHECK(op.calls == 0); // never sent
  CHECK(obs->started == 1);
  CHECK(obs->finished == 1); // its end is heard, as abandoned, as retry_op reports it
  CHECK(obs->last_outcome == coretry::attempt_outcome::abandoned);
  CHECK(gate->granted == 1);
  CHECK(gate->abandoned == 1);
  CHECK(gate->successes + gate->failures == 0);
}

TEST_CASE("a hedge whose group is cancelled from the second attempt's start sends no hedge, "
          "and its budget charge and send token go back") {
  manual_clock::reset();
  asio::io_context io;
  const cancelled_at_second c;
  scripted_op op{{hang(), succeed(2)}}; // the first never ends by itself; the hedge would win
  coretry::hedge_stats stats;
  const outcome o = run_hedge(io, op, c.policy(), coretry::hedge_options{.delay = 10ms}, stats);
  CHECK(o.completions == 1);
  CHECK(coretry::detail::is_aborted(o.error));
  CHECK(stats.reason == coretry::errc::cancelled);
  CHECK(op.calls == 1); // the hedge was not sent
  c.check_given_back();
  CHECK(c.gate->failures == 0);
  CHECK(c.gate->abandoned == 2); // the hedge never sent, and the first cut by the cancellation
}

TEST_CASE("a retry cancelled from its attempt_started gives its budget charge and send token "
          "back, on every driver") {
  // The composed operation (a callback token) and the direct coroutine (`retry_async`).
  for (const bool direct : {false, true}) {
    CAPTURE(direct);
    manual_clock::reset();
    asio::io_context io;
    const cancelled_at_second c;
    scripted_op op{{fail(refused), succeed(3)}};
    const retry_policy p = c.policy();
    std::error_code error;
    int completions = 0;
    if (direct) {
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            try {
              co_await coretry::retry_async<manual_timer>([&] { return op(); }, p);
            } catch (const std::system_error& e) {
              error = e.code();
            }
            ++completions;
          },
          asio::detached);
    } else {
      coretry::retry_stats stats;
      const outcome o = run_retry(io, op, p, stats, drive_until::idle);
      error = o.error;
      completions = o.completions;
    }
    drive(io, [] { return false; });
    CHECK(completions == 1);
    CHECK(coretry::detail::is_aborted(error));
    CHECK(op.calls == 1); // the retry was not sent
    c.check_given_back();
    CHECK(c.gate->failures == 1);
    CHECK(c.gate->abandoned == 1);
  }
}

// --- async_retry and async_hedge: a default completion token, and token constraints ---------

namespace {
asio::awaitable<int> four() {
  co_return 4;
}
using four_op = asio::awaitable<int> (*)();
void int_handler(std::error_code, int) {}
} // namespace

static_assert(coretry::detail::token_for<decltype(&int_handler), four_op>);
static_assert(coretry::detail::token_for<const asio::use_awaitable_t<>&, four_op>);
static_assert(!coretry::detail::token_for<coretry::retry_stats&, four_op>,
              "a retry_stats is no token: the overload that takes one is chosen");
static_assert(!coretry::detail::token_for<void (*)(std::string), four_op>,
              "a handler of the wrong signature is refused at the call");

TEST_CASE("async_retry and async_hedge take the executor's default completion token") {
  asio::io_context io;
  // An executor that names its default token (Asio 1.22 has no default otherwise).
  const asio::use_awaitable_t<>::executor_with_default<asio::io_context::executor_type> ex(
      io.get_executor());
  const retry_policy once{.max_attempts = 1};
  const retry_policy twice{.max_attempts = 2};
  const coretry::hedge_options late{.delay = 1s}; // named: g++ 12 and braced temporaries
  int total = 0;
  coretry::retry_stats stats;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        total += co_await coretry::async_retry(ex, four_op{&four}, once);
        total += co_await coretry::async_retry(ex, four_op{&four}, once, stats);
        total += co_await coretry::async_hedge(ex, four_op{&four}, twice, late);
      },
      asio::detached);
  io.run();
  CHECK(total == 12);
  CHECK(stats.attempts == 1);
}

// --- Reviewer r5: a cancellation emitted before the operation has started -----------------

TEST_CASE("a hedge whose caller's slot is cancelled before it starts asks no gate and starts "
          "no attempt") {
  // The slot's handler posts cancel() behind the initiation's posted start(), which read only
  // what cancel() sets: the gate was asked (a half-open breaker spent its probe) and attempt 1
  // started before launch() saw the mark and abandoned it.
  manual_clock::reset();
  asio::io_context io;
  asio::cancellation_signal caller;
  auto gate = std::make_shared<counting_gate>();
  auto obs = std::make_shared<cancelling_observer>(); // cancels nothing
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
          "the hedge does") {
  // The same cancellation on the composed retry: its slot handler's dispatch, from a thread
  // outside io.run(), queued behind begin(), which asked the gate and sent the attempt.
  manual_clock::reset();
  asio::io_context io;
  asio::cancellation_signal caller;
  auto gate = std::make_shared<counting_gate>();
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
