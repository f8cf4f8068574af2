// SPDX-License-Identifier: BSL-1.0
// Many operations waiting in backoff on one thread: memory, start-up, cancel-all and timer
// accuracy. One variant per process (`.ci/bench` runs each in a fresh process and alternates
// them), so that no variant inherits a heap another one grew and freed.
//
//   coretry_sleepers --variant=V [--count=1000000] [--mode=sleep|accuracy] [--window-ms=500]
//
// --mode=sleep (default): `count` operations start; each one's first attempt fails and it goes
// to sleep for an hour. Prints the RSS the sleepers added per operation (`rss_per_op`, and
// `hwm_per_op` from the peak), the time until all are asleep (`start_s`), and, where the variant
// can be cancelled, the time from the cancel call until `run()` returns (`cancel_s`).
//   coretry         retry loop, the attempt throws std::system_error; one group token cancels all
//   coretry_tuple   retry loop, the attempt returns std::tuple<std::error_code, int>: no throw
//   coretry_shared  coretry_tuple with one shared_policy for all, instead of a copy each
//   bare            coroutine awaiting a steady_timer (as_tuple: no exception anywhere);
//                   not cancellable, so no cancel_s
//   bare_catch      the same after throwing and catching one std::system_error
//   bare_signal     bare plus one cancellation_signal each, emitted one by one to cancel all
//   coretry_token   retry loop, the attempt is a token-based operation (an initiating function)
//                   failing through a post; one group token cancels all
//   callback        the same retry by hand, with completion handlers and a steady_timer (no
//                   coroutine); not cancellable, so no cancel_s
//   callback_signal callback plus one cancellation_signal each, bound to its sleep and emitted
//                   one by one to cancel all
//
// --mode=accuracy: `count` sleeps with delays drawn uniformly over [window, 2 window), all
// started at once (no sleep is due before every one has started); prints how late each one
// woke (`late_p50_us`, `late_p99_us`, `late_max_us`).
//   coretry         retry loop (error-as-value attempt) with fixed(2 window) equal-jitter
//                   backoff; lateness of attempt 2 against the delay `on_retry` reported
//   bare            coroutines on steady_timers with the same delay distribution
#include <coretry/coretry.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "callback_retry.hpp"
#include "harness.hpp"

using namespace std::chrono_literals;
namespace cb = coretry::bench;

#ifndef CORETRY_BENCH_TUPLE_OPS
// Operations returning std::tuple<std::error_code, T> (retry.hpp); 0 skips that variant.
#define CORETRY_BENCH_TUPLE_OPS 1
#endif

