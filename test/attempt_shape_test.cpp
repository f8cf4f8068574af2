// SPDX-License-Identifier: BSL-1.0
// Attempts of every Asio shape: initiating functions taking a completion token (with and without
// the attempt_context), deferred operations, and the completion signatures they may have, on
// every front end; per-attempt timeout and cancellation reaching them through their bound slot.
#include <coretry/hedge.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <typeinfo>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

const std::error_code refused = std::make_error_code(std::errc::connection_refused);

/// A callback-style operation: completes, through a post, with the next scripted error and the
/// attempt's number times ten. Signature `void(error_code, int)`.
struct scripted_async {
  asio::io_context& io;
  std::vector<std::error_code> script;
  int calls = 0;

  template <class Token> auto operator()(Token&& token) {
    const std::error_code ec =
        calls < static_cast<int>(script.size()) ? script[calls] : std::error_code{};
    const int n = ++calls;
    return asio::async_initiate<Token, void(error_code, int)>(
        [ec, n](auto handler, asio::io_context* io) {
          asio::post(*io, [h = std::move(handler), ec, n]() mutable {
            std::move(h)(coretry::detail::to_asio_error(ec), n * 10);
          });
        },
        token, &io);
  }
};

retry_policy quick(unsigned attempts) {
  return {.max_attempts = attempts, .backoff = coretry::backoff::fixed(10ms)};
}

template <class T> struct seen {
  int calls = 0;
  std::error_code error;
  std::optional<T> value;
};

} // namespace

using coretry::detail::attempt_form;
using coretry::detail::form_of;
// The shape is told at compile time; anything else is refused by a static_assert.
static_assert(form_of<decltype([](auto&& t) { return std::move(t); })>() == attempt_form::token);
static_assert(
    form_of<decltype([](coretry::attempt_context&, auto&& t) { return std::move(t); })>() ==
    attempt_form::token_with_context);
static_assert(form_of<decltype([]() -> asio::awaitable<int> { co_return 1; })>() ==
              attempt_form::awaitable);
static_assert(
    form_of<decltype([](coretry::attempt_context&) -> asio::awaitable<void> { co_return; })>() ==
    attempt_form::awaitable);
static_assert(form_of<decltype([] { return 1; })>() == attempt_form::invalid);
static_assert(form_of<int>() == attempt_form::invalid);

TEST_CASE("async_retry takes an initiating function and a plain callback: no coroutine written") {
  manual_clock::reset();
  asio::io_context io;
  scripted_async op{io, {refused, refused}};
  seen<int> out;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&](auto&& token) { return op(std::forward<decltype(token)>(token)); },
      quick(5),
      [&](error_code ec, int v) {
        ++out.calls;
        out.error = ec;
        out.value = v;
      });
  REQUIRE(drive(io, [&] { return out.calls > 0; }));
  CHECK(out.calls == 1);
  CHECK(!out.error);
  CHECK(out.value == 30);
  CHECK(op.calls == 3);
  CHECK(manual_clock::elapsed() == 20ms);
}

TEST_CASE("retry_async takes op(attempt_context&, token) and gives up with the last error") {
  manual_clock::reset();
  asio::io_context io;
  scripted_async op{io, {refused, refused, refused}};
  std::vector<unsigned> numbers;
  coretry::retry_stats stats;
  seen<int> out;
  asio::co_spawn(io,
                 coretry::retry_async<manual_timer>(
                     [&](coretry::attempt_context& ctx, auto&& token) {
                       numbers.push_back(ctx.number());
                       return op(std::forward<decltype(token)>(token));
                     },
                     quick(3), stats),
                 [&](std::exception_ptr e, int) {
                   ++out.calls;
                   try {
                     if (e)
                       std::rethrow_exception(e);
                   } catch (const std::system_error& x) {
                     out.error = x.code();
                   }
                 });
  REQUIRE(drive(io, [&] { return out.calls > 0; }));
  CHECK(out.error == refused);
  CHECK(numbers == std::vector<unsigned>{1, 2, 3});
  CHECK(stats.attempts == 3);
}

