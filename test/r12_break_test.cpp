// SPDX-License-Identifier: BSL-1.0
// Reviewer r12: probes of the retry_op split (9de3c0c, 5e0d029): the intermediate handlers hold
// the state through op_steps / op_frame, the loop lives in retry_engine, and retry_op's own
// members (the operation, the handler) now die before the engine unlinks from its group and its
// deadline queue. Each case runs under ASan (Asio 1.38) and TSan (Boost.Asio).
#include <coretry/cancellation.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using coretry::retry_policy;
using coretry::testing::manual_clock;
using coretry::testing::manual_timer;
using error_code = coretry::detail::asio_error_code;

namespace {

/// Bytes and blocks through a handler's allocator.
struct arena_counts {
  std::atomic<long> blocks{0};
  std::atomic<long> live{0};
};

template <class T> struct counting_allocator {
  using value_type = T;
  arena_counts* counts;
  explicit counting_allocator(arena_counts* c) noexcept : counts(c) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& o) noexcept : counts(o.counts) {}
  T* allocate(std::size_t n) {
    counts->blocks.fetch_add(1);
    counts->live.fetch_add(1);
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    counts->live.fetch_sub(1);
    std::allocator<T>().deallocate(p, n);
  }
  template <class U> bool operator==(const counting_allocator<U>& o) const noexcept {
    return counts == o.counts;
  }
};

/// A token attempt on the manual clock: fails `failures` times after 1 ms, then yields 7; or
/// hangs (cancellably) for an hour.
struct token_op {
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  int failures = 0;
  bool hang = false;
  template <class Token> auto operator()(Token&& token) {
    return asio::async_initiate<Token, void(error_code, int)>(
        [this](auto h) {
          const int n = ++*calls;
          auto ex = asio::get_associated_executor(h);
          auto t = std::make_shared<manual_timer>(ex);
          t->expires_after(hang ? std::chrono::nanoseconds(1h) : std::chrono::nanoseconds(1ms));
          const bool fail = n <= failures;
          auto slot = asio::get_associated_cancellation_slot(h);
          if (slot.is_connected())
            slot.assign([t](asio::cancellation_type) { t->cancel(); });
          t->async_wait([t, fail, h = std::move(h)](error_code ec) mutable {
            if (!ec && fail)
              ec = asio::error::connection_refused;
            std::move(h)(ec, ec ? 0 : 7);
          });
        },
        token);
  }
};

retry_policy quick(unsigned attempts) {
  return retry_policy{.max_attempts = attempts, .backoff = coretry::backoff::fixed(10ms)};
}

/// Calls `source.cancel()` from its destructor (once: the last copy).
struct cancels_on_death {
  coretry::cancellation_source source;
  std::shared_ptr<int> alive = std::make_shared<int>(0);
  ~cancels_on_death() {
    if (alive && alive.use_count() == 1)
      source.cancel();
  }
  cancels_on_death(coretry::cancellation_source s) : source(std::move(s)) {}
  cancels_on_death(const cancels_on_death&) = default;
  cancels_on_death(cancels_on_death&&) = default;
};

} // namespace

TEST_CASE("a handler's allocator pays for the state and every intermediate handler, and gets "
          "every block back") {
  for (bool controlled : {false, true}) {
    manual_clock::reset();
    arena_counts counts;
    int completions = 0;
    int value = 0;
    error_code seen;
    {
      asio::io_context io;
      coretry::cancellation_source source;
      auto policy = quick(3);
      if (controlled) {
        policy.cancellation = source.token();
        policy.attempt_timeout = 1h;
      }
      token_op op{.failures = 2};
      coretry::async_retry<manual_timer>(
          io.get_executor(), op, policy,
          asio::bind_allocator(counting_allocator<void>(&counts), [&](error_code ec, int v) {
            ++completions;
            seen = ec;
            value = v;
          }));
      REQUIRE(coretry::testing::drive(io, [&] { return completions > 0; }));
      CHECK(*op.calls == 3);
    }
    CHECK(completions == 1);
    CHECK(!seen);
    CHECK(value == 7);
    CHECK(counts.blocks.load() > 0);
    CHECK(counts.live.load() == 0);
  }
}

