// SPDX-License-Identifier: BSL-1.0
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

#include <atomic>
#include <chrono>
#include <climits>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <thread>

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

TEST_CASE(
    "break17: hedges failing inline forever, cancelled by a group source from another thread") {
  // Real time: nothing here sleeps. Attempts fail without suspending, so each hedge relaunches
  // inline and through posts until the source cancels it from this thread.
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  coretry::cancellation_source source;
  auto gate = std::make_shared<fake_gate>();
  std::atomic<int> completions{0}, wrong{0};
  constexpr int ops = 20;
  retry_policy p{.max_attempts = UINT_MAX, .backoff = coretry::backoff::fixed(0ns)};
  p.cancellation = source.token();
  p.breaker = gate; // touched on the context's thread only (one thread runs it)
  for (int i = 0; i < ops; ++i)
    coretry::async_hedge<asio::steady_timer>(
        io.get_executor(),
        []() -> asio::awaitable<int> {
          throw std::system_error(refused);
          co_return 0;
        },
        p, {.delay = 0ns, .max_copies = 2},
        [&](std::error_code ec, int) {
          if (ec != coretry::test::operation_aborted)
            ++wrong;
          ++completions;
        });
  std::thread runner([&] { io.run(); });
  std::this_thread::sleep_for(5ms);
  source.cancel();
  for (int i = 0; i < 2000 && completions.load() < ops; ++i)
    std::this_thread::sleep_for(1ms);
  work.reset();
  runner.join();
  CHECK(completions.load() == ops);
  CHECK(wrong.load() == 0);
  CHECK(gate->granted == static_cast<int>(gate->log.size()));
}

TEST_CASE("break17: rate limiter release() racing acquire() on two threads keeps the rate") {
  // A fixed 1000/s and a clock that stands still: the bucket starts full (burst), then every
  // token is 1 ms further away. Thread A acquires and releases (a waiter who gives up); thread
  // B acquires and keeps. Whatever the interleaving, A's releases give back what A took and no
  // more: B's tokens end exactly where B alone would have put them.
  coretry::adaptive_rate_limiter rate(coretry::adaptive_rate_options{
      .burst = 1ms, .initial_rate = 1000, .max_wait = std::chrono::hours(1)});
  const auto now = std::chrono::nanoseconds(std::chrono::seconds(10));
  constexpr int n = 20000;
  std::thread a([&] {
    for (int i = 0; i < n; ++i) {
      (void)rate.acquire(now);
      rate.release(now);
    }
  });
  std::chrono::nanoseconds last{0};
  std::thread b([&] {
    for (int i = 0; i < n / 10; ++i)
      last = rate.acquire(now);
  });
  a.join();
  b.join();
  // B's n/10 tokens: the first at once (the bucket held one), each next 1 ms later. A release
  // may hand back a token slot B's reservation was granted in, but never more than A took; and
  // A holds at most one token at a time, so B's last may wait one interval behind it.
  const auto alone = std::chrono::milliseconds(n / 10 - 1);
  CHECK(last <= alone + 1ms);
  // And the bucket afterwards: one more acquire lands right after B's last token.
  const auto next = rate.acquire(now);
  CHECK(next >= alone);
  CHECK(next <= alone + 1ms);
}

TEST_CASE("break17: reused hedge slots: a stale attempt-timeout wait never cuts a later attempt") {
  // Each attempt takes 2 ms and fails, under a 3 ms attempt timeout, with a hedge every 1 ms:
  // slots are freed and reused while earlier timeout waits are cancelled or still queued. No
  // attempt may be cut.
  manual_clock::reset();
  asio::io_context io;
  int cut = 0, attempts = 0, completions = 0;
  coretry::hedge_stats stats;
  retry_policy p{.max_attempts = 60, .attempt_timeout = 3ms};
  coretry::async_hedge<manual_timer>(
      io.get_executor(),
      [&]() -> asio::awaitable<int> {
        ++attempts;
        manual_timer t(co_await asio::this_coro::executor);
        t.expires_after(2ms);
        auto [ec] = co_await t.async_wait(coretry::detail::as_tuple(asio::use_awaitable));
        if (ec)
          ++cut;
        throw std::system_error(refused);
      },
      p, {.delay = 1ms, .max_copies = 3}, stats,
      [&](std::error_code ec, int) {
        ++completions;
        CHECK(ec == refused);
      });
  drive(io, [&] { return completions > 0; });
  CHECK(completions == 1);
  CHECK(attempts == 60);
  CHECK(cut == 0);
  CHECK(stats.reason == coretry::errc::attempts_exhausted);
}

TEST_CASE("break17: cancelled while pacing: the send token goes back, in both machines") {
  for (const bool hedged : {false, true}) {
    CAPTURE(hedged);
    manual_clock::reset();
    asio::io_context io;
    coretry::cancellation_source source;
    auto gate = std::make_shared<fake_gate>();
    auto rate = std::make_shared<token_rate>();
    auto budget = std::make_shared<counting_budget>();
    retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(0ns)};
    p.breaker = gate;
    p.rate_limit = rate;
    p.budget = budget;
    p.cancellation = source.token();
    int sent = 0, completions = 0;
    std::error_code error;
    auto op = [&]() -> asio::awaitable<int> {
      ++sent;
      rate->wait = 50ms; // every later token is 50 ms away
      throw std::system_error(refused);
      co_return 0;
    };
    auto done = [&](std::error_code ec, int) {
      ++completions;
      error = ec;
    };
    if (hedged)
      coretry::async_hedge<manual_timer>(io.get_executor(), op, p, {.delay = 1ms}, done);
    else
      coretry::async_retry<manual_timer>(io.get_executor(), op, p, done);
    io.poll();
    manual_clock::advance(10ms);
    io.restart();
    io.poll();
    CHECK(sent == 1);
    source.cancel();
    drive(io, [&] { return completions > 0; });
    CHECK(completions == 1);
    CHECK(error == coretry::test::operation_aborted);
    CHECK(rate->acquired == 2);
    CHECK(rate->acquired - rate->released == sent);
    CHECK(budget->granted - budget->refunded <= 0);
    CHECK(gate->granted == static_cast<int>(gate->log.size()));
  }
}

TEST_CASE("break17: a zero-delay hedge failing inline gives the strand back after a few attempts") {
  manual_clock::reset();
  asio::io_context io;
  coretry::cancellation_source source;
  retry_policy p{.max_attempts = 100000, .backoff = coretry::backoff::fixed(0ns)};
  p.cancellation = source.token();
  int attempts = 0, completions = 0;
  std::error_code error;
  coretry::async_hedge<manual_timer>(
      io.get_executor(),
      [&]() -> asio::awaitable<int> {
        ++attempts;
        throw std::system_error(refused);
        co_return 0;
      },
      p, {.delay = 0ns, .max_copies = 2},
      [&](std::error_code ec, int) {
        ++completions;
        error = ec;
      });
  io.poll_one(); // the start: a bounded number of inline attempts, then a post
  CHECK(attempts > 0);
  CHECK(attempts <= 4 * static_cast<int>(coretry::detail::max_inline_relaunch));
  source.cancel();
  drive(io, [&] { return completions > 0; });
  CHECK(completions == 1);
  CHECK(error == coretry::test::operation_aborted);
  CHECK(attempts < 100000);
}