TEST_CASE("a deferred operation, returned by the attempt or being it, is an attempt") {
  manual_clock::reset();
  asio::io_context io;
  scripted_async op{io, {refused}};
  seen<int> out;
  auto handler = [&](error_code ec, int v) {
    ++out.calls;
    out.error = ec;
    out.value = v;
  };
  SUBCASE("returned") {
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(coretry::test::deferred); }, quick(3), handler);
  }
  manual_timer t(io.get_executor()); // outlives the operation
  SUBCASE("being it") {
    // A deferred operation is an initiating function; it may be started again and again.
    auto wait = t.async_wait(coretry::test::deferred);
    coretry::async_retry<manual_timer>(
        io.get_executor(),
        [&, wait](auto&& token) {
          t.expires_after(5ms);
          return wait(std::forward<decltype(token)>(token));
        },
        quick(3),
        [&](error_code ec) {
          ++out.calls;
          out.error = ec;
          out.value = 0;
        });
  }
  REQUIRE(drive(io, [&] { return out.calls > 0; }));
  CHECK(out.calls == 1);
  CHECK(!out.error);
  CHECK(out.value.has_value());
}

TEST_CASE("completion signatures: void(ec), void(T), void(ec, T, U) and void(exception_ptr, T)") {
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  manual_timer t(io.get_executor()); // outlives the operation
  SUBCASE("void(error_code) delivers void") {
    std::optional<std::error_code> got;
    coretry::async_retry<manual_timer>(
        io.get_executor(),
        [&](auto&& token) {
          t.expires_after(1ms);
          return t.async_wait(std::forward<decltype(token)>(token));
        },
        quick(2), [&](error_code ec) { got = ec; });
    REQUIRE(drive(io, [&] { return got.has_value(); }));
    CHECK(!*got);
  }
  SUBCASE("void(T) cannot fail") {
    std::optional<std::string> got;
    coretry::async_retry<manual_timer>(
        io.get_executor(),
        [&](auto&& token) {
          ++calls;
          return asio::async_initiate<decltype(token), void(std::string)>(
              [&](auto h) { asio::post(io, [h = std::move(h)]() mutable { std::move(h)("x"); }); },
              token);
        },
        quick(2),
        [&](error_code ec, std::string v) {
          CHECK(!ec);
          got = v;
        });
    REQUIRE(drive(io, [&] { return got.has_value(); }));
    CHECK(*got == "x");
    CHECK(calls == 1);
  }
  SUBCASE("several values arrive as a tuple") {
    std::optional<std::tuple<int, std::string>> got;
    coretry::async_retry<manual_timer>(
        io.get_executor(),
        [&](auto&& token) {
          const bool fail = calls++ == 0;
          return asio::async_initiate<decltype(token), void(std::error_code, int, std::string)>(
              [&, fail](auto h) {
                asio::post(io, [h = std::move(h), fail]() mutable {
                  std::move(h)(fail ? refused : std::error_code{}, 7, "seven");
                });
              },
              token);
        },
        quick(2),
        [&](error_code ec, std::tuple<int, std::string> v) {
          CHECK(!ec);
          got = std::move(v);
        });
    REQUIRE(drive(io, [&] { return got.has_value(); }));
    CHECK(std::get<0>(*got) == 7);
    CHECK(std::get<1>(*got) == "seven");
    CHECK(calls == 2);
  }
  SUBCASE("an exception_ptr holding a system_error is the attempt's error") {
    std::optional<std::error_code> got;
    coretry::async_retry<manual_timer>(
        io.get_executor(),
        [&](auto&& token) {
          ++calls;
          return asio::async_initiate<decltype(token), void(std::exception_ptr, int)>(
              [&](auto h) {
                asio::post(io, [h = std::move(h)]() mutable {
                  std::move(h)(std::make_exception_ptr(std::system_error(refused)), 0);
                });
              },
              token);
        },
        quick(2), [&](error_code ec, int) { got = ec; });
    REQUIRE(drive(io, [&] { return got.has_value(); }));
    CHECK(*got == refused);
    CHECK(calls == 2);
  }
}

