// SPDX-License-Identifier: BSL-1.0
// Compiled once per 0.2 spelling (-DSPELLING=n) with -Werror=deprecated-declarations: each must
// fail, i.e. warn (test/CMakeLists.txt, tests migration.warns.*). Without SPELLING it must
// compile: the new spellings, and copies and moves of every struct that keeps a deprecated field,
// do not warn.

#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/hedge.hpp>
#include <coretry/overload.hpp>
#include <coretry/policy.hpp>

#include <chrono>
#include <exception>
#include <system_error>
#include <utility>

#ifndef SPELLING
#define SPELLING 0
#endif

int main() {
  coretry::circuit_breaker_options b{.consecutive_failures = 3, .max_concurrent_calls = 2};
  coretry::ratio_budget_options r{.ratio = 0.2, .window_buckets = 5};
  coretry::hedge_options h{.delay = std::chrono::milliseconds(5), .max_copies = 3};
  // Copies, moves and assignments use the implicit members, which must not warn.
  coretry::circuit_breaker_options b2 = b;
  coretry::circuit_breaker_options b3 = std::move(b2);
  b2 = b3;
  coretry::ratio_budget_options r2 = r;
  r = std::move(r2);
  coretry::hedge_options h2 = h;
  h = std::move(h2);
  h.validate();
  // retry_policy keeps the five 0.2 predicates: its copies and moves must not warn either, nor
  // must `classify`, which replaces them.
  coretry::retry_policy p{.max_attempts = 2};
  p.classify = coretry::default_classify;
  coretry::retry_policy p2 = p;
  coretry::retry_policy p3 = std::move(p2);
  p2 = p3;
  p = std::move(p3);
  p.validate();
  std::chrono::nanoseconds n = coretry::unlimited;
  unsigned attempts = coretry::unlimited_attempts;
#if SPELLING == 1
  n = coretry::attempt_gate::never;
#elif SPELLING == 2
  n = coretry::retry_budget::never;
#elif SPELLING == 3
  n = coretry::send_rate::refused;
#elif SPELLING == 4
  b.max_in_flight = 2; // circuit_breaker_options
#elif SPELLING == 5
  r.buckets = 5; // ratio_budget_options
#elif SPELLING == 6
  h.max_in_flight = 3; // hedge_options
#elif SPELLING == 7
  p2.retry_if = [](const std::error_code&) { return true; }; // retry_policy
#elif SPELLING == 8
  p2.pushback_if = [](const std::error_code&) { return true; };
#elif SPELLING == 9
  p2.throttle_if = [](const std::error_code&) { return true; };
#elif SPELLING == 10
  p2.retry_if_exception = coretry::retry_on<std::exception>();
#elif SPELLING == 11
  p2 = p2.retry_if_result([](int v) { return v == 0; });
#endif
  return static_cast<int>(n.count() == 0) + static_cast<int>(attempts == 0) +
         static_cast<int>(b.consecutive_failures + r.window_buckets + h.max_copies == 0) +
         static_cast<int>(p.max_attempts == 0);
}
