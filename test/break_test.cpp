// SPDX-License-Identifier: BSL-1.0
// Hostile review of issue 8: targeted attempts to make an operation complete twice, never, or
// touch freed memory. Each case asserts something that could fail; run under asan and tsan too.

#include <coretry/breaker.hpp>
#include <coretry/cancellation.hpp>
#include <coretry/hedge.hpp>
#include <coretry/rate_limit.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

asio::awaitable<int> fail_now() {
  throw std::system_error(make_error_code(std::errc::connection_refused));
  co_return 0;
}

} // namespace

// --- A slot emitted on the operation's own strand, while the loop is running ------------------

TEST_CASE("break: the caller's slot emitted from inside on_retry stops the operation once") {
  manual_clock::reset();
  asio::io_context io;
  asio::cancellation_signal signal;
  scripted_op op{{fail(refused)}};
  retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(1s)};
  p.on_retry = [&](const coretry::retry_event&) { signal.emit(asio::cancellation_type::terminal); };
  int completions = 0;
  std::error_code error;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, p,
      asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, int) {
        ++completions;
        error = ec;
      }));
  CHECK(drive(io, [&] { return completions > 0; }));
  io.restart();
  io.poll();
  CHECK(completions == 1);
  CHECK(error == coretry::test::operation_aborted);
  CHECK(op.calls == 1);
}

TEST_CASE("break: the caller's slot emitted from inside an attempt, before it suspends") {
  manual_clock::reset();
  asio::io_context io;
  asio::cancellation_signal signal;
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> {
    ++calls;
    signal.emit(asio::cancellation_type::terminal); // on the operation's strand, synchronously
    manual_timer t(co_await asio::this_coro::executor);
    t.expires_after(1h);
    co_await t.async_wait(asio::use_awaitable);
    co_return 1;
  };
  int completions = 0;
  std::error_code error;
  coretry::async_retry<manual_timer>(
      io.get_executor(), op, retry_policy{.max_attempts = 5},
      asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, int) {
        ++completions;
        error = ec;
      }));
  CHECK(drive(io, [&] { return completions > 0; }));
  CHECK(completions == 1);
  CHECK(error == coretry::test::operation_aborted);
  CHECK(calls == 1);
}

// --- Throwing predicates and factories on every front end -------------------------------------

namespace {

enum class thrower { result_filter, retry_if, on_retry, factory };

retry_policy throwing_policy(thrower where, bool system_error) {
  auto raise = [system_error] {
    if (system_error)
      throw std::system_error(make_error_code(std::errc::bad_message));
    throw std::logic_error("bug");
  };
  retry_policy p{.max_attempts = 4, .backoff = coretry::backoff::fixed(1ms)};
  switch (where) {
  case thrower::result_filter:
    return std::move(p).retry_if_result([raise](const int&) -> bool {
      raise();
      return false;
    });
  case thrower::retry_if:
    p.retry_if = [raise](const std::error_code&) -> bool {
      raise();
      return true;
    };
    return p;
  case thrower::on_retry:
    p.on_retry = [raise](const coretry::retry_event&) { raise(); };
    return p;
  case thrower::factory:
    return p;
  }
  return p;
}

/// The operation: fails once (so predicates and hooks run), then succeeds with 7. With
/// `thrower::factory` the factory itself throws before returning an awaitable.
struct front_op {
  thrower where;
  bool system_error;
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  asio::awaitable<int> operator()() const {
    ++*calls;
    if (where == thrower::factory) {
      if (system_error)
        throw std::system_error(make_error_code(std::errc::bad_message));
      throw std::logic_error("factory");
    }
    return body(*calls);
  }
  static asio::awaitable<int> body(int n) {
    if (n == 1 && true)
      throw std::system_error(make_error_code(std::errc::connection_refused));
    co_return 7;
  }
};

} // namespace