TEST_CASE("a token attempt is timed out through its bound slot: errc::attempt_timeout") {
  manual_clock::reset();
  asio::io_context io;
  manual_timer t(io.get_executor());
  int started = 0;
  coretry::retry_stats stats;
  std::optional<std::error_code> got;
  auto policy = quick(2);
  policy.attempt_timeout = 50ms;
  coretry::async_retry<manual_timer>(
      io.get_executor(),
      [&](auto&& token) {
        ++started;
        t.expires_after(1h); // never completes by itself: holds the attempt until cut
        return t.async_wait(std::forward<decltype(token)>(token));
      },
      policy, stats, [&](error_code ec) { got = ec; });
  REQUIRE(drive(io, [&] { return got.has_value(); }));
  CHECK(started == 2);
  CHECK(stats.last_error == coretry::errc::attempt_timeout);
  CHECK(manual_clock::elapsed() == 110ms); // 50 + 10 + 50
  CHECK(manual_clock::pending() == 0);     // both waits were cancelled, none left behind
}

// The rule (docs/core.md): a caller's cancellation of any type stops the whole operation, and
// the attempt running then is cancelled as terminal. An awaitable attempt heeds only terminal
// cancellation (co_spawn's default filter), and the operation must stop whatever the attempt is.
TEST_CASE(
    "a caller's partial or total cancellation stops the operation: the attempt sees terminal") {
  for (const auto type : {asio::cancellation_type::partial, asio::cancellation_type::total}) {
    CAPTURE(static_cast<int>(type));
    asio::io_context io;
    asio::cancellation_signal signal;
    std::vector<asio::cancellation_type> seen_types;
    std::function<void(error_code, int)> held;
    int calls = 0;
    coretry::async_retry(
        io.get_executor(),
        [&](auto&& token) {
          return asio::async_initiate<decltype(token), void(error_code, int)>(
              [&](auto handler) {
                auto slot = asio::get_associated_cancellation_slot(handler);
                auto h = std::make_shared<decltype(handler)>(std::move(handler));
                held = [h](error_code ec, int n) { std::move (*h)(ec, n); };
                if (slot.is_connected())
                  slot.assign([&](asio::cancellation_type t) { seen_types.push_back(t); });
              },
              token);
        },
        quick(3), asio::bind_cancellation_slot(signal.slot(), [&](error_code, int) { ++calls; }));
    io.poll();
    REQUIRE(held);
    signal.emit(type);
    io.restart();
    io.poll();
    // A retry cannot promise what partial or total cancellation ask for (a known state, nothing
    // lost), so every type stops it, and the running attempt is asked to stop outright.
    CHECK(seen_types == std::vector<asio::cancellation_type>{asio::cancellation_type::terminal});
    if (held)
      std::exchange(held, nullptr)(error_code{}, 1);
    io.restart();
    io.poll();
    CHECK(calls == 1);
  }
}

TEST_CASE("a cancelled token attempt that completes with operation_aborted is cancelled") {
  manual_clock::reset();
  asio::io_context io;
  manual_timer t(io.get_executor());
  asio::cancellation_signal signal;
  int started = 0;
  int calls = 0;
  std::error_code got;
  coretry::async_retry<manual_timer>(
      io.get_executor(),
      [&](auto&& token) {
        ++started;
        t.expires_after(1h);
        return t.async_wait(std::forward<decltype(token)>(token));
      },
      quick(5), asio::bind_cancellation_slot(signal.slot(), [&](error_code ec) {
        ++calls;
        got = ec;
      }));
  io.poll();
  REQUIRE(started == 1);
  signal.emit(asio::cancellation_type::terminal);
  io.restart();
  io.poll();
  CHECK(calls == 1);
  CHECK(got == operation_aborted);
  CHECK(started == 1); // never retried
  CHECK(manual_clock::pending() == 0);
}

