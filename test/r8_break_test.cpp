// SPDX-License-Identifier: BSL-1.0
// Reviewer r8's reproducers against the guarded initiation (detail/attempt_shape.hpp): token
// attempts whose initiating function throws, run by retry_async's direct loop, the hedge and
// the fallback; and pushback_if asked once per attempt (schedule::classify).
#include <coretry/hedge.hpp>
#include <coretry/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using coretry::errc;
using coretry::retry_policy;
using error_code = coretry::detail::asio_error_code;

namespace {

const std::error_code refused = make_error_code(std::errc::connection_refused);

retry_policy no_wait(unsigned attempts) {
  return {.max_attempts = attempts, .backoff = coretry::backoff::fixed(0ms)};
}

struct ended {
  int completions = 0;
  std::optional<int> value;
  std::error_code error;
  std::exception_ptr exception;
};

template <class A> void spawn_into(asio::io_context& io, A a, ended& out) {
  asio::co_spawn(io, std::move(a), [&out](std::exception_ptr e, int v) {
    ++out.completions;
    if (!e) {
      out.value = v;
      return;
    }
    try {
      std::rethrow_exception(e);
    } catch (const std::system_error& se) {
      out.error = se.code();
    } catch (...) {
      out.exception = std::current_exception();
    }
  });
}

template <class A> ended await_in(asio::io_context& io, A a) {
  ended out;
  spawn_into(io, std::move(a), out);
  io.run();
  return out;
}

} // namespace

TEST_CASE("retry_async: an initiation that completes its handler inline and then returns "
          "completes the attempt once with that value") {
  asio::io_context io;
  int calls = 0;
  auto op = [&calls](auto&& token) {
    ++calls;
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [](auto handler) { std::move(handler)(error_code{}, 7); }, token);
  };
  const ended r = await_in(io, coretry::retry_async(op, no_wait(3)));
  CHECK(r.completions == 1);
  CHECK(r.value == 7);
  CHECK(calls == 1);
}

TEST_CASE("retry_async: an initiation that completes its handler inline and then throws "
          "completes the attempt once, with the handler's value") {
  asio::io_context io;
  int calls = 0;
  auto op = [&calls](auto&& token) {
    ++calls;
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [](auto handler) {
          std::move(handler)(error_code{}, 7);
          throw std::system_error(refused);
        },
        token);
  };
  const ended r = await_in(io, coretry::retry_async(op, no_wait(3)));
  CHECK(r.completions == 1);
  CHECK(r.value == 7);
  CHECK(calls == 1);
}

TEST_CASE("retry_async: a token attempt that drops its handler and throws is a failed attempt, "
          "and the next one succeeds") {
  asio::io_context io;
  int calls = 0;
  auto op = [&](auto&& token) {
    const int n = ++calls;
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&io, n](auto handler) {
          if (n == 1) {
            { auto dropped = std::move(handler); }
            throw std::system_error(refused);
          }
          asio::post(io, [h = std::move(handler)]() mutable { std::move(h)(error_code{}, 5); });
        },
        token);
  };
  const ended r = await_in(io, coretry::retry_async(op, no_wait(3)));
  CHECK(r.completions == 1);
  CHECK(r.value == 5);
  CHECK(calls == 2);
}

TEST_CASE("retry_async: a token attempt that drops its handler ends the coroutine uncalled; "
          "nothing leaks") {
  asio::io_context io;
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  auto op = [](auto&& token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [](auto handler) { (void)handler; }, token);
  };
  int calls = 0;
  asio::co_spawn(io, coretry::retry_async(op, no_wait(3)),
                 [&calls, alive = std::move(alive)](std::exception_ptr, int) { ++calls; });
  io.run();
  CHECK(calls == 0);
  CHECK(watch.expired());
}

TEST_CASE("retry_async: a token attempt with a move-only, non-default-constructible value whose "
          "first initiation throws") {
  struct value {
    explicit value(int x) : p(std::make_unique<int>(x)) {}
    std::unique_ptr<int> p;
  };
  asio::io_context io;
  int calls = 0;
  auto op = [&](auto&& token) {
    const int n = ++calls;
    return asio::async_initiate<decltype(token), void(error_code, value, std::string)>(
        [&io, n](auto handler) {
          if (n == 1)
            throw std::system_error(refused);
          asio::post(io, [h = std::move(handler)]() mutable {
            std::move(h)(error_code{}, value(42), std::string("s"));
          });
        },
        token);
  };
  std::optional<int> got;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [v, s] = co_await coretry::retry_async(op, no_wait(3));
        got = *v.p + static_cast<int>(s.size());
      },
      asio::detached);
  io.run();
  CHECK(got == 43);
  CHECK(calls == 2);
}