TEST_CASE("break: a throwing predicate, hook or factory completes every front end exactly once") {
  using namespace asio::experimental::awaitable_operators;
  for (thrower where :
       {thrower::result_filter, thrower::retry_if, thrower::on_retry, thrower::factory}) {
    for (bool sys : {false, true}) {
      for (bool controlled : {false, true}) {
        CAPTURE(static_cast<int>(where));
        CAPTURE(sys);
        CAPTURE(controlled);
        auto policy = [&] {
          auto p = throwing_policy(where, sys);
          if (controlled)
            p.deadline = 1h;
          return p;
        };
        // A system_error from an attempt (the factory's) is an attempt error: retried, and the
        // operation ends with it after max_attempts. Anything else thrown is unexpected.
        const bool attempt_error = where == thrower::factory && sys;
        asio::io_context io;

        // 1. async_retry, callback.
        {
          front_op op{where, sys};
          int n = 0;
          std::error_code ec;
          coretry::async_retry(io.get_executor(), op, policy(), [&](std::error_code e, int) {
            ++n;
            ec = e;
          });
          CHECK_NOTHROW(io.run());
          io.restart();
          CHECK(n == 1);
          if (attempt_error) {
            CHECK(ec == std::errc::bad_message);
            CHECK(*op.calls == 4);
          } else {
            CHECK(ec == coretry::errc::unexpected_exception);
          }
        }
        // 2. use_future. Not under TSan: the future's exception_ptr is released on Asio's system
        // thread, with reference counts TSan cannot see (see test/tsan.supp), and that thread
        // cannot be joined.
#if !defined(__SANITIZE_THREAD__)
        {
          front_op op{where, sys};
          auto f = coretry::async_retry(io.get_executor(), op, policy(), asio::use_future);
          CHECK_NOTHROW(io.run());
          io.restart();
          // use_future completes through the system executor: maybe on another thread, later.
          REQUIRE(f.wait_for(10s) == std::future_status::ready);
          CHECK_THROWS_AS(f.get(), coretry::test::system_error);
        }
#endif
        // 3. bound slot (always controlled).
        {
          front_op op{where, sys};
          asio::cancellation_signal sig;
          int n = 0;
          std::error_code ec;
          coretry::async_retry(
              io.get_executor(), op, policy(),
              asio::bind_cancellation_slot(sig.slot(), [&](std::error_code e, int) {
                ++n;
                ec = e;
              }));
          CHECK_NOTHROW(io.run());
          io.restart();
          CHECK(n == 1);
          CHECK(ec == (attempt_error ? make_error_code(std::errc::bad_message)
                                     : std::error_code(coretry::errc::unexpected_exception)));
        }
        // 4. use_awaitable, as_tuple(use_awaitable), retry_async, retry_async || timer.
        {
          front_op op{where, sys};
          int n = 0;
          std::vector<std::error_code> codes;
          std::vector<bool> threw;
          asio::co_spawn(
              io,
              [&]() -> asio::awaitable<void> {
                *op.calls = 0; // each front end: a first attempt that fails
                try {
                  co_await coretry::async_retry(co_await asio::this_coro::executor, op, policy(),
                                                asio::use_awaitable);
                  threw.push_back(false);
                } catch (const coretry::test::system_error& e) {
                  codes.push_back(e.code());
                  threw.push_back(true);
                }
                ++n;
                *op.calls = 0;
                auto [e2, v2] =
                    co_await coretry::async_retry(co_await asio::this_coro::executor, op, policy(),
                                                  coretry::detail::as_tuple(asio::use_awaitable));
                (void)v2;
                codes.push_back(e2);
                ++n;
                *op.calls = 0;
                try {
                  co_await coretry::retry_async(op, policy());
                  threw.push_back(false);
                } catch (const std::system_error&) {
                  threw.push_back(true);
                } catch (const std::logic_error&) {
                  threw.push_back(true);
                }
                ++n;
                // Asio 1.22's `||` waits for the first *success*: a retry_async that throws
                // lets the timer win; it must not hang or throw out of the group.
                asio::steady_timer t(co_await asio::this_coro::executor, 5ms);
                *op.calls = 0;
                try {
                  auto r = co_await (coretry::retry_async(op, policy()) ||
                                     t.async_wait(asio::use_awaitable));
                  threw.push_back(r.index() == 1); // the retry failed; the timer won
                } catch (const std::system_error&) {
                  threw.push_back(true);
                } catch (const std::logic_error&) {
                  threw.push_back(true);
                }
                ++n;
              },
              [](std::exception_ptr e) { CHECK(!e); });
          CHECK_NOTHROW(io.run());
          io.restart();
          CHECK(n == 4);
          CHECK(threw == std::vector<bool>{true, true, true});
          REQUIRE(codes.size() == 2);
          for (auto c : codes)
            CHECK(c == (attempt_error ? make_error_code(std::errc::bad_message)
                                      : std::error_code(coretry::errc::unexpected_exception)));
        }
      }
    }
  }
}

// --- A result whose move constructor throws -------------------------------------------------

namespace {

struct moves {
  static inline std::atomic<int> countdown{-1}; // throws when it reaches 0
};

struct fragile {
  int v = 0;
  fragile() = default;
  explicit fragile(int x) : v(x) {}
  fragile(const fragile&) = delete;
  fragile& operator=(const fragile&) = delete;
  fragile(fragile&& o) : v(o.v) {
    if (moves::countdown.fetch_sub(1) == 0)
      throw std::runtime_error("move");
  }
  fragile& operator=(fragile&& o) {
    v = o.v;
    if (moves::countdown.fetch_sub(1) == 0)
      throw std::runtime_error("move");
    return *this;
  }
};

asio::awaitable<fragile> make_fragile() {
  co_return fragile(5);
}

} // namespace

// BUG (not fixed): co_spawn moves the loop's result several times after the loop has ended
// (into its handler lambda, into retry_completion's by-value parameter, out in take_value). A move
// that throws there escapes io_context::run() and the handler is never called. Run with
// --no-skip to see it fail for k = 5..10 on both paths.
TEST_CASE("break: a result whose move throws still completes async_retry exactly once" *
          doctest::skip()) {
  for (bool controlled : {false, true}) {
    for (int k = 0; k < 16; ++k) {
      CAPTURE(controlled);
      CAPTURE(k);
      asio::io_context io;
      retry_policy p{.max_attempts = 1};
      if (controlled)
        p.deadline = 1h;
      int n = 0;
      std::error_code ec;
      int value = -1;
      moves::countdown = k;
      coretry::async_retry(io.get_executor(), make_fragile, p, [&](std::error_code e, fragile f) {
        ++n;
        ec = e;
        value = f.v;
      });
      bool threw_out = false;
      try {
        io.run();
      } catch (const std::runtime_error&) {
        threw_out = true;
      }
      moves::countdown = -1000;
      // A move into the handler's own parameter is the handler's business; anything before it
      // must still reach the handler, once.
      CHECK(n <= 1);
      if (!threw_out)
        CHECK(n == 1);
      if (threw_out && n == 0) {
        MESSAGE("k=" << k << " controlled=" << controlled
                     << ": the exception escaped run() and the handler was never called");
        CHECK(n == 1);
      }
    }
  }
}