TEST_CASE("an io_context destroyed under a timed token attempt with a group and a caller's slot "
          "frees the operation, and a later cancel or emit reaches nothing") {
  manual_clock::reset();
  coretry::cancellation_source source;
  asio::cancellation_signal signal;
  auto alive = std::make_shared<int>(0);
  int completions = 0;
  token_op op{.hang = true};
  {
    asio::io_context io;
    auto policy = quick(3);
    policy.cancellation = source.token();
    policy.attempt_timeout = 30min;
    coretry::async_retry<manual_timer>(
        io.get_executor(), op, policy,
        asio::bind_cancellation_slot(signal.slot(),
                                     [&, alive](error_code, int) { ++completions; }));
    io.poll();
    CHECK(*op.calls == 1);
    CHECK(alive.use_count() > 1);
  }
  CHECK(alive.use_count() == 1);
  CHECK(completions == 0);
  CHECK(source.cancel());
  signal.emit(asio::cancellation_type::terminal);
  CHECK(completions == 0);
}

TEST_CASE("an operation whose destruction cancels its own group at the context's teardown is "
          "freed once, and the group stays usable") {
  for (bool in_attempt : {false, true}) {
    manual_clock::reset();
    coretry::cancellation_source source;
    auto handler_alive = std::make_shared<int>(0);
    int completions = 0;
    {
      asio::io_context io(2); // not one thread: the operation runs on a strand
      auto policy = retry_policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(1h)};
      policy.cancellation = source.token();
      if (in_attempt)
        policy.attempt_timeout = 30min;
      cancels_on_death guard(source);
      token_op inner{.hang = in_attempt};
      inner.failures = 5;
      auto op = [guard, inner](auto&& token) mutable {
        return inner(std::forward<decltype(token)>(token));
      };
      coretry::async_retry<manual_timer>(io.get_executor(), std::move(op), policy,
                                         [&, handler_alive](error_code, int) { ++completions; });
      // the first attempt fails after 1 ms (or hangs), then the operation sleeps for an hour
      if (!in_attempt) {
        manual_clock::advance(1ms);
      }
      io.poll();
      CHECK(handler_alive.use_count() > 1);
    }
    CHECK(handler_alive.use_count() == 1);
    CHECK(completions == 0);
    CHECK(source.cancelled());
    // A new operation on the same, cancelled source completes at once, aborted.
    asio::io_context io2;
    auto policy = quick(3);
    policy.cancellation = source.token();
    token_op op2{.hang = true};
    error_code seen;
    coretry::async_retry<manual_timer>(io2.get_executor(), op2, policy, [&](error_code ec, int) {
      ++completions;
      seen = ec;
    });
    io2.run();
    CHECK(completions == 1);
    CHECK(seen == asio::error::operation_aborted);
  }
}

TEST_CASE("cross-thread caller-slot emits and group cancels against timed token attempts on a "
          "two-thread context complete every operation exactly once") {
  constexpr int rounds = 40;
  constexpr int per_round = 6;
  for (int round = 0; round < rounds; ++round) {
    asio::io_context io(2);
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
      threads.emplace_back([&] { io.run(); });
    coretry::cancellation_source source;
    std::vector<std::unique_ptr<asio::cancellation_signal>> signals;
    std::vector<asio::strand<asio::io_context::executor_type>> strands;
    std::atomic<int> calls{0};
    std::vector<std::atomic<int>> each(per_round);
    for (int i = 0; i < per_round; ++i) {
      signals.push_back(std::make_unique<asio::cancellation_signal>());
      retry_policy policy{.max_attempts = 50, .backoff = coretry::backoff::fixed(0ms)};
      policy.cancellation = source.token();
      policy.attempt_timeout = 1h;
      auto op = [](auto&& token) {
        // fails at once, from another post: retried with no wait
        return asio::async_initiate<decltype(token), void(error_code, int)>(
            [](auto h) {
              auto ex = asio::get_associated_executor(h);
              asio::post(ex, [h = std::move(h)]() mutable {
                std::move(h)(error_code(asio::error::connection_refused), 0);
              });
            },
            token);
      };
      strands.push_back(asio::make_strand(io));
      coretry::async_retry(
          io.get_executor(), op, policy,
          asio::bind_cancellation_slot(signals.back()->slot(),
                                       asio::bind_executor(strands.back(), [&, i](error_code, int) {
                                         each[static_cast<std::size_t>(i)]++;
                                         calls++;
                                       })));
    }
    // The caller emits on its handler's strand (Asio's rule for a slot), racing the group
    // cancel from this thread and the operation's own steps on the other thread.
    for (int i = 0; i < per_round; i += 2)
      asio::post(strands[static_cast<std::size_t>(i)], [&, i] {
        signals[static_cast<std::size_t>(i)]->emit(asio::cancellation_type::terminal);
      });
    source.cancel();
    work.reset();
    for (auto& t : threads)
      t.join();
    CHECK(calls.load() == per_round);
    for (auto& e : each)
      CHECK(e.load() == 1);
  }
}

