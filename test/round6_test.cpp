// SPDX-License-Identifier: BSL-1.0
// A token attempt whose initiating function throws, on every driver that awaits attempts in a
// coroutine: retry_async's direct loop, the hedge, the fallback. Asio runs a use_awaitable
// initiation inside a `noexcept` suspension, so on Asio 1.22 what it threw ended the process
// (std::terminate); the composed operation (async_retry) already caught it. Now all of them
// start such an attempt through one guarded initiation (detail/attempt_shape.hpp), and what it
// threw ends that attempt, as an exception thrown by an awaitable attempt does.
#include <coretry/breaker.hpp>
#include <coretry/hedge.hpp>
#include <coretry/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>

using namespace std::chrono_literals;
using coretry::errc;
using coretry::retry_policy;
using error_code = coretry::detail::asio_error_code;

namespace {

const std::error_code refused = make_error_code(std::errc::connection_refused);

/// A token attempt: on its first `throws` calls its initiation throws (a `std::system_error`
/// with `refused`, or `std::logic_error` when `logic`), after taking its handler when `keep` is
/// set (the handler is kept in `kept`); later calls complete with `10 * call`, posted.
struct throwing_async {
  asio::io_context* io;
  int throws = 1;
  bool logic = false;
  std::function<void(error_code, int)>* kept = nullptr;
  int calls = 0;

  template <class Token> auto operator()(Token&& token) {
    const int n = ++calls;
    return asio::async_initiate<Token, void(error_code, int)>(
        [this, n](auto handler) {
          if (n <= throws) {
            if (kept) {
              auto h = std::make_shared<decltype(handler)>(std::move(handler));
              *kept = [h](error_code ec, int v) { std::move (*h)(ec, v); };
            }
            if (logic)
              throw std::logic_error("initiation bug");
            throw std::system_error(refused);
          }
          asio::post(*io,
                     [h = std::move(handler), n]() mutable { std::move(h)(error_code{}, 10 * n); });
        },
        token);
  }
};

retry_policy no_wait(unsigned attempts) {
  return {.max_attempts = attempts, .backoff = coretry::backoff::fixed(0ms)};
}

/// What a coroutine awaiting an operation ended with.
struct ended {
  int completions = 0;
  std::optional<int> value;
  std::error_code error;
  std::exception_ptr exception;
};

template <class A> ended await_in(asio::io_context& io, A a) {
  ended out;
  asio::co_spawn(io, std::move(a), [&](std::exception_ptr e, int v) {
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
  io.run();
  return out;
}

bool is_logic_error(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::logic_error&) {
    return true;
  } catch (...) {
    return false;
  }
}

} // namespace

TEST_CASE("retry_async: a token attempt whose initiation throws a system_error is a failed "
          "attempt, and the next one succeeds") {
  asio::io_context io;
  throwing_async op{&io};
  const ended r = await_in(io, coretry::retry_async(std::ref(op), no_wait(3)));
  CHECK(r.completions == 1);
  CHECK(r.value == 20);
  CHECK(op.calls == 2);
}

TEST_CASE("retry_async: a token attempt whose initiation throws another exception ends the "
          "operation with that exception, once") {
  asio::io_context io;
  throwing_async op{&io, 5, true};
  const ended r = await_in(io, coretry::retry_async(std::ref(op), no_wait(3)));
  CHECK(r.completions == 1);
  CHECK(op.calls == 1);
  CHECK(is_logic_error(r.exception));
}

TEST_CASE("retry_async: an attempt context form whose initiation throws is retried too") {
  asio::io_context io;
  throwing_async inner{&io};
  auto op = [&inner](coretry::attempt_context&, auto&& token) {
    return inner(std::forward<decltype(token)>(token));
  };
  const ended r = await_in(io, coretry::retry_async(op, no_wait(3)));
  CHECK(r.value == 20);
  CHECK(inner.calls == 2);
}

TEST_CASE("retry_async: a handler taken before the initiation threw and run later is ignored") {
  asio::io_context io;
  std::function<void(error_code, int)> kept;
  throwing_async op{&io, 1, false, &kept};
  ended r;
  asio::co_spawn(io, coretry::retry_async(std::ref(op), no_wait(3)),
                 [&](std::exception_ptr e, int v) {
                   ++r.completions;
                   r.exception = e;
                   r.value = v;
                 });
  io.run();
  REQUIRE(kept);
  CHECK(r.completions == 1);
  CHECK(r.value == 20); // attempt 2's
  auto h = std::exchange(kept, {});
  h(error_code{}, 99); // the first attempt's handler, run late: nothing happens
  io.restart();
  io.run();
  CHECK(r.completions == 1);
  CHECK(r.value == 20);
  CHECK(!r.exception);
}

TEST_CASE("async_hedge: an attempt whose initiation throws a system_error is a failed attempt; "
          "another exception completes the hedge once with unexpected_exception") {
  for (const bool logic : {false, true}) {
    CAPTURE(logic);
    asio::io_context io;
    throwing_async op{&io, logic ? 5 : 1, logic};
    int calls = 0;
    std::error_code got;
    int value = 0;
    coretry::async_hedge(io.get_executor(), std::ref(op), no_wait(3),
                         coretry::hedge_options{.delay = 1h, .max_copies = 2},
                         [&](std::error_code ec, int v) {
                           ++calls;
                           got = ec;
                           value = v;
                         });
    io.run();
    CHECK(calls == 1);
    if (logic) {
      CHECK(got == errc::unexpected_exception);
      CHECK(op.calls == 1);
    } else {
      CHECK(!got);
      CHECK(value == 20);
      CHECK(op.calls == 2);
    }
  }
}

TEST_CASE("fallback: a token fallback whose initiation throws completes the operation once with "
          "what it threw") {
  asio::io_context io;
  throwing_async op{&io, 5}; // every attempt's initiation throws refused
  throwing_async backup{&io, 1};
  auto f = [&backup](const coretry::fallback_info&, auto&& token) {
    return backup(std::forward<decltype(token)>(token));
  };
  const ended r =
      await_in(io, coretry::retry_async(std::ref(op), no_wait(2), coretry::fallback(f)));
  CHECK(r.completions == 1);
  CHECK(op.calls == 2);
  CHECK(backup.calls == 1);
  CHECK(r.error == refused);
}

TEST_CASE("pushback_if is asked once per failed attempt, with a breaker as without one") {
  for (const bool with_breaker : {false, true}) {
    CAPTURE(with_breaker);
    asio::io_context io;
    throwing_async op{&io, 2}; // two failed attempts (refused), then a success
    int asked = 0;
    retry_policy p = no_wait(3);
    p.pushback_if = [&asked](const std::error_code&) {
      ++asked;
      return false;
    };
    if (with_breaker)
      p.breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{});
    const ended r = await_in(io, coretry::retry_async(std::ref(op), p));
    CHECK(r.value == 30);
    CHECK(asked == 2);
  }
}