TEST_CASE("a group cancel from another thread reaches a token attempt; completes once") {
  manual_clock::reset();
  asio::io_context io;
  manual_timer t(io.get_executor());
  coretry::cancellation_source source;
  std::atomic<int> started{0};
  int calls = 0;
  std::error_code got;
  auto policy = quick(5);
  policy.cancellation = source.token();
  coretry::async_retry<manual_timer>(
      io.get_executor(),
      [&](auto&& token) {
        ++started;
        t.expires_after(1h);
        return t.async_wait(std::forward<decltype(token)>(token));
      },
      policy,
      [&](error_code ec) {
        ++calls;
        got = ec;
      });
  while (started == 0)
    io.run_one();
  std::thread other([&] { source.cancel(); });
  other.join();
  io.restart();
  io.run_for(std::chrono::seconds(5)); // ends as soon as nothing is left
  CHECK(calls == 1);
  CHECK(got == operation_aborted);
  CHECK(started == 1);
}

/// An operation that keeps its handler in `held` and completes only when the test calls it:
/// it ignores cancellation. Signature `void(error_code, int)`.
struct held_async {
  std::function<void(error_code, int)>* held;
  template <class Token> auto operator()(Token&& token) {
    return asio::async_initiate<Token, void(error_code, int)>(
        [this](auto handler) {
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          *held = [h](error_code ec, int n) { std::move (*h)(ec, n); };
        },
        token);
  }
};

TEST_CASE("a token attempt that ignores cancellation holds the operation until it completes") {
  asio::io_context io;
  coretry::cancellation_source source;
  std::function<void(error_code, int)> held;
  int started = 0;
  int calls = 0;
  int value = 0;
  std::error_code got;
  auto policy = quick(5);
  policy.cancellation = source.token();
  coretry::async_retry(
      io.get_executor(),
      [&](auto&& token) {
        ++started;
        return held_async{&held}(std::forward<decltype(token)>(token));
      },
      policy,
      [&](error_code ec, int v) {
        ++calls;
        got = ec;
        value = v;
      });
  io.poll();
  REQUIRE(started == 1);
  REQUIRE(held);
  source.cancel();
  io.restart();
  io.poll();
  CHECK(calls == 0); // a cancellation is a request: the attempt has not completed
  auto h = std::exchange(held, {});
  h(error_code{}, 7); // it succeeds after all: a result in hand is delivered
  io.restart();
  io.poll();
  CHECK(calls == 1);
  CHECK(!got);
  CHECK(value == 7);
  CHECK(started == 1);
}

TEST_CASE("a timed-out attempt whose handler is held outside, released after the io_context died") {
  // One-thread io_context: no strand, so nothing of Asio's own outlives the context with the
  // state. The attempt timer fires (the deadline queue unlinks the state's entry), the attempt
  // ignores the cancellation and keeps its handler outside any context; the context is
  // destroyed, then the handler, and with it the operation's state: its destructor must touch
  // no deadline queue (ASan: heap-use-after-free).
  std::function<void(error_code, int)> held;
  int calls = 0;
  {
    asio::io_context io(1);
    auto policy = quick(3);
    policy.attempt_timeout = 1ms;
    coretry::async_retry(io.get_executor(), held_async{&held}, policy,
                         [&](error_code, int) { ++calls; });
    io.run_for(50ms);
    REQUIRE(held);
  }
  held = nullptr; // the state dies here, after its context
  CHECK(calls == 0);
}