namespace {

constexpr auto no_throw = asio::experimental::as_tuple(asio::use_awaitable);

struct counts {
  long completed = 0;
  long started = 0; // first attempts (or first awaits) run so far
};

asio::awaitable<void> bare_sleeper(long* started) {
  asio::steady_timer t(co_await asio::this_coro::executor, 1h);
  ++*started;
  co_await t.async_wait(no_throw);
}

asio::awaitable<void> bare_catch_sleeper(long* started) {
  try {
    throw std::system_error(make_error_code(std::errc::connection_refused));
  } catch (const std::system_error&) {
  }
  asio::steady_timer t(co_await asio::this_coro::executor, 1h);
  ++*started;
  co_await t.async_wait(no_throw);
}

coretry::retry_policy sleep_policy(const coretry::cancellation_source& source) {
  return {
      .max_attempts = 2, .backoff = coretry::backoff::fixed(1h), .cancellation = source.token()};
}

int run_sleep(const std::string& variant, long n) {
  asio::io_context io(1);
  counts c;
  const long rss0 = cb::proc_status("VmRSS");
  const long hwm0 = cb::proc_status("VmHWM");
  std::unique_ptr<asio::cancellation_signal[]> signals;
  coretry::cancellation_source source;
  const auto t0 = cb::steady::now();
  bool cancellable = true;
  if (variant == "bare" || variant == "bare_catch") {
    cancellable = false;
    for (long i = 0; i < n; ++i)
      asio::co_spawn(io,
                     variant == "bare" ? bare_sleeper(&c.started) : bare_catch_sleeper(&c.started),
                     [&c](std::exception_ptr) { ++c.completed; });
  } else if (variant == "bare_signal") {
    signals = std::make_unique<asio::cancellation_signal[]>(static_cast<std::size_t>(n));
    for (long i = 0; i < n; ++i)
      asio::co_spawn(io, bare_sleeper(&c.started),
                     asio::bind_cancellation_slot(signals[static_cast<std::size_t>(i)].slot(),
                                                  [&c](std::exception_ptr) { ++c.completed; }));
  } else if (variant == "callback") {
    cancellable = false;
    const auto ex = io.get_executor();
    for (long i = 0; i < n; ++i)
      cb::start_callback_retry(
          ex,
          [&c, ex](auto handler) {
            ++c.started;
            cb::post_result(ex, make_error_code(std::errc::connection_refused), std::move(handler));
          },
          [&c](std::error_code, int) { ++c.completed; }, 2, 1h);
  } else if (variant == "callback_signal") {
    signals = std::make_unique<asio::cancellation_signal[]>(static_cast<std::size_t>(n));
    const auto ex = io.get_executor();
    for (long i = 0; i < n; ++i)
      cb::start_callback_retry(
          ex,
          [&c, ex](auto handler) {
            ++c.started;
            cb::post_result(ex, make_error_code(std::errc::connection_refused), std::move(handler));
          },
          [&c](std::error_code, int) { ++c.completed; }, 2, 1h,
          signals[static_cast<std::size_t>(i)].slot());
  } else if (variant == "coretry_token") {
    const auto policy = sleep_policy(source);
    const auto ex = io.get_executor();
    for (long i = 0; i < n; ++i)
      coretry::async_retry(
          ex,
          [&c, ex](auto&& token) {
            ++c.started;
            return cb::post_result(ex, make_error_code(std::errc::connection_refused),
                                   std::forward<decltype(token)>(token));
          },
          policy, [&c](std::error_code, int) { ++c.completed; });
  } else if (variant == "coretry") {
    const auto policy = sleep_policy(source);
    for (long i = 0; i < n; ++i)
      coretry::async_retry(
          io.get_executor(),
          [&c]() -> asio::awaitable<int> {
            ++c.started;
            throw std::system_error(make_error_code(std::errc::connection_refused));
            co_return 0;
          },
          policy, [&c](std::error_code, int) { ++c.completed; });
#if CORETRY_BENCH_TUPLE_OPS
  } else if (variant == "coretry_tuple" || variant == "coretry_shared") {
    auto start_all = [&](const auto& policy) {
      for (long i = 0; i < n; ++i)
        coretry::async_retry(
            io.get_executor(),
            [&c]() -> asio::awaitable<std::tuple<std::error_code, int>> {
              ++c.started;
              co_return std::tuple{make_error_code(std::errc::connection_refused), 0};
            },
            policy, [&c](std::error_code, int) { ++c.completed; });
    };
    if (variant == "coretry_shared")
      start_all(coretry::shared_policy(sleep_policy(source)));
    else
      start_all(sleep_policy(source));
#endif
  } else {
    std::fprintf(stderr, "coretry_sleepers: unknown --variant '%s'\n", variant.c_str());
    return 2;
  }
  // Each operation is asleep once its first attempt (or first await) ran and every handler it
  // queued has run: poll until nothing is ready, bounded in rounds.
  for (int round = 0; round < 1000 && io.poll() > 0;)
    ++round;
  const double start_s = cb::seconds_since(t0);
  const long rss1 = cb::proc_status("VmRSS");
  const long hwm1 = cb::proc_status("VmHWM");
  if (c.started != n || c.completed != 0) {
    std::fprintf(stderr, "coretry_sleepers: %s: %ld of %ld started, %ld completed early\n",
                 variant.c_str(), c.started, n, c.completed);
    return 1;
  }
  cb::sample("rss_per_op", variant, double(rss1 - rss0) / double(n));
  cb::sample("hwm_per_op", variant, double(hwm1 - hwm0) / double(n));
  cb::sample("start_s", variant, start_s);
  if (!cancellable) {
    std::fflush(stdout);
    std::_Exit(0); // tearing a million frames down measures nothing asked for here
  }
  const auto t1 = cb::steady::now();
  if (signals) {
    for (long i = 0; i < n; ++i)
      signals[static_cast<std::size_t>(i)].emit(asio::cancellation_type::terminal);
  } else {
    source.cancel();
  }
  io.run();
  cb::sample("cancel_s", variant, cb::seconds_since(t1));
  if (c.completed != n) {
    std::fprintf(stderr, "coretry_sleepers: %s: %ld of %ld completed\n", variant.c_str(),
                 c.completed, n);
    return 1;
  }
  return 0;
}

void report_lateness(const std::string& variant, std::vector<double>& late_us) {
  std::sort(late_us.begin(), late_us.end());
  auto at = [&](double q) {
    return late_us[std::min(late_us.size() - 1,
                            static_cast<std::size_t>(q * double(late_us.size())))];
  };
  cb::sample("late_p50_us", variant, at(0.50));
  cb::sample("late_p99_us", variant, at(0.99));
  cb::sample("late_max_us", variant, late_us.back());
}

int run_accuracy(const std::string& variant, long n, std::chrono::milliseconds window) {
  asio::io_context io(1);
  std::vector<cb::steady::time_point> due(static_cast<std::size_t>(n));
  std::vector<double> late_us;
  late_us.reserve(static_cast<std::size_t>(n));
  auto woke = [&](long i) {
    late_us.push_back(
        std::chrono::duration<double, std::micro>(cb::steady::now() - due[std::size_t(i)]).count());
  };
  if (variant == "bare") {
    std::mt19937_64 gen(42);
    std::uniform_real_distribution<double> dist(1.0, 2.0);
    for (long i = 0; i < n; ++i) {
      const auto delay = std::chrono::duration_cast<cb::steady::duration>(dist(gen) * window);
      asio::co_spawn(
          io,
          [&, i, delay]() -> asio::awaitable<void> {
            asio::steady_timer t(co_await asio::this_coro::executor, delay);
            due[std::size_t(i)] = cb::steady::now() + delay;
            t.expires_at(due[std::size_t(i)]);
            co_await t.async_wait(no_throw);
            woke(i);
          },
          asio::detached);
    }
  } else if (variant == "coretry") {
    // One seed shared by every copy: operation k draws the stream mix(42, k).
    const coretry::retry_policy base{
        .max_attempts = 2,
        .backoff = coretry::backoff::fixed(2 * window).with_jitter(coretry::jitter::equal()),
        .seed = 42,
    };
    for (long i = 0; i < n; ++i) {
      coretry::retry_policy policy = base;
      policy.on_retry = [&due, i](const coretry::retry_event& e) {
        due[std::size_t(i)] = cb::steady::now() + e.delay;
      };
      coretry::async_retry(
          io.get_executor(),
          [&, i, attempt = 0]() mutable -> asio::awaitable<std::tuple<std::error_code, int>> {
            if (++attempt == 1)
              co_return std::tuple{make_error_code(std::errc::connection_refused), 0};
            woke(i);
            co_return std::tuple{std::error_code{}, 0};
          },
          std::move(policy), [](std::error_code, int) {});
    }
  } else {
    std::fprintf(stderr, "coretry_sleepers: unknown --variant '%s' for accuracy\n",
                 variant.c_str());
    return 2;
  }
  io.run();
  if (late_us.size() != static_cast<std::size_t>(n)) {
    std::fprintf(stderr, "coretry_sleepers: %zu of %ld woke\n", late_us.size(), n);
    return 1;
  }
  report_lateness(variant, late_us);
  return 0;
}

} // namespace

int main(int argc, char** argv) try {
  const std::string variant = cb::option(argc, argv, "variant", "coretry");
  const std::string mode = cb::option(argc, argv, "mode", "sleep");
  const long n = cb::count_option(argc, argv, "count", 1'000'000);
  if (mode == "sleep")
    return run_sleep(variant, n);
  if (mode == "accuracy")
    return run_accuracy(variant, n,
                        std::chrono::milliseconds(cb::count_option(argc, argv, "window-ms", 500)));
  std::fprintf(stderr, "coretry_sleepers: unknown --mode '%s'\n", mode.c_str());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "coretry_sleepers: %s\n", e.what());
  return 2;
}
