// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Parsing the HTTP `Retry-After` header field (RFC 9110, section 10.2.3): the names
/// `coretry::curl` has always had, forwarding to coretry/http.hpp.

#include <coretry/export.hpp>
#include <coretry/http.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace coretry::curl {

/// `coretry::http::max_retry_after`: the longest wait `parse_retry_after` reports.
inline constexpr std::chrono::seconds max_retry_after = coretry::http::max_retry_after;

/// `coretry::http::parse_http_date`, which it forwards to (see there).
CORETRY_CURL_API std::optional<std::chrono::sys_seconds>
parse_http_date(std::string_view value, std::chrono::sys_seconds now) noexcept;

/// `coretry::http::parse_retry_after`, which it forwards to (see there): delta-seconds or an
/// HTTP-date, relative to `now`; the wait, never negative, saturated at `max_retry_after`, or
/// `std::nullopt`.
CORETRY_CURL_API std::optional<std::chrono::seconds>
parse_retry_after(std::string_view value,
                  std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

} // namespace coretry::curl
