// SPDX-License-Identifier: BSL-1.0
// A service that retries a flaky dependency and exposes what its retries do on /metrics, for a
// Prometheus server to scrape: coretry::prometheus_observer on its policy and on its circuit
// breaker, a prometheus-cpp Exposer on 127.0.0.1.
//
//   metrics_service [--port N] [--rate N] [--failure-rate X] [--seconds S]
//   curl -s http://127.0.0.1:9464/metrics | grep coretry_
#include <coretry/coretry.hpp>
#include <coretry/prometheus.hpp>

#include "support/cli.hpp"

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <system_error>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

using namespace std::chrono_literals;
namespace cli = sample_support::cli;

namespace {

void usage(std::FILE* out) {
  std::fputs("usage: metrics_service [--port N] [--rate N] [--failure-rate X] [--seconds S]\n"
             "Retries a flaky in-process dependency and serves Prometheus metrics of it on\n"
             "http://127.0.0.1:PORT/metrics.\n"
             "  --port N          port to listen on (default 9464; 0: any free port, printed)\n"
             "  --rate N          operations started per second (default 50)\n"
             "  --failure-rate X  share of attempts that fail, in [0, 1] (default 0.3)\n"
             "  --seconds S       exit after S seconds (default 0: at SIGINT or SIGTERM)\n",
             out);
}

} // namespace

int main(int argc, char** argv) {
  unsigned port = 9464;
  double rate = 50, failure_rate = 0.3, seconds = 0;
  cli::parse("metrics_service", argc, argv, 1,
             {{"port", true}, {"rate", true}, {"failure-rate", true}, {"seconds", true}}, usage,
             [&](std::string_view name, const std::string& value) {
               if (name == "port")
                 port = static_cast<unsigned>(cli::whole("--port", value, 0, 65535));
               else if (name == "rate")
                 rate = cli::number("--rate", value, 0.1);
               else if (name == "failure-rate")
                 failure_rate = cli::number("--failure-rate", value, 0);
               else if (name == "seconds")
                 seconds = cli::number("--seconds", value, 0);
             });
  if (failure_rate > 1)
    cli::fail("--failure-rate must be in [0, 1], got " + std::to_string(failure_rate));

  auto registry = std::make_shared<prometheus::Registry>();
  auto observer = std::make_shared<coretry::prometheus_observer>(registry);
  prometheus::Exposer exposer("127.0.0.1:" + std::to_string(port));
  exposer.RegisterCollectable(registry);
  std::printf("metrics on http://127.0.0.1:%d/metrics\n", exposer.GetListeningPorts().at(0));
  std::fflush(stdout);

  // One upstream ("inventory"): one breaker and one budget for every call to it, both watched.
  const coretry::shared_policy policy{{
      .max_attempts = 4,
      .attempt_timeout = 200ms,
      .backoff =
          coretry::backoff::exponential(10ms, 2.0, 200ms).with_jitter(coretry::jitter::full()),
      .budget = std::make_shared<coretry::ratio_budget>(),
      .breaker =
          coretry::make_observed_breaker({.break_duration = 1s}, observer, "inventory.lookup"),
      .observer = observer,
      .label = "inventory.lookup",
  }};

  asio::io_context io;
  std::mt19937_64 rng(42);
  std::bernoulli_distribution fails(failure_rate);
  std::uniform_int_distribution<int> latency_ms(1, 20);
  std::atomic<long> started{0}, succeeded{0};
  // The dependency: 1-20 ms, then fails with the given probability.
  auto lookup = [&]() -> asio::awaitable<int> {
    asio::steady_timer t(co_await asio::this_coro::executor,
                         std::chrono::milliseconds(latency_ms(rng)));
    co_await t.async_wait(asio::use_awaitable);
    if (fails(rng))
      throw std::system_error(make_error_code(std::errc::connection_refused));
    co_return 7;
  };

  asio::steady_timer tick(io);
  bool stopping = false; // a tick already due when the timer is cancelled still runs
  const auto period = std::chrono::nanoseconds(static_cast<long long>(1e9 / rate));
  std::function<void()> next = [&] {
    ++started;
    coretry::async_retry(io.get_executor(), lookup, policy, [&](std::error_code ec, int) {
      if (!ec)
        ++succeeded;
    });
    tick.expires_after(period);
    tick.async_wait([&](std::error_code ec) {
      if (!ec && !stopping)
        next();
    });
  };
  next();

  asio::signal_set signals(io, SIGINT, SIGTERM);
  asio::steady_timer stop(io);
  auto shut = [&] {
    stopping = true;
    tick.cancel();
    signals.cancel();
    stop.cancel();
  };
  signals.async_wait([&](std::error_code ec, int) {
    if (!ec)
      shut();
  });
  if (seconds > 0) {
    stop.expires_after(std::chrono::nanoseconds(static_cast<long long>(seconds * 1e9)));
    stop.async_wait([&](std::error_code ec) {
      if (!ec)
        shut();
    });
  }
  io.run(); // returns when the last operation has completed
  std::printf("%ld operations, %ld succeeded\n", started.load(), succeeded.load());
  return 0;
}
