// SPDX-License-Identifier: BSL-1.0
// Exceptions as outcomes (`retry_policy::retry_if_exception`, `retry_on<E...>`) in the three
// loops, and the fallback (`coretry::fallback`) for retry_async and async_retry: on the manual
// clock.
#include <coretry/hedge.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::errc;
using coretry::retry_policy;

namespace {

struct transient_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct flaky_error : transient_error { // derived: retry_on<transient_error> catches it
  using transient_error::transient_error;
};
struct other_transient : std::exception {};

/// An asynchronous operation completing with `(ec, v)` through any completion token, posted.
template <class Token>
auto async_answer(asio::io_context& io, std::error_code ec, int v, Token&& t) {
  return asio::async_initiate<Token, void(std::error_code, int)>(
      [&io, ec, v](auto handler) {
        asio::post(io, [h = std::move(handler), ec, v]() mutable { std::move(h)(ec, v); });
      },
      t);
}

/// Throws `transient_error("try N")` on its first `throws` calls, then returns 7; or throws
/// `std::logic_error` on every call when `logic` is set.
struct throwing_op {
  int throws = 0;
  bool logic = false;
  int calls = 0;
  asio::awaitable<int> operator()() {
    ++calls;
    if (logic)
      throw std::logic_error("a bug");
    if (calls <= throws)
      throw transient_error("try " + std::to_string(calls));
    co_return 7;
  }
};

retry_policy fixed_policy(unsigned attempts) {
  return {.max_attempts = attempts,
          .backoff = coretry::backoff::fixed(100ms),
          .retry_if_exception = coretry::retry_on<transient_error>()};
}

/// What an awaited operation ended with: a value, a system error, or another exception.
struct awaited {
  int completions = 0;
  std::optional<int> value;
  std::error_code error;
  std::exception_ptr exception;
};

template <class A> awaited await_on_manual_clock(asio::io_context& io, A a) {
  awaited out;
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
  drive(io, [&] { return out.completions > 0; });
  drive(io, [] { return false; });
  return out;
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

template <class E> bool holds(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

/// The three loops: retry_async's direct coroutine, the composed operation, the hedge.
enum class loop { direct, composed, hedge };

/// Runs `op` under `p` on the loop `l`, reporting through a callback; stats in `stats`.
outcome run_on(loop l, asio::io_context& io, throwing_op& op, const retry_policy& p,
               coretry::retry_stats& stats) {
  outcome o;
  switch (l) {
  case loop::direct:
  case loop::composed: {
    if (l == loop::direct) {
      asio::co_spawn(io, coretry::retry_async<manual_timer>([&] { return op(); }, p, stats),
                     [&](std::exception_ptr e, int v) {
                       ++o.completions;
                       o.value = v;
                       if (e)
                         o.error = errc::retryable_exception; // rethrown: checked elsewhere
                     });
    } else {
      coretry::async_retry<manual_timer>(
          io.get_executor(), [&] { return op(); }, p, stats, record(o));
    }
    drive(io, [&] { return o.completions > 0; });
    drive(io, [] { return false; });
    return o;
  }
  case loop::hedge: {
    coretry::hedge_stats hs;
    o = run_hedge(io, op, p, coretry::hedge_options{.delay = coretry::unlimited}, hs);
    stats.attempts = hs.attempts;
    stats.last_error = hs.last_error;
    stats.reason = hs.reason;
    stats.exception = hs.exception;
    return o;
  }
  }
  return o;
}

const char* name_of(loop l) {
  return l == loop::direct ? "direct" : l == loop::composed ? "composed" : "hedge";
}

} // namespace

TEST_CASE("an exception the policy retries is a failed attempt: the third attempt succeeds, "
          "in every loop") {
  for (loop l : {loop::direct, loop::composed, loop::hedge}) {
    CAPTURE(name_of(l));
    manual_clock::reset();
    asio::io_context io;
    throwing_op op{.throws = 2};
    std::vector<coretry::retry_event> events;
    retry_policy p = fixed_policy(5);
    p.on_retry = [&](const coretry::retry_event& e) { events.push_back(e); };
    coretry::retry_stats stats;
    const outcome o = run_on(l, io, op, p, stats);
    CHECK(o.completions == 1);
    CHECK_FALSE(o.error);
    CHECK(o.value == 7);
    CHECK(op.calls == 3);
    CHECK(stats.attempts == 3);
    CHECK_FALSE(stats.last_error);
    CHECK_FALSE(stats.reason);
    CHECK_FALSE(stats.exception); // the last attempt succeeded
    if (l != loop::hedge) {       // the hedge has no backoff and no on_retry
      CHECK(manual_clock::elapsed() == 200ms);
      REQUIRE(events.size() == 2);
      CHECK(events[0].error == errc::retryable_exception);
      CHECK(events[1].attempt == 2);
    }
  }
}

TEST_CASE("an exception the policy does not list stops the loop at once, as before, in every "
          "loop") {
  for (loop l : {loop::direct, loop::composed, loop::hedge}) {
    CAPTURE(name_of(l));
    manual_clock::reset();
    asio::io_context io;
    throwing_op op{.logic = true};
    coretry::retry_stats stats;
    const outcome o = run_on(l, io, op, fixed_policy(5), stats);
    CHECK(o.completions == 1);
    CHECK(op.calls == 1);
    CHECK(stats.reason == errc::unexpected_exception);
    CHECK(holds<std::logic_error>(stats.exception));
    if (l != loop::direct)
      CHECK(o.error == errc::unexpected_exception);
  }
}

TEST_CASE("without retry_if_exception an exception still stops the loop at once") {
  manual_clock::reset();
  asio::io_context io;
  throwing_op op{.throws = 5};
  retry_policy p = fixed_policy(5);
  p.retry_if_exception = {};
  coretry::retry_stats stats;
  const outcome o = run_on(loop::composed, io, op, p, stats);
  CHECK(o.error == errc::unexpected_exception);
  CHECK(op.calls == 1);
  CHECK(holds<transient_error>(stats.exception));
}

TEST_CASE("giving up after retried exceptions delivers retryable_exception to a callback, with "
          "the last exception in the stats, in the composed loop and the hedge") {
  for (loop l : {loop::composed, loop::hedge}) {
    CAPTURE(name_of(l));
    manual_clock::reset();
    asio::io_context io;
    throwing_op op{.throws = 10};
    coretry::retry_stats stats;
    const outcome o = run_on(l, io, op, fixed_policy(3), stats);
    CHECK(o.completions == 1);
    CHECK(o.error == errc::retryable_exception);
    CHECK(op.calls == 3);
    CHECK(stats.reason == errc::attempts_exhausted);
    CHECK(stats.last_error == errc::retryable_exception);
    REQUIRE(holds<transient_error>(stats.exception));
    CHECK(what_of(stats.exception) == "try 3");
  }
}

TEST_CASE("giving up after retried exceptions rethrows the last one itself from retry_async "
          "(either path) and hedge_async") {
  for (int path = 0; path < 3; ++path) {
    CAPTURE(path);
    manual_clock::reset();
    asio::io_context io;
    throwing_op op{.throws = 10};
    retry_policy p = fixed_policy(3);
    if (path == 1)
      p.deadline = 1h; // the composed operation's path
    coretry::retry_stats stats;
    awaited out;
    if (path < 2)
      out = await_on_manual_clock(
          io, coretry::retry_async<manual_timer>([&] { return op(); }, p, stats));
    else
      out = await_on_manual_clock(
          io, coretry::hedge_async<manual_timer>(
                  [&] { return op(); }, p, coretry::hedge_options{.delay = coretry::unlimited}));
    CHECK(out.completions == 1);
    CHECK(op.calls == 3);
    REQUIRE(out.exception);
    CHECK(holds<transient_error>(out.exception));
    CHECK(what_of(out.exception) == "try 3");
    if (path < 2) {
      CHECK(stats.reason == errc::attempts_exhausted);
      CHECK(stats.last_error == errc::retryable_exception);
    }
  }
}

TEST_CASE("final_error::policy_reason reports attempts_exhausted after retried exceptions, not "
          "the exception") {
  manual_clock::reset();
  asio::io_context io;
  throwing_op op{.throws = 10};
  retry_policy p = fixed_policy(2);
  p.report = coretry::final_error::policy_reason;
  const awaited out =
      await_on_manual_clock(io, coretry::retry_async<manual_timer>([&] { return op(); }, p));
  CHECK_FALSE(out.exception);
  CHECK(out.error == errc::attempts_exhausted);
}

TEST_CASE("retry_on takes several types and derived types; retry_if does not veto it") {
  const auto pred = coretry::retry_on<transient_error, other_transient>();
  CHECK(pred(std::make_exception_ptr(transient_error("x"))));
  CHECK(pred(std::make_exception_ptr(flaky_error("x"))));
  CHECK(pred(std::make_exception_ptr(other_transient{})));
  CHECK_FALSE(pred(std::make_exception_ptr(std::logic_error("x"))));
  CHECK_FALSE(pred(std::make_exception_ptr(42)));
  CHECK_FALSE(pred(nullptr));

  manual_clock::reset();
  asio::io_context io;
  throwing_op op{.throws = 1};
  retry_policy p = fixed_policy(3);
  p.retry_if = [](const std::error_code&) { return false; }; // codes only
  coretry::retry_stats stats;
  const outcome o = run_on(loop::composed, io, op, p, stats);
  CHECK_FALSE(o.error);
  CHECK(op.calls == 2);
}

TEST_CASE("a retry_if_exception that throws stops the loop with what it threw") {
  manual_clock::reset();
  asio::io_context io;
  throwing_op op{.throws = 5};
  retry_policy p = fixed_policy(3);
  p.retry_if_exception = [](const std::exception_ptr&) -> bool {
    throw std::out_of_range("predicate");
  };
  coretry::retry_stats stats;
  const outcome o = run_on(loop::composed, io, op, p, stats);
  CHECK(o.error == errc::unexpected_exception);
  CHECK(op.calls == 1);
  CHECK(holds<std::out_of_range>(stats.exception));
}

TEST_CASE("the observer hears a retried exception as a failed attempt, in order") {
  manual_clock::reset();
  asio::io_context io;
  struct log_observer : coretry::retry_observer {
    std::vector<std::string> lines;
    void on_attempt_started(const coretry::attempt_started_event& e) override {
      lines.push_back("start " + std::to_string(e.attempt));
    }
    void on_attempt_finished(const coretry::attempt_finished_event& e) override {
      lines.push_back("done " + std::to_string(e.attempt) + " " + coretry::to_string(e.outcome) +
                      " " + e.error.message());
    }
    void on_retry_scheduled(const coretry::retry_scheduled_event& e) override {
      lines.push_back("retry " + std::to_string(e.attempt) + " " + e.error.message());
    }
    void on_operation_finished(const coretry::operation_finished_event& e) override {
      lines.push_back("end " + e.reason.message() + " / " + e.error.message());
    }
  };
  auto obs = std::make_shared<log_observer>();
  throwing_op op{.throws = 10};
  retry_policy p = fixed_policy(2);
  p.observer = obs;
  coretry::retry_stats stats;
  (void)run_on(loop::composed, io, op, p, stats);
  const std::string m = coretry::make_error_code(errc::retryable_exception).message();
  const std::string failure = coretry::to_string(coretry::attempt_outcome::failure);
  CHECK(obs->lines ==
        std::vector<std::string>{
            "start 1", "done 1 " + failure + " " + m, "retry 1 " + m, "start 2",
            "done 2 " + failure + " " + m,
            "end " + coretry::make_error_code(errc::attempts_exhausted).message() + " / " + m});
}

// --- The fallback ----------------------------------------------------------------------------

TEST_CASE("fallback: the value is returned after the policy gave up, and the reason is visible") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused)}};
  coretry::retry_stats stats;
  std::vector<std::error_code> told;
  const awaited out = await_on_manual_clock(
      io,
      coretry::retry_async<manual_timer>([&] { return op(); }, fixed_policy(3), stats,
                                         coretry::fallback([&](const coretry::fallback_info& i) {
                                           told.push_back(i.error);
                                           CHECK(&i.stats == &stats);
                                           CHECK(i.stats.attempts == 3);
                                           return 42;
                                         })));
  CHECK(out.completions == 1);
  CHECK(out.value == 42);
  CHECK(told == std::vector<std::error_code>{refused});
  CHECK(op.calls == 3);
  CHECK(stats.reason == errc::attempts_exhausted);
  CHECK(stats.last_error == refused);
}

