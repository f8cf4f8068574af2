// SPDX-License-Identifier: BSL-1.0
// Per-call costs of the retry loop, each next to its baseline. The variants alternate inside
// each repetition, in one process, so that a slow moment of a loaded machine hits both sides.
//
//   coretry_bench [--reps=7] [--calls=200000] [--only=<variant>]
//
// --only runs one variant (e.g. under `valgrind --tool=callgrind`).
//
// Rows (.ci/bench pairs them):
//   success_ns     coretry (plain op), coretry_shared (shared_policy)
//                                              vs loop (hand-written for-loop) and direct (await)
//                coretry_token (the attempt an initiating function taking a token)
//                                              vs the same two
//   success_cb_ns  coretry_token_cb (async_retry, token attempt, callback handler)
//                                              vs callback (hand-written with handlers, no
//                                              coroutine)
//   timeout_ns     coretry_timeout, coretry_timeout_shared
//                                              vs or_timer (`op() || timer.async_wait()`)
//   timeout_cb_ns  coretry_timeout_cb (async_retry with an attempt timeout, token attempt,
//                  callback handler)           vs callback_timeout (the same by hand: handlers,
//                                              a steady_timer and a cancellation_signal)
//   jitter_ns      coretry_full                vs mt19937_64 (+ uniform_real_distribution)
//   success_ns     coretry_observed (shared_policy with an observer that does nothing),
//                  coretry_counted (one that counts every event)
//                                              vs coretry_shared (no observer set)
#include <coretry/coretry.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <random>
#include <string>

#include "callback_retry.hpp"
#include "harness.hpp"

using namespace std::chrono_literals;
namespace cb = coretry::bench;

namespace {

// One scheduler round trip: the cheapest realistic asynchronous operation.
asio::awaitable<int> one_round_trip() {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  co_return 1;
}

volatile int sink = 0;

/// Nanoseconds per call of `body(ex)` awaited `calls` times in one coroutine on `ex`, the
/// executor of a fresh `io_context`.
template <class Body> double time_awaits_on(long calls, Body body) {
  asio::io_context io(1);
  const auto ex = io.get_executor();
  double ns = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const auto t0 = cb::steady::now();
        for (long i = 0; i < calls; ++i)
          sink = sink + co_await body(ex);
        ns = cb::seconds_since(t0) * 1e9 / double(calls);
      },
      [](std::exception_ptr e) {
        if (e)
          std::rethrow_exception(e);
      });
  io.run();
  return ns;
}

/// Nanoseconds per call of `body()` awaited `calls` times in one coroutine.
template <class Body> double time_awaits(long calls, Body body) {
  return time_awaits_on(calls, [&body](const asio::io_context::executor_type&) { return body(); });
}

const coretry::retry_policy plain_policy{};

/// One scheduler round trip as a token-based operation: `void(int)` on the handler's executor.
struct round_trip_token {
  template <class Token> auto operator()(Token&& token) const {
    return asio::async_initiate<Token, void(int)>(
        [](auto handler) {
          auto ex = asio::get_associated_executor(handler);
          asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(1); });
        },
        token);
  }
};

/// Nanoseconds per call of `start(done)` run `calls` times one after the other, each started
/// from the previous one's completion handler: no coroutine on this side.
template <class Start> double time_callbacks(long calls, Start start) {
  asio::io_context io(1);
  long left = calls;
  std::function<void(std::error_code, int)> next;
  next = [&](std::error_code, int v) {
    sink = sink + v;
    if (--left > 0)
      start(io.get_executor(), next);
  };
  const auto t0 = cb::steady::now();
  start(io.get_executor(), next);
  io.run();
  return cb::seconds_since(t0) * 1e9 / double(calls);
}
const coretry::retry_policy timeout_policy{.attempt_timeout = 10s};
const coretry::shared_policy shared_plain_policy{{}};
const coretry::shared_policy shared_timeout_policy{{.attempt_timeout = 10s}};

