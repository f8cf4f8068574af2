#include <coretry/curl/retry_after.hpp>

#include <curl/curl.h>

#include <string>

namespace coretry::curl {

std::optional<std::chrono::seconds> parse_retry_after(std::string_view value,
                                                      std::chrono::system_clock::time_point now) {
  auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!value.empty() && space(value.front()))
    value.remove_prefix(1);
  while (!value.empty() && space(value.back()))
    value.remove_suffix(1);
  if (value.empty())
    return std::nullopt;

  const std::int64_t cap = max_retry_after.count();
  if (value.front() >= '0' && value.front() <= '9') {
    std::int64_t n = 0;
    for (char c : value) {
      if (c < '0' || c > '9')
        return std::nullopt; // "1.5", "10s", "12 34", a date starting with a digit: not
                             // delta-seconds
      if (n < cap)
        n = n * 10 + (c - '0'); // n < 2^31 before the step: no overflow in 64 bits
    }
    return std::chrono::seconds(n < cap ? n : cap);
  }

  // An HTTP-date always starts with a day name (IMF-fixdate, RFC 850, asctime).
  const char first = value.front();
  if (!((first >= 'A' && first <= 'Z') || (first >= 'a' && first <= 'z')))
    return std::nullopt;
  const std::string copy(value);
  const time_t when = curl_getdate(copy.c_str(), nullptr);
  if (when == static_cast<time_t>(-1))
    return std::nullopt;
  // In seconds, to stay clear of system_clock's nanosecond range for far-away dates.
  const std::int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  const std::int64_t then = static_cast<std::int64_t>(when);
  if (then <= now_s)
    return std::chrono::seconds(0);
  const std::int64_t delta = then - now_s; // both far from the int64 limits: no overflow
  return std::chrono::seconds(delta < cap ? delta : cap);
}

} // namespace coretry::curl
