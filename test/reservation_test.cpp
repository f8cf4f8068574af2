// SPDX-License-Identifier: BSL-1.0
// What an operation takes from the shared overload controls is settled exactly once, and each
// attempt is judged once for every listener: the send token, the budget's retry and the
// breaker's grant on every path; the deadline, from the call, over any predicate; seeded
// streams in call order. On the manual clock.

#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/overload.hpp>
#include <coretry/rate_limit.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/fake_gate.hpp>
#include <support/test_ops.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

struct outcome {
  int completions = 0;
  std::error_code error;
  int value = -1;
};

struct counting_rate final : coretry::send_rate {
  int acquired = 0, throttled = 0, succeeded = 0;
  std::chrono::nanoseconds acquire(std::chrono::nanoseconds) noexcept override {
    ++acquired;
    return {};
  }
  void on_throttle(std::chrono::nanoseconds) noexcept override { ++throttled; }
  void on_success(std::chrono::nanoseconds) noexcept override { ++succeeded; }
};

/// Grants every other `try_acquire`, starting with the first.
struct alternating_gate final : coretry::attempt_gate {
  int asked = 0;
  bool try_acquire(std::chrono::nanoseconds) noexcept override { return asked++ % 2 == 0; }
  void on_success(std::chrono::nanoseconds) noexcept override {}
  void on_failure(std::chrono::nanoseconds) noexcept override {}
  void on_abandoned(std::chrono::nanoseconds) noexcept override {}
};

} // namespace

TEST_CASE("a fixed sending rate keeps sending when waiters give up at their deadline") {
  // 50 arrivals a second against 10 sends a second, each with a 300 ms deadline: most give up
  // rather than wait past it, and hand their reserved token back.
  manual_clock::reset();
  asio::io_context io;
  auto rate = std::make_shared<coretry::adaptive_rate_limiter>(
      coretry::adaptive_rate_options{.initial_rate = 10});
  retry_policy p{.max_attempts = 1, .deadline = 300ms};
  p.rate_limit = rate;
  std::map<long, int> sent_in_second;
  int done = 0;
  auto op = [&]() -> asio::awaitable<int> {
    ++sent_in_second[static_cast<long>(manual_clock::elapsed() / 1s)];
    co_return 1;
  };
  for (int i = 0; i < 150; ++i) { // 3 s
    coretry::async_retry<manual_timer>(io.get_executor(), op, p,
                                       [&](std::error_code, int) { ++done; });
    io.restart();
    io.poll();
    manual_clock::advance(20ms);
    io.restart();
    io.poll();
  }
  drive(io, [&] { return done == 150; });
  CHECK(done == 150);
  INFO("sent in s0: " << sent_in_second[0] << ", s1: " << sent_in_second[1]
                      << ", s2: " << sent_in_second[2]);
  CHECK(sent_in_second[1] >= 9);
  CHECK(sent_in_second[2] >= 9);
  CHECK(rate->released() > 0);
}

TEST_CASE("waiters cancelled while they wait for a send token hand it back") {
  manual_clock::reset();
  asio::io_context io;
  auto rate = std::make_shared<coretry::adaptive_rate_limiter>(
      coretry::adaptive_rate_options{.burst = 100ms, .initial_rate = 10});
  retry_policy p{.max_attempts = 1};
  p.rate_limit = rate;
  auto op = []() -> asio::awaitable<int> { co_return 1; };
  std::vector<asio::cancellation_signal> signals(99);
  int aborted = 0;
  for (auto& s : signals)
    coretry::async_retry<manual_timer>(
        io.get_executor(), op, p,
        asio::bind_cancellation_slot(s.slot(), [&](std::error_code ec, int) {
          if (ec)
            ++aborted;
        }));
  io.poll();
  manual_clock::advance(100ms);
  io.restart();
  io.poll();
  for (auto& s : signals)
    s.emit(asio::cancellation_type::terminal);
  io.restart();
  io.poll();
  CHECK(aborted >= 97); // one or two were sent before the cancel
  manual_clock::advance(100ms);
  coretry::retry_stats stats;
  bool finished = false;
  coretry::async_retry<manual_timer>(io.get_executor(), op, p, stats,
                                     [&](std::error_code, int) { finished = true; });
  drive(io, [&] { return finished; });
  CHECK(manual_clock::elapsed() < 500ms); // not 10 s behind 99 abandoned reservations
}

TEST_CASE("an attempt cut by the deadline is a failure for the breaker, whatever retry_if says") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  auto rate = std::make_shared<counting_rate>();
  scripted_op op{{hang()}};
  retry_policy p{.max_attempts = 3, .deadline = 100ms};
  p.breaker = gate;
  p.rate_limit = rate;
  p.retry_if = [](const std::error_code& ec) { return ec == refused; }; // not the deadline
  outcome r;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, p,
      [&](std::error_code ec, int) {
        ++r.completions;
        r.error = ec;
      });
  drive(io, [&] { return r.completions > 0; });
  CHECK(r.error == coretry::errc::deadline_exceeded);
  CHECK(gate->log == std::vector<std::string>{"failure"});
  CHECK(rate->throttled == 1); // a hung upstream slows the rate down
  CHECK(rate->succeeded == 0);
}