// --- Deadlines that leave no time at all ----------------------------------------------------

TEST_CASE("break: a deadline of one nanosecond completes once, with deadline_exceeded") {
  asio::io_context io;
  for (int i = 0; i < 50; ++i) {
    retry_policy p{.max_attempts = 3, .deadline = 1ns};
    int n = 0;
    std::error_code ec;
    coretry::retry_stats stats;
    coretry::async_retry(io.get_executor(), hang_on_steady_timer, p, stats,
                         [&](std::error_code e, int) {
                           ++n;
                           ec = e;
                         });
    io.run();
    io.restart();
    CHECK(n == 1);
    CHECK(ec == coretry::errc::deadline_exceeded);
    CHECK(stats.attempts <= 1);
  }
}

// --- Racing cancellations -------------------------------------------------------------------

TEST_CASE("break: a group cancel at the instant an attempt times out, on a 2-thread io_context") {
  constexpr int rounds = 60;
  constexpr int ops = 16;
  for (int round = 0; round < rounds; ++round) {
    asio::io_context io(2);
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
      threads.emplace_back([&] { io.run(); });
    coretry::cancellation_source source;
    std::vector<std::unique_ptr<asio::cancellation_signal>> signals;
    std::atomic<int> calls{0};
    std::atomic<int> bad{0};
    retry_policy p{
        .max_attempts = 3, .attempt_timeout = 1ms, .backoff = coretry::backoff::fixed(1ms)};
    p.cancellation = source.token();
    auto strand = asio::make_strand(io);
    for (int i = 0; i < ops; ++i) {
      signals.push_back(std::make_unique<asio::cancellation_signal>());
      coretry::async_retry(
          strand, hang_on_steady_timer, p,
          asio::bind_cancellation_slot(signals.back()->slot(), [&](std::error_code e, int) {
            calls.fetch_add(1);
            if (e != coretry::test::operation_aborted && e != coretry::errc::attempt_timeout)
              bad.fetch_add(1);
          }));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(900 + (round % 10) * 50));
    // The group from this thread, the slots at the same moment on the handlers' strand.
    asio::post(strand, [&] {
      for (auto& s : signals)
        s->emit(asio::cancellation_type::terminal);
    });
    source.cancel();
    work.reset();
    for (auto& t : threads)
      t.join();
    CHECK(calls.load() == ops);
    CHECK(bad.load() == 0);
  }
}

TEST_CASE("break: io_context destroyed after each step of a timed operation") {
  // Walks the destruction point through every handler the operation runs: start, attempt
  // timer armed, fired (timeout handler queued), hop to the strand, sleep, next attempt...
  for (int steps = 0; steps < 60; ++steps) {
    CAPTURE(steps);
    coretry::cancellation_source source;
    auto calls = std::make_shared<int>(0);
    {
      asio::io_context io;
      retry_policy p{
          .max_attempts = 4, .attempt_timeout = 1ms, .backoff = coretry::backoff::fixed(1ms)};
      p.cancellation = source.token();
      asio::cancellation_signal signal;
      coretry::async_retry(
          io.get_executor(), hang_on_steady_timer, p,
          asio::bind_cancellation_slot(signal.slot(), [calls](std::error_code, int) { ++*calls; }));
      for (int i = 0; i < steps; ++i) {
        if (io.run_one_for(5ms) == 0)
          break;
      }
      // the signal outlives nothing: destroyed before io (declared after it)
    }
    CHECK(*calls <= 1);
    source.cancel(); // nothing is reachable any more
  }
}

TEST_CASE("break: one token copied into thousands of operations, the source destroyed first") {
  asio::io_context io(2);
  std::atomic<int> calls{0};
  std::atomic<int> ok{0};
  constexpr int ops = 2000;
  {
    coretry::cancellation_source source;
    retry_policy p{.max_attempts = 2, .backoff = coretry::backoff::fixed(2ms)};
    p.cancellation = source.token();
    for (int i = 0; i < ops; ++i)
      coretry::async_retry(io.get_executor(), fail_now, p, [&](std::error_code e, int) {
        calls.fetch_add(1);
        if (e == std::errc::connection_refused)
          ok.fetch_add(1);
      });
  } // the source is gone; the tokens in the operations keep its state
  std::thread t([&] { io.run(); });
  io.run();
  t.join();
  CHECK(calls.load() == ops);
  CHECK(ok.load() == ops);
}

