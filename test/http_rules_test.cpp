// SPDX-License-Identifier: BSL-1.0
// coretry/http.hpp in a unit that never includes libcurl's adapter, linked with coretry::coretry
// alone: the rules a Beast (or any other) HTTP client shares with coretry::curl.
#include <coretry/error.hpp>
#include <coretry/http.hpp>
#include <coretry/overload.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <system_error>

namespace http = coretry::http;
using namespace std::chrono_literals;

namespace {

std::string message_of(const http::retry_rules& rules) {
  try {
    rules.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("the default rules are urllib3's, with coretry's Retry-After statuses") {
  const http::retry_rules rules;
  for (long s : {408L, 429L, 500L, 502L, 503L, 504L}) {
    CHECK(http::is_retryable_status(s, rules));
    CHECK(http::is_retryable_status(s));
  }
  for (long s : {200L, 301L, 400L, 404L, 413L, 501L, 505L}) {
    CHECK_FALSE(http::is_retryable_status(s, rules));
    CHECK_FALSE(http::is_retryable_status(s));
  }
  for (const char* m : {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}) {
    CHECK(http::is_allowed_method(m, rules));
    CHECK(http::is_idempotent(m));
  }
  CHECK_FALSE(http::is_allowed_method("POST", rules));
  CHECK_FALSE(http::is_allowed_method("get", rules)); // methods are case-sensitive
  CHECK(http::honours_retry_after(429, rules));
  CHECK(http::honours_retry_after(503, rules));
  CHECK_FALSE(http::honours_retry_after(413, rules));
  CHECK_FALSE(http::honours_retry_after(413));
  CHECK_FALSE(rules.retry_dns_failures);
  CHECK_FALSE(rules.connect_retries);
  CHECK_FALSE(rules.read_retries);
  CHECK_FALSE(rules.status_retries);
  CHECK_NOTHROW(rules.validate());
}

TEST_CASE("rules built with designated initializers replace the lists they name") {
  const http::retry_rules rules{.status_forcelist = {429, 520},
                                .allowed_methods = {"GET", "POST"},
                                .retry_after_status_codes = {413, 429, 503}};
  CHECK(http::is_retryable_status(520, rules));
  CHECK_FALSE(http::is_retryable_status(503, rules));
  CHECK(http::may_retry("POST", false, rules));
  CHECK_FALSE(http::may_retry("PUT", false, rules));
  CHECK(http::may_retry("PUT", true, rules)); // an Idempotency-Key allows any method
  CHECK_FALSE(http::may_retry("POST", false));
  CHECK(http::may_retry("POST", true));
  CHECK(http::honours_retry_after(413, rules));
}

TEST_CASE("429 pushes back, and 429 and 503 slow a sending rate") {
  CHECK(http::is_pushback_status(429));
  CHECK_FALSE(http::is_pushback_status(503));
  CHECK(http::slows_sending_rate(429));
  CHECK(http::slows_sending_rate(503));
  CHECK_FALSE(http::slows_sending_rate(500));
}

TEST_CASE("bad rules are refused naming the field, its index and its value") {
  CHECK(message_of({.status_forcelist = {503, 700}}) ==
        "coretry::http::retry_rules: status_forcelist[1] = 700 (must be an HTTP status, 100-599)");
  CHECK(message_of({.status_forcelist = {99}}) ==
        "coretry::http::retry_rules: status_forcelist[0] = 99 (must be an HTTP status, 100-599)");
  CHECK(message_of({.retry_after_status_codes = {600}}) ==
        "coretry::http::retry_rules: retry_after_status_codes[0] = 600 (must be an HTTP "
        "status, 100-599)");
  CHECK(message_of({.allowed_methods = {"GET", ""}}) ==
        "coretry::http::retry_rules: allowed_methods[1] = \"\" (must be a non-empty HTTP token)");
  CHECK(message_of({.allowed_methods = {"GE T\n"}}) ==
        "coretry::http::retry_rules: allowed_methods[0] = \"GE T\\n\" (must be a "
        "non-empty HTTP token)");
  CHECK(message_of({.status_forcelist = {100, 599}, .allowed_methods = {}}).empty());
}

TEST_CASE("failure counts stop each kind at its own limit, and only that kind") {
  const http::retry_rules rules{.connect_retries = 2, .status_retries = 1};
  http::failure_counts counts;
  CHECK(counts.record(http::failure_kind::status, rules));       // first status: retried
  CHECK_FALSE(counts.record(http::failure_kind::status, rules)); // second: past status_retries
  CHECK(counts.exhausted(http::failure_kind::status, rules));
  CHECK(counts.record(http::failure_kind::connect, rules));
  CHECK(counts.record(http::failure_kind::connect, rules));
  CHECK_FALSE(counts.record(http::failure_kind::connect, rules));
  for (int i = 0; i < 100; ++i)
    CHECK(counts.record(http::failure_kind::read, rules)); // unlimited
  CHECK(counts.count(http::failure_kind::read) == 100);
  CHECK(counts.count(http::failure_kind::status) == 2);
  const http::retry_rules none{.read_retries = 0};
  http::failure_counts fresh;
  CHECK_FALSE(fresh.record(http::failure_kind::read, none));
}

TEST_CASE("Retry-After is parsed without libcurl") {
  const auto base = std::chrono::system_clock::time_point(std::chrono::seconds(1445412480));
  CHECK(http::parse_retry_after("120", base) == 120s);
  CHECK(http::parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", base) == 30s);
  CHECK_FALSE(http::parse_retry_after("soon", base));
  CHECK(http::parse_retry_after("99999999999", base) == http::max_retry_after);
  CHECK(http::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT",
                              std::chrono::sys_seconds(std::chrono::seconds(0))) ==
        std::chrono::sys_seconds(std::chrono::seconds(1445412480)));
}

TEST_CASE("a status as an error code tells a gate what the answer says of the upstream") {
  using coretry::health;
  CHECK(std::string(http::status_category().name()) == "http-status");
  CHECK(http::make_status_error(503).message() == "HTTP 503 Service Unavailable");
  CHECK(http::make_status_error(418).message() == "HTTP 418");
  CHECK(http::make_status_error(503).category() == http::status_category());
  // 5xx: the upstream failed; 408: a timeout; 429: a push-back; any other 4xx: the request's
  // fault, no failure of the upstream.
  CHECK(coretry::default_health(http::make_status_error(500)) == health::unhealthy);
  CHECK(coretry::default_health(http::make_status_error(503)) == health::unhealthy);
  CHECK(coretry::default_health(http::make_status_error(408)) == health::unhealthy);
  CHECK(http::make_status_error(408) == coretry::condition::timed_out);
  CHECK(coretry::default_health(http::make_status_error(429)) == health::pushback);
  CHECK(coretry::default_health(http::make_status_error(404)) == health::healthy);
  CHECK(coretry::default_health(http::make_status_error(400)) == health::healthy);
  CHECK(http::make_status_error(404) == coretry::condition::client_error);
  CHECK(http::make_status_error(503) != coretry::condition::client_error);
  // 1xx to 3xx: an answer, healthy even when the policy rejects it ("202 pending", a retried
  // 302); before, a rejected 202 reached the breaker as a failure.
  for (const long s : {100L, 200L, 202L, 302L, 399L}) {
    CAPTURE(s);
    CHECK(http::make_status_error(s) == coretry::condition::answered);
    CHECK(coretry::default_health(http::make_status_error(s)) == health::healthy);
  }
  for (const long s : {400L, 404L, 429L, 500L, 503L, 99L})
    CHECK(http::make_status_error(s) != coretry::condition::answered);
  CHECK(std::error_code(coretry::errc::result_rejected) != coretry::condition::answered);
  CHECK(coretry::make_error_condition(coretry::condition::answered).message() ==
        "the upstream answered without failing");
}

TEST_CASE("an HTTP token is one or more tchar, and a refused value is shown on one bounded line") {
  CHECK(http::is_token("GET"));
  CHECK(http::is_token("X-Request-Id"));
  CHECK(http::is_token("!#$%&'*+-.^_`|~09azAZ"));
  CHECK_FALSE(http::is_token(""));
  CHECK_FALSE(http::is_token("GE T"));
  CHECK_FALSE(http::is_token("Host:"));
  CHECK_FALSE(http::is_token("GET\r\n"));
  CHECK_FALSE(http::is_token("caf\xc3\xa9"));
  CHECK(http::detail::escaped("a\r\nb") == "\"a\\r\\nb\"");
  CHECK(http::detail::escaped("q\"\\") == "\"q\\\"\\\\\"");
  CHECK(http::detail::escaped(std::string_view("\0\x7f\xff", 3)) == "\"\\x00\\x7f\\xff\"");
  const std::string long_value(70, 'v');
  CHECK(http::detail::escaped(long_value) == "\"" + std::string(64, 'v') + "\"...");
}

TEST_CASE("classify_response retries the rules' statuses and reads Retry-After where honoured") {
  const http::retry_rules defaults{};
  auto d = http::classify_response(503, "7", defaults);
  CHECK(d.retry);
  CHECK(d.throttle);
  CHECK_FALSE(d.pushback);
  CHECK(d.retry_after == 7s);
  d = http::classify_response(429, "", defaults);
  CHECK(d.retry);
  CHECK(d.pushback);
  CHECK(d.throttle);
  CHECK(d.retry_after == 0s);
  // Retried, but not a status whose Retry-After is honoured, nor one that slows the rate.
  d = http::classify_response(502, "7", defaults);
  CHECK(d.retry);
  CHECK_FALSE(d.throttle);
  CHECK(d.retry_after == 0s);
  // A final answer decides nothing else, hint included.
  for (long status : {200L, 404L, 501L}) {
    d = http::classify_response(status, "7", defaults);
    CHECK_FALSE(d.retry);
    CHECK_FALSE(d.pushback);
    CHECK_FALSE(d.throttle);
    CHECK(d.retry_after == 0s);
  }
  // A malformed value is no hint.
  CHECK(http::classify_response(503, "soon", defaults).retry_after == 0s);
  // An HTTP-date, against the given now.
  const auto now = std::chrono::sys_days{std::chrono::year{1994} / 11 / 6} + 8h + 49min + 30s;
  CHECK(http::classify_response(503, "Sun, 06 Nov 1994 08:49:37 GMT", defaults, now).retry_after ==
        7s);

  // The rules decide which statuses are retried and which honour Retry-After; 429 stays the
  // push-back and 429 and 503 the statuses that slow the rate, when retried.
  const http::retry_rules own{.status_forcelist = {409, 503}, .retry_after_status_codes = {409}};
  d = http::classify_response(409, "7", own);
  CHECK(d.retry);
  CHECK_FALSE(d.pushback);
  CHECK_FALSE(d.throttle);
  CHECK(d.retry_after == 7s);
  d = http::classify_response(503, "7", own);
  CHECK(d.retry);
  CHECK(d.throttle);
  CHECK(d.retry_after == 0s);
  d = http::classify_response(429, "7", own);
  CHECK_FALSE(d.retry);
  CHECK_FALSE(d.pushback);
  CHECK_FALSE(d.throttle);
}
