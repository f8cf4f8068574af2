// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: the one way the adapter reports a bad field. Not installed.

#include <string>

namespace coretry::curl {

struct tls_options;

/// Throws std::invalid_argument "coretry::curl::<where>: <field> = <value> (<rule>)".
[[noreturn]] void throw_invalid(const char* where, const std::string& field,
                                const std::string& value, const char* rule);

namespace detail {
/// Validates `tls`, naming its fields "<prefix><field>" in "coretry::curl::<where>: ...".
void validate_tls(const tls_options& tls, const char* where, const std::string& prefix);
} // namespace detail

} // namespace coretry::curl
