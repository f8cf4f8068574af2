// SPDX-License-Identifier: BSL-1.0
// r16's probes of issue 28 through coretry::curl: a caller's `retry_policy::classify` against
// the 0.2 predicates' defaults, with the request's rules' limits, a breaker's refusal after a
// rejected response, and the hedge (whose copies share the request's state).
#include <coretry/breaker.hpp>
#include <coretry/curl/classify.hpp>
#include <coretry/curl/hedge.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/http.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include "test_util.hpp"

using namespace std::chrono_literals;
using namespace coretry::test;
using coretry::curl::client;
using coretry::curl::request;
using coretry::curl::response;

namespace {

coretry::retry_policy quick(unsigned attempts, bool classifier) {
  coretry::retry_policy p{.max_attempts = attempts, .backoff = coretry::backoff::fixed(1ms)};
  if (classifier)
    p.classify = [](const coretry::attempt_result& r) { return coretry::curl::classify(r); };
  return p;
}

http_action closing(int status, std::string body = {}) {
  auto a = http_action::with_status(status, std::move(body));
  a.keep_alive = false;
  return a;
}

request with_rules(request r, coretry::http::retry_rules rules) {
  r.retry_rules = std::move(rules);
  return r;
}

struct seen {
  int status = 0;
  std::string body;
  std::error_code thrown;
  std::optional<int> open_last_status;
  unsigned attempts = 0;
  std::error_code reason, last_error;
  int requests = 0;
  bool operator==(const seen&) const = default;
};

seen run(bool classifier, bool hedged, std::shared_ptr<coretry::circuit_breaker> breaker,
         std::vector<http_action> script, coretry::http::retry_rules rules = {}) {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  for (auto& a : script)
    server.push(a);
  client c(io.get_executor());
  coretry::retry_policy p = quick(4, classifier);
  p.breaker = std::move(breaker);
  const request req = with_rules(get(server.url()), rules);
  seen s;
  coretry::retry_stats stats;
  coretry::hedge_stats hs;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    try {
      response r;
      if (hedged) {
        const coretry::hedge_options h{.delay = 1h, .max_copies = 1};
        r = co_await coretry::curl::hedge(c, req, p, h, hs);
      } else {
        r = co_await coretry::curl::retry(c, req, p, stats);
      }
      s.status = static_cast<int>(r.status);
      s.body = r.body;
    } catch (const coretry::curl::circuit_open_error& e) {
      s.thrown = e.code();
      if (e.last_response())
        s.open_last_status = static_cast<int>(e.last_response()->status);
    } catch (const std::system_error& e) {
      s.thrown = e.code();
    }
  }());
  s.attempts = hedged ? hs.attempts : stats.attempts;
  s.reason = hedged ? hs.reason : stats.reason;
  s.last_error = hedged ? hs.last_error : stats.last_error;
  s.requests = static_cast<int>(server.requests());
  return s;
}

} // namespace

TEST_CASE("r16 curl: curl::classify as the policy's classify decides as curl::retry's defaults, "
          "on retry and hedge, with the rules' limits") {
  for (const bool hedged : {false, true}) {
    CAPTURE(hedged);
    const seen a = run(false, hedged, nullptr, {closing(503), closing(502), closing(429)},
                       {.status_retries = 2});
    const seen b = run(true, hedged, nullptr, {closing(503), closing(502), closing(429)},
                       {.status_retries = 2});
    CHECK(a == b);
    CHECK(a.status == 429);
    CHECK(a.requests == 3);
    const seen c = run(false, hedged, nullptr, {closing(404)});
    const seen d = run(true, hedged, nullptr, {closing(404)});
    CHECK(c == d);
    CHECK(c.status == 404);
  }
}

TEST_CASE("r16 curl: a breaker's refusal after a 503 a classifier rejected throws "
          "circuit_open_error with that 503, as with the 0.2 predicates") {
  for (const bool hedged : {false, true}) {
    CAPTURE(hedged);
    auto trip = [] {
      return std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
          .consecutive_failures = 1, .failure_ratio = 0, .break_duration = 1h});
    };
    const seen a = run(false, hedged, trip(), {closing(503, "busy")});
    const seen b = run(true, hedged, trip(), {closing(503, "busy")});
    CHECK(a == b);
    CHECK(b.thrown == coretry::errc::circuit_open);
    CHECK(b.open_last_status == 503);
    CHECK(b.requests == 1);
  }
}
