// SPDX-License-Identifier: BSL-1.0
#pragma once
// The responses on which coretry::curl's and coretry::beast's default classifiers are held to
// `coretry::http::classify_response` (test/curl/classify_test.cpp, test/beast/beast_test.cpp):
// every status 100-599, without and with a `Retry-After`, for a GET and a POST. The two
// adapters cannot be built into one test binary (beast needs Boost.Asio, the dev build's curl
// adapter standalone Asio), so each is compared with the shared function case by case, and
// both tally their decisions against the same literal totals.

#include <coretry/classify.hpp>
#include <coretry/http.hpp>

#include <array>
#include <string_view>

namespace coretry::test {

/// One response a classifier decides on.
struct http_decision_case {
  long status;
  std::string_view retry_after; ///< the `Retry-After` field's value; empty: none
  std::string_view method;      ///< the request's
};

/// Calls `f(c)` for every case: statuses 100-599, `Retry-After` absent or "7", GET and POST.
template <class F> void for_each_http_decision_case(F&& f) {
  constexpr std::array<std::string_view, 2> hints{"", "7"};
  constexpr std::array<std::string_view, 2> methods{"GET", "POST"};
  for (std::string_view method : methods)
    for (std::string_view hint : hints)
      for (long status = 100; status <= 599; ++status)
        f(http_decision_case{status, hint, method});
}

/// Whether two decisions are the same in every field.
inline bool same_decision(const attempt_decision& a, const attempt_decision& b) noexcept {
  return a.retry == b.retry && a.pushback == b.pushback && a.throttle == b.throttle &&
         a.retry_after == b.retry_after;
}

/// How many cases a classifier decided with each field set: under the default rules, both
/// adapters must come to `expected_default_tally` (six statuses retried, 429 pushing back, 429
/// and 503 slowing the rate and, with the header, giving its 7 s).
struct decision_tally {
  int retry = 0, pushback = 0, throttle = 0, hint = 0;

  void add(const attempt_decision& d) noexcept {
    retry += d.retry ? 1 : 0;
    pushback += d.pushback ? 1 : 0;
    throttle += d.throttle ? 1 : 0;
    hint += d.retry_after == std::chrono::seconds(7) ? 1 : 0;
  }
  bool operator==(const decision_tally&) const = default;
};

/// 2 methods x 2 hints x {408, 429, 500, 502, 503, 504}; 429 in the four; 429 and 503 in the
/// four; 429 and 503 with the header, for either method.
inline constexpr decision_tally expected_default_tally{24, 4, 8, 4};

} // namespace coretry::test
