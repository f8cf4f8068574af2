// SPDX-License-Identifier: BSL-1.0
// Where async_retry's first step runs: dispatched to the operation's executor. Started on a
// thread that runs that executor already, it sends its first attempt inside the initiating
// function, without a post, as Asio's composed operations do; started elsewhere, it posts its
// start. Either way the caller's handler is never called from inside the initiating
// function: an outcome decided there (a gate refusing, an attempt whose handler runs inside its
// own initiation) is submitted as Asio submits an immediate completion.
#include <coretry/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/fake_gate.hpp>

#if CORETRY_ASIO_HAS_IMMEDIATE_EXECUTOR
#if CORETRY_ASIO_BOOST
#include <boost/asio/bind_immediate_executor.hpp>
#else
#include <asio/bind_immediate_executor.hpp>
#endif
#endif

#include <chrono>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <utility>

using namespace std::chrono_literals;
using coretry::retry_policy;
using error_code = coretry::detail::asio_error_code;

namespace {

retry_policy quick_policy() {
  return {.max_attempts = 3, .backoff = coretry::backoff::fixed(1us)};
}

/// A token attempt counting its initiations. It completes through a post with `result` (an
/// error first `failures` times), or, with `inline_handler`, calls its handler inside its own
/// initiating function (which Asio's rules forbid an operation to do, and users still write).
struct counted_op {
  asio::io_context* io;
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  int failures = 0;
  bool inline_handler = false;
  template <class Token> auto operator()(Token&& token) const {
    return asio::async_initiate<Token, void(error_code, int)>(
        [this](auto handler) {
          const int n = ++*calls;
          const error_code ec =
              n <= failures ? error_code(asio::error::connection_refused) : error_code();
          if (inline_handler) {
            std::move(handler)(ec, n);
            return;
          }
          auto ex = asio::get_associated_executor(handler, io->get_executor());
          asio::post(ex, [h = std::move(handler), ec, n]() mutable { std::move(h)(ec, n); });
        },
        token);
  }
};

/// A completion handler recording how it was called.
struct recorded {
  int calls = 0;
  error_code ec;
  int value = 0;
  bool on_io_thread = false;
};
auto record(recorded& r, asio::io_context& io) {
  return [&r, &io](error_code ec, int v) {
    ++r.calls;
    r.ec = ec;
    r.value = v;
    r.on_io_thread = io.get_executor().running_in_this_thread();
  };
}

} // namespace

TEST_CASE("started on its executor's thread, an operation sends its first attempt inside "
          "async_retry; started elsewhere, it posts its start") {
  asio::io_context io;
  counted_op op{&io};
  recorded r;
  int calls_at_return = -1;
  SUBCASE("inside a handler running on the io_context") {
    asio::post(io, [&] {
      coretry::async_retry(io.get_executor(), op, quick_policy(), record(r, io));
      calls_at_return = *op.calls;
    });
    io.run();
    CHECK(calls_at_return == 1); // sent, no post in between
  }
  SUBCASE("from a thread not running it") {
    coretry::async_retry(io.get_executor(), op, quick_policy(), record(r, io));
    calls_at_return = *op.calls;
    io.run();
    CHECK(calls_at_return == 0); // the policy's hooks, too, run on the operation's executor
  }
  SUBCASE("inside a coroutine, through an any_io_executor") {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          const asio::any_io_executor ex = co_await asio::this_coro::executor;
          coretry::async_retry(ex, op, quick_policy(), record(r, io));
          calls_at_return = *op.calls;
          co_return;
        },
        asio::detached);
    io.run();
    CHECK(calls_at_return == 1);
  }
  CHECK(*op.calls == 1);
  CHECK(r.calls == 1);
  CHECK(!r.ec);
  CHECK(r.value == 1);
  CHECK(r.on_io_thread);
}

TEST_CASE("on a strand it runs in, an operation sends its first attempt at once") {
  asio::io_context io;
  auto strand = asio::make_strand(io);
  counted_op op{&io};
  recorded r;
  int calls_at_return = -1;
  asio::post(strand, [&] {
    coretry::async_retry(strand, op, quick_policy(), record(r, io));
    calls_at_return = *op.calls;
  });
  io.run();
  CHECK(calls_at_return == 1);
  CHECK(r.calls == 1);
}

