// SPDX-License-Identifier: BSL-1.0
#include <coretry/presets.hpp>

#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

namespace coretry::presets {

using namespace std::chrono_literals;

namespace {
constexpr unsigned no_limit = std::numeric_limits<unsigned>::max();
} // namespace

circuit_breaker_options overload_safe_breaker() {
  // 10 in a row, not 5: at a 30 % error rate (partial failure) five failures in a row come by
  // chance every few hundred attempts and open the breaker again and again; ten come once in
  // about 170,000 (docs/retry_storm.md). A stopped upstream's timeouts still open it at once:
  // they come back together.
  return circuit_breaker_options{
      .consecutive_failures = 10,
      .failure_ratio = 0.5,
      .minimum_throughput = 20,
      .window = 10s,
      .break_duration = 1s,
      .break_jitter = 0.2,
      .half_open_probes = 1,
  };
}

ratio_budget_options overload_safe_budget() {
  return ratio_budget_options{.ratio = 0.1, .min_retries_per_second = 1, .window = 10s};
}

retry_policy overload_safe_per_endpoint(nanoseconds attempt_timeout) {
  retry_policy p{.max_attempts = no_limit, .attempt_timeout = attempt_timeout};
  p.validate();
  return p;
}

retry_policy overload_safe(nanoseconds attempt_timeout) {
  retry_policy p = overload_safe_per_endpoint(attempt_timeout);
  p.budget = std::make_shared<ratio_budget>(overload_safe_budget());
  p.breaker = std::make_shared<circuit_breaker>(overload_safe_breaker());
  return p;
}

endpoint_registry_options overload_safe_registry() {
  endpoint_registry_options o;
  o.breaker = overload_safe_breaker();
  o.budget = overload_safe_budget();
  return o;
}

retry_policy retry_forever(nanoseconds cap, nanoseconds initial) {
  return retry_policy{
      .max_attempts = no_limit,
      .backoff = backoff::exponential(initial, 2.0, cap).with_jitter(jitter::full()),
  };
}

backoff truncated_exponential(nanoseconds initial, nanoseconds max, nanoseconds max_extra) {
  return backoff::exponential(initial, 2.0, max).with_jitter(jitter::additive_truncated(max_extra));
}

retry_policy cloud_storage(nanoseconds max_backoff, nanoseconds deadline) {
  if (max_backoff < 1s)
    throw std::invalid_argument("coretry::presets::cloud_storage: max_backoff (ns) = " +
                                std::to_string(max_backoff.count()) + " (must be at least 1 s)");
  retry_policy p{
      .max_attempts = no_limit,
      .deadline = deadline,
      .backoff = truncated_exponential(1s, max_backoff, 1s),
  };
  p.validate(); // names a non-positive deadline
  return p;
}

} // namespace coretry::presets
