// SPDX-License-Identifier: BSL-1.0
#include <coretry/detail/refuse.hpp>
#include <coretry/presets.hpp>

#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

namespace coretry::presets {

using namespace std::chrono_literals;

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

namespace {
// Fails fast on its own: a deadline bounds the whole call, and the backoff's cap is the break
// (1 s), so that no sleep outlasts the breaker's and an open breaker is asked again, as a probe,
// within about a break rather than after up to 32 s.
retry_policy overload_safe_base(nanoseconds attempt_timeout, nanoseconds deadline) {
  retry_policy p{
      .max_attempts = unlimited_attempts,
      .deadline = deadline,
      .attempt_timeout = attempt_timeout,
      .backoff = backoff::exponential(100ms, 2.0, overload_safe_breaker().break_duration)
                     .with_jitter(jitter::full()),
  };
  p.validate(); // names a non-positive attempt_timeout or deadline
  return p;
}

/// Refuses every attempt: it stands for the breaker an endpoint_registry supplies.
class placeholder_gate final : public attempt_gate {
public:
  bool try_acquire(nanoseconds) noexcept override { return false; }
  void on_success(nanoseconds) noexcept override {}
  void on_failure(nanoseconds) noexcept override {}
  void on_abandoned(nanoseconds) noexcept override {}
  nanoseconds retry_after(nanoseconds) noexcept override { return unlimited; }
};
} // namespace

retry_policy overload_safe_per_endpoint(nanoseconds attempt_timeout, nanoseconds deadline) {
  retry_policy p = overload_safe_base(attempt_timeout, deadline);
  p.breaker = detail::registry_placeholder();
  return p;
}

retry_policy overload_safe(nanoseconds attempt_timeout, nanoseconds deadline) {
  retry_policy p = overload_safe_base(attempt_timeout, deadline);
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
      .max_attempts = unlimited_attempts,
      .backoff = backoff::exponential(initial, 2.0, cap).with_jitter(jitter::full()),
  };
}

backoff truncated_exponential(nanoseconds initial, nanoseconds max, nanoseconds max_extra) {
  return backoff::exponential(initial, 2.0, max).with_jitter(jitter::additive_truncated(max_extra));
}

retry_policy cloud_storage(nanoseconds max_backoff, nanoseconds deadline) {
  if (max_backoff < 1s)
    detail::refuse("coretry::presets::cloud_storage", "max_backoff (ns)",
                   std::to_string(max_backoff.count()), "must be at least 1 s");
  retry_policy p{
      .max_attempts = unlimited_attempts,
      .deadline = deadline,
      .backoff = truncated_exponential(1s, max_backoff, 1s),
  };
  p.validate(); // names a non-positive deadline
  return p;
}

} // namespace coretry::presets

namespace coretry::detail {

std::shared_ptr<attempt_gate> registry_placeholder() {
  static const std::shared_ptr<attempt_gate> gate = std::make_shared<presets::placeholder_gate>();
  return gate;
}

bool is_registry_placeholder(const attempt_gate* g) noexcept {
  return g != nullptr && dynamic_cast<const presets::placeholder_gate*>(g) != nullptr;
}

} // namespace coretry::detail
