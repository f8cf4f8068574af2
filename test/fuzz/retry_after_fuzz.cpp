// SPDX-License-Identifier: BSL-1.0
// Fuzz target: the Retry-After parser and the HTTP-date parser behind it.
//
// Properties: no crash or undefined behaviour; a result is never negative nor above
// curl::max_retry_after; delta-seconds are digits only; a parsed date, printed back in
// IMF-fixdate, parses to the same instant; every accepted date has one of the three shapes.

#include <coretry/curl/retry_after.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace {

using std::chrono::seconds;
using std::chrono::sys_seconds;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

std::string_view trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
    v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t'))
    v.remove_suffix(1);
  return v;
}

std::string imf_fixdate(sys_seconds t) {
  static const char* const days[] = {"Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"};
  static const char* const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const auto day = std::chrono::floor<std::chrono::days>(t);
  const std::chrono::year_month_day ymd(day);
  const std::chrono::hh_mm_ss hms(t - day);
  const auto weekday = ((day.time_since_epoch().count() % 7) + 7) % 7;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s, %02u %s %04d %02d:%02d:%02d GMT", days[weekday],
                static_cast<unsigned>(ymd.day()), months[static_cast<unsigned>(ymd.month()) - 1],
                static_cast<int>(ymd.year()), static_cast<int>(hms.hours().count()),
                static_cast<int>(hms.minutes().count()), static_cast<int>(hms.seconds().count()));
  return buf;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The first 8 bytes, when there are that many, choose "now" (any second of years 1900-2200).
  std::int64_t now_s = 1445412480; // 2015-10-21 07:28:00
  std::int64_t any_now = now_s;
  if (size >= 8) {
    std::uint64_t raw = 0;
    std::memcpy(&raw, data, 8);
    any_now = static_cast<std::int64_t>(raw);
    now_s = -2208988800 + static_cast<std::int64_t>(raw % 9467280000ull);
    data += 8;
    size -= 8;
  }
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  const auto now = std::chrono::system_clock::time_point(seconds(now_s));

  const auto wait = coretry::curl::parse_retry_after(value, now);
  if (wait) {
    check(*wait >= seconds(0), "negative wait");
    check(*wait <= coretry::curl::max_retry_after, "wait above max_retry_after");
    const std::string_view v = trim(value);
    check(!v.empty(), "empty value accepted");
    if (v.front() >= '0' && v.front() <= '9')
      check(v.find_first_not_of("0123456789") == std::string_view::npos,
            "delta-seconds with a non-digit");
  }

  const auto date = coretry::curl::parse_http_date(value, sys_seconds(seconds(now_s)));
  // Any now at all, the clock's extremes included: only RFC 850's two-digit year (its form is
  // the only one with a '-') depends on it, and with it whether 29 Feb exists.
  const auto at_any = coretry::curl::parse_http_date(value, sys_seconds(seconds(any_now)));
  if (value.find('-') == std::string_view::npos)
    check(at_any == date, "an IMF-fixdate or asctime date depends on now");
  if (date) {
    check(value.size() == 29 || value.size() == 24 || (value.size() >= 30 && value.size() <= 33),
          "a date of impossible length");
    check(value.ends_with(" GMT") || (value.size() == 24 && value[3] == ' '),
          "a date without GMT that is not asctime");
    // Printed back unless a leap second carried 9999-12-31 into year 10000.
    if (std::chrono::year_month_day(std::chrono::floor<std::chrono::days>(*date)).year() >
        std::chrono::year(9999))
      return 0;
    const std::string again = imf_fixdate(*date);
    const auto back = coretry::curl::parse_http_date(again, sys_seconds(seconds(now_s)));
    check(back.has_value(), "a parsed date printed back does not parse");
    check(*back == *date, "a parsed date printed back parses to another instant");
    // Through Retry-After: the same value gives the date's distance from now, saturated.
    const auto w = coretry::curl::parse_retry_after(value, now);
    check(w.has_value(), "a date parse_http_date accepts, Retry-After refuses");
    const std::int64_t delta = date->time_since_epoch().count() - now_s;
    const std::int64_t expect =
        delta <= 0 ? 0 : std::min<std::int64_t>(delta, coretry::curl::max_retry_after.count());
    check(w->count() == expect, "Retry-After date is not its distance from now");
  }
  return 0;
}
