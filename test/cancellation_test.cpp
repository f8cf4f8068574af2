// SPDX-License-Identifier: BSL-1.0
#include <coretry/cancellation.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

struct completion_log {
  int completions = 0;
  std::error_code error;
  auto handler() {
    return [this](std::error_code ec, int) {
      ++completions;
      error = ec;
    };
  }
};

retry_policy slow_retries(unsigned attempts = 10) {
  return {.max_attempts = attempts, .backoff = coretry::backoff::fixed(10s)};
}

// Runs until the operation is sleeping (or in an attempt) at the given call count.
void run_until_calls(asio::io_context& io, const scripted_op& op, int calls) {
  REQUIRE(drive(io, [&] { return op.calls >= calls; }));
  io.restart();
  io.poll();
}

} // namespace

TEST_CASE("a bound cancellation slot stops the operation during an attempt") {
  for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial,
                    asio::cancellation_type::total}) {
    manual_clock::reset();
    asio::io_context io;
    scripted_op op{{hang()}};
    asio::cancellation_signal signal;
    completion_log log;
    coretry::retry_stats stats;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, slow_retries(), stats,
        asio::bind_cancellation_slot(signal.slot(), log.handler()));
    run_until_calls(io, op, 1);
    CHECK(log.completions == 0);
    signal.emit(type);
    io.restart();
    io.run();
    CHECK(log.completions == 1);
    CHECK(log.error == coretry::test::operation_aborted);
    CHECK(op.calls == 1); // never retried
    CHECK(op.aborted == 1);
    CHECK(stats.reason == coretry::test::operation_aborted);
    CHECK(manual_clock::pending() == 0);
    CHECK(manual_clock::elapsed() == 0ms); // promptly: no clock advance needed
  }
}

TEST_CASE("a bound cancellation slot stops the operation during a sleep") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused)}};
  asio::cancellation_signal signal;
  completion_log log;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, slow_retries(),
      asio::bind_cancellation_slot(signal.slot(), log.handler()));
  io.poll();
  CHECK(op.calls == 1);
  CHECK(manual_clock::pending() == 1); // the backoff sleep
  signal.emit(asio::cancellation_type::terminal);
  io.restart();
  io.run();
  CHECK(log.completions == 1);
  CHECK(log.error == coretry::test::operation_aborted);
  CHECK(op.calls == 1);
  CHECK(manual_clock::pending() == 0);
  // Emitting again after completion does nothing.
  signal.emit(asio::cancellation_type::terminal);
  io.restart();
  io.poll();
  CHECK(log.completions == 1);
}

TEST_CASE("an enclosing || cancels retry_async during a sleep and during a timed attempt") {
  using namespace asio::experimental::awaitable_operators;
  for (bool in_attempt : {false, true}) {
    manual_clock::reset();
    asio::io_context io;
    scripted_op op{{in_attempt ? hang() : fail(refused)}};
    auto policy = slow_retries();
    if (in_attempt)
      policy.attempt_timeout = 1h;
    bool timer_won = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          manual_timer t(co_await asio::this_coro::executor);
          t.expires_after(1s);
          auto r = co_await (coretry::retry_async<manual_timer>([&] { return op(); }, policy) ||
                             t.async_wait(asio::use_awaitable));
          timer_won = r.index() == 1;
        },
        asio::detached);
    REQUIRE(drive(io, [&] { return timer_won; }));
    CHECK(op.calls == 1);
    CHECK(op.aborted == (in_attempt ? 1 : 0));
    CHECK(manual_clock::elapsed() == 1s);
    CHECK(manual_clock::pending() == 0);
  }
}

TEST_CASE("a group token cancels every operation, in attempts and in sleeps") {
  manual_clock::reset();
  asio::io_context io;
  coretry::cancellation_source source;
  auto policy = slow_retries();
  policy.cancellation = source.token();
  std::vector<scripted_op> ops(6);
  for (std::size_t i = 0; i < ops.size(); ++i)
    ops[i].script = {i % 2 ? hang() : fail(refused)};
  std::vector<completion_log> logs(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i)
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&op = ops[i]] { return op(); }, policy, logs[i].handler());
  // and one awaiting retry_async in a coroutine
  scripted_op coro_op{{fail(refused)}};
  std::error_code coro_error;
  asio::co_spawn(io, coretry::retry_async<manual_timer>([&] { return coro_op(); }, policy),
                 [&](std::exception_ptr e, int) {
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::system_error& se) {
                     coro_error = se.code();
                   }
                 });
  io.poll();
  CHECK(manual_clock::pending() == 7);
  CHECK(source.cancel());
  CHECK_FALSE(source.cancel()); // once
  io.restart();
  io.run();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    CHECK(logs[i].completions == 1);
    CHECK(logs[i].error == coretry::test::operation_aborted);
    CHECK(ops[i].calls == 1);
  }
  CHECK(coro_error == coretry::test::operation_aborted);
  CHECK(manual_clock::pending() == 0);
  CHECK(manual_clock::elapsed() == 0ms);
}

