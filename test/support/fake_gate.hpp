// SPDX-License-Identifier: BSL-1.0
#pragma once
// A hand-driven circuit breaker for the tests: refuses while `open`, counts grants and logs every
// outcome it hears, one entry each.

#include <coretry/overload.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace coretry::test {

struct fake_gate final : coretry::attempt_gate {
  bool open = false;
  int granted = 0;
  std::vector<std::string> log; ///< one entry per outcome reported
  bool try_acquire(std::chrono::nanoseconds) noexcept override {
    if (open)
      return false;
    ++granted;
    return true;
  }
  void on_success(std::chrono::nanoseconds) noexcept override { log.push_back("success"); }
  void on_failure(std::chrono::nanoseconds) noexcept override { log.push_back("failure"); }
  void on_abandoned(std::chrono::nanoseconds) noexcept override { log.push_back("abandoned"); }
  void on_pushback(std::chrono::nanoseconds) noexcept override { log.push_back("pushback"); }
  int count(const std::string& what) const {
    return static_cast<int>(std::count(log.begin(), log.end(), what));
  }
};

} // namespace coretry::test
