// Hostile cases against the reservations of issue 17: every breaker grant reported once, every
// send token and budget charge settled once, on the paths nobody walks on purpose (a hook or a
// predicate that throws, a context destroyed mid-wait, a clock reset from a handler). On the
// manual clock.

#include <coretry/budget.hpp>
#include <coretry/hedge.hpp>
#include <coretry/overload.hpp>
#include <coretry/rate_limit.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/fake_gate.hpp>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <system_error>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::hedge_options;
using coretry::retry_policy;

namespace {

const std::error_code refused = make_error_code(std::errc::connection_refused);

/// Counts every send token: acquired, released, and (by difference) used.
struct token_rate final : coretry::send_rate {
  std::chrono::nanoseconds wait{0};
  int acquired = 0, released = 0, throttled = 0, succeeded = 0;
  std::chrono::nanoseconds acquire(std::chrono::nanoseconds) noexcept override {
    ++acquired;
    return wait;
  }
  void release(std::chrono::nanoseconds) noexcept override { ++released; }
  void on_throttle(std::chrono::nanoseconds) noexcept override { ++throttled; }
  void on_success(std::chrono::nanoseconds) noexcept override { ++succeeded; }
};

/// Grants every retry, and counts the grants and the refunds.
struct counting_budget final : coretry::retry_budget {
  int granted = 0, refunded = 0;
  bool try_retry(std::chrono::nanoseconds) noexcept override {
    ++granted;
    return true;
  }
  void refund(std::chrono::nanoseconds) noexcept override { ++refunded; }
};

} // namespace

TEST_CASE("break17: on_hedge throws: the hedge that was never sent spends no token and no budget") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  auto rate = std::make_shared<token_rate>();
  auto budget = std::make_shared<counting_budget>();
  retry_policy p{.max_attempts = 3};
  p.breaker = gate;
  p.rate_limit = rate;
  p.budget = budget;
  hedge_options h{.delay = 10ms};
  h.on_hedge = [](const coretry::hedge_event&) { throw std::runtime_error("hook"); };
  int sent = 0, completions = 0;
  std::error_code error;
  coretry::async_hedge<manual_timer>(
      io.get_executor(),
      [&]() -> asio::awaitable<int> {
        ++sent;
        asio::steady_timer never(co_await asio::this_coro::executor, 1h); // hangs until cut
        co_await never.async_wait(asio::use_awaitable);
        co_return 1;
      },
      p, h,
      [&](std::error_code ec, int) {
        ++completions;
        error = ec;
      });
  io.poll();
  manual_clock::advance(10ms); // the hedge is due; its hook throws
  io.restart();
  io.poll();
  CHECK(completions == 1);
  CHECK(error == coretry::errc::unexpected_exception);
  CHECK(sent == 1);
  // Two tokens reserved (the first attempt, the hedge): one sent, the other handed back.
  CHECK(rate->acquired == 2);
  CHECK(rate->acquired - rate->released == sent);
  // The hedge's retry was granted by the budget, then never sent: refunded.
  CHECK(budget->granted - budget->refunded == 0);
  CHECK(gate->granted == 2);
  CHECK(gate->log.size() == 2); // each grant reported once: both abandoned
  CHECK(gate->count("abandoned") == 2);
}

TEST_CASE("break17: on_retry throws: the retry's budget charge is refunded, grants reported once") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  auto rate = std::make_shared<token_rate>();
  auto budget = std::make_shared<counting_budget>();
  retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(5ms)};
  p.breaker = gate;
  p.rate_limit = rate;
  p.budget = budget;
  p.on_retry = [](const coretry::retry_event&) { throw std::runtime_error("hook"); };
  int sent = 0, completions = 0;
  std::error_code error;
  coretry::async_retry<manual_timer>(
      io.get_executor(),
      [&]() -> asio::awaitable<int> {
        ++sent;
        throw std::system_error(refused);
        co_return 0;
      },
      p,
      [&](std::error_code ec, int) {
        ++completions;
        error = ec;
      });
  drive(io, [&] { return completions > 0; });
  CHECK(completions == 1);
  CHECK(error == coretry::errc::unexpected_exception);
  CHECK(sent == 1);
  CHECK(rate->acquired - rate->released == sent);
  CHECK(budget->granted - budget->refunded == 0);
  CHECK(gate->log.size() == 1);
  CHECK(gate->count("failure") == 1);
}

