// SPDX-License-Identifier: BSL-1.0
// Exactly once, whatever happens: regression tests for the ways an operation used to be lost,
// completed twice, or touched after its death.

#include <coretry/cancellation.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

/// Counts how often a handler ran and how many of its copies still exist.
struct tracked_handler {
  std::shared_ptr<std::atomic<int>> calls;
  std::shared_ptr<int> alive; // use_count() - 1 = copies of this handler in existence
  std::shared_ptr<std::error_code> error;
  void operator()(std::error_code ec, int) const {
    calls->fetch_add(1);
    *error = ec;
  }
};

tracked_handler make_tracked() {
  return {std::make_shared<std::atomic<int>>(0), std::make_shared<int>(0),
          std::make_shared<std::error_code>()};
}

} // namespace

TEST_CASE("a group cancel racing operations that are starting completes every one exactly once") {
  // 2 io threads run the operations; this thread starts them while a third thread cancels.
  constexpr int rounds = 150;
  constexpr int per_round = 8;
  int completed = 0;
  int aborted = 0;
  for (int round = 0; round < rounds; ++round) {
    asio::io_context io(2);
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
      threads.emplace_back([&] { io.run(); });
    coretry::cancellation_source source;
    retry_policy policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
    policy.cancellation = source.token();
    std::atomic<int> calls{0};
    std::atomic<bool> go{false};
    std::thread canceller([&] {
      while (!go.load())
        std::this_thread::yield();
      for (int spin = 0; spin < (round % 7) * 20; ++spin)
        std::this_thread::yield();
      source.cancel();
    });
    go = true;
    for (int i = 0; i < per_round; ++i) {
      CHECK_NOTHROW(coretry::async_retry(io.get_executor(), hang_on_steady_timer, policy,
                                         [&](std::error_code ec, int) {
                                           calls.fetch_add(1);
                                           CHECK(ec == coretry::test::operation_aborted);
                                         }));
    }
    canceller.join();
    work.reset();
    for (auto& t : threads)
      t.join();
    CHECK(calls.load() == per_round);
    completed += calls.load();
    aborted += per_round;
  }
  CHECK(completed == aborted);
}

TEST_CASE("a source that outlives an io_context destroyed with operations pending is safe") {
  coretry::cancellation_source source;
  auto handler = make_tracked();
  {
    asio::io_context io;
    int calls = 0;
    auto fail_once = [&]() -> asio::awaitable<int> {
      ++calls;
      throw std::system_error(refused);
      co_return 0;
    };
    retry_policy policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
    policy.cancellation = source.token();
    coretry::async_retry(io.get_executor(), fail_once, policy, handler);
    io.poll(); // the first attempt failed: the operation sleeps for an hour
    CHECK(calls == 1);
    CHECK(handler.alive.use_count() > 1);
  } // the io_context destroys the frame and the handler, uncalled
  CHECK(handler.alive.use_count() == 1);
  CHECK(handler.calls->load() == 0);

  // A new operation on a new context links into the same source: it must find a clean list.
  asio::io_context io2;
  auto second = make_tracked();
  retry_policy policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
  policy.cancellation = source.token();
  coretry::async_retry(io2.get_executor(), hang_on_steady_timer, policy, second);
  io2.poll();
  CHECK(source.cancel()); // touches no freed operation (ASan checks this)
  io2.run();
  CHECK(second.calls->load() == 1);
  CHECK(*second.error == coretry::test::operation_aborted);
  CHECK(handler.calls->load() == 0);
}

TEST_CASE("a source cancelled after its io_context died notifies nothing") {
  coretry::cancellation_source source;
  {
    asio::io_context io;
    retry_policy policy{.backoff = coretry::backoff::fixed(1h)};
    policy.cancellation = source.token();
    for (int i = 0; i < 10; ++i)
      coretry::async_retry(io.get_executor(), hang_on_steady_timer, policy,
                           [](std::error_code, int) { FAIL("called after destruction"); });
    io.poll();
  }
  CHECK(source.cancel());
}

