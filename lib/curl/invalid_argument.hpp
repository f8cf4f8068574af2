// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: the one way the adapter reports a bad field. Not installed.

#include <string>
#include <string_view>

namespace coretry::curl {

struct tls_options;

/// Throws std::invalid_argument "coretry::curl::<where>: <field> = <value> (<rule>)".
[[noreturn]] void throw_invalid(const char* where, const std::string& field,
                                const std::string& value, const char* rule);

namespace detail {
/// A URL as the value of a message: `coretry::redact_url` (no userinfo, path, query or
/// fragment: nothing that may hold a credential), escaped and quoted as every value is.
std::string url_value(std::string_view url);

/// Validates `tls`, naming its fields "<prefix><field>" in "coretry::curl::<where>: ...".
void validate_tls(const tls_options& tls, const char* where, const std::string& prefix);
} // namespace detail

} // namespace coretry::curl
