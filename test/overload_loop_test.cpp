// SPDX-License-Identifier: BSL-1.0
// How the loop uses a circuit breaker (attempt_gate) and a sending rate (send_rate): with
// scripted fakes, on the manual clock.

#include <coretry/breaker.hpp>
#include <coretry/overload.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/fake_gate.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <chrono>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

struct fake_rate final : coretry::send_rate {
  std::deque<std::chrono::nanoseconds> waits;
  int acquired = 0, throttled = 0, succeeded = 0;
  std::chrono::nanoseconds acquire(std::chrono::nanoseconds) noexcept override {
    ++acquired;
    if (waits.empty())
      return {};
    auto w = waits.front();
    waits.pop_front();
    return w;
  }
  void on_throttle(std::chrono::nanoseconds) noexcept override { ++throttled; }
  void on_success(std::chrono::nanoseconds) noexcept override { ++succeeded; }
};

} // namespace

TEST_CASE("an open breaker stops the operation before anything is sent") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  gate->open = true;
  scripted_op op{{succeed(1)}};
  retry_policy p{.max_attempts = 3};
  p.breaker = gate;
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.completions == 1);
  CHECK(r.error == coretry::errc::circuit_open); // no attempt error exists: the reason
  CHECK(stats.reason == coretry::errc::circuit_open);
  CHECK(stats.attempts == 0);
  CHECK(op.calls == 0);
  CHECK(gate->log.empty());
}

TEST_CASE("the breaker hears once about every attempt it granted") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  const auto denied = make_error_code(std::errc::permission_denied);
  scripted_op op{{fail(refused), fail(refused), fail(denied)}};
  retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(10ms)};
  p.retry_if = [&](const std::error_code& ec) { return ec != denied; };
  p.breaker = gate;
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.error == denied);
  // Refused twice, then a permanent error: not retried, but a failure to the gate all the same
  // (its own classification, `default_health`, not `retry_if`, decides; issue 28).
  CHECK(gate->log == std::vector<std::string>{"failure", "failure", "failure"});
  CHECK(gate->granted == 3);

  SUBCASE("and the breaker opening mid-way stops the retries") {
    auto gate2 = std::make_shared<fake_gate>();
    scripted_op op2{{fail(refused)}};
    retry_policy p2{.max_attempts = 5, .backoff = coretry::backoff::fixed(10ms)};
    p2.breaker = gate2;
    p2.on_retry = [&](const coretry::retry_event&) { gate2->open = true; };
    coretry::retry_stats s2;
    const auto r2 = run_retry(io, op2, p2, s2);
    // One outcome per cause: the refusal reports circuit_open even though an attempt ran (as
    // when none did); the attempt's own error stays in the stats.
    CHECK(r2.error == coretry::errc::circuit_open);
    CHECK(s2.reason == coretry::errc::circuit_open);
    CHECK(s2.last_error == refused);
    CHECK(op2.calls == 1);
  }
}

TEST_CASE("a breaker's refusal after a rejected result reports circuit_open, with that result") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  scripted_op op{{succeed(503), succeed(200)}};
  retry_policy p =
      retry_policy{.max_attempts = 5, .backoff = coretry::backoff::fixed(10ms)}.retry_if_result(
          [](int v) { return v == 503; });
  p.breaker = gate;
  p.on_retry = [&](const coretry::retry_event&) { gate->open = true; };
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  // Before: the 503 came back as a plain result, only stats.reason said circuit_open.
  CHECK(r.error == coretry::errc::circuit_open);
  CHECK(r.value == 503); // the last (rejected) result travels with the error
  CHECK(stats.reason == coretry::errc::circuit_open);
  CHECK(stats.last_error == coretry::errc::result_rejected);
  CHECK(op.calls == 1);

  SUBCASE("and the awaitable form throws circuit_open") {
    scripted_op op2{{succeed(503), succeed(200)}};
    auto gate2 = std::make_shared<fake_gate>();
    p.breaker = gate2;
    p.on_retry = [&](const coretry::retry_event&) { gate2->open = true; };
    std::error_code thrown;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          try {
            co_await coretry::retry_async<manual_timer>([&] { return op2(); }, p);
          } catch (const std::system_error& e) {
            thrown = e.code();
          }
        },
        asio::detached);
    drive(io, [&] { return static_cast<bool>(thrown); });
    CHECK(thrown == coretry::errc::circuit_open);
  }
}

TEST_CASE("a cancelled attempt is abandoned, not a failure, for the breaker") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  scripted_op op{{hang()}};
  retry_policy p{.max_attempts = 3};
  p.breaker = gate;
  asio::cancellation_signal cancel;
  int completions = 0;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, p,
      asio::bind_cancellation_slot(cancel.slot(), [&](std::error_code ec, int) {
        ++completions;
        CHECK(ec == coretry::test::operation_aborted);
      }));
  io.poll();
  REQUIRE(op.calls == 1);
  cancel.emit(asio::cancellation_type::terminal);
  drive(io, [&] { return completions > 0; });
  CHECK(completions == 1);
  CHECK(gate->log == std::vector<std::string>{"abandoned"});
}

