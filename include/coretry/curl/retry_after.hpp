// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Parsing the HTTP `Retry-After` header field (RFC 9110, section 10.2.3).

#include <coretry/export.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace coretry::curl {

/// The longest wait `parse_retry_after` reports (2^31 - 1 s, about 68 years): larger values
/// saturate here, so the result always converts to `std::chrono::nanoseconds` without overflow.
inline constexpr std::chrono::seconds max_retry_after{INT32_MAX};

/// Parses an HTTP-date (RFC 9110, section 5.6.7) in any of its three forms, exactly as the
/// grammar has them (case-sensitive, single spaces, no leading or trailing characters):
///
/// | form        | example                            |
/// |-------------|------------------------------------|
/// | IMF-fixdate | `Sun, 06 Nov 1994 08:49:37 GMT`    |
/// | RFC 850     | `Sunday, 06-Nov-94 08:49:37 GMT`   |
/// | asctime     | `Sun Nov  6 08:49:37 1994` (or `Nov 06`), read as GMT |
///
/// The zone must be `GMT` (asctime has none); hours 00-23, minutes 00-59, seconds 00-60 (a
/// leap second, counted as the next second); the day must exist in its month (29 Feb in leap
/// years only). The day name is checked against the list of names, not against the date. An
/// RFC 850 two-digit year is the one in the century of `now`, or the century before when that
/// would be more than 50 years after `now`. `std::nullopt` for anything else. Thread-safe,
/// never allocates.
CORETRY_CURL_API std::optional<std::chrono::sys_seconds>
parse_http_date(std::string_view value, std::chrono::sys_seconds now) noexcept;

/// Parses a `Retry-After` value: delta-seconds (`"120"`) or an HTTP-date (see
/// `parse_http_date`), relative to `now`.
///
/// \returns the wait, never negative: a date in the past gives zero; values beyond
/// `max_retry_after` saturate. `std::nullopt` for anything else: empty or garbage values, signs
/// (`"-5"`, `"+5"`), fractions, units (`"10s"`), a date in another zone (`"... PST"`, `"... +0000"`,
/// `"... UTC"`) or followed by anything but spaces and tabs. Leading and trailing spaces or tabs
/// are ignored. Thread-safe; never allocates.
CORETRY_CURL_API std::optional<std::chrono::seconds>
parse_retry_after(std::string_view value,
                  std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

} // namespace coretry::curl
