// SPDX-License-Identifier: BSL-1.0
// r17's probes of issue 28 through coretry::curl: a policy read by coretry::config (which sets
// a `classify` giving only `retry`, for errors, where 0.2 set `retry_if`) handed to curl::retry
// and curl::hedge. In 0.2 the loader's list judged transport errors only, and curl's status
// rules still judged responses; curl now completes the loader's decision with its own.
#include <coretry/config/json.hpp>
#include <coretry/curl/error.hpp>
#include <coretry/curl/hedge.hpp>
#include <coretry/curl/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <string>
#include <system_error>

#include "test_util.hpp"

using namespace std::chrono_literals;
using namespace coretry::test;
using coretry::curl::client;
using coretry::curl::response;

namespace {

http_action closing(int status) {
  auto a = http_action::with_status(status, "x");
  a.keep_alive = false;
  return a;
}

// A policy of coretry's own form listing one retryable transport error, as a 0.2 user of
// coretry::config and coretry::curl writes it.
coretry::retry_policy loaded() {
  const coretry::config::status_table statuses{
      {"UNAVAILABLE", make_error_code(coretry::curl::errc::couldnt_connect)}};
  auto p = coretry::config::read_policy(
               R"({"max_attempts": 3, "backoff": {"kind": "fixed", "delay": "1ms"},
                   "retry_on": ["UNAVAILABLE"]})",
               statuses)
               .policy;
  return p;
}

struct seen {
  int status = 0;
  int requests = 0;
};

seen run(bool hedged, const coretry::retry_policy& p) {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(closing(503));
  server.push(closing(200));
  client c(io.get_executor());
  seen s;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    response r;
    if (hedged) {
      const coretry::hedge_options h{.delay = 1h, .max_copies = 1};
      r = co_await coretry::curl::hedge(c, get(server.url()), p, h);
    } else {
      r = co_await coretry::curl::retry(c, get(server.url()), p);
    }
    s.status = static_cast<int>(r.status);
  }());
  s.requests = static_cast<int>(server.requests());
  return s;
}

} // namespace

TEST_CASE("r17 curl: a policy from coretry::config still has curl::retry retry a 503, as in 0.2") {
  const seen s = run(false, loaded());
  CHECK(s.requests == 2);
  CHECK(s.status == 200);
}

TEST_CASE("r17 curl: a policy from coretry::config still has curl::hedge treat a 503 as non-fatal, "
          "as in 0.2") {
  const seen s = run(true, loaded());
  CHECK(s.requests == 2);
  CHECK(s.status == 200);
}

TEST_CASE("r17 curl: a classifier that leaves responses open has curl's status rules retry a "
          "503") {
  coretry::retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms)};
  p.classify = [](const coretry::attempt_result& r) {
    return r.error() ? coretry::attempt_decision::only_retry(false)
                     : coretry::attempt_decision::no_opinion();
  };
  const seen s = run(false, p);
  CHECK(s.requests == 2);
  CHECK(s.status == 200);
}

TEST_CASE("r17 curl: the loaded policy with a 0.2 throttle_if added still validates and retries "
          "a 503, as in 0.2") {
  coretry::retry_policy p = loaded();
  CORETRY_ALLOW_DEPRECATED_BEGIN
  p.throttle_if = [](const std::error_code&) { return false; };
  CORETRY_ALLOW_DEPRECATED_END
  REQUIRE_NOTHROW(p.validate());
  const seen s = run(false, p);
  CHECK(s.requests == 2);
  CHECK(s.status == 200);
  const seen h = run(true, p);
  CHECK(h.requests == 2);
  CHECK(h.status == 200);
}
