// SPDX-License-Identifier: BSL-1.0
// Reviewer r19's probes of `coretry::http::classify_response` (issue 28, commit cb025d1): the
// one response classifier behind `coretry::curl::classify` and `coretry::beast::retry`'s default.
// Each case is held against the decision 0.3 as shipped (31b60cd) made, written out here from
// that commit's code: curl's `classify` for the decision, and each adapter's attempt for the
// hint it gave its `attempt_context` (the loop takes the larger of that and the decision's).

#include <coretry/classify.hpp>
#include <coretry/error.hpp>
#include <coretry/http.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

using namespace std::chrono_literals;
namespace http = coretry::http;
using coretry::attempt_decision;

namespace {

// 31b60cd, lib/curl/classify.cpp: the response half of curl::classify. `header` is the
// response's Retry-After field, std::nullopt when it has none.
attempt_decision old_curl(long status, std::optional<std::string_view> header,
                          const http::retry_rules& rules,
                          std::chrono::system_clock::time_point now) {
  attempt_decision d;
  d.retry = http::is_retryable_status(status, rules);
  d.pushback = d.retry && http::is_pushback_status(status);
  d.throttle = d.retry && http::slows_sending_rate(status);
  if (d.retry && http::honours_retry_after(status, rules))
    if (header)
      if (auto hint = http::parse_retry_after(*header, now))
        d.retry_after = *hint;
  return d;
}

// 31b60cd, include/coretry/curl/retry.hpp and include/coretry/beast.hpp: the hint both
// adapters' attempts give their context, whatever the classifier decides.
std::chrono::nanoseconds attempt_hint(long status, std::optional<std::string_view> header,
                                      const http::retry_rules& rules,
                                      std::chrono::system_clock::time_point now) {
  if (http::honours_retry_after(status, rules) && header)
    if (auto hint = http::parse_retry_after(*header, now))
      return *hint;
  return 0s;
}

bool same(const attempt_decision& a, const attempt_decision& b) {
  return a.retry == b.retry && a.pushback == b.pushback && a.throttle == b.throttle &&
         a.retry_after == b.retry_after;
}

const auto fixed_now = std::chrono::sys_days{std::chrono::year{2026} / 11 / 27} + 17h;

std::vector<http::retry_rules> rule_sets() {
  return {
      http::retry_rules{},
      http::retry_rules{.status_forcelist = {}},
      http::retry_rules{.status_forcelist = {500, 502, 503, 504}}, // 429 not retried
      http::retry_rules{.retry_after_status_codes = {}},           // Retry-After ignored
      http::retry_rules{.status_forcelist = {409, 503}, .retry_after_status_codes = {409}},
      http::retry_rules{.status_forcelist = {503}, .retry_after_status_codes = {409, 429}},
      http::retry_rules{.status_forcelist = {429, 429, 503, 503},
                        .retry_after_status_codes = {503, 503}},
      http::retry_rules{.status_forcelist = {100, 200, 599}, .retry_after_status_codes = {200}},
  };
}

std::vector<long> statuses() {
  std::vector<long> out{-503, -1, 0, 99, 600, 999, 1000, 4294967296L + 503, 65536 + 503};
  for (long s = 100; s <= 599; ++s)
    out.push_back(s);
  return out;
}

std::vector<std::optional<std::string_view>> headers() {
  static const std::string long_digits(100000, '9');
  static const std::string zeros_then_seven = std::string(5000, '0') + "7";
  static const std::string with_nul("7\0", 2);
  return {std::nullopt,
          std::string_view(""),
          std::string_view(" "),
          std::string_view("\t"),
          std::string_view("7"),
          std::string_view(" 7 "),
          std::string_view("\t7\t"),
          std::string_view("0"),
          std::string_view("60"),
          std::string_view("61"),
          std::string_view("-5"),
          std::string_view("+5"),
          std::string_view("1.5"),
          std::string_view("7s"),
          std::string_view("7, 9"),
          std::string_view("7 9"),
          std::string_view("\r7"),
          std::string_view("7\n"),
          std::string_view("\v7"),
          std::string_view("\xc2\xa0"
                           "7"),
          std::string_view("\xd9\xa1"), // ARABIC-INDIC DIGIT ONE
          std::string_view("\xff\xfe"),
          std::string_view(with_nul),
          std::string_view("2147483647"),
          std::string_view("2147483648"),
          std::string_view("9223372036854775808"),
          std::string_view(long_digits),
          std::string_view(zeros_then_seven),
          std::string_view("Fri, 27 Nov 2026 17:00:07 GMT"),     // 7 s ahead
          std::string_view("Fri, 27 Nov 2026 16:59:53 GMT"),     // 7 s ago
          std::string_view("Fri, 27 Nov 2026 17:00:00 GMT"),     // now
          std::string_view("Friday, 27-Nov-26 17:01:00 GMT"),    // RFC 850, 60 s ahead
          std::string_view("Fri Nov 27 17:01:01 2026"),          // asctime, 61 s ahead
          std::string_view("Fri, 27 Nov 2026 17:00:07 UTC"),     // another zone
          std::string_view("fri, 27 nov 2026 17:00:07 gmt"),     // case
          std::string_view("Fri, 31 Dec 9999 23:59:59 GMT"),     // saturates
          std::string_view("Thu, 01 Jan 1970 00:00:00 GMT"),     // long past
          std::string_view("Mon, 01 Jan 0000 00:00:00 GMT"),     // year 0
          std::string_view("Fri, 27 Nov 2026 23:59:60 GMT"),     // leap second
          std::string_view("Fri, 30 Feb 2026 17:00:07 GMT"),     // no such day
          std::string_view("Fri, 27 Nov 2026 17:00:07 GMT   ")}; // trailing spaces
}

} // namespace

