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