TEST_CASE("fallback: a plain value, through async_retry with a callback; not called on success") {
  manual_clock::reset();
  asio::io_context io;
  {
    scripted_op op{{fail(refused)}};
    coretry::retry_stats stats;
    outcome o;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, fixed_policy(2), stats, coretry::fallback(5),
        record(o));
    drive(io, [&] { return o.completions > 0; });
    drive(io, [] { return false; });
    CHECK(o.completions == 1);
    CHECK_FALSE(o.error);
    CHECK(o.value == 5);
    CHECK(stats.reason == errc::attempts_exhausted);
  }
  {
    scripted_op op{{succeed(9)}};
    int called = 0;
    outcome o;
    coretry::async_retry<manual_timer>(
        io.get_executor(), [&] { return op(); }, fixed_policy(2),
        coretry::fallback([&](const coretry::fallback_info&) {
          ++called;
          return 1;
        }),
        record(o));
    drive(io, [&] { return o.completions > 0; });
    CHECK(o.value == 9);
    CHECK(called == 0);
  }
}

TEST_CASE("fallback: runs after retried exceptions and after a non-retryable error, not for a "
          "bug") {
  manual_clock::reset();
  asio::io_context io;
  std::vector<std::error_code> told;
  auto fb = [&](const coretry::fallback_info& i) {
    told.push_back(i.error);
    if (i.error == errc::retryable_exception)
      CHECK(holds<transient_error>(i.stats.exception));
    return 1;
  };
  throwing_op transient{.throws = 10};
  auto a = await_on_manual_clock(io, coretry::retry_async<manual_timer>([&] { return transient(); },
                                                                        fixed_policy(2),
                                                                        coretry::fallback(fb)));
  CHECK(a.value == 1);

  retry_policy stop_at_once = fixed_policy(5);
  stop_at_once.retry_if = [](const std::error_code&) { return false; };
  scripted_op permanent{{fail(refused)}};
  auto b = await_on_manual_clock(io, coretry::retry_async<manual_timer>([&] { return permanent(); },
                                                                        stop_at_once,
                                                                        coretry::fallback(fb)));
  CHECK(b.value == 1);
  CHECK(permanent.calls == 1);

  throwing_op bug{.logic = true};
  auto c =
      await_on_manual_clock(io, coretry::retry_async<manual_timer>(
                                    [&] { return bug(); }, fixed_policy(2), coretry::fallback(fb)));
  CHECK(holds<std::logic_error>(c.exception));
  CHECK(told == std::vector<std::error_code>{errc::retryable_exception, refused});
}

