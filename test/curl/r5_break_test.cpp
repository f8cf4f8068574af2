// SPDX-License-Identifier: BSL-1.0
// Reviewer r5's reproducers for the retry rules (coretry::http::retry_rules) wired into
// coretry::curl::retry and hedge. Each failed before its fix and names the behaviour it expects.
// (A third, read_retries after an attempt cut by the policy's attempt_timeout, is a documented
// limit: the loop never asks the HTTP rules about such an attempt; docs/curl.md.)
#include <coretry/curl/hedge.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/http.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <stdexcept>
#include <string>
#include <system_error>

#include "test_util.hpp"

namespace {

namespace http = coretry::http;

coretry::retry_policy quick_policy(unsigned attempts) {
  coretry::retry_policy p;
  p.max_attempts = attempts;
  p.backoff = coretry::backoff::exponential(1ms, 2.0, 4ms);
  return p;
}

http_action closing_status(int status) {
  auto a = http_action::with_status(status);
  a.keep_alive = false;
  return a;
}

request rules_of(request r, http::retry_rules rules) {
  r.retry_rules = std::move(rules);
  return r;
}

} // namespace

TEST_CASE("hedge sends more than one copy of a POST that the request's allowed_methods admit") {
  // retry retries a POST listed in allowed_methods (urllib3's meaning: the method may be sent
  // more than once); hedge read only the built-in idempotent list and refused it at the call.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  server.push(closing_status(503));
  auto req = rules_of(post(server.url()), {.allowed_methods = {"GET", "POST"}});
  coretry::hedge_options options{.delay = 10s};
  response r;
  std::string refused;
  try {
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::hedge(c, std::move(req), quick_policy(3), options);
    }());
  } catch (const std::invalid_argument& e) {
    refused = e.what();
  }
  CHECK(refused == "");
  CHECK(r.status == 200);
  CHECK(server.requests() == 2);
}

TEST_CASE("status_retries limits retryable statuses only, not a 200 the user's retry_if_result "
          "rejects") {
  // urllib3's `status` counts retries on a status of `status_forcelist`. The limit was applied
  // to every rejection of the response filter, the user's own included: a user who polled
  // until the body said "done" (retry_if_result) and capped 503 retries at one
  // (status_retries = 1) got the second "pending" 200 back as the final answer.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  server.push(http_action::ok("pending"));
  server.push(http_action::ok("pending"));
  server.push(http_action::ok("pending"));
  server.push(http_action::ok("done"));
  auto policy = quick_policy(10).retry_if_result(
      [](const response& r) { return r.status == 200 && r.body == "pending"; });
  request req = rules_of(get(server.url()), {.status_retries = 1});
  coretry::retry_stats stats;
  response r;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    r = co_await coretry::curl::retry(c, std::move(req), policy, stats);
  }());
  CHECK(r.body == "done");
  CHECK(server.requests() == 4);
}
