#pragma once
// Private: the one way the adapter reports a bad field. Not installed.

#include <string>

namespace coretry::curl {

/// Throws std::invalid_argument "coretry::curl::<where>: <field> = <value> (<rule>)".
[[noreturn]] void throw_invalid(const char* where, const std::string& field,
                                const std::string& value, const char* rule);

} // namespace coretry::curl