// An observer that listens to no event, and says so (`interests`): what having one costs.
struct quiet_observer final : coretry::retry_observer {
  coretry::observer_interest interests() const noexcept override {
    return coretry::observer_interest::none;
  }
};
const coretry::shared_policy observed_policy{
    {.observer = std::make_shared<quiet_observer>(), .label = "bench"}};

// One that counts every event, as a metrics exporter's cheapest counter would.
struct counting_observer final : coretry::retry_observer {
  std::atomic<long> events{0};
  void on_operation_started(const coretry::operation_started_event&) override { count(); }
  void on_attempt_started(const coretry::attempt_started_event&) override { count(); }
  void on_attempt_finished(const coretry::attempt_finished_event&) override { count(); }
  void on_operation_finished(const coretry::operation_finished_event&) override { count(); }
  void count() noexcept { events.fetch_add(1, std::memory_order_relaxed); }
};
const coretry::shared_policy counted_policy{
    {.observer = std::make_shared<counting_observer>(), .label = "bench"}};

// What a careful programmer writes by hand: try the operation; on an error, back off on a timer
// made only when first needed. Its success path is one call and a zero-cost try block.
asio::awaitable<int> hand_written_retry() {
  std::optional<asio::steady_timer> timer;
  for (int attempt = 1;; ++attempt) {
    try {
      co_return co_await one_round_trip();
    } catch (const std::system_error&) {
      if (attempt == 3)
        throw;
    }
    if (!timer)
      timer.emplace(co_await asio::this_coro::executor);
    timer->expires_after(100ms * attempt);
    co_await timer->async_wait(asio::use_awaitable);
  }
}

asio::awaitable<int> or_timer() {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, 10s);
  auto r = co_await (one_round_trip() || timer.async_wait(asio::use_awaitable));
  co_return static_cast<int>(r.index());
}

// Full jitter on an exponential schedule (100 ms doubling up to 32 s), as the standard library
// offers it: the same arithmetic as coretry's delay.
double mt_full_jitter(long calls) {
  std::mt19937_64 gen(42);
  std::uniform_real_distribution<double> dist(0.0, 1.0);
  long long total = 0;
  const auto t0 = cb::steady::now();
  for (long i = 0; i < calls; ++i) {
    const double cap = std::min(32e9, 100e6 * double(1u << (unsigned(i) & 7u)));
    total += std::chrono::nanoseconds(static_cast<long long>(dist(gen) * cap)).count();
  }
  const double ns = cb::seconds_since(t0) * 1e9 / double(calls);
  sink = sink + static_cast<int>(total & 1);
  return ns;
}

double coretry_full_jitter(long calls) {
  const auto b =
      coretry::backoff::exponential(100ms, 2.0, 32s).with_jitter(coretry::jitter::full());
  coretry::fast_rng rng(42);
  long long total = 0;
  const auto t0 = cb::steady::now();
  for (long i = 0; i < calls; ++i)
    total += b.delay(unsigned(i) & 7u, 0ns, rng).count();
  const double ns = cb::seconds_since(t0) * 1e9 / double(calls);
  sink = sink + static_cast<int>(total & 1);
  return ns;
}

} // namespace