TEST_CASE("a token attempt that drops its handler ends the operation uncalled; nothing leaks") {
  asio::io_context io;
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  int calls = 0;
  coretry::async_retry(
      io.get_executor(),
      [](auto&& token) {
        return asio::async_initiate<decltype(token), void(error_code, int)>(
            [](auto handler) { (void)handler; }, token); // destroyed, never called
      },
      quick(3), [&calls, alive = std::move(alive)](error_code, int) { ++calls; });
  io.run();
  CHECK(calls == 0);
  CHECK(watch.expired()); // the operation's state, and the handler in it, are gone
}

TEST_CASE(
    "an initiating function that throws after taking its handler completes the attempt once") {
  asio::io_context io;
  std::function<void(error_code, int)> taken;
  int started = 0;
  int calls = 0;
  std::error_code got;
  int value = 0;
  coretry::async_retry(
      io.get_executor(),
      [&](auto&& token) {
        ++started;
        if (started == 1) {
          // Takes the handler (as an operation that queued it would), then throws.
          (void)held_async{&taken}(std::forward<decltype(token)>(token));
          throw std::system_error(refused);
        }
        return scripted_async{io, {}}(std::forward<decltype(token)>(token));
      },
      quick(3),
      [&](error_code ec, int v) {
        ++calls;
        got = ec;
        value = v;
      });
  io.poll();
  REQUIRE(taken);
  CHECK(started == 1); // the throw ended attempt 1; attempt 2 waits for its backoff
  auto h = std::exchange(taken, {});
  h(error_code{}, 99); // the handler it had taken runs late: ignored
  io.restart();
  io.run();
  CHECK(calls == 1);
  CHECK(started == 2);
  CHECK(!got);
  CHECK(value == 10); // attempt 2's result, not the stale 99
}

TEST_CASE("a handler bound to another io_context keeps that context's run() until it completes") {
  asio::io_context io;      // where the operation runs
  asio::io_context home(1); // where the handler wants to run
  int calls = 0;
  coretry::async_retry(io.get_executor(), scripted_async{io, {refused}}, quick(3),
                       asio::bind_executor(home, [&](error_code ec, int) {
                         CHECK(!ec);
                         ++calls;
                       }));
  // Nothing has completed yet: home's run() must not return as if it had no work.
  std::thread t([&] { io.run(); });
  home.run(); // returns only once the handler has run there
  t.join();
  CHECK(calls == 1);
}

TEST_CASE("a one-thread io_context needs no strand; a cancel from another thread completes once") {
  for (const int hint : {1, -1}) {
    CAPTURE(hint);
    std::optional<asio::io_context> ctx;
    if (hint == 1)
      ctx.emplace(1);
    else
      ctx.emplace();
    asio::io_context& io = *ctx;
    coretry::cancellation_source source;
    const std::type_info* attempt_executor = nullptr;
    int started = 0;
    int calls = 0;
    std::error_code got;
    retry_policy policy{.max_attempts = 5, .backoff = coretry::backoff::fixed(1h)};
    policy.cancellation = source.token();
    coretry::async_retry(
        io.get_executor(),
        [&](auto&& token) {
          ++started;
          attempt_executor = &typeid(asio::get_associated_executor(token));
          return asio::async_initiate<decltype(token), void(error_code, int)>(
              [&io](auto handler) {
                const auto ex = asio::get_associated_executor(handler, io.get_executor());
                asio::post(ex, [h = std::move(handler)]() mutable {
                  std::move(h)(coretry::detail::to_asio_error(refused), 0);
                });
              },
              token);
        },
        policy,
        [&](error_code ec, int) {
          ++calls;
          got = ec;
        });
    while (started == 0)
      io.run_one();
    io.poll();             // the attempt fails, the operation goes to sleep
    REQUIRE(started == 1); // asleep for an hour
    std::thread other([&] { source.cancel(); });
    other.join();
    io.restart();
    io.run_for(std::chrono::seconds(5));
    CHECK(calls == 1);
    CHECK(got == operation_aborted);
    if (hint == 1)
      CHECK(*attempt_executor == typeid(asio::io_context::executor_type));
    else
      CHECK(*attempt_executor == typeid(asio::strand<asio::io_context::executor_type>));
  }
}