TEST_CASE("break: a breaker and a sending rate hear about every attempt while a group cancels") {
  for (int round = 0; round < 20; ++round) {
    asio::io_context io(2);
    auto breaker = std::make_shared<coretry::circuit_breaker>(
        coretry::circuit_breaker_options{.consecutive_failures = 1000000, .failure_ratio = 0});
    auto rate = std::make_shared<coretry::adaptive_rate_limiter>();
    coretry::cancellation_source source;
    retry_policy p{
        .max_attempts = 5, .attempt_timeout = 2ms, .backoff = coretry::backoff::fixed(1ms)};
    p.cancellation = source.token();
    p.breaker = breaker;
    p.rate_limit = rate;
    constexpr int ops = 50;
    std::vector<coretry::retry_stats> stats(ops);
    std::atomic<int> calls{0};
    for (int i = 0; i < ops; ++i)
      coretry::async_retry(io.get_executor(), (i % 2) ? hang_on_steady_timer : fail_now, p,
                           stats[i], [&](std::error_code, int) { calls.fetch_add(1); });
    std::thread t([&] { io.run(); });
    std::this_thread::sleep_for(std::chrono::microseconds(500 + round * 200));
    source.cancel();
    io.run();
    t.join();
    CHECK(calls.load() == ops);
    std::uint64_t attempts = 0;
    for (auto& s : stats)
      attempts += s.attempts;
    CHECK(breaker->successes() + breaker->failures() + breaker->abandoned() == attempts);
    CHECK(breaker->probes_in_flight() == 0);
  }
}

// --- Executors ------------------------------------------------------------------------------

TEST_CASE("break: a timed operation on an any_io_executor wrapping a strand of a tracked "
          "executor runs its attempts and hooks on that strand") {
  asio::io_context io(2);
  auto tracked = asio::require(io.get_executor(), asio::execution::outstanding_work.tracked);
  auto strand = asio::make_strand(tracked);
  asio::any_io_executor ex = strand;
  std::atomic<int> off_strand{0};
  std::atomic<int> calls{0};
  auto op = [&]() -> asio::awaitable<int> {
    if (!strand.running_in_this_thread())
      off_strand.fetch_add(1);
    asio::steady_timer t(co_await asio::this_coro::executor, 1ms);
    co_await t.async_wait(asio::use_awaitable);
    if (!strand.running_in_this_thread())
      off_strand.fetch_add(1);
    throw std::system_error(make_error_code(std::errc::connection_refused));
  };
  retry_policy p{.max_attempts = 3, .attempt_timeout = 1h, .backoff = coretry::backoff::fixed(1ms)};
  p.on_retry = [&](const coretry::retry_event&) {
    if (!strand.running_in_this_thread())
      off_strand.fetch_add(1);
  };
  for (int i = 0; i < 20; ++i)
    coretry::async_retry(ex, op, p, [&](std::error_code, int) { calls.fetch_add(1); });
  asio::co_spawn(
      ex,
      [&]() -> asio::awaitable<void> {
        try {
          co_await coretry::retry_async(op, p);
        } catch (const std::system_error&) {
        }
        if (!strand.running_in_this_thread())
          off_strand.fetch_add(1);
        calls.fetch_add(1);
      },
      asio::detached);
  std::thread t([&] { io.run(); });
  std::thread t2([&] { io.run(); });
  for (int i = 0; i < 5000 && calls.load() < 21; ++i)
    std::this_thread::sleep_for(1ms);
  io.stop(); // the strand's tracked executor keeps run() going
  t.join();
  t2.join();
  CHECK(calls.load() == 21);
  CHECK(off_strand.load() == 0);
}

// --- A group cancel racing the destruction of one of the io_contexts it reaches ---------------

// Was: heap-use-after-free in ~strand_impl (op_state::notify_from_group kept the state, and its
// strand, alive past the io_context through the pin taken under the source's lock).
TEST_CASE("break: a source cancelled on one thread while another destroys an io_context whose "
          "operation it has already taken from its list") {
  // One source serves two io_contexts. Many operations on `big` are linked first, so that
  // cancel() notifies them first (oldest first) and is still busy when `small` is destroyed;
  // the one operation on `small` was pinned under the source's lock before that.
  coretry::cancellation_source source;
  retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
  p.cancellation = source.token();
  asio::io_context big;
  constexpr int big_ops = 4000;
  int big_calls = 0;
  for (int i = 0; i < big_ops; ++i)
    coretry::async_retry(big.get_executor(), fail_now, p,
                         [&](std::error_code, int) { ++big_calls; });
  big.poll(); // all linked, asleep
  auto small = std::make_unique<asio::io_context>();
  coretry::async_retry(small->get_executor(), fail_now, p, [](std::error_code, int) {});
  small->poll(); // linked last: notified last

  std::thread canceller([&] { source.cancel(); });
  // Wait until cancel() has taken (and pinned) the whole list: attach succeeds only before.
  coretry::detail::cancellation_registration probe;
  probe.notify = [](coretry::detail::cancellation_registration&) noexcept {};
  auto token = source.token();
  while (token.attach(probe))
    token.detach(probe);
  small.reset(); // the operation's frame and state die with it, while cancel() is notifying
  canceller.join();
  big.run();
  CHECK(big_calls == big_ops);
}

// --- use_future completes on the system executor ----------------------------------------------

// Was: heap-use-after-free (ASan) in ~op_state on an asio system thread: the completion carried
// the operation's state (strand, attempt timer) to use_future's executor, where it was released
// after run() had returned and the io_context had been destroyed.
TEST_CASE("break: use_future on the controlled path, the io_context destroyed right after run()") {
  for (int i = 0; i < 200; ++i) {
    std::future<int> f;
    {
      asio::io_context io;
      retry_policy p{.max_attempts = 1, .deadline = 1h};
      f = coretry::async_retry(
          io.get_executor(), []() -> asio::awaitable<int> { co_return 3; }, p, asio::use_future);
      io.run();
    }
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    std::this_thread::sleep_for(std::chrono::microseconds(50)); // the system thread lets go
    CHECK(f.get() == 3);
  }
}

