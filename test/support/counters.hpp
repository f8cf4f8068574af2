// SPDX-License-Identifier: BSL-1.0
#pragma once
// Listeners that only count what they hear, shared by the tests that compare what the breaker
// and the sending rate were told (classify, gate health, r16).

#include <coretry/breaker.hpp>
#include <coretry/overload.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

namespace coretry::test {

/// A breaker that no outcome in a test opens (a thousand consecutive failures, no ratio): only
/// its counts are read.
inline std::shared_ptr<circuit_breaker> counting_breaker() {
  return std::make_shared<circuit_breaker>(
      circuit_breaker_options{.consecutive_failures = 1000, .failure_ratio = 0, .seed = 1});
}

/// What a breaker has heard, comparable as a whole.
struct counts {
  std::uint64_t successes, failures, pushbacks, abandoned;
  bool operator==(const counts&) const = default;
};

/// The counts of `b`.
inline counts counts_of(const circuit_breaker& b) {
  return {b.successes(), b.failures(), b.pushbacks(), b.abandoned()};
}

/// A sending rate that grants at once and counts the throttles and successes it hears.
struct counting_rate final : send_rate {
  int throttles = 0, successes = 0;
  std::chrono::nanoseconds acquire(std::chrono::nanoseconds) noexcept override { return {}; }
  void on_throttle(std::chrono::nanoseconds) noexcept override { ++throttles; }
  void on_success(std::chrono::nanoseconds) noexcept override { ++successes; }
};

} // namespace coretry::test
