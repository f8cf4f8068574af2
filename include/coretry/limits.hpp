// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// The one sentinel for "no limit" on a duration, and its twin for attempts. The headers that
/// speak of a duration without an end (<coretry/policy.hpp>, <coretry/overload.hpp>,
/// <coretry/budget.hpp>) include this one.

#include <chrono>
#include <limits>

namespace coretry {

/// `std::chrono::nanoseconds::max()`: a duration that never ends. Where a limit is set
/// (`retry_policy::deadline`, `retry_policy::attempt_timeout`,
/// `circuit_breaker_options::slow_call_duration`, `hedge_options::delay`) it means no limit;
/// returned by `attempt_gate::retry_after` or `retry_budget::retry_after` it means "cannot say
/// when" (a waiting operation stops); returned by `send_rate::acquire` it means the rate reserved
/// nothing (the operation stops with `errc::rate_limited`). 0.2 spelled the last two
/// `attempt_gate::never`, `retry_budget::never` and `send_rate::refused`.
inline constexpr std::chrono::nanoseconds unlimited = std::chrono::nanoseconds::max();

/// No limit on attempts (`retry_policy::max_attempts`): the deadline, the breaker and the budget
/// decide when to stop. `std::numeric_limits<unsigned>::max()`.
inline constexpr unsigned unlimited_attempts = std::numeric_limits<unsigned>::max();

} // namespace coretry