// --- Batched group cancel (one notice per execution context) --------------------------------

namespace {

struct counted {
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> aborted = std::make_shared<std::atomic<int>>(0);
  void operator()(std::error_code e, int) const {
    calls->fetch_add(1);
    if (e == coretry::test::operation_aborted)
      aborted->fetch_add(1);
  }
};

asio::awaitable<int> ok_now() {
  co_return 1;
}

} // namespace

TEST_CASE("break-batch: cancel from a third thread while 2-thread io_contexts start, finish and "
          "sleep operations") {
  for (int round = 0; round < 30; ++round) {
    asio::io_context a(2), b(2);
    auto wa = asio::make_work_guard(a);
    auto wb = asio::make_work_guard(b);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&] { a.run(); });
      threads.emplace_back([&] { b.run(); });
    }
    coretry::cancellation_source source;
    retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
    p.cancellation = source.token();
    counted c;
    constexpr int ops = 200;
    auto sa = asio::make_strand(a); // shared user strand for some
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(50 * (round % 8)));
      source.cancel();
    });
    for (int i = 0; i < ops; ++i) {
      auto op = (i % 3 == 0) ? ok_now : (i % 3 == 1) ? fail_now : hang_on_steady_timer;
      switch (i % 4) {
      case 0:
        coretry::async_retry(a.get_executor(), op, p, c);
        break;
      case 1:
        coretry::async_retry(b.get_executor(), op, p, c);
        break;
      case 2:
        coretry::async_retry(sa, op, p, c);
        break;
      default:
        coretry::async_retry(asio::any_io_executor(b.get_executor()), op, p, c);
        break;
      }
    }
    canceller.join();
    wa.reset();
    wb.reset();
    for (auto& t : threads)
      t.join();
    CHECK(c.calls->load() == ops);
  }
}

TEST_CASE("break-batch: an on_retry hook cancels its own source on a 2-thread io_context, with "
          "peers on a thread_pool and a user strand") {
  for (int round = 0; round < 30; ++round) {
    asio::io_context io(2);
    asio::thread_pool pool(2);
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
      threads.emplace_back([&] { io.run(); });
    coretry::cancellation_source source;
    retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
    p.cancellation = source.token();
    counted peers;
    constexpr int n = 40;
    auto st = asio::make_strand(io);
    for (int i = 0; i < n; ++i) {
      coretry::async_retry(io.get_executor(), hang_on_steady_timer, p, peers);
      coretry::async_retry(pool.get_executor(), fail_now, p, peers);
      coretry::async_retry(st, fail_now, p, peers);
    }
    retry_policy q = p;
    q.on_retry = [&](const coretry::retry_event&) { source.cancel(); };
    counted self;
    coretry::async_retry(st, fail_now, q, self);
    coretry::async_retry(io.get_executor(), fail_now, coretry::shared_policy(q), self);
    for (int i = 0; i < 2000 && (peers.calls->load() < 3 * n || self.calls->load() < 2); ++i)
      std::this_thread::sleep_for(1ms);
    work.reset();
    for (auto& t : threads)
      t.join();
    pool.join();
    CHECK(peers.calls->load() == 3 * n);
    CHECK(peers.aborted->load() == 3 * n);
    CHECK(self.calls->load() == 2);
    CHECK(self.aborted->load() == 2);
  }
}

// Asio forbids destroying an execution context while another thread still submits work to its
// executors, and cancel() posts to each context it finds: so a context may be destroyed once
// cancel() has returned, with its batches or notices still queued, not during the call (Boost's
// TSan build caught the strand service shutting down under a post from cancel()).
TEST_CASE("break-batch: contexts destroyed on other threads while their batches are queued, over "
          "more contexts than batches") {
  for (int round = 0; round < 20; ++round) {
    constexpr int contexts = 12;
    constexpr int per = 30;
    coretry::cancellation_source source;
    retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
    p.cancellation = source.token();
    std::vector<std::unique_ptr<asio::io_context>> ios;
    std::vector<counted> cs(contexts);
    for (int c = 0; c < contexts; ++c) {
      ios.push_back(std::make_unique<asio::io_context>());
      for (int i = 0; i < per; ++i)
        coretry::async_retry(ios.back()->get_executor(), (i % 2) ? hang_on_steady_timer : fail_now,
                             p, cs[static_cast<std::size_t>(c)]);
      ios.back()->poll();
    }
    std::atomic<bool> go{false};
    std::vector<std::thread> killers;
    for (int c = 0; c < contexts; c += 3)
      killers.emplace_back([&, c] {
        while (!go.load())
          ;
        if (round % 2)
          std::this_thread::sleep_for(std::chrono::microseconds(c * 5));
        ios[static_cast<std::size_t>(c)].reset();
      });
    source.cancel();
    go.store(true);
    for (auto& t : killers)
      t.join();
    for (int c = 0; c < contexts; ++c) {
      if (c % 3 == 0) {
        CHECK(cs[static_cast<std::size_t>(c)].calls->load() == 0);
        continue;
      }
      ios[static_cast<std::size_t>(c)]->run();
      CHECK(cs[static_cast<std::size_t>(c)].calls->load() == per);
      CHECK(cs[static_cast<std::size_t>(c)].aborted->load() == per);
    }
  }
}