TEST_CASE("fallback: not called when cancelled while sleeping, through the slot or the group "
          "token") {
  for (int how = 0; how < 3; ++how) {
    CAPTURE(how);
    manual_clock::reset();
    asio::io_context io;
    scripted_op op{{fail(refused)}};
    int called = 0;
    auto fb = coretry::fallback([&](const coretry::fallback_info&) {
      ++called;
      return 1;
    });
    coretry::cancellation_source source;
    retry_policy p = fixed_policy(5);
    p.backoff = coretry::backoff::fixed(1h);
    if (how == 2)
      p.cancellation = source.token();
    asio::cancellation_signal signal;
    coretry::retry_stats stats;
    outcome o;
    awaited a;
    if (how == 0) // async_retry, the handler's slot
      coretry::async_retry<manual_timer>(
          io.get_executor(), [&] { return op(); }, p, stats, fb,
          asio::bind_cancellation_slot(signal.slot(), record(o)));
    else // retry_async in a coroutine whose slot is emitted; or the group token
      asio::co_spawn(io, coretry::retry_async<manual_timer>([&] { return op(); }, p, stats, fb),
                     asio::bind_cancellation_slot(signal.slot(), [&](std::exception_ptr e, int) {
                       ++o.completions;
                       try {
                         if (e)
                           std::rethrow_exception(e);
                       } catch (const std::system_error& se) {
                         o.error = se.code();
                       }
                     }));
    io.poll();
    CHECK(op.calls == 1);
    CHECK(manual_clock::pending() == 1); // the sleep
    if (how == 2)
      source.cancel();
    else
      signal.emit(asio::cancellation_type::terminal);
    io.restart();
    io.run();
    CHECK(o.completions == 1);
    CHECK(o.error == operation_aborted);
    CHECK(called == 0);
    CHECK(op.calls == 1);
    CHECK(stats.reason == (how == 2 ? std::error_code(errc::cancelled) : operation_aborted));
  }
}