int main(int argc, char** argv) try {
  const long reps = cb::count_option(argc, argv, "reps", 7);
  const long calls = cb::count_option(argc, argv, "calls", 200'000);
  const long timed_calls = std::max(1L, calls / 8); // the timeout rows cost ~10x more per call
  const long jitter_calls = calls * 20;
  const std::string only = cb::option(argc, argv, "only", "");
  // One untimed round first, so that every variant starts with warm caches and a grown heap.
  for (long rep = 0; rep <= reps; ++rep) {
    const bool keep = rep > 0;
    // Runs `measure` unless --only names another variant (for profilers).
    auto put = [&](const char* metric, const char* variant, auto measure) {
      if (!only.empty() && only != variant)
        return;
      const double v = measure();
      if (keep)
        cb::sample(metric, variant, v);
    };
    put("success_ns", "direct", [&] { return time_awaits(calls, one_round_trip); });
    put("success_ns", "loop", [&] { return time_awaits(calls, hand_written_retry); });
    put("success_ns", "coretry", [&] {
      return time_awaits(calls, [] { return coretry::retry_async(one_round_trip, plain_policy); });
    });
    put("success_ns", "coretry_shared", [&] {
      return time_awaits(calls,
                         [] { return coretry::retry_async(one_round_trip, shared_plain_policy); });
    });
    put("success_ns", "coretry_observed", [&] {
      return time_awaits(calls,
                         [] { return coretry::retry_async(one_round_trip, observed_policy); });
    });
    put("success_ns", "coretry_counted", [&] {
      return time_awaits(calls,
                         [] { return coretry::retry_async(one_round_trip, counted_policy); });
    });
    put("success_ns", "coretry_token", [&] {
      return time_awaits(calls,
                         [] { return coretry::retry_async(round_trip_token{}, plain_policy); });
    });
    // The composed operation awaited with use_awaitable: what retry_async would cost without
    // its direct coroutine path.
    put("success_ns", "coretry_composed", [&] {
      return time_awaits_on(calls, [](const asio::io_context::executor_type& ex) {
        return coretry::async_retry(ex, one_round_trip, plain_policy, asio::use_awaitable);
      });
    });
    put("success_ns", "coretry_composed_token", [&] {
      return time_awaits_on(calls, [](const asio::io_context::executor_type& ex) {
        return coretry::async_retry(ex, round_trip_token{}, plain_policy, asio::use_awaitable);
      });
    });
    put("success_cb_ns", "callback", [&] {
      return time_callbacks(calls, [](const asio::io_context::executor_type& ex, auto& done) {
        cb::start_callback_retry(
            ex, [ex](auto handler) { cb::post_result(ex, std::error_code{}, std::move(handler)); },
            done, 3, 100ms);
      });
    });
    put("success_cb_ns", "coretry_token_cb", [&] {
      return time_callbacks(calls, [](const asio::io_context::executor_type& ex, auto& done) {
        coretry::async_retry(
            ex,
            [ex](auto&& token) {
              return cb::post_result(ex, std::error_code{}, std::forward<decltype(token)>(token));
            },
            plain_policy, done);
      });
    });
    put("timeout_ns", "or_timer", [&] { return time_awaits(timed_calls, or_timer); });
    put("timeout_ns", "coretry_timeout", [&] {
      return time_awaits(timed_calls,
                         [] { return coretry::retry_async(one_round_trip, timeout_policy); });
    });
    put("timeout_ns", "coretry_timeout_shared", [&] {
      return time_awaits(
          timed_calls, [] { return coretry::retry_async(one_round_trip, shared_timeout_policy); });
    });
    put("timeout_cb_ns", "callback_timeout", [&] {
      return time_callbacks(timed_calls, [](const asio::io_context::executor_type& ex, auto& done) {
        cb::start_callback_timeout_retry(
            ex, [ex](auto handler) { cb::post_result(ex, std::error_code{}, std::move(handler)); },
            done, 3, 10s, 100ms);
      });
    });
    put("timeout_cb_ns", "coretry_timeout_cb", [&] {
      return time_callbacks(timed_calls, [](const asio::io_context::executor_type& ex, auto& done) {
        coretry::async_retry(
            ex,
            [ex](auto&& token) {
              return cb::post_result(ex, std::error_code{}, std::forward<decltype(token)>(token));
            },
            timeout_policy, done);
      });
    });
    put("jitter_ns", "mt19937_64", [&] { return mt_full_jitter(jitter_calls); });
    put("jitter_ns", "coretry_full", [&] { return coretry_full_jitter(jitter_calls); });
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "coretry_bench: %s\n", e.what());
  return 2;
}