TEST_CASE("an attempt whose handler runs inside its own initiation does not complete the "
          "operation inside async_retry") {
  asio::io_context io;
  SUBCASE("it succeeds") {
    counted_op op{&io, std::make_shared<int>(0), 0, true};
    recorded r;
    asio::post(io, [&] {
      coretry::async_retry(io.get_executor(), op, quick_policy(), record(r, io));
      CHECK(*op.calls == 1);
      CHECK(r.calls == 0); // decided, not delivered
    });
    CHECK(io.run() > 1);
    CHECK(r.calls == 1);
    CHECK(!r.ec);
    CHECK(r.value == 1);
    CHECK(r.on_io_thread);
  }
  SUBCASE("it fails, and is retried after a sleep") {
    counted_op op{&io, std::make_shared<int>(0), 1, true};
    recorded r;
    asio::post(io, [&] {
      coretry::async_retry(io.get_executor(), op, quick_policy(), record(r, io));
      CHECK(*op.calls == 1);
      CHECK(r.calls == 0);
    });
    io.run();
    CHECK(*op.calls == 2);
    CHECK(r.calls == 1);
    CHECK(!r.ec);
    CHECK(r.value == 2);
  }
}

TEST_CASE("what the caller's handler throws leaves run() when an attempt completed inside its own "
          "initiation") {
  // The first step is posted (started from outside run), or the attempt follows a sleep: the
  // attempt's handler then runs inside its initiating function on the operation's executor.
  // The caller's handler is not called there, where the attempt's guard would swallow what it
  // throws, but later, so that its exception leaves through run() as Asio's handlers' do.
  // io_context's own executor would capture the exception of a handler it runs inline; a strand
  // (and thread_pool's executor) lets it through, into the attempt's guard.
  for (const bool on_strand : {false, true}) {
    for (const int failures : {0, 1}) {
      CAPTURE(on_strand);
      CAPTURE(failures);
      asio::io_context io;
      counted_op op{&io, std::make_shared<int>(0), failures, true};
      int handled = 0;
      auto handler = [&](error_code ec, int) {
        CHECK(!ec);
        ++handled;
        throw std::runtime_error("from the caller's handler");
      };
      if (on_strand)
        coretry::async_retry(asio::make_strand(io), op, quick_policy(), handler);
      else
        coretry::async_retry(io.get_executor(), op, quick_policy(), handler);
      CHECK_THROWS_WITH_AS(io.run(), "from the caller's handler", std::runtime_error);
      CHECK(handled == 1);
      CHECK(*op.calls == failures + 1);
      io.restart();
      CHECK(io.run() == 0);
      CHECK(handled == 1);
    }
  }
}

TEST_CASE("a gate refusing the first attempt completes the operation after async_retry returns") {
  asio::io_context io;
  auto gate = std::make_shared<coretry::test::fake_gate>();
  gate->open = true;
  retry_policy p = quick_policy();
  p.breaker = gate;
  counted_op op{&io};
  recorded r;
  asio::post(io, [&] {
    coretry::async_retry(io.get_executor(), op, p, record(r, io));
    CHECK(r.calls == 0);
  });
  io.run();
  CHECK(*op.calls == 0);
  CHECK(r.calls == 1);
  CHECK(r.ec == coretry::errc::circuit_open);
  CHECK(r.on_io_thread);
}

TEST_CASE("a controlled operation posts its start from outside its executor's thread and sends "
          "at once from inside it") {
  asio::io_context io(1);
  coretry::cancellation_source source;
  retry_policy p = quick_policy();
  p.cancellation = source.token();
  counted_op outside{&io};
  counted_op inside{&io};
  recorded r1, r2;
  int inside_calls_at_return = -1;
  coretry::async_retry(io.get_executor(), outside, p, record(r1, io));
  CHECK(*outside.calls == 0); // posted: a cancellation may still come first
  asio::post(io, [&] {
    coretry::async_retry(io.get_executor(), inside, p, record(r2, io));
    inside_calls_at_return = *inside.calls;
  });
  io.run();
  CHECK(inside_calls_at_return == 1);
  CHECK(r1.calls == 1);
  CHECK(r2.calls == 1);
  CHECK(!r1.ec);
  CHECK(!r2.ec);
}

TEST_CASE("a group cancelled before a controlled operation starts inside its executor's thread "
          "stops it before any attempt") {
  asio::io_context io(1);
  coretry::cancellation_source source;
  source.cancel();
  retry_policy p = quick_policy();
  p.cancellation = source.token();
  counted_op op{&io};
  recorded r;
  asio::post(io, [&] {
    coretry::async_retry(io.get_executor(), op, p, record(r, io));
    CHECK(r.calls == 0);
  });
  io.run();
  CHECK(*op.calls == 0);
  CHECK(r.calls == 1);
  CHECK(r.ec == asio::error::operation_aborted);
}