TEST_CASE("break-batch: a completion run inline by the batch cancels again, starts a new "
          "operation with the token and drops the source") {
  asio::io_context io;
  auto source = std::make_unique<coretry::cancellation_source>();
  retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
  p.cancellation = source->token();
  counted late;
  std::atomic<int> calls{0};
  constexpr int n = 150; // more than a chunk
  for (int i = 0; i < n; ++i)
    coretry::async_retry(io.get_executor(), fail_now, p, [&](std::error_code e, int) {
      calls.fetch_add(1);
      CHECK(e == coretry::test::operation_aborted);
      if (source) {
        CHECK_FALSE(source->cancel());
        source.reset();
      }
      coretry::async_retry(io.get_executor(), hang_on_steady_timer, p, late);
    });
  io.poll();
  std::thread([&] { source->cancel(); }).join();
  io.run();
  CHECK(calls.load() == n);
  CHECK(late.calls->load() == n);
  CHECK(late.aborted->load() == n);
}

TEST_CASE("break-batch: an attempt cancels its own source before it suspends, on a strand of a "
          "strand and on a thread_pool") {
  asio::io_context io;
  asio::thread_pool pool(2);
  coretry::cancellation_source source;
  retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
  p.cancellation = source.token();
  counted c;
  auto inner = asio::make_strand(io);
  auto outer = asio::make_strand(inner);
  for (int i = 0; i < 20; ++i) {
    coretry::async_retry(outer, hang_on_steady_timer, p, c);
    coretry::async_retry(asio::any_io_executor(outer), hang_on_steady_timer, p, c);
    coretry::async_retry(pool.get_executor(), hang_on_steady_timer, p, c);
  }
  coretry::async_retry(
      outer,
      [&]() -> asio::awaitable<int> {
        source.cancel();
        asio::steady_timer t(co_await asio::this_coro::executor, 1h);
        co_await t.async_wait(asio::use_awaitable);
        co_return 0;
      },
      p, c);
  io.run();
  for (int i = 0; i < 2000 && c.calls->load() < 61; ++i)
    std::this_thread::sleep_for(1ms);
  pool.join();
  CHECK(c.calls->load() == 61);
  CHECK(c.aborted->load() == 61);
}

TEST_CASE("break-batch: retry and hedge operations of one source, cancelled while finishing, "
          "on a 2-thread io_context") {
  for (int round = 0; round < 30; ++round) {
    asio::io_context io(2);
    coretry::cancellation_source source;
    retry_policy p{.max_attempts = 2,
                   .backoff =
                       coretry::backoff::fixed(std::chrono::microseconds(100 + 37 * (round % 10)))};
    p.cancellation = source.token();
    counted c;
    constexpr int n = 60;
    for (int i = 0; i < n; ++i) {
      coretry::async_retry(io.get_executor(), fail_now, p, c);
      coretry::async_hedge(io.get_executor(), fail_now, p,
                           coretry::hedge_options{.delay = std::chrono::microseconds(50)}, c);
    }
    std::thread t1([&] { io.run(); });
    std::thread t2([&] { io.run(); });
    std::this_thread::sleep_for(std::chrono::microseconds(100 + 30 * round));
    source.cancel();
    t1.join();
    t2.join();
    CHECK(c.calls->load() == 2 * n);
  }
}

TEST_CASE("break-batch: a shared_policy used from many threads, lvalues not moved from") {
  asio::thread_pool pool(2);
  coretry::cancellation_source source;
  retry_policy base{.max_attempts = 2, .backoff = coretry::backoff::fixed(1h), .seed = 7};
  base.cancellation = source.token();
  coretry::shared_policy sp(base);
  counted c;
  std::vector<std::thread> starters;
  constexpr int per = 100;
  for (int t = 0; t < 2; ++t)
    starters.emplace_back([&] {
      for (int i = 0; i < per; ++i) {
        coretry::async_retry(pool.get_executor(), fail_now, sp, c);
        coretry::async_retry(asio::make_strand(pool), fail_now, std::as_const(sp), c);
      }
    });
  for (auto& t : starters)
    t.join();
  CHECK(static_cast<bool>(sp));
  retry_policy lv = base;
  coretry::async_retry(pool.get_executor(), fail_now, lv, c);
  CHECK(lv.cancellation.can_be_cancelled()); // copied, not moved
  asio::co_spawn(
      pool,
      [&, sp]() -> asio::awaitable<void> {
        try {
          co_await coretry::retry_async(fail_now, sp);
        } catch (const std::system_error& e) {
          c(e.code(), 0);
        }
      },
      asio::detached);
  std::this_thread::sleep_for(2ms);
  source.cancel();
  for (int i = 0; i < 2000 && c.calls->load() < 4 * per + 2; ++i)
    std::this_thread::sleep_for(1ms);
  pool.join();
  CHECK(c.calls->load() == 4 * per + 2);
  CHECK(c.aborted->load() == 4 * per + 2);
  coretry::shared_policy gone = std::move(sp);
  CHECK_THROWS_AS(coretry::async_retry(pool.get_executor(), fail_now, sp, c),
                  std::invalid_argument);
}