TEST_CASE("hedge_async and async_hedge take token attempts; the losers are cancelled") {
  manual_clock::reset();
  asio::io_context io;
  std::vector<std::unique_ptr<manual_timer>> timers;
  int started = 0;
  // The first attempt hangs (until cancelled); the second answers after 5 ms.
  auto op = [&](coretry::attempt_context& ctx, auto&& token) {
    ++started;
    timers.push_back(std::make_unique<manual_timer>(io.get_executor()));
    timers.back()->expires_after(ctx.number() == 1 ? 1h : 5ms);
    return timers.back()->async_wait(std::forward<decltype(token)>(token));
  };
  retry_policy policy = quick(3);
  coretry::hedge_options hedge{.delay = 20ms};
  std::optional<std::error_code> got;
  SUBCASE("async_hedge") {
    coretry::async_hedge<manual_timer>(io.get_executor(), op, policy, hedge,
                                       [&](error_code ec) { got = ec; });
  }
  SUBCASE("hedge_async") {
    asio::co_spawn(io, coretry::hedge_async<manual_timer>(op, policy, hedge),
                   [&](std::exception_ptr e) { got = e ? refused : std::error_code{}; });
  }
  REQUIRE(drive(io, [&] { return got.has_value(); }));
  CHECK(!*got);
  CHECK(started == 2);
  CHECK(manual_clock::elapsed() == 25ms);
  CHECK(manual_clock::pending() == 0);
}

namespace {

/// What passes through a `counting_allocator` and all its copies and rebinds.
struct allocation_counts {
  std::atomic<int> allocations{0};
  std::atomic<int> deallocations{0};
  std::atomic<std::size_t> allocated{0};   ///< bytes
  std::atomic<std::size_t> deallocated{0}; ///< bytes
};

/// An allocator that counts its calls into counters its copies share: a handler's allocator,
/// as Asio hands it on to the intermediate handlers of a composed operation.
template <class T> struct counting_allocator {
  using value_type = T;
  std::shared_ptr<allocation_counts> counts;

  explicit counting_allocator(std::shared_ptr<allocation_counts> c) noexcept
      : counts(std::move(c)) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& other) noexcept : counts(other.counts) {}

  T* allocate(std::size_t n) {
    ++counts->allocations;
    counts->allocated += n * sizeof(T);
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    ++counts->deallocations;
    counts->deallocated += n * sizeof(T);
    std::allocator<T>().deallocate(p, n);
  }
  template <class U> bool operator==(const counting_allocator<U>& other) const noexcept {
    return counts == other.counts;
  }
};

/// Whether `a` is a copy of the counting allocator on `counts`, or asks one first.
template <class A>
bool counts_into(const A& a, const std::shared_ptr<allocation_counts>& counts) noexcept {
  if constexpr (requires { a.counts; })
    return a.counts == counts;
  else if constexpr (requires { a.inner(); })
    return counts_into(a.inner(), counts); // behind the operation's fallback (issue 28)
  else
    return false;
}

/// A token attempt that fails twice, then succeeds with 30; its intermediate memory (the post
/// that completes it) comes from its handler's allocator, as with Asio's own operations.
/// `ours` counts the attempts whose handler carried the counting allocator.
auto fails_twice_token(asio::io_context& io, const std::shared_ptr<allocation_counts>& counts,
                       int& started, int& ours) {
  return [&io, counts, &started, &ours](auto&& token) {
    const int n = ++started;
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&io, counts, &ours, n](auto handler) {
          const auto a = asio::get_associated_allocator(handler);
          if (counts_into(a, counts))
            ++ours;
          const auto ex = asio::get_associated_executor(handler, io.get_executor());
          asio::post(ex, asio::bind_allocator(a, [h = std::move(handler), n]() mutable {
                       std::move(h)(
                           coretry::detail::to_asio_error(n < 3 ? refused : std::error_code{}),
                           n * 10);
                     }));
        },
        token);
  };
}

