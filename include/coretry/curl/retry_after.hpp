#pragma once
/// \file
/// Parsing the HTTP `Retry-After` header field (RFC 9110, section 10.2.3).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace coretry::curl {

/// The longest wait `parse_retry_after` reports (2^31 - 1 s, about 68 years): larger values
/// saturate here, so the result always converts to `std::chrono::nanoseconds` without overflow.
inline constexpr std::chrono::seconds max_retry_after{INT32_MAX};

/// Parses a `Retry-After` value: delta-seconds (`"120"`) or an HTTP-date
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`, and the obsolete RFC 850 and asctime forms), relative
/// to `now`.
///
/// \returns the wait, never negative: a date in the past gives zero; values beyond
/// `max_retry_after` saturate. `std::nullopt` for anything else: empty or garbage values, signs
/// (`"-5"`, `"+5"`), fractions, trailing junk. Leading and trailing spaces or tabs are ignored.
/// Thread-safe; does not allocate for delta-seconds.
std::optional<std::chrono::seconds>
parse_retry_after(std::string_view value,
                  std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

} // namespace coretry::curl
