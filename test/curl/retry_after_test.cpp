// SPDX-License-Identifier: BSL-1.0
#include <coretry/curl/retry_after.hpp>

#include <doctest/doctest.h>

#include <ctime>

using coretry::curl::parse_retry_after;
using namespace std::chrono_literals;
using std::chrono::seconds;

namespace {
// 2015-10-21 07:28:00 UTC
const auto base = std::chrono::system_clock::time_point(seconds(1445412480));
} // namespace

TEST_CASE("Retry-After delta-seconds are parsed, with surrounding spaces ignored") {
  CHECK(parse_retry_after("0", base) == 0s);
  CHECK(parse_retry_after("120", base) == 120s);
  CHECK(parse_retry_after("  7\t", base) == 7s);
  CHECK(parse_retry_after("007", base) == 7s);
}

TEST_CASE("Retry-After garbage, signs and fractions are rejected") {
  CHECK_FALSE(parse_retry_after("", base));
  CHECK_FALSE(parse_retry_after("   ", base));
  CHECK_FALSE(parse_retry_after("-5", base));
  CHECK_FALSE(parse_retry_after("+5", base));
  CHECK_FALSE(parse_retry_after("1.5", base));
  CHECK_FALSE(parse_retry_after("10s", base));
  CHECK_FALSE(parse_retry_after("1 2", base));
  CHECK_FALSE(parse_retry_after("soon", base));
  CHECK_FALSE(parse_retry_after("Wed, 99 Foo 2015 07:28:00 GMT", base));
  CHECK_FALSE(parse_retry_after("\xff\xfe", base));
}

TEST_CASE("Retry-After huge delta-seconds saturate without overflow") {
  CHECK(parse_retry_after("2147483647", base) == coretry::curl::max_retry_after);
  CHECK(parse_retry_after("2147483648", base) == coretry::curl::max_retry_after);
  CHECK(parse_retry_after("99999999999999999999999999999999999999", base) ==
        coretry::curl::max_retry_after);
  const auto longest = std::chrono::nanoseconds(*parse_retry_after("999999999999999999999", base));
  CHECK(longest > std::chrono::nanoseconds::zero());
}

TEST_CASE("Retry-After HTTP-dates are relative to now, and never negative") {
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", base) == 0s);
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:29:30 GMT", base) == 90s);
  CHECK(parse_retry_after("Wednesday, 21-Oct-15 07:29:30 GMT", base) == 90s); // RFC 850
  CHECK(parse_retry_after("Wed Oct 21 07:29:30 2015", base) == 90s);          // asctime
  CHECK(parse_retry_after("Tue, 20 Oct 2015 07:28:00 GMT", base) == 0s);      // the past
  CHECK(parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", base) == 0s);
}

TEST_CASE("Retry-After dates far in the future saturate") {
  const auto far = parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", base);
  REQUIRE(far);
  CHECK(*far == coretry::curl::max_retry_after);
}

TEST_CASE("Retry-After HTTP-dates in a zone other than GMT are rejected") {
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:29:30 PST", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:29:30 UTC", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:29:30 +0000", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:29:30 gmt", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:29:30", base));
  CHECK_FALSE(parse_retry_after("Wednesday, 21-Oct-15 07:29:30 CET", base));
  CHECK_FALSE(parse_retry_after("Wed Oct 21 07:29:30 2015 GMT", base)); // asctime has no zone
}

TEST_CASE("Retry-After HTTP-dates with trailing junk are rejected, trailing blanks are not") {
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:29:30 GMT junk", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:29:30 GMTX", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:29:30 GMT, 5", base));
  CHECK_FALSE(parse_retry_after("Wednesday, 21-Oct-15 07:29:30 GMT;", base));
  CHECK_FALSE(parse_retry_after("Wed Oct 21 07:29:30 2015x", base));
  CHECK_FALSE(parse_retry_after("Wed Oct 21 07:29:30 20155", base));
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:29:30 GMT \t ", base) == 90s);
  CHECK(parse_retry_after(" \tWed Oct 21 07:29:30 2015 ", base) == 90s);
}

TEST_CASE("Retry-After HTTP-dates follow RFC 9110's grammar exactly") {
  // Each of the three forms, as the RFC writes them.
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:29:30 GMT", base) == 90s);
  CHECK(parse_retry_after("Wednesday, 21-Oct-15 07:29:30 GMT", base) == 90s);
  CHECK(parse_retry_after("Wed Oct 21 07:29:30 2015", base) == 90s);
  // asctime's day: two digits, or a space and one digit.
  const auto nov = std::chrono::system_clock::time_point(seconds(1446336000)); // 2015-11-01
  CHECK(parse_retry_after("Sun Nov  1 00:01:00 2015", nov) == 60s);
  CHECK(parse_retry_after("Sun Nov 01 00:01:00 2015", nov) == 60s);
  CHECK_FALSE(parse_retry_after("Sun Nov 1 00:01:00 2015", nov));
  // Case-sensitive names, single spaces, two-digit fields, fields in range.
  CHECK_FALSE(parse_retry_after("wed, 21 Oct 2015 07:29:30 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 oct 2015 07:29:30 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed,  21 Oct 2015 07:29:30 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed, 1 Oct 2015 07:29:30 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 15 07:29:30 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 7:29:30 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 24:00:00 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:60:00 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:29:61 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed, 32 Oct 2015 07:29:30 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed, 00 Oct 2015 07:29:30 GMT", base));
  CHECK_FALSE(parse_retry_after("Sun, 29 Feb 2015 07:29:30 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed 21 Oct 2015 07:29:30 GMT", base));
  CHECK_FALSE(
      parse_retry_after("Wed, 21-Oct-15 07:29:30 GMT", base)); // RFC 850 needs the long name
  CHECK_FALSE(parse_retry_after("Wednesday, 21 Oct 2015 07:29:30 GMT", base));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015", base));
  CHECK_FALSE(parse_retry_after("Wed", base));
  // A leap second counts as the next second; 29 February exists in leap years.
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:28:60 GMT", base) == 60s);
  const auto feb = std::chrono::system_clock::time_point(seconds(1456704000)); // 2016-02-29
  CHECK(parse_retry_after("Mon, 29 Feb 2016 00:00:10 GMT", feb) == 10s);
}

TEST_CASE("Retry-After RFC 850 two-digit years are never more than 50 years ahead") {
  using coretry::curl::parse_http_date;
  using std::chrono::sys_seconds;
  const sys_seconds y2026(seconds(1767225600)); // 2026-01-01 00:00:00
  // 76 -> 2076 (50 years ahead: kept); 77 -> 1977, not 2077.
  CHECK(parse_http_date("Wednesday, 01-Jan-76 00:00:00 GMT", y2026) ==
        sys_seconds(seconds(3345062400)));
  CHECK(parse_http_date("Saturday, 01-Jan-77 00:00:00 GMT", y2026) ==
        sys_seconds(seconds(220924800)));
  CHECK(parse_http_date("Thursday, 01-Jan-26 00:00:00 GMT", y2026) == y2026);
}

TEST_CASE("parse_http_date takes any now, the extremes of its clock included") {
  using coretry::curl::parse_http_date;
  using std::chrono::sys_seconds;
  const auto imf = sys_seconds(seconds(1445412570)); // 2015-10-21 07:29:30
  for (auto now : {sys_seconds::min(), sys_seconds::max(), sys_seconds(seconds(0))}) {
    CHECK(parse_http_date("Wed, 21 Oct 2015 07:29:30 GMT", now) == imf);
    CHECK(parse_http_date("Wednesday, 21-Oct-15 07:29:30 GMT", now).has_value());
  }
}