/// An awaitable attempt that fails twice, then succeeds with 30.
auto fails_twice_awaitable(int& started) {
  return [&started]() -> asio::awaitable<int> {
    const int n = ++started;
    if (n < 3)
      throw std::system_error(refused);
    co_return n * 10;
  };
}

/// What the counting allocator saw over one async_retry of `op` on `io`, its handler bound to the
/// counting allocator and to a strand of `io` (so that the completion's dispatch must queue).
struct allocator_run {
  int calls = 0;
  std::error_code error;
  int value = 0;
  int outstanding_at_completion = -1; ///< allocations not yet deallocated when the handler ran
};

/// A retry policy of 5 attempts with a fixed backoff.
retry_policy fixed_backoff(std::chrono::nanoseconds d) {
  return {.max_attempts = 5, .backoff = coretry::backoff::fixed(d)};
}

/// The handler `wrap` is given (it may bind a cancellation slot) is bound to the counting
/// allocator and to a strand of `io`.
template <class Timer, class Op, class Drive, class Wrap = std::identity>
allocator_run run_with_counting_allocator(asio::io_context& io,
                                          const std::shared_ptr<allocation_counts>& counts, Op op,
                                          retry_policy policy, Drive drive_io, Wrap wrap = {}) {
  allocator_run run;
  auto strand = asio::make_strand(io);
  coretry::async_retry<Timer>(
      io.get_executor(), std::move(op), std::move(policy),
      wrap(asio::bind_allocator(counting_allocator<void>(counts),
                                asio::bind_executor(strand, [&run, counts](error_code ec, int v) {
                                  ++run.calls;
                                  run.error = ec;
                                  run.value = v;
                                  run.outstanding_at_completion =
                                      counts->allocations - counts->deallocations;
                                }))));
  drive_io(run);
  return run;
}

} // namespace

