// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: the one spelling of an option refused at construction,
// `std::invalid_argument("<where>: <field> = <value> (<rule>)")`, for every options struct the
// library validates (breaker, budgets, throttle, rate limiter, registry).

#include <stdexcept>
#include <string>

namespace coretry::detail {

/// Throws `std::invalid_argument` naming `where` (the options' type), the field, its value and
/// the rule it breaks.
[[noreturn]] inline void reject(const char* where, const char* field, const std::string& value,
                                const char* rule) {
  throw std::invalid_argument(std::string(where) + ": " + field + " = " + value + " (" + rule +
                              ")");
}

/// As above, for a number (`std::to_string`'s spelling).
[[noreturn]] inline void reject(const char* where, const char* field, double value,
                                const char* rule) {
  reject(where, field, std::to_string(value), rule);
}

} // namespace coretry::detail