// Held: for every status, Retry-After value and rule set above, the decision classify_response
// makes is the one 31b60cd's curl::classify made, and the hint the loop ends with through
// Beast (max of the attempt's and the decision's) is the one it had (the attempt's alone).
TEST_CASE("r19: classify_response decides as 31b60cd's curl::classify, and Beast's loop hint is "
          "unchanged") {
  const auto rules_list = rule_sets();
  const auto status_list = statuses();
  const auto header_list = headers();
  int compared = 0;
  int mismatches = 0;
  for (std::size_t ri = 0; ri < rules_list.size(); ++ri) {
    const http::retry_rules& rules = rules_list[ri];
    for (const long status : status_list)
      for (const auto& header : header_list) {
        attempt_decision now_d;
        CHECK_NOTHROW(now_d =
                          http::classify_response(status, header.value_or(""), rules, fixed_now));
        const attempt_decision old_d = old_curl(status, header, rules, fixed_now);
        const auto hint_before = attempt_hint(status, header, rules, fixed_now);
        const auto hint_after = std::max(hint_before, now_d.retry_after);
        ++compared;
        if (!same(now_d, old_d) || hint_before != hint_after) {
          ++mismatches;
          CAPTURE(ri);
          CAPTURE(status);
          CAPTURE(std::string(header.value_or("<none>")).substr(0, 40));
          CHECK(same(now_d, old_d));
          CHECK(hint_before == hint_after);
        }
      }
  }
  CHECK(compared > 10000);
  CHECK(mismatches == 0);
}