TEST_CASE("the handler's allocator serves async_retry's state, start, attempts, sleeps and "
          "completion") {
  // Two failures, two sleeps, one success. Each count below is what Asio (1.22, Boost 1.81's
  // 1.26, 1.38) does with a handler's associated allocator: a post or a queued dispatch
  // allocates its operation with it, as does a timer's wait (asio::steady_timer, and
  // manual_timer, which posts its completion besides). co_spawn's own frame and completion do
  // not use it (they never did, in any of these versions).
  constexpr int state = 1, start = 1, completion = 1; // the completion queues on the strand
  auto counts = std::make_shared<allocation_counts>();
  asio::io_context io;
  int started = 0;
  int ours = 0;
  int expected = 0;
  allocator_run run;

  SUBCASE("token attempt, manual clock") {
    manual_clock::reset();
    run = run_with_counting_allocator<manual_timer>(
        io, counts, fails_twice_token(io, counts, started, ours), fixed_backoff(10ms),
        [&](allocator_run& r) {
          REQUIRE(drive(io, [&] { return r.calls > 0; }));
          drive(io, [] { return false; });
        });
    CHECK(manual_clock::elapsed() == 20ms);
    CHECK(ours == 3); // every attempt's handler carried it
    constexpr int attempt_posts = 3, sleeps = 2 * 2;
    expected = state + start + attempt_posts + sleeps + completion;
  }
  SUBCASE("awaitable attempt, manual clock") {
    manual_clock::reset();
    run = run_with_counting_allocator<manual_timer>(
        io, counts, fails_twice_awaitable(started), fixed_backoff(10ms), [&](allocator_run& r) {
          REQUIRE(drive(io, [&] { return r.calls > 0; }));
          drive(io, [] { return false; });
        });
    CHECK(manual_clock::elapsed() == 20ms);
    constexpr int sleeps = 2 * 2;
    expected = state + start + sleeps + completion;
  }
  SUBCASE("token attempt, asio::steady_timer (1 µs sleeps)") {
    run = run_with_counting_allocator<asio::steady_timer>(
        io, counts, fails_twice_token(io, counts, started, ours), fixed_backoff(1us),
        [&](allocator_run&) { io.run(); });
    CHECK(ours == 3);
    constexpr int attempt_posts = 3, sleeps = 2; // the wait's operation; completes in place
    expected = state + start + attempt_posts + sleeps + completion;
  }

  SUBCASE("token attempt, controlled (a group token, timed attempts): on a strand") {
    manual_clock::reset();
    coretry::cancellation_source source;
    retry_policy p = fixed_backoff(10ms);
    p.cancellation = source.token();
    p.attempt_timeout = 1s;
    run = run_with_counting_allocator<manual_timer>(
        io, counts, fails_twice_token(io, counts, started, ours), p, [&](allocator_run& r) {
          REQUIRE(drive(io, [&] { return r.calls > 0; }));
          drive(io, [] { return false; });
        });
    CHECK(ours == 3);
    // A post onto the idle strand from outside run() (the start, the two timer completions)
    // also posts the strand's own scheduling handler to the io_context with that allocator.
    constexpr int attempt_posts = 3, sleeps = 2 * 2, strand_scheduled = 3;
    expected = state + start + attempt_posts + sleeps + completion + strand_scheduled;
  }

  CHECK(run.calls == 1);
  CHECK(!run.error);
  CHECK(run.value == 30);
  CHECK(started == 3);
  // Asio's rule for a composed operation: its intermediate memory is freed before its handler
  // is called (the state too: released before the completion is dispatched).
  CHECK(run.outstanding_at_completion == 0);
  CHECK(counts->allocations.load() == expected);
  CHECK(counts->deallocations.load() == counts->allocations.load());
  CHECK(counts->deallocated.load() == counts->allocated.load());
}

TEST_CASE("a cancellation through the handler's slot goes through the handler's allocator too") {
  // Asleep after one failure; the caller's slot is emitted from outside the context's run(), so
  // the hop onto the operation's strand queues; the timer's cancelled wait completes through a
  // post.
  manual_clock::reset();
  auto counts = std::make_shared<allocation_counts>();
  asio::io_context io;
  asio::cancellation_signal cancel;
  int started = 0;
  int ours = 0;
  const allocator_run run = run_with_counting_allocator<manual_timer>(
      io, counts, fails_twice_token(io, counts, started, ours), fixed_backoff(1h),
      [&](allocator_run& r) {
        io.poll(); // the start, the attempt, its failure: asleep for an hour
        REQUIRE(started == 1);
        REQUIRE(manual_clock::pending() == 1);
        const int before = counts->allocations;
        cancel.emit(asio::cancellation_type::terminal);
        // The hop onto the operation's idle strand, and the strand's scheduling of itself.
        CHECK(counts->allocations.load() == before + 2);
        REQUIRE(drive(io, [&] { return r.calls > 0; }));
        drive(io, [] { return false; });
      },
      [&](auto handler) {
        return asio::bind_cancellation_slot(cancel.slot(), std::move(handler));
      });
  CHECK(run.calls == 1);
  CHECK(run.error == operation_aborted);
  CHECK(started == 1);
  CHECK(ours == 1);
  CHECK(manual_clock::elapsed() == 0ms);
  CHECK(run.outstanding_at_completion == 0);
  // The state, the start (and the strand scheduling itself), the attempt's post, the wait and
  // its cancelled completion's post, the cancellation's hop (and the strand scheduling itself),
  // the completion.
  CHECK(counts->allocations.load() == 9);
  CHECK(counts->deallocations.load() == counts->allocations.load());
  CHECK(counts->deallocated.load() == counts->allocated.load());
}