TEST_CASE("break-batch: thread_pools and io_contexts destroyed on other threads while cancel() "
          "posts, operations cycling through zero-delay retries") {
  for (int round = 0; round < 15; ++round) {
    coretry::cancellation_source source;
    retry_policy p{.max_attempts = 1000000, .backoff = coretry::backoff::fixed(0ms)};
    p.cancellation = source.token();
    auto pool = std::make_unique<asio::thread_pool>(1);
    auto io = std::make_unique<asio::io_context>();
    auto io2 = std::make_unique<asio::io_context>();
    counted c, c2;
    for (int i = 0; i < 40; ++i) {
      coretry::async_retry(pool->get_executor(), fail_now, p, c);
      coretry::async_retry(io->get_executor(), fail_now, p, c);
      coretry::async_retry(asio::make_strand(io2->get_executor()), fail_now, p, c2);
    }
    std::thread runner([&] { io->run_for(std::chrono::microseconds(300)); });
    io2->run_for(std::chrono::microseconds(200));
    runner.join();
    std::atomic<bool> go{false};
    std::thread killer([&] {
      while (!go.load())
        ;
      pool.reset();
      io.reset();
    });
    go.store(true);
    source.cancel();
    killer.join();
    io2->run();
    CHECK(c2.calls->load() == 40);
    CHECK(c2.aborted->load() == 40);
    CHECK(c.calls->load() <= 80);
  }
}

TEST_CASE(
    "break-batch: strand-of-strand inside any_io_executor, system_executor and blocking.never "
    "executors, on a 2-thread io_context") {
  for (int round = 0; round < 20; ++round) {
    asio::io_context io(2);
    auto work = asio::make_work_guard(io);
    std::thread t1([&] { io.run(); });
    std::thread t2([&] { io.run(); });
    coretry::cancellation_source source;
    retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
    p.cancellation = source.token();
    counted c;
    auto s1 = asio::make_strand(io);
    auto s2 = asio::make_strand(s1);
    auto never = asio::require(io.get_executor(), asio::execution::blocking.never);
    int n = 0;
    for (int i = 0; i < 30; ++i) {
      coretry::async_retry(asio::any_io_executor(s2), i % 2 ? fail_now : hang_on_steady_timer, p,
                           c);
      coretry::async_retry(s2, i % 2 ? fail_now : hang_on_steady_timer, p, c);
      coretry::async_retry(never, i % 2 ? fail_now : hang_on_steady_timer, p, c);
      coretry::async_retry(asio::any_io_executor(s1), i % 2 ? fail_now : hang_on_steady_timer, p,
                           c);
      n += 4;
    }
    for (int i = 0; i < 3; ++i) {
      coretry::async_retry(asio::system_executor(), fail_now, p, c);
      ++n;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100 * (round % 5)));
    source.cancel();
    for (int i = 0; i < 3000 && c.calls->load() < n; ++i)
      std::this_thread::sleep_for(1ms);
    work.reset();
    t1.join();
    t2.join();
    CHECK(c.calls->load() == n);
    CHECK(c.aborted->load() == n);
  }
}

// A spawned attempt cut before its coroutine began. co_spawn (Boost 1.81's Asio 1.26) first
// dispatches itself onto the executor and, when the coroutine it runs ends without a context
// switch, posts once more before completing; if the attempt's slot was emitted before the first
// dispatch resumed, the coroutine never ran (so never turned `throw_if_cancelled` off) and that
// last post threw `operation_aborted` out of `run()`: std::terminate on the thread. The test
// above hit it in about 5 runs of 100 under TSan (an attempt on a `strand<io_context::executor>`,
// co_spawned on its strand, cancelled before its coroutine entered), 0 of 100 since the cut waits
// until the attempt begins (retry_op.hpp, `cut_attempt`; hedge_op.hpp, `hedge_slot::begun`).
// This test did not reproduce it: it checks the same exactly-once for retries and hedges,
// cancelled at once, and that nothing leaves `run()`.
TEST_CASE("break-batch: retries and hedges cut before their spawned attempt began complete once, "
          "with nothing thrown out of run(), on a strand of an any_io_executor") {
  for (int round = 0; round < 60; ++round) {
    asio::io_context io(2);
    auto work = asio::make_work_guard(io);
    std::atomic<int> escaped{0};
    auto runner = [&] {
      for (;;) {
        try {
          io.run();
          return;
        } catch (...) {
          escaped.fetch_add(1);
        }
      }
    };
    std::thread t1(runner);
    std::thread t2(runner);
    coretry::cancellation_source source;
    retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
    p.cancellation = source.token();
    const coretry::hedge_options h{.delay = 0ms};
    counted c;
    const asio::any_io_executor ex(asio::make_strand(asio::make_strand(io)));
    int n = 0;
    for (int i = 0; i < 20; ++i) {
      coretry::async_retry(ex, hang_on_steady_timer, p, c);
      coretry::async_hedge(ex, hang_on_steady_timer, p, h, c);
      n += 2;
    }
    if (round % 3 == 1)
      std::this_thread::sleep_for(std::chrono::microseconds(50 * (round % 7)));
    source.cancel();
    for (int i = 0; i < 3000 && c.calls->load() < n; ++i)
      std::this_thread::sleep_for(1ms);
    work.reset();
    t1.join();
    t2.join();
    CHECK(escaped.load() == 0);
    CHECK(c.calls->load() == n);
    CHECK(c.aborted->load() == n);
  }
}

// --- Token-based and deferred attempts (issue 20): the same exactly-once under fire -----------

