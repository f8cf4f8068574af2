// SPDX-License-Identifier: BSL-1.0
// Reviewer r10: the coretry::curl twin of test/r10_beast_break_test.cpp's first case: since 794c43a
// `make_http_attempt` sets `health_code(HTTP <status>)` for every response (`r.status != 0`),
// so a *successful* 200 reaches a breaker's own classifier as a non-empty error code, where it
// reached it as no error before. Built in coretry_curl_rules_tests.
#include <coretry/breaker.hpp>
#include <coretry/curl/hedge.hpp>
#include <coretry/curl/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "test_util.hpp"

using namespace coretry::test;
using namespace std::chrono_literals;

namespace {

// Polly's ShouldHandle shape, written against the documented contract: a success is healthy,
// a request's own fault is healthy, anything else is a failure.
std::shared_ptr<coretry::circuit_breaker> strict_breaker(std::vector<std::string>& seen) {
  return std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
      .consecutive_failures = 2,
      .break_duration = 1h,
      .classify =
          [&seen](const std::error_code& ec) {
            seen.push_back(ec ? ec.message() : "no error");
            return !ec || ec == coretry::condition::client_error ? coretry::health::healthy
                                                                 : coretry::health::unhealthy;
          },
      .seed = 1});
}

} // namespace

// Failed at 794c43a (fixed since) (passes at 34382f8): three GETs answered 200 by a healthy server;
// the classifier is handed "HTTP 200" for each success and counts it a failure, so the breaker
// opens after two and the third GET throws circuit_open_error without being sent. The hedge,
// sharing `make_http_attempt`, does the same.
TEST_CASE("r10: curl: a 200 reaches a custom breaker classifier as HTTP 200 (retry and hedge)") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::ok("fine"));
  coretry::curl::client c(io.get_executor());
  for (const bool hedged : {false, true}) {
    CAPTURE(hedged);
    std::vector<std::string> seen;
    auto breaker = strict_breaker(seen);
    coretry::retry_policy policy;
    policy.max_attempts = 2;
    policy.breaker = breaker;
    int ok = 0;
    std::error_code last;
    for (int i = 0; i < 3; ++i) {
      try {
        run_until_done(io, [&]() -> asio::awaitable<void> {
          // Not a conditional expression: g++ 12 miscompiles co_await in one.
          coretry::curl::response r;
          if (hedged) {
            coretry::hedge_options h;
            h.delay = 1s;
            r = co_await coretry::curl::hedge(c, get(server.url()), policy, h);
          } else {
            r = co_await coretry::curl::retry(c, get(server.url()), policy);
          }
          ok += r.status == 200;
        }());
      } catch (const std::system_error& e) {
        last = e.code();
      }
    }
    for (const auto& s : seen)
      MESSAGE("classifier was handed: ", s);
    CHECK(ok == 3);
    CHECK_FALSE(last);
    CHECK(breaker->failures() == 0);
    CHECK(breaker->state() == coretry::breaker_state::closed);
  }
}