TEST_CASE("a deadline after rejected results fails with deadline_exceeded, not the last value") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{succeed(5)}};
  retry_policy p =
      retry_policy{.max_attempts = 10, .deadline = 250ms, .backoff = coretry::backoff::fixed(100ms)}
          .retry_if_result<int>([](int v) { return v == 5; });
  outcome r;
  coretry::retry_stats stats;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, stats,
      [&](std::error_code ec, int v) {
        ++r.completions;
        r.error = ec;
        r.value = v;
      });
  drive(io, [&] { return r.completions > 0; });
  CHECK(op.calls == 3); // 0, 100, 200 ms; the next would start at 300 > 250
  CHECK(r.error == coretry::errc::deadline_exceeded);
  CHECK(r.value == 0); // no value with an error
  CHECK(stats.reason == coretry::errc::deadline_exceeded);

  // And from retry_async, which throws.
  manual_clock::reset();
  scripted_op op2{{succeed(5)}};
  std::error_code thrown;
  bool finished = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          (void)co_await coretry::retry_async<manual_timer>([&] { return op2(); }, p);
        } catch (const std::system_error& e) {
          thrown = e.code();
        }
        finished = true;
      },
      asio::detached);
  drive(io, [&] { return finished; });
  CHECK(thrown == coretry::errc::deadline_exceeded);
}

TEST_CASE("a retry the breaker refuses spends nothing of the budget") {
  manual_clock::reset();
  asio::io_context io;
  auto budget = std::make_shared<coretry::ratio_budget>(
      coretry::ratio_budget_options{.ratio = 0, .min_retries_per_second = 0.3}); // 3 per 10 s
  retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(10ms)};
  p.breaker = std::make_shared<alternating_gate>(); // grants each first attempt, refuses retries
  p.budget = budget;
  for (int i = 0; i < 3; ++i) {
    scripted_op op{{fail(refused)}};
    coretry::retry_stats stats;
    outcome r;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, p, stats,
        [&](std::error_code ec, int) {
          ++r.completions;
          r.error = ec;
        });
    drive(io, [&] { return r.completions > 0; });
    CHECK(stats.reason == coretry::errc::circuit_open);
  }
  CHECK(budget->retries(std::chrono::nanoseconds(manual_clock::now().time_since_epoch())) == 0);
  CHECK(budget->try_retry(std::chrono::nanoseconds(manual_clock::now().time_since_epoch())));
}

TEST_CASE("the k-th operation started with a seeded policy draws stream k, whoever fails first") {
  manual_clock::reset();
  asio::io_context io;
  const auto b = coretry::backoff::exponential(100ms).with_jitter(coretry::jitter::full());
  // The streams of operations 0 and 1 of seed 42, as the README says.
  coretry::jitter_seed reference(42);
  std::vector<std::chrono::nanoseconds> expected;
  for (int k = 0; k < 2; ++k) {
    coretry::fast_rng rng = reference.next_stream();
    expected.push_back(b.delay(0, b.initial(), rng));
  }
  REQUIRE(expected[0] != expected[1]);

  retry_policy p{.max_attempts = 2, .backoff = b, .seed = 42};
  std::vector<std::chrono::nanoseconds> delays(2);
  scripted_op slow{{fail(refused, 50ms), succeed(1)}}; // started first, fails last
  scripted_op fast{{fail(refused), succeed(1)}};
  int done = 0;
  for (int k = 0; k < 2; ++k) {
    retry_policy pk = p;
    pk.on_retry = [&delays, k](const coretry::retry_event& e) { delays[k] = e.delay; };
    scripted_op& op = k == 0 ? slow : fast;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&op] { return op(); }, pk, [&](std::error_code, int) { ++done; });
  }
  drive(io, [&] { return done == 2; });
  CHECK(delays == expected);
}

TEST_CASE("the deadline counts from the call, not from when the loop first runs") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused)}};
  retry_policy p{.max_attempts = 10, .deadline = 200ms, .backoff = coretry::backoff::fixed(100ms)};
  outcome r;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, p,
      [&](std::error_code ec, int) {
        ++r.completions;
        r.error = ec;
      });
  manual_clock::advance(150ms); // a busy executor: the loop first runs 150 ms after the call
  drive(io, [&] { return r.completions > 0; });
  CHECK(r.error == coretry::errc::deadline_exceeded);
  CHECK(op.started == std::vector<manual_clock::duration>{150ms}); // 250 ms is past the deadline
  CHECK(manual_clock::elapsed() == 150ms);
}

TEST_CASE("a sending rate that refuses a token ends the operation with rate_limited") {
  manual_clock::reset();
  asio::io_context io;
  auto rate = std::make_shared<coretry::adaptive_rate_limiter>(coretry::adaptive_rate_options{
      .burst = 100ms, .initial_rate = 1, .max_wait = 1500ms}); // 1 s a token
  retry_policy p{.max_attempts = 1};
  p.rate_limit = rate;
  std::vector<std::error_code> errors;
  std::vector<manual_clock::duration> sent;
  auto op = [&]() -> asio::awaitable<int> {
    sent.push_back(manual_clock::elapsed());
    co_return 1;
  };
  for (int i = 0; i < 3; ++i)
    coretry::async_retry<manual_timer>(io.get_executor(), op, p,
                                       [&](std::error_code ec, int) { errors.push_back(ec); });
  drive(io, [&] { return errors.size() == 3; });
  // 0 s and 1 s are handed out; 2 s is past max_wait: refused at once, nothing reserved.
  CHECK(sent == std::vector<manual_clock::duration>{0s, 1s});
  CHECK(std::count(errors.begin(), errors.end(), coretry::errc::rate_limited) == 1);
  CHECK(rate->refused() == 1);
}