TEST_CASE("r19: Retry-After values, against a fixed now") {
  const http::retry_rules rules{};
  auto hint = [&](std::string_view v) {
    return http::classify_response(503, v, rules, fixed_now).retry_after;
  };
  CHECK(hint("7") == 7s);
  CHECK(hint(" \t7\t ") == 7s);
  CHECK(hint(std::string(5000, '0') + "7") == 7s);
  CHECK(hint("2147483648") == http::max_retry_after);
  CHECK(hint(std::string(100000, '9')) == http::max_retry_after);
  CHECK(hint("Fri, 27 Nov 2026 17:00:07 GMT") == 7s);
  CHECK(hint("Fri, 27 Nov 2026 16:59:53 GMT") == 0s);
  CHECK(hint("Friday, 27-Nov-26 17:01:00 GMT") == 60s);
  CHECK(hint("Fri Nov 27 17:01:01 2026") == 61s);
  CHECK(hint("Fri, 31 Dec 9999 23:59:59 GMT") == http::max_retry_after);
  for (std::string_view bad : {"", "-5", "+5", "1.5", "7s", "7, 9", "\r7", "\v7", "\xd9\xa1",
                               "Fri, 27 Nov 2026 17:00:07 UTC", "Fri, 30 Feb 2026 17:00:07 GMT"})
    CHECK(hint(bad) == 0s);
  // The saturated hint converts to the loop's nanoseconds without overflow.
  CHECK(std::chrono::nanoseconds(hint("2147483648")).count() > 0);
}

namespace {

struct reply {
  long status = 0;
  std::string retry_after;
};

struct finished {
  bool done = false;
  std::error_code ec;
  reply value;
};

// One operation on the manual clock: each attempt answers the next of `replies`, and the
// policy decides every reply with classify_response, as both adapters' defaults do.
finished run(std::vector<reply> replies, coretry::retry_policy p, coretry::retry_stats& stats,
             std::vector<std::chrono::nanoseconds>* delays = nullptr) {
  coretry::testing::manual_clock::reset();
  asio::io_context io;
  std::size_t next = 0;
  p.classify = [](const coretry::attempt_result& r) {
    if (const reply* res = r.value<reply>())
      return http::classify_response(res->status, res->retry_after, http::retry_rules{});
    return attempt_decision{};
  };
  if (delays)
    p.on_retry = [delays](const coretry::retry_event& e) { delays->push_back(e.delay); };
  finished f;
  coretry::async_retry<coretry::testing::manual_timer>(
      io.get_executor(),
      [&]() -> asio::awaitable<reply> {
        co_return replies.at(next < replies.size() ? next++ : replies.size() - 1);
      },
      p, stats,
      [&](auto ec, reply r) {
        f.done = true;
        f.ec = ec;
        f.value = std::move(r);
      });
  coretry::testing::drive(io, [&] { return f.done; });
  return f;
}

} // namespace

TEST_CASE("r19: through the loop, a hint from classify_response above max_retry_after stops at "
          "once with the last response; one at the limit is waited for") {
  coretry::retry_stats stats;
  coretry::retry_policy p{.max_attempts = 4, .backoff = coretry::backoff::fixed(1ms)};
  finished f = run({{503, "61"}, {200, ""}}, p, stats);
  CHECK(f.done);
  CHECK(!f.ec);
  CHECK(f.value.status == 503);
  CHECK(stats.attempts == 1);
  CHECK(stats.reason == coretry::errc::retry_after_too_long);

  std::vector<std::chrono::nanoseconds> delays;
  coretry::retry_stats stats2;
  f = run({{429, "60"}, {200, ""}}, p, stats2, &delays);
  CHECK(f.value.status == 200);
  CHECK(stats2.attempts == 2);
  REQUIRE(delays.size() == 1);
  CHECK(delays[0] == 60s);
}

TEST_CASE("r19: through the loop, a 503 to a request allowed one attempt is a failure given up "
          "on, as classify_response's documentation says") {
  coretry::retry_stats stats;
  coretry::retry_policy p{.max_attempts = 1};
  const finished f = run({{503, "7"}}, p, stats);
  CHECK(!f.ec);
  CHECK(f.value.status == 503);
  CHECK(stats.attempts == 1);
  CHECK(stats.reason == coretry::errc::attempts_exhausted);
  CHECK(stats.last_error == coretry::errc::result_rejected);
}