TEST_CASE("an operation started inside another's initiation completes after both return") {
  asio::io_context io;
  auto gate = std::make_shared<coretry::test::fake_gate>();
  gate->open = true;
  retry_policy refused = quick_policy();
  refused.breaker = gate;
  recorded outer, inner;
  bool inner_called_inside = false;
  bool outer_called_inside = false;
  auto calls = std::make_shared<int>(0);
  // The outer attempt starts the inner operation (refused at once), then calls its own handler
  // inline: neither handler may run before its async_retry returns.
  auto op = [&](auto&& token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&](auto handler) {
          ++*calls;
          coretry::async_retry(io.get_executor(), counted_op{&io}, refused, record(inner, io));
          inner_called_inside = inner.calls != 0;
          std::move(handler)(error_code(), 5);
          outer_called_inside = outer.calls != 0;
        },
        token);
  };
  asio::post(io, [&] {
    coretry::async_retry(io.get_executor(), op, quick_policy(), record(outer, io));
    CHECK(*calls == 1);
    CHECK(outer.calls == 0);
    CHECK(inner.calls == 0);
  });
  io.run();
  CHECK(!inner_called_inside);
  CHECK(!outer_called_inside);
  CHECK(outer.calls == 1);
  CHECK(outer.value == 5);
  CHECK(inner.calls == 1);
  CHECK(inner.ec == coretry::errc::circuit_open);
}

TEST_CASE("a handler that completes inside the initiating function is dispatched normally later") {
  // The first operation's outcome is decided inside its initiation and posted; the second,
  // started from its handler, completes through an ordinary attempt: its handler is dispatched
  // (called from the attempt's completion, on the same thread), not posted once more.
  asio::io_context io;
  counted_op first{&io, std::make_shared<int>(0), 0, true};
  counted_op second{&io};
  recorded r2;
  int handled = 0;
  asio::post(io, [&] {
    coretry::async_retry(io.get_executor(), first, quick_policy(), [&](error_code ec, int) {
      CHECK(!ec);
      ++handled;
      coretry::async_retry(io.get_executor(), second, quick_policy(), record(r2, io));
      CHECK(*second.calls == 1);
    });
    CHECK(*first.calls == 1);
  });
  CHECK(io.run_one() == 1); // the start
  CHECK(handled == 0);
  CHECK(io.run_one() == 1); // the first completion
  CHECK(handled == 1);
  CHECK(io.run_one() == 1); // the second attempt's completion, and with it the handler
  CHECK(r2.calls == 1);
  CHECK(io.run() == 0);
}

#if CORETRY_ASIO_HAS_IMMEDIATE_EXECUTOR
TEST_CASE("a completion decided inside the initiation goes to the handler's immediate executor") {
  asio::io_context io;
  asio::io_context other;
  counted_op op{&io, std::make_shared<int>(0), 0, true};
  recorded r;
  asio::post(io, [&] {
    coretry::async_retry(io.get_executor(), op, quick_policy(),
                         asio::bind_immediate_executor(other.get_executor(), record(r, io)));
  });
  io.run();
  CHECK(*op.calls == 1);
  CHECK(r.calls == 0); // submitted to `other`, which has not run yet
  other.run();
  CHECK(r.calls == 1);
  CHECK(!r.ec);
}
#endif

#if !defined(ASIO_HAS_IOCP) && !defined(BOOST_ASIO_HAS_IOCP) // IOCP: always a strand
TEST_CASE("the strand is left out exactly where the context promises one thread") {
  // Asked of every controlled operation (the group's batched notice and the attempt timer rely
  // on it), for each shape an executor comes in: an io_context's, tracked or not, inside an
  // any_io_executor or not, a strand's and a thread_pool's.
  using coretry::detail::runs_on_one_thread;
  asio::io_context one(1);
  asio::io_context many;
  const auto tracked = asio::prefer(one.get_executor(), asio::execution::outstanding_work.tracked);
  CHECK(runs_on_one_thread(one.get_executor()));
  CHECK(!runs_on_one_thread(many.get_executor()));
  CHECK(runs_on_one_thread(tracked));
  CHECK(runs_on_one_thread(asio::any_io_executor(one.get_executor())));
  CHECK(runs_on_one_thread(asio::any_io_executor(tracked)));
  CHECK(!runs_on_one_thread(asio::any_io_executor(many.get_executor())));
  CHECK(!runs_on_one_thread(asio::make_strand(one.get_executor())));
  asio::thread_pool single(1);
  asio::thread_pool pair(2);
  CHECK(runs_on_one_thread(single.get_executor()));
  CHECK(!runs_on_one_thread(pair.get_executor()));
  CHECK(runs_on_one_thread(asio::any_io_executor(single.get_executor())));
  CHECK(!runs_on_one_thread(asio::any_io_executor(pair.get_executor())));
  single.join();
  pair.join();
}
#endif