TEST_CASE("break17: retry_if throws: the grant is reported once, as abandoned, in both machines") {
  for (const bool hedged : {false, true}) {
    CAPTURE(hedged);
    manual_clock::reset();
    asio::io_context io;
    auto gate = std::make_shared<fake_gate>();
    auto rate = std::make_shared<token_rate>();
    auto budget = std::make_shared<counting_budget>();
    retry_policy p{.max_attempts = 3};
    p.breaker = gate;
    p.rate_limit = rate;
    p.budget = budget;
    p.retry_if = [](const std::error_code&) -> bool { throw std::runtime_error("predicate"); };
    int completions = 0, sent = 0;
    std::error_code error;
    auto op = [&]() -> asio::awaitable<int> {
      ++sent;
      throw std::system_error(refused);
      co_return 0;
    };
    auto done = [&](std::error_code ec, int) {
      ++completions;
      error = ec;
    };
    if (hedged)
      coretry::async_hedge<manual_timer>(io.get_executor(), op, p, {.delay = 10ms}, done);
    else
      coretry::async_retry<manual_timer>(io.get_executor(), op, p, done);
    drive(io, [&] { return completions > 0; });
    CHECK(completions == 1);
    CHECK(error == coretry::errc::unexpected_exception);
    CHECK(sent == 1);
    CHECK(rate->acquired - rate->released == sent);
    CHECK(budget->granted - budget->refunded == 0);
    CHECK(gate->log.size() == 1);
    CHECK(gate->count("abandoned") == 1);
  }
}

TEST_CASE("break17: a context destroyed while pacing or sleeping settles its token and charge") {
  manual_clock::reset();
  auto gate = std::make_shared<fake_gate>();
  auto rate = std::make_shared<token_rate>();
  auto budget = std::make_shared<counting_budget>();
  int sent = 0;
  {
    asio::io_context io;
    retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(5ms)};
    p.breaker = gate;
    p.rate_limit = rate;
    p.budget = budget;
    auto op = [&]() -> asio::awaitable<int> {
      ++sent;
      throw std::system_error(refused);
      co_return 0;
    };
    rate->wait = 0ns;
    coretry::async_retry<manual_timer>(io.get_executor(), op, p, [](std::error_code, int) {});
    coretry::async_hedge<manual_timer>(io.get_executor(), op, p, {.delay = 1ms},
                                       [](std::error_code, int) {});
    io.poll();         // both sent once, failed; the loop sleeps 5 ms holding a budget charge
    rate->wait = 50ms; // from now on every token is 50 ms away: both pace
    manual_clock::advance(5ms);
    io.restart();
    io.poll();
    CHECK(manual_clock::pending() > 0);
  } // destroyed mid-pacing
  CHECK(manual_clock::pending() == 0);
  CHECK(rate->acquired - rate->released == sent);
  CHECK(budget->granted - budget->refunded <= sent - 2);
  CHECK(gate->granted == static_cast<int>(gate->log.size()));
  manual_clock::reset();
}

TEST_CASE("break17: manual_clock: two contexts, one destroyed with waits; reset from a handler") {
  manual_clock::reset();
  asio::io_context a;
  int a_done = 0;
  {
    asio::io_context b;
    retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(5ms)};
    auto op = []() -> asio::awaitable<int> {
      throw std::system_error(refused);
      co_return 0;
    };
    for (int i = 0; i < 3; ++i) {
      coretry::async_retry<manual_timer>(a.get_executor(), op, p,
                                         [&](std::error_code, int) { ++a_done; });
      coretry::async_retry<manual_timer>(b.get_executor(), op, p, [](std::error_code, int) {});
    }
    a.poll();
    b.poll();
    CHECK(manual_clock::pending() == 6);
  }
  CHECK(manual_clock::pending() == 3); // b's waits left with b
  // A handler that resets the clock while a's other waits are queued.
  manual_timer t(a);
  t.expires_after(1ms);
  bool reset_ran = false;
  t.async_wait([&](auto) {
    manual_clock::reset();
    reset_ran = true;
  });
  manual_clock::advance(1ms);
  a.restart();
  a.poll();
  CHECK(reset_ran);
  CHECK(manual_clock::pending() == 0);
  CHECK(a_done == 0); // their waits were dropped, not called
}