TEST_CASE("fallback: one that throws completes the operation once with what it threw") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused)}};
  const auto fb_sys = coretry::fallback([](const coretry::fallback_info&) -> int {
    throw std::system_error(make_error_code(std::errc::host_unreachable));
  });
  const auto fb_other =
      coretry::fallback([](const coretry::fallback_info&) -> int { throw std::out_of_range("x"); });
  auto a = await_on_manual_clock(
      io, coretry::retry_async<manual_timer>([&] { return op(); }, fixed_policy(2), fb_sys));
  CHECK(a.completions == 1);
  CHECK(a.error == std::errc::host_unreachable);
  auto b = await_on_manual_clock(
      io, coretry::retry_async<manual_timer>([&] { return op(); }, fixed_policy(2), fb_other));
  CHECK(holds<std::out_of_range>(b.exception));

  coretry::retry_stats stats;
  outcome o;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, fixed_policy(2), stats, fb_other, record(o));
  drive(io, [&] { return o.completions > 0; });
  drive(io, [] { return false; });
  CHECK(o.completions == 1);
  CHECK(o.error == errc::unexpected_exception);
  CHECK(holds<std::out_of_range>(stats.exception));
  CHECK(stats.reason == errc::attempts_exhausted); // why the retry gave up
}

TEST_CASE("fallback: an awaitable and a token operation supply the result") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused)}};
  // An awaitable that waits on the manual clock, then answers.
  auto awaitable_fb =
      coretry::fallback([](const coretry::fallback_info& i) -> asio::awaitable<int> {
        manual_timer t(co_await asio::this_coro::executor);
        t.expires_after(50ms);
        co_await t.async_wait(asio::use_awaitable);
        co_return static_cast<int>(i.stats.attempts) * 10;
      });
  auto a = await_on_manual_clock(
      io, coretry::retry_async<manual_timer>([&] { return op(); }, fixed_policy(2), awaitable_fb));
  CHECK(a.value == 20);
  CHECK(manual_clock::elapsed() == 150ms); // one 100 ms sleep, then the fallback's 50 ms

  // A token operation completing with (error_code, int).
  auto token_fb = coretry::fallback([&io](const coretry::fallback_info&, auto token) {
    return async_answer(io, std::error_code{}, 77, std::move(token));
  });
  outcome o;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, fixed_policy(2), token_fb, record(o));
  drive(io, [&] { return o.completions > 0; });
  CHECK(o.completions == 1);
  CHECK_FALSE(o.error);
  CHECK(o.value == 77);

  // A token operation that fails: its error is the operation's.
  auto failing_fb = coretry::fallback([&io](const coretry::fallback_info&, auto token) {
    return async_answer(io, make_error_code(std::errc::host_unreachable), 0, std::move(token));
  });
  outcome f;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, fixed_policy(2), failing_fb, record(f));
  drive(io, [&] { return f.completions > 0; });
  CHECK(f.error == std::errc::host_unreachable);
}

