// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// The one spelling of an option refused at validation, for every options struct coretry checks
/// (`retry_policy`, `hedge_options`, `circuit_breaker_options`, the budgets, the throttle, the
/// rate limiter, `http::retry_rules`, the registry, the backoffs):
/// `std::invalid_argument("coretry::<struct>: <field> = <value> (<why>)")`.

#include <stdexcept>
#include <string>

namespace coretry::detail {

/// Throws `std::invalid_argument("<where>: <field> = <value> (<why>)")`: `where` names the options'
/// type (`coretry::circuit_breaker_options`), `field` the field (with its unit when it is a
/// duration: `window (ns)`), `value` its value as the caller spells it, `why` the rule it breaks.
[[noreturn]] inline void refuse(const char* where, const char* field, const std::string& value,
                                const char* why) {
  throw std::invalid_argument(std::string(where) + ": " + field + " = " + value + " (" + why + ")");
}

/// As above, for a number (`std::to_string`'s spelling).
[[noreturn]] inline void refuse(const char* where, const char* field, double value,
                                const char* why) {
  refuse(where, field, std::to_string(value), why);
}

/// Refuses a field set both under its name and under its deprecated 0.2 name, to different
/// values: "<where>: <field> = <value> (and <old_field> = <old_value>, its deprecated name: set
/// one)".
[[noreturn]] inline void refuse_both(const char* where, const char* field, const std::string& value,
                                     const char* old_field, const std::string& old_value) {
  const std::string why =
      std::string("and ") + old_field + " = " + old_value + ", its deprecated name: set one";
  refuse(where, field, value, why.c_str());
}

} // namespace coretry::detail