namespace {

/// The attempt shapes, each failing, succeeding or hanging until cancelled (on a timer of its
/// own per attempt, kept alive by the handler it completes).
enum class outcome { fail, ok, hang };

struct token_attempt {
  asio::any_io_executor ex;
  outcome what;
  template <class Token> auto operator()(Token&& token) const {
    return asio::async_initiate<Token, void(coretry::test::error_code, int)>(
        [ex = ex, what = what](auto handler) {
          auto hex = asio::get_associated_executor(handler, ex);
          if (what != outcome::hang) {
            const std::error_code ec = what == outcome::fail
                                           ? make_error_code(std::errc::connection_refused)
                                           : std::error_code{};
            asio::post(hex, [h = std::move(handler), ec]() mutable {
              std::move(h)(coretry::detail::to_asio_error(ec), 1);
            });
            return;
          }
          auto t = std::make_shared<asio::steady_timer>(ex, std::chrono::hours(1));
          auto slot = asio::get_associated_cancellation_slot(handler);
          t->async_wait(asio::bind_cancellation_slot(
              slot, asio::bind_executor(
                        hex, [t, h = std::move(handler)](coretry::test::error_code ec) mutable {
                          std::move(h)(ec, 0);
                        })));
        },
        token);
  }
};

/// `op(attempt_context&, token)`.
struct context_token_attempt {
  token_attempt inner;
  template <class Token> auto operator()(coretry::attempt_context&, Token&& token) const {
    return inner(std::forward<Token>(token));
  }
};

/// `op()` returning a deferred operation.
struct deferred_attempt {
  token_attempt inner;
  auto operator()() const { return inner(coretry::test::deferred); }
};

/// Starts one operation of front end `front` (0 async_retry, 1 retry_async, 2 async_hedge,
/// 3 hedge_async) with attempt `op` on `ex`, reporting to `c`.
template <class Executor, class Op>
void start_front(int front, const Executor& ex, Op op, const retry_policy& p, counted c) {
  const coretry::hedge_options h{.delay = std::chrono::microseconds(50)};
  auto to_counted = [c](std::exception_ptr e, int v) {
    std::error_code ec;
    try {
      if (e)
        std::rethrow_exception(e);
    } catch (const std::system_error& x) {
      ec = x.code();
#if CORETRY_ASIO_DISTINCT_SYSTEM_ERROR
    } catch (const coretry::test::system_error& x) {
      ec = x.code();
#endif
    } catch (...) {
      ec = make_error_code(std::errc::invalid_argument);
    }
    c(ec, v);
  };
  switch (front) {
  case 0:
    coretry::async_retry(ex, std::move(op), p, c);
    break;
  case 1:
    asio::co_spawn(ex, coretry::retry_async(std::move(op), p), to_counted);
    break;
  case 2:
    coretry::async_hedge(ex, std::move(op), p, h, c);
    break;
  default:
    asio::co_spawn(ex, coretry::hedge_async(std::move(op), p, h), to_counted);
    break;
  }
}

template <class Executor>
void start_shaped(int i, const Executor& ex, asio::any_io_executor io_ex, const retry_policy& p,
                  counted c) {
  const token_attempt base{io_ex, static_cast<outcome>(i % 3)};
  const int front = (i / 3) % 4;
  switch ((i / 12) % 3) {
  case 0:
    start_front(front, ex, base, p, c);
    break;
  case 1:
    start_front(front, ex, context_token_attempt{base}, p, c);
    break;
  default:
    start_front(front, ex, deferred_attempt{base}, p, c);
    break;
  }
}

} // namespace

TEST_CASE("break-shapes: token and deferred attempts on every front end, cancelled from a third "
          "thread while 2-thread io_contexts start, finish and sleep them") {
  for (int round = 0; round < 20; ++round) {
    asio::io_context io(2);
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
      threads.emplace_back([&] { io.run(); });
    coretry::cancellation_source source;
    retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
    p.cancellation = source.token();
    if (round % 2)
      p.attempt_timeout = std::chrono::microseconds(200 + 50 * (round % 5));
    counted c;
    constexpr int ops = 72; // every shape, front end and outcome twice
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(40 * (round % 8)));
      source.cancel();
    });
    auto strand = asio::make_strand(io);
    for (int i = 0; i < ops; ++i) {
      if (i % 2)
        start_shaped(i / 2 + (ops / 2) * (i % 2), strand, io.get_executor(), p, c);
      else
        start_shaped(i / 2, io.get_executor(), io.get_executor(), p, c);
    }
    canceller.join();
    work.reset();
    for (auto& t : threads)
      t.join();
    CHECK(c.calls->load() == ops);
  }
}

TEST_CASE("break-shapes: io_context destroyed with token and deferred attempts in flight, asleep "
          "and being cancelled from another thread: each completes at most once, nothing leaks") {
  for (int round = 0; round < 20; ++round) {
    counted c;
    constexpr int ops = 36;
    coretry::cancellation_source source;
    {
      asio::io_context io(2);
      retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
      if (round % 2)
        p.cancellation = source.token();
      for (int i = 0; i < ops; ++i)
        start_shaped(i, io.get_executor(), io.get_executor(), p, c);
      std::thread t([&] { io.run_for(std::chrono::microseconds(100 * (round % 4))); });
      if (round % 2)
        source.cancel(); // while the other thread runs the context
      t.join();
      // The context is destroyed here, after cancel() has returned, with whatever is left.
    }
    CHECK(c.calls->load() <= ops);
  }
}