TEST_CASE("retry_async: void() and void(exception_ptr, T) attempts whose first initiation "
          "throws") {
  asio::io_context io;
  int calls = 0;
  auto v = [&](auto&& token) {
    const int n = ++calls;
    return asio::async_initiate<decltype(token), void()>(
        [&io, n](auto handler) {
          if (n == 1)
            throw std::system_error(refused);
          asio::post(io, std::move(handler));
        },
        token);
  };
  int ecalls = 0;
  auto e = [&](auto&& token) {
    const int n = ++ecalls;
    return asio::async_initiate<decltype(token), void(std::exception_ptr, int)>(
        [&io, n](auto handler) {
          if (n == 1)
            throw std::system_error(refused);
          asio::post(io, [h = std::move(handler)]() mutable { std::move(h)(nullptr, 9); });
        },
        token);
  };
  bool done = false;
  int value = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await coretry::retry_async(v, no_wait(3));
        value = co_await coretry::retry_async(e, no_wait(3));
        done = true;
      },
      asio::detached);
  io.run();
  CHECK(done);
  CHECK(value == 9);
  CHECK(calls == 2);
  CHECK(ecalls == 2);
}

namespace {
/// A token attempt whose initiation posts its handler (to the io_context, as a well-behaved
/// operation completing on another thread does) and then throws.
struct posts_then_throws {
  asio::io_context* io;
  std::atomic<int> calls{0};
  template <class Token> auto operator()(Token&& token) {
    const int n = ++calls;
    return asio::async_initiate<Token, void(error_code, int)>(
        [this, n](auto handler) {
          asio::post(*io, [h = std::move(handler), n]() mutable { std::move(h)(error_code{}, n); });
          if (n == 1) {
            // Work that takes a while, then fails: the posted handler runs meanwhile on the
            // io_context's other thread.
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            throw std::system_error(refused);
          }
        },
        token);
  }
};
} // namespace

// Failed at fd06422 (a data race, found by TSan): guard_box::take was not synchronised, so when
// the attempt's handler ran on one thread of a multi-threaded io_context while the initiation
// threw on another, both took the coroutine's handler. Now one atomic exchange decides.
TEST_CASE("retry_async on a two-thread io_context: an initiation that posts its handler and "
          "then throws completes the operation once") {
  for (int round = 0; round < 200; ++round) {
    asio::io_context io;
    posts_then_throws op{&io};
    std::atomic<int> completions{0};
    asio::co_spawn(io, coretry::retry_async(std::ref(op), no_wait(3)),
                   [&](std::exception_ptr, int) { ++completions; });
    std::thread t([&io] { io.run(); });
    io.run();
    t.join();
    CHECK(completions == 1);
  }
}

TEST_CASE("retry_async: a cancellation emitted after an initiation registered a slot handler and "
          "threw still cancels the operation, once") {
  asio::io_context io;
  asio::cancellation_signal sig;
  int calls = 0;
  int stale = 0;
  auto op = [&](auto&& token) {
    ++calls;
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&](auto handler) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          if (slot.is_connected())
            slot.assign([&stale](asio::cancellation_type) { ++stale; });
          // The caller cancels before the loop learns of the throw.
          asio::post(io, [&sig] { sig.emit(asio::cancellation_type::terminal); });
          throw std::system_error(refused);
        },
        token);
  };
  retry_policy p = no_wait(5);
  p.backoff = coretry::backoff::fixed(10ms);
  ended r;
  asio::co_spawn(io, coretry::retry_async(op, p),
                 asio::bind_cancellation_slot(sig.slot(), [&r](std::exception_ptr e, int v) {
                   ++r.completions;
                   if (!e) {
                     r.value = v;
                     return;
                   }
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::system_error& se) {
                     r.error = se.code();
                   } catch (...) {
                     r.exception = std::current_exception();
                   }
                 }));
  io.run();
  CHECK(r.completions == 1);
  CHECK(!r.value);
  CHECK(calls == 1); // cancelled: no second attempt
  CHECK(r.error);
  CAPTURE(stale);
}