TEST_CASE("a hook or predicate that throws ends the operation once, whatever the front end") {
  manual_clock::reset();
  struct case_t {
    const char* what;
    bool from_hook;    // on_retry throws
    bool system_error; // what is thrown is a std::system_error
  };
  for (const case_t c : {case_t{"runtime_error from on_retry", true, false},
                         case_t{"system_error from on_retry", true, true},
                         case_t{"runtime_error from retry_if", false, false}}) {
    CAPTURE(c.what);
    auto make_policy = [&] {
      retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(1ms)};
      auto raise = [c] {
        if (c.system_error)
          throw std::system_error(make_error_code(std::errc::bad_message));
        throw std::runtime_error("hook failed");
      };
      if (c.from_hook)
        p.on_retry = [raise](const coretry::retry_event&) { raise(); };
      else
        p.retry_if = [raise](const std::error_code&) -> bool {
          raise();
          return true;
        };
      return p;
    };
    scripted_op op{{fail(refused)}};

    // async_retry with a callback: called once with unexpected_exception; run() does not throw.
    asio::io_context io;
    int completions = 0;
    std::error_code error;
    coretry::retry_stats stats;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, make_policy(), stats,
        [&](std::error_code ec, int) {
          ++completions;
          error = ec;
        });
    CHECK_NOTHROW(drive(io, [&] { return completions > 0; }));
    CHECK(completions == 1);
    CHECK(error == coretry::errc::unexpected_exception);
    CHECK(stats.reason == coretry::errc::unexpected_exception);
    CHECK(stats.exception != nullptr);
    CHECK(op.calls == 1); // no further attempt after the throw

    // The same with a deadline (the controlled path, on a strand).
    auto timed = make_policy();
    timed.deadline = 1h;
    completions = 0;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, timed,
        [&](std::error_code ec, int) {
          ++completions;
          error = ec;
        });
    CHECK_NOTHROW(drive(io, [&] { return completions > 0; }));
    CHECK(completions == 1);
    CHECK(error == coretry::errc::unexpected_exception);

    // retry_async rethrows what was thrown, as itself, on both paths.
    for (bool with_deadline : {false, true}) {
      auto p = make_policy();
      if (with_deadline)
        p.deadline = 1h;
      std::exception_ptr seen;
      bool done = false;
      asio::co_spawn(io, coretry::retry_async<manual_timer>([&] { return op(); }, p),
                     [&](std::exception_ptr e, int) {
                       seen = e;
                       done = true;
                     });
      CHECK_NOTHROW(drive(io, [&] { return done; }));
      REQUIRE(seen);
      if (c.system_error)
        CHECK_THROWS_AS(std::rethrow_exception(seen), std::system_error);
      else
        CHECK_THROWS_AS(std::rethrow_exception(seen), std::runtime_error);
    }
  }
}

TEST_CASE(
    "an operation that throws something else completes async_retry with unexpected_exception") {
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> {
    ++calls;
    throw std::logic_error("bug");
    co_return 0;
  };
  std::error_code ec;
  int completions = 0;
  coretry::async_retry<manual_timer>(io.get_executor(), op, retry_policy{},
                                     [&](std::error_code e, int) {
                                       ec = e;
                                       ++completions;
                                     });
  CHECK_NOTHROW(io.run());
  CHECK(completions == 1);
  CHECK(ec == coretry::errc::unexpected_exception);
  CHECK(calls == 1);
}

TEST_CASE("a group cancel over many contexts reaches each once, and one that dies drops its "
          "notices") {
  // More contexts than the source gathers into batches (the rest are notified one by one),
  // operations both sleeping and in an attempt, the cancel from another thread, and the first
  // context destroyed with its notices still queued.
  constexpr int contexts = 11;
  constexpr int per_context = 4;
  coretry::cancellation_source source;
  std::vector<std::unique_ptr<asio::io_context>> ios;
  std::vector<tracked_handler> handlers;
  for (int c = 0; c < contexts; ++c) {
    ios.push_back(std::make_unique<asio::io_context>());
    for (int i = 0; i < per_context; ++i) {
      retry_policy policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
      policy.cancellation = source.token();
      handlers.push_back(make_tracked());
      if (i % 2 == 0)
        coretry::async_retry(ios.back()->get_executor(), hang_on_steady_timer, policy,
                             handlers.back());
      else
        coretry::async_retry(
            ios.back()->get_executor(),
            []() -> asio::awaitable<int> {
              throw std::system_error(refused);
              co_return 0;
            },
            policy, handlers.back());
    }
    ios.back()->poll(); // each operation is in its attempt or asleep
  }
  std::thread([&] { CHECK(source.cancel()); }).join();
  ios.front().reset(); // its notices and operations are destroyed, uncalled
  for (int c = 1; c < contexts; ++c)
    ios[static_cast<std::size_t>(c)]->run();
  for (std::size_t k = 0; k < handlers.size(); ++k) {
    CHECK(handlers[k].alive.use_count() == 1);
    if (k < per_context) {
      CHECK(handlers[k].calls->load() == 0);
    } else {
      CHECK(handlers[k].calls->load() == 1);
      CHECK(*handlers[k].error == coretry::test::operation_aborted);
    }
  }
}
