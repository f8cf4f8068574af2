// Costs of the retry loop, each next to the baseline it must be compared with, in one run:
//   a call that succeeds at once      vs awaiting the operation directly / a hand-written loop
//   a per-attempt timeout             vs `op() || timer.async_wait()`
//   drawing one jittered delay        vs std::mt19937 + std::uniform_real_distribution
// Run: build/release/bench/coretry_bench --benchmark_min_time=0.2
// The ratios are what matter; absolute numbers move with the machine.
#include <coretry/coretry.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <random>

#include <benchmark/benchmark.h>

using namespace std::chrono_literals;

namespace {

// One scheduler round trip: the cheapest realistic asynchronous operation.
asio::awaitable<int> one_round_trip() {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  co_return 1;
}

template <class Body> void run_loop(benchmark::State& state, Body body) {
  asio::io_context io(1);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (auto _ : state)
          benchmark::DoNotOptimize(co_await body());
      },
      asio::detached);
  io.run();
}

const coretry::retry_policy plain_policy{};
const coretry::retry_policy timeout_policy{.attempt_timeout = 10s};

// --- success at once ---------------------------------------------------------------------------

void direct_await(benchmark::State& state) {
  run_loop(state, one_round_trip);
}

// What a careful programmer writes by hand: try, catch, back off on a lazily made timer.
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
void hand_written_loop(benchmark::State& state) {
  run_loop(state, hand_written_retry);
}

void coretry_retry_async(benchmark::State& state) {
  run_loop(state, [] { return coretry::retry_async(one_round_trip, plain_policy); });
}

// --- per-attempt timeout -----------------------------------------------------------------------

void asio_or_timeout(benchmark::State& state) {
  using namespace asio::experimental::awaitable_operators;
  run_loop(state, []() -> asio::awaitable<int> {
    asio::steady_timer timer(co_await asio::this_coro::executor, 10s);
    auto r = co_await (one_round_trip() || timer.async_wait(asio::use_awaitable));
    co_return static_cast<int>(r.index());
  });
}

void coretry_attempt_timeout(benchmark::State& state) {
  run_loop(state, [] { return coretry::retry_async(one_round_trip, timeout_policy); });
}

// --- one jittered delay ------------------------------------------------------------------------

void mt19937_uniform(benchmark::State& state) {
  std::mt19937 gen(42);
  std::uniform_real_distribution<double> dist(0.0, 1.0);
  double d = 100e6;
  for (auto _ : state)
    benchmark::DoNotOptimize(std::chrono::nanoseconds(static_cast<long long>(dist(gen) * d)));
}

void coretry_full_jitter(benchmark::State& state) {
  const auto b =
      coretry::backoff::exponential(100ms, 2.0, 32s).with_jitter(coretry::jitter::full());
  coretry::fast_rng rng(42);
  unsigned n = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(b.delay(n++ & 7u, 0ns, rng));
}

void coretry_decorrelated_jitter(benchmark::State& state) {
  const auto b =
      coretry::backoff::exponential(100ms, 2.0, 32s).with_jitter(coretry::jitter::decorrelated());
  coretry::fast_rng rng(42);
  std::chrono::nanoseconds previous = b.initial();
  for (auto _ : state)
    benchmark::DoNotOptimize(previous = b.delay(0, previous, rng));
}

} // namespace

BENCHMARK(direct_await);
BENCHMARK(hand_written_loop);
BENCHMARK(coretry_retry_async);
BENCHMARK(asio_or_timeout);
BENCHMARK(coretry_attempt_timeout);
BENCHMARK(mt19937_uniform);
BENCHMARK(coretry_full_jitter);
BENCHMARK(coretry_decorrelated_jitter);
BENCHMARK_MAIN();