TEST_CASE("retry_async under ||: a timer wins over an attempt that threw once and then hangs "
          "until cancelled") {
  asio::io_context io;
  int calls = 0;
  int cancelled = 0;
  auto op = [&](auto&& token) {
    const int n = ++calls;
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&, n](auto handler) {
          if (n == 1)
            throw std::system_error(refused);
          auto slot = asio::get_associated_cancellation_slot(handler);
          REQUIRE(slot.is_connected());
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          slot.assign([&cancelled, h, &io](asio::cancellation_type) {
            ++cancelled;
            asio::post(io, [h] { std::move (*h)(error_code(asio::error::operation_aborted), 0); });
          });
        },
        token);
  };
  bool timer_won = false;
  int done = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        using namespace asio::experimental::awaitable_operators;
        asio::steady_timer t(io, 5ms);
        auto v =
            co_await (coretry::retry_async(op, no_wait(3)) || t.async_wait(asio::use_awaitable));
        timer_won = v.index() == 1;
        ++done;
      },
      asio::detached);
  io.run();
  CHECK(done == 1);
  CHECK(timer_won);
  CHECK(calls == 2);
  CHECK(cancelled == 1);
}

// Failed to compile at fd06422 on standalone Asio 1.38 (and compiled before 668e547):
// await_outcome's check of whether the op takes a guarded handler instantiated the initiation's
// body with a stand-in handler whose associated executor was Asio 1.38's `inline_executor`, so
// `asio::post(asio::get_associated_executor(handler, io_ex), ...)` was a hard error. The
// stand-in now has use_awaitable's executor type.
TEST_CASE("retry_async: an initiation that posts to its handler's associated executor compiles "
          "and completes") {
  asio::io_context io;
  auto op = [&io](auto&& token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&io](auto handler) {
          auto ex = asio::get_associated_executor(handler, io.get_executor());
          asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(error_code{}, 3); });
        },
        token);
  };
  const ended r = await_in(io, coretry::retry_async(op, no_wait(3)));
  CHECK(r.value == 3);
}

// Same cause: `asio::any_io_executor aex = get_associated_executor(handler, io_ex);` and
// `asio::defer(get_associated_executor(handler, io_ex), ...)` do not compile either (1.38).
TEST_CASE("retry_async: an initiation that converts its handler's associated executor to "
          "any_io_executor compiles and completes") {
  asio::io_context io;
  auto op = [&io](auto&& token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&io](auto handler) {
          asio::any_io_executor ex = asio::get_associated_executor(handler, io.get_executor());
          asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(error_code{}, 4); });
        },
        token);
  };
  const ended r = await_in(io, coretry::retry_async(op, no_wait(3)));
  CHECK(r.value == 4);
}

namespace {
/// A token attempt with a context: fails with `refused` (and the hint `hint`) on its first
/// `fails` calls, then completes with `10 * call`; everything posted.
struct failing_async {
  asio::io_context* io;
  int fails = 1;
  std::chrono::nanoseconds hint{};
  int calls = 0;
  template <class Token> auto operator()(coretry::attempt_context& ctx, Token&& token) {
    const int n = ++calls;
    if (n <= fails && hint > std::chrono::nanoseconds::zero())
      ctx.retry_after(hint);
    return asio::async_initiate<Token, void(error_code, int)>(
        [this, n](auto handler) {
          const error_code ec =
              n <= fails ? error_code(asio::error::connection_refused) : error_code();
          asio::post(*io, [h = std::move(handler), ec, n]() mutable { std::move(h)(ec, 10 * n); });
        },
        token);
  }
};
} // namespace

TEST_CASE("pushback_if is not asked for a failure that carries a retry_after hint, with a "
          "breaker or without") {
  for (const bool with_breaker : {false, true}) {
    CAPTURE(with_breaker);
    asio::io_context io;
    failing_async op{&io, 1, 1ms};
    int asked = 0;
    retry_policy p = no_wait(3);
    p.pushback_if = [&asked](const std::error_code&) {
      ++asked;
      return true;
    };
    if (with_breaker)
      p.breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{});
    const ended r = await_in(io, coretry::retry_async(std::ref(op), p));
    CHECK(r.value == 20);
    CHECK(asked == 0);
  }
}

TEST_CASE("pushback_if is asked once for a failure the policy does not retry, only with a "
          "breaker (for the gate's health)") {
  for (const bool with_breaker : {false, true}) {
    CAPTURE(with_breaker);
    asio::io_context io;
    failing_async op{&io, 1};
    int asked = 0;
    retry_policy p = no_wait(3);
    p.retry_if = [](const std::error_code&) { return false; };
    p.pushback_if = [&asked](const std::error_code&) {
      ++asked;
      return false;
    };
    if (with_breaker)
      p.breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{});
    const ended r = await_in(io, coretry::retry_async(std::ref(op), p));
    CHECK(op.calls == 1);
    CHECK(r.error);
    CHECK(!r.value);
    CHECK(asked == (with_breaker ? 1 : 0));
  }
}