TEST_CASE("an operation started with a cancelled token never runs an attempt") {
  manual_clock::reset();
  asio::io_context io;
  coretry::cancellation_source source;
  source.cancel();
  auto policy = slow_retries();
  policy.cancellation = source.token();
  scripted_op op{{succeed(1)}};
  completion_log log;
  coretry::retry_stats stats;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, policy, stats, log.handler());
  io.run();
  CHECK(log.completions == 1);
  CHECK(log.error == coretry::test::operation_aborted);
  CHECK(op.calls == 0);
  CHECK(stats.reason == coretry::errc::cancelled);
}

TEST_CASE("a token cancels operations on a multi-threaded io_context from another thread") {
  asio::io_context io(2);
  auto guard = asio::make_work_guard(io);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&] { io.run(); });

  coretry::cancellation_source source;
  const int n = 200;
  std::atomic<int> started{0}, completions{0}, aborted{0};
  std::vector<std::atomic<int>> per_op(n);
  for (int i = 0; i < n; ++i) {
    retry_policy policy{.max_attempts = 100, .backoff = coretry::backoff::fixed(1h)};
    policy.cancellation = source.token();
    if (i % 2)
      policy.attempt_timeout = 1h; // half of them hang in a timed attempt
    coretry::async_retry(
        io.get_executor(),
        [&, hang = i % 2 == 1]() -> asio::awaitable<int> {
          started.fetch_add(1);
          if (!hang)
            throw std::system_error(refused); // then sleeps for an hour
          asio::steady_timer t(co_await asio::this_coro::executor, 1h);
          co_await t.async_wait(asio::use_awaitable);
          co_return 1;
        },
        policy,
        [&, i](std::error_code ec, int) {
          per_op[static_cast<std::size_t>(i)].fetch_add(1);
          if (ec == coretry::test::operation_aborted)
            aborted.fetch_add(1);
          completions.fetch_add(1);
        });
  }
  while (started.load() < n)
    std::this_thread::sleep_for(1ms);
  const auto t0 = std::chrono::steady_clock::now();
  source.cancel();
  while (completions.load() < n && std::chrono::steady_clock::now() - t0 < 10s)
    std::this_thread::sleep_for(1ms);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  guard.reset();
  for (auto& t : threads)
    t.join();
  CHECK(completions.load() == n);
  CHECK(aborted.load() == n);
  CHECK(started.load() == n); // nothing retried
  for (auto& c : per_op)
    CHECK(c.load() == 1);
}

TEST_CASE("operations that finish unlink themselves from the token") {
  manual_clock::reset();
  asio::io_context io;
  coretry::cancellation_source source;
  auto policy = slow_retries(1);
  policy.cancellation = source.token();
  for (int i = 0; i < 3; ++i) {
    scripted_op op{{succeed(i)}};
    completion_log log;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, policy, log.handler());
    io.restart();
    io.run();
    CHECK(log.completions == 1);
    CHECK_FALSE(log.error);
  }
  CHECK(source.cancel()); // nothing left to notify; must not touch finished operations
  io.restart();
  CHECK(io.poll() == 0);
}

TEST_CASE("an on_retry hook may cancel its own group: it and its peers stop at once") {
  manual_clock::reset();
  asio::io_context io;
  coretry::cancellation_source source;
  auto policy = slow_retries();
  policy.cancellation = source.token();
  scripted_op peer{{hang()}}; // another operation of the group, mid-attempt
  completion_log peer_log;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return peer(); }, policy, peer_log.handler());
  // The hook runs on the operation's own strand: cancel() must not run the emit inline there.
  policy.on_retry = [&](const coretry::retry_event&) { source.cancel(); };
  scripted_op op{{fail(refused)}};
  completion_log log;
  coretry::retry_stats stats;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, policy, stats, log.handler());
  io.run();
  CHECK(log.completions == 1);
  CHECK(log.error == coretry::test::operation_aborted);
  CHECK(op.calls == 1);
  CHECK(stats.reason == coretry::errc::cancelled);
  CHECK(peer_log.completions == 1);
  CHECK(peer_log.error == coretry::test::operation_aborted);
  CHECK(peer.calls == 1);
  CHECK(manual_clock::pending() == 0);
  CHECK(manual_clock::elapsed() == 0ms);
}