// The rule's steps themselves (detail/attempt_shape.hpp), which every path above goes through.
TEST_CASE("the exception rule: a system_error is its code, a listed exception is retried, the "
          "rest is a bug, and a spawn that could not start keeps only operation_aborted") {
  using coretry::detail::kept_codes;
  using result = coretry::detail::loop_result<int>;
  const auto thrown = [](auto e) { return std::make_exception_ptr(e); };

  // Step 1: a std::system_error is the error it carries; anything else is kept.
  result a;
  coretry::detail::take_exception(a, thrown(std::system_error(refused)));
  CHECK(a.error == refused);
  CHECK_FALSE(a.exception);
  result b;
  coretry::detail::take_exception(b, thrown(flaky_error("flaky")));
  CHECK_FALSE(b.error);
  CHECK(b.exception);

  // Step 2: an exception the policy lists is a failed attempt, and is handed back; a result the
  // policy rejects is `result_rejected`; with no predicate the exception stays.
  const retry_policy listed{.retry_if_exception = coretry::retry_on<transient_error>()};
  const retry_policy p = listed.retry_if_result<int>([](int v) { return v < 0; });
  std::exception_ptr retried = coretry::detail::judge_attempt(p, b);
  CHECK(retried);
  CHECK(b.error == errc::retryable_exception);
  CHECK_FALSE(b.exception);
  result c;
  c.value.emplace(-1);
  CHECK_FALSE(coretry::detail::judge_attempt(p, c));
  CHECK(c.error == errc::result_rejected);
  result d;
  coretry::detail::take_exception(d, thrown(other_transient{}));
  CHECK_FALSE(coretry::detail::judge_attempt(p, d));
  CHECK(d.exception);

  // Step 3: what stays an exception is a bug.
  CHECK(coretry::detail::fatal_exception(d));
  CHECK(d.error == errc::unexpected_exception);

  // A spawn that could not start: operation_aborted is a cancellation, any other code a bug
  // (kept_codes::aborted_only); the composed operation's own spawn keeps every code.
  result e;
  CHECK_FALSE(coretry::detail::take_fatal_exception(
      e, thrown(std::system_error(coretry::detail::aborted_error())), kept_codes::aborted_only));
  CHECK(coretry::detail::is_aborted(e.error));
  result f;
  CHECK(coretry::detail::take_fatal_exception(f, thrown(std::system_error(refused)),
                                              kept_codes::aborted_only));
  CHECK(f.error == errc::unexpected_exception);
  CHECK(f.exception);
  result g;
  CHECK_FALSE(coretry::detail::take_fatal_exception(g, thrown(std::system_error(refused))));
  CHECK(g.error == refused);
}