namespace {
// The policy is a named local: GCC 12 mis-moves a braced temporary policy inside a co_await
// expression (its label's small-string buffer), at a4eb90d as well; not the subject here.
template <class Op> asio::awaitable<void> await_retry(Op op, int* out) {
  retry_policy policy{.max_attempts = 3};
  *out = co_await coretry::retry_async(std::move(op), std::move(policy));
}
} // namespace

TEST_CASE("an attempt whose initiating function completes with an Asio error enum, not an "
          "error_code, compiles and is retried on every path") {
  // Boost.Asio's `asio::error::connection_refused` converts to its error_code but not to
  // std::error_code: the attempt handler converts the arguments to the signature's types first,
  // as the coroutine path's `as_tuple` does.
  auto op = [calls = std::make_shared<int>(0)](auto&& token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [calls](auto h) {
          auto ex = asio::get_associated_executor(h);
          const bool first = ++*calls == 1;
          asio::post(ex, [h = std::move(h), first]() mutable {
            if (first)
              std::move(h)(asio::error::connection_refused, 0);
            else
              std::move(h)(error_code(), 5);
          });
        },
        token);
  };
  asio::io_context io;
  coretry::cancellation_source source;
  auto policy = retry_policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(0ms)};
  policy.cancellation = source.token(); // controlled: the composed operation
  int value = 0;
  int awaited = 0;
  int completions = 0;
  coretry::async_retry(io.get_executor(), op, policy, [&](error_code ec, int v) {
    ++completions;
    CHECK(!ec);
    value = v;
  });
  // A coroutine function, not a capturing lambda: the lambda would be gone when it resumes.
  asio::co_spawn(io, await_retry(op, &awaited), asio::detached);
  io.run();
  CHECK(completions == 1);
  CHECK(value == 5);
  CHECK(awaited == 5);
}

namespace {
asio::awaitable<int> hang_on_manual_timer(std::shared_ptr<int> calls) {
  ++*calls;
  manual_timer t(co_await asio::this_coro::executor);
  t.expires_after(1h);
  co_await t.async_wait(asio::use_awaitable);
  co_return 0;
}
} // namespace

TEST_CASE("an io_context destroyed under a timed awaitable attempt with a group and a caller's "
          "slot frees the operation and its attempt's frame, and a later cancel or emit reaches "
          "nothing") {
  manual_clock::reset();
  coretry::cancellation_source source;
  asio::cancellation_signal signal;
  auto alive = std::make_shared<int>(0);
  auto calls = std::make_shared<int>(0);
  int completions = 0;
  {
    asio::io_context io;
    auto policy = quick(3);
    policy.cancellation = source.token();
    policy.attempt_timeout = 30min;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [calls] { return hang_on_manual_timer(calls); }, policy,
        asio::bind_cancellation_slot(signal.slot(),
                                     [&, alive](error_code, int) { ++completions; }));
    io.poll();
    CHECK(*calls == 1);
    CHECK(alive.use_count() > 1);
  }
  CHECK(alive.use_count() == 1);
  CHECK(calls.use_count() == 1); // the operation, and the attempt's frame, are gone
  CHECK(completions == 0);
  CHECK(source.cancel());
  signal.emit(asio::cancellation_type::terminal);
  CHECK(completions == 0);
}