TEST_CASE("a sending rate delays first attempts and retries alike, on the timer") {
  manual_clock::reset();
  asio::io_context io;
  auto rate = std::make_shared<fake_rate>();
  rate->waits = {50ms, 0ms, 30ms};
  scripted_op op{{fail(refused), fail(refused), succeed(7)}};
  retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(10ms)};
  p.rate_limit = rate;
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.value == 7);
  // 50 ms for the first token; 10 ms backoff, no wait; 10 ms backoff, then 30 ms for a token.
  CHECK(op.started == std::vector<manual_clock::duration>{50ms, 60ms, 100ms});
  CHECK(rate->acquired == 3); // one token per attempt, however long the wait
  CHECK(rate->throttled == 0);
  CHECK(rate->succeeded == 3);
}

TEST_CASE("timeouts slow the sending rate down; a wait past the deadline stops the loop") {
  manual_clock::reset();
  asio::io_context io;
  auto rate = std::make_shared<fake_rate>();
  rate->waits = {0ms, 5s};
  scripted_op op{{hang()}};
  retry_policy p{.max_attempts = 5,
                 .deadline = 2s,
                 .attempt_timeout = 100ms,
                 .backoff = coretry::backoff::fixed(10ms)};
  p.rate_limit = rate;
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.error == coretry::errc::deadline_exceeded);
  CHECK(stats.reason == coretry::errc::deadline_exceeded);
  CHECK(op.calls == 1);
  CHECK(rate->throttled == 1);             // the attempt timeout
  CHECK(manual_clock::elapsed() == 110ms); // no wait for a token that would come too late
}

TEST_CASE("an attempt the breaker let through is reported even if its io_context dies first") {
  manual_clock::reset();
  auto gate = std::make_shared<fake_gate>();
  {
    asio::io_context io;
    scripted_op op{{hang()}};
    retry_policy p{.max_attempts = 3};
    p.breaker = gate;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, p, [](std::error_code, int) { FAIL("called"); });
    io.poll();
    REQUIRE(op.calls == 1);
    manual_clock::reset(); // drops the hanging attempt's wait, as the context's end would
  } // the frame is destroyed mid-attempt: a half-open probe slot must not be lost
  CHECK(gate->granted == 1);
  CHECK(gate->log == std::vector<std::string>{"abandoned"});
}

TEST_CASE("a retry_if that throws still reports the attempt to the breaker") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  scripted_op op{{fail(refused)}};
  retry_policy p{.max_attempts = 3};
  p.breaker = gate;
  p.retry_if = [](const std::error_code&) -> bool { throw std::logic_error("bug"); };
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.error == coretry::errc::unexpected_exception);
  CHECK(gate->log == std::vector<std::string>{"abandoned"});
}

TEST_CASE("an answer carrying Retry-After is retried after the hint but is no breaker failure") {
  manual_clock::reset();
  asio::io_context io;
  // A rate-limited upstream: ten answers asking to come back in 1 s, then a success. A breaker
  // counting them would open on the fifth and fail the operation with circuit_open.
  auto breaker = std::make_shared<coretry::circuit_breaker>(
      coretry::circuit_breaker_options{.consecutive_failures = 5, .break_jitter = 0, .seed = 1});
  int calls = 0;
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    if (++calls <= 10) {
      ctx.retry_after(1s);
      throw std::system_error(refused);
    }
    co_return calls;
  };
  retry_policy p{.max_attempts = 20, .backoff = coretry::backoff::fixed(10ms), .breaker = breaker};
  const auto start = manual_clock::now();
  int value = 0, completions = 0;
  asio::co_spawn(io, coretry::retry_async<manual_timer>(op, p), [&](std::exception_ptr e, int v) {
    ++completions;
    CHECK_FALSE(e);
    value = v;
  });
  REQUIRE(drive(io, [&] { return completions > 0; }));
  CHECK(value == 11);
  CHECK(manual_clock::now() - start == 10s); // every hint honoured
  CHECK(breaker->times_opened() == 0);
  CHECK(breaker->pushbacks() == 10);
  CHECK(breaker->failures() == 0);
  CHECK(breaker->successes() == 1);
}

TEST_CASE("pushback_if marks errors without a hint as push-backs; others stay failures") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  const std::error_code reset = make_error_code(std::errc::connection_reset);
  scripted_op op{{fail(refused), fail(reset), succeed(3)}};
  retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms)};
  p.breaker = gate;
  p.pushback_if = [](const std::error_code& ec) { return ec == refused; };
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.value == 3);
  CHECK(gate->log == std::vector<std::string>{"pushback", "failure", "success"});
}
