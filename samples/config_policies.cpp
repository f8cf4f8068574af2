// SPDX-License-Identifier: BSL-1.0
// docs/config.md's example: policies read from JSON with coretry::config. A gRPC service config
// (gRFC A6) gives a retry policy for one method and a hedge for another, with retry throttling;
// coretry's own form gives a policy with a breaker and a budget. Each is then used as is.
#include <coretry/config/json.hpp>
#include <coretry/coretry.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <system_error>

using namespace std::chrono_literals;

// The statuses an RPC layer fails with, here a few errno values; a gRPC adapter would map all 16
// of its codes to its own error category.
const coretry::config::status_table statuses{
    {"UNAVAILABLE", make_error_code(std::errc::connection_refused)},
    {"RESOURCE_EXHAUSTED", make_error_code(std::errc::resource_unavailable_try_again)},
    {"INTERNAL", make_error_code(std::errc::io_error)},
};

constexpr const char* service_config = R"({
  "methodConfig": [
    {"name": [{"service": "inventory.Stock", "method": "Get"}],
     "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
                     "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]},
     "timeout": "2s"},
    {"name": [{"service": "inventory.Search"}],
     "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.02s",
                       "nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL"]}}
  ],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
})";

constexpr const char* own_policy = R"({
  "max_attempts": 5,
  "deadline": "3s",
  "attempt_timeout": "500ms",
  "backoff": {"kind": "exponential", "initial": "10ms", "max": "200ms", "jitter": "full"},
  "retry_on": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
  "breaker": {"consecutive_failures": 5, "break_duration": "1s"},
  "budget": {"kind": "ratio", "ratio": 0.1, "min_retries_per_second": 5}
})";

// A stand-in for an RPC: fails with UNAVAILABLE twice, then answers.
asio::awaitable<int> flaky_call(int& calls) {
  if (++calls < 3)
    throw std::system_error(make_error_code(std::errc::connection_refused));
  co_return 42;
}

asio::awaitable<void> run() {
  const auto config = coretry::config::read_service_config(service_config, statuses);

  int calls = 0;
  const int stock = co_await coretry::retry_async([&] { return flaky_call(calls); },
                                                  config.policy_for("inventory.Stock", "Get"));
  std::printf("inventory.Stock/Get: %d after %d attempts\n", stock, calls);

  // A hedged method: the entry says how, hedge_async runs it.
  const auto* search = config.find("inventory.Search", "Query");
  if (search == nullptr || search->kind != coretry::config::method_kind::hedge)
    throw std::logic_error("inventory.Search has no hedging policy");
  calls = 0;
  const int found = co_await coretry::hedge_async([&] { return flaky_call(calls); }, search->policy,
                                                  search->hedge);
  std::printf("inventory.Search/Query (hedged): %d after %d attempts\n", found, calls);

  const auto own = coretry::config::read_policy(own_policy, statuses);
  calls = 0;
  const int answer = co_await coretry::retry_async([&] { return flaky_call(calls); }, own.policy);
  std::printf("own form: %d after %d attempts\n", answer, calls);

  // A document with a mistake is refused with the JSON path of the value.
  try {
    (void)coretry::config::read_service_config(
        R"({"methodConfig": [{"retryPolicy": {"maxAttempts": 1}}]})", statuses);
  } catch (const std::invalid_argument& e) {
    std::printf("refused: %s\n", e.what());
  }
}

int main() {
  asio::io_context io;
  bool ok = false;
  asio::co_spawn(io, run(), [&](std::exception_ptr e) {
    ok = !e;
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::fprintf(stderr, "failed: %s\n", x.what());
      }
    }
  });
  io.run();
  return ok ? 0 : 1;
}
