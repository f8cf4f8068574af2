// SPDX-License-Identifier: BSL-1.0
// coretry::http::retry_rules wired into coretry::curl::retry, async_retry and hedge: each rule
// (urllib3's Retry arguments) changes what goes on the wire, per request or client-wide.
#include <coretry/breaker.hpp>
#include <coretry/curl/hedge.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/http.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "test_util.hpp"

namespace {

namespace http = coretry::http;

// Short, deterministic backoff: 1 ms, 2 ms, 4 ms ... capped at 4 ms, no jitter.
coretry::retry_policy fast_policy(unsigned attempts) {
  coretry::retry_policy p;
  p.max_attempts = attempts;
  p.backoff = coretry::backoff::exponential(1ms, 2.0, 4ms);
  return p;
}

// A status on a connection that closes after it: libcurl silently resends a request whose
// reused keep-alive connection died before any reply, which would hide a scripted failure.
http_action closing(int status) {
  auto a = http_action::with_status(status);
  a.keep_alive = false;
  return a;
}

request with_rules(request r, http::retry_rules rules) {
  r.retry_rules = std::move(rules);
  return r;
}

struct outcome {
  std::error_code ec;
  response r;
};

// `retry` to its end: the response, or the error it threw.
outcome run_retry(asio::io_context& io, client& c, request req, coretry::retry_policy policy,
                  coretry::retry_stats& stats) {
  outcome out;
  try {
    run_until_done(io, [&]() -> asio::awaitable<void> {
      out.r = co_await coretry::curl::retry(c, std::move(req), std::move(policy), stats);
    }());
  } catch (const std::system_error& e) {
    out.ec = e.code();
  }
  return out;
}

std::string invalid_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE(
    "curl's status category is coretry::http's: a code made by either name equals the other") {
  CHECK(&coretry::curl::http_status_category() == &coretry::http::status_category());
  CHECK(coretry::curl::make_http_status_error(503) == coretry::http::make_status_error(503));
  CHECK(coretry::curl::make_http_status_error(429).message() == "HTTP 429 Too Many Requests");
  CHECK(coretry::curl::make_http_status_error(404) == coretry::condition::client_error);
  CHECK(coretry::curl::make_http_status_error(429) == coretry::condition::pushback);
}

TEST_CASE("a status added to status_forcelist is retried, one left out is returned at once") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  coretry::retry_stats stats;
  SUBCASE("418 added: retried until the 200") {
    server.push(closing(418));
    auto r = run_retry(io, c, with_rules(get(server.url()), {.status_forcelist = {418, 503}}),
                       fast_policy(3), stats);
    CHECK(r.r.status == 200);
    CHECK(server.requests() == 2);
  }
  SUBCASE("418 by default: final") {
    server.push(closing(418));
    auto r = run_retry(io, c, get(server.url()), fast_policy(3), stats);
    CHECK(r.r.status == 418);
    CHECK(server.requests() == 1);
  }
  SUBCASE("503 left out: final") {
    server.push(closing(503));
    auto r = run_retry(io, c, with_rules(get(server.url()), {.status_forcelist = {418}}),
                       fast_policy(3), stats);
    CHECK(r.r.status == 503);
    CHECK(server.requests() == 1);
  }
}

TEST_CASE("the client's retry_rules apply to every request without rules of its own") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor(), client_options{.retry_rules = {.status_forcelist = {418}}});
  coretry::retry_stats stats;
  server.push(closing(418));
  auto r = run_retry(io, c, get(server.url()), fast_policy(3), stats);
  CHECK(r.r.status == 200);
  CHECK(server.requests() == 2);
  // A request's own rules replace the client's as a whole.
  server.push(closing(418));
  r = run_retry(io, c, with_rules(get(server.url()), {}), fast_policy(3), stats);
  CHECK(r.r.status == 418);
  CHECK(server.requests() == 3);
}

TEST_CASE("a method removed from allowed_methods is sent once; one added is retried") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  coretry::retry_stats stats;
  SUBCASE("PUT removed") {
    server.push(closing(503));
    auto req = get(server.url());
    req.method = "PUT";
    auto r = run_retry(io, c, with_rules(req, {.allowed_methods = {"GET"}}), fast_policy(3), stats);
    CHECK(r.r.status == 503);
    CHECK(server.requests() == 1);
  }
  SUBCASE("PUT removed, but the request carries an Idempotency-Key") {
    server.push(closing(503));
    auto req = get(server.url());
    req.method = "PUT";
    req.headers.emplace_back("Idempotency-Key", "k-1");
    auto r = run_retry(io, c, with_rules(req, {.allowed_methods = {"GET"}}), fast_policy(3), stats);
    CHECK(r.r.status == 200);
    CHECK(server.requests() == 2);
  }
  SUBCASE("PUT removed, but the request opts in with retry_non_idempotent") {
    server.push(closing(503));
    auto req = get(server.url());
    req.method = "PUT";
    req.retry_non_idempotent = true;
    auto r = run_retry(io, c, with_rules(req, {.allowed_methods = {"GET"}}), fast_policy(3), stats);
    CHECK(r.r.status == 200);
    CHECK(server.requests() == 2);
  }
  SUBCASE("POST added") {
    server.push(closing(503));
    auto r = run_retry(io, c, with_rules(post(server.url()), {.allowed_methods = {"GET", "POST"}}),
                       fast_policy(3), stats);
    CHECK(r.r.status == 200);
    CHECK(server.requests() == 2);
  }
}

TEST_CASE("a name that does not resolve is retried only when retry_dns_failures says so") {
  asio::io_context io;
  client c(io.get_executor());
  coretry::retry_stats stats;
  const std::string url = "http://nonexistent.invalid/";
  SUBCASE("by default: one attempt") {
    auto r = run_retry(io, c, get(url), fast_policy(3), stats);
    CHECK(r.ec == errc::couldnt_resolve_host);
    CHECK(stats.attempts == 1);
  }
  SUBCASE("retry_dns_failures: every attempt") {
    auto r =
        run_retry(io, c, with_rules(get(url), {.retry_dns_failures = true}), fast_policy(3), stats);
    CHECK(r.ec == errc::couldnt_resolve_host);
    CHECK(stats.attempts == 3);
    CHECK(stats.reason == coretry::errc::attempts_exhausted);
  }
  SUBCASE("retry_dns_failures counts as connect failures: connect_retries = 1") {
    auto r =
        run_retry(io, c, with_rules(get(url), {.retry_dns_failures = true, .connect_retries = 1}),
                  fast_policy(5), stats);
    CHECK(r.ec == errc::couldnt_resolve_host);
    CHECK(stats.attempts == 2);
  }
}

TEST_CASE("status_retries = 1 stops after one status retry while read failures go on") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  coretry::retry_stats stats;
  server.push(http_action::reset()); // read
  server.push(closing(503));         // status 1: retried
  server.push(http_action::close()); // read
  auto second = closing(502);        // status 2: past the limit, returned
  second.body = "second";
  server.push(second);
  auto r = run_retry(io, c, with_rules(get(server.url()), {.status_retries = 1}), fast_policy(10),
                     stats);
  CHECK(r.r.status == 502);
  CHECK(r.r.body == "second");
  CHECK(server.requests() == 4);
}

TEST_CASE("connect_retries and read_retries stop their own kind only") {
  asio::io_context io;
  client c(io.get_executor());
  coretry::retry_stats stats;
  SUBCASE("connect_retries = 1: a refused connection is retried once") {
    const std::string url =
        "http://127.0.0.1:" + std::to_string(coretry::test::unused_port()) + "/";
    auto r = run_retry(io, c, with_rules(get(url), {.connect_retries = 1}), fast_policy(5), stats);
    CHECK(r.ec == errc::couldnt_connect);
    CHECK(stats.attempts == 2);
  }
  SUBCASE("read_retries = 0 leaves connect failures alone") {
    const std::string url =
        "http://127.0.0.1:" + std::to_string(coretry::test::unused_port()) + "/";
    auto r = run_retry(io, c, with_rules(get(url), {.read_retries = 0}), fast_policy(4), stats);
    CHECK(r.ec == errc::couldnt_connect);
    CHECK(stats.attempts == 4);
  }
  SUBCASE("read_retries = 1: a reset is retried once, then thrown; statuses go on") {
    http_fault_server server(io.get_executor());
    server.push(closing(503));
    server.push(http_action::reset());
    server.push(closing(503));
    server.push(http_action::close());
    auto r = run_retry(io, c, with_rules(get(server.url()), {.read_retries = 1}), fast_policy(10),
                       stats);
    CHECK(r.ec == errc::got_nothing);
    CHECK(server.requests() == 4);
  }
}

TEST_CASE("Retry-After is honoured for the statuses retry_after_status_codes lists") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  coretry::retry_stats stats;
  // A hint above max_retry_after ends the operation at once: proof that it was read.
  auto policy = fast_policy(3);
  policy.max_retry_after = 1s;
  auto too_long = http_action::retry_after(413, "120");
  too_long.keep_alive = false;
  server.set_default(too_long);
  SUBCASE("413 listed: its Retry-After is read") {
    auto r = run_retry(io, c,
                       with_rules(get(server.url()),
                                  {.status_forcelist = {413}, .retry_after_status_codes = {413}}),
                       policy, stats);
    CHECK(r.r.status == 413);
    CHECK(stats.reason == coretry::errc::retry_after_too_long);
    CHECK(server.requests() == 1);
  }
  SUBCASE("413 not listed: retried on the backoff, its Retry-After ignored") {
    auto r =
        run_retry(io, c, with_rules(get(server.url()), {.status_forcelist = {413}}), policy, stats);
    CHECK(r.r.status == 413);
    CHECK(stats.reason == coretry::errc::attempts_exhausted);
    CHECK(server.requests() == 3);
  }
  SUBCASE("an empty list ignores every Retry-After, 503's too") {
    auto busy = http_action::retry_after(503, "120");
    busy.keep_alive = false;
    server.set_default(busy);
    auto r = run_retry(io, c, with_rules(get(server.url()), {.retry_after_status_codes = {}}),
                       policy, stats);
    CHECK(r.r.status == 503);
    CHECK(stats.reason == coretry::errc::attempts_exhausted);
    CHECK(server.requests() == 3);
  }
}

TEST_CASE("async_retry with a callback and hedge follow the request's rules") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  SUBCASE("async_retry: status_retries = 0 returns the first 503") {
    server.set_default(closing(503));
    std::optional<response> got;
    coretry::curl::async_retry(c, with_rules(get(server.url()), {.status_retries = 0}),
                               fast_policy(5),
                               [&](std::error_code, response r) { got = std::move(r); });
    run_until(io, [&] { return got.has_value(); });
    CHECK(got->status == 503);
    CHECK(server.requests() == 1);
  }
  SUBCASE("hedge: a 418 in the list starts the next copy") {
    server.push(closing(418));
    auto req = with_rules(get(server.url()), {.status_forcelist = {418}});
    coretry::hedge_options options{.delay = 10s};
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::hedge(c, std::move(req), fast_policy(3), options);
    }());
    CHECK(r.status == 200);
    CHECK(server.requests() == 2);
  }
  SUBCASE("hedge: a method removed from allowed_methods is refused at the call") {
    server.set_default(closing(503));
    auto req = with_rules(get(server.url()), {.allowed_methods = {"HEAD"}});
    const coretry::retry_policy policy = fast_policy(3);
    const coretry::hedge_options options{.delay = 10s};
    CHECK_THROWS_AS((void)coretry::curl::hedge(c, std::move(req), policy, options),
                    std::invalid_argument);
    CHECK(server.requests() == 0);
  }
}

TEST_CASE("bad rules are refused at the call, naming the field and its value") {
  asio::io_context io;
  client c(io.get_executor());
  auto bad = with_rules(get("http://127.0.0.1:1/"), {.status_forcelist = {503, 1000}});
  CHECK(invalid_message([&] {
          coretry::curl::async_retry(c, bad, fast_policy(3), [](std::error_code, response) {});
        }) == "coretry::curl::request: retry_rules.status_forcelist[1] = 1000 (must be an HTTP "
              "status, 100-599)");
  CHECK(invalid_message([&] {
          client_options o{.retry_rules = {.allowed_methods = {""}}};
          client bad_client(io.get_executor(), o);
        }) == "coretry::curl::client_options: retry_rules.allowed_methods[0] = \"\" (must be a "
              "non-empty HTTP token)");
}

TEST_CASE("transport errors have the kind urllib3 counts them as") {
  using coretry::curl::failure_kind_of;
  using coretry::http::failure_kind;
  CHECK(failure_kind_of(make_error_code(errc::couldnt_connect)) == failure_kind::connect);
  CHECK(failure_kind_of(make_error_code(errc::couldnt_resolve_host)) == failure_kind::connect);
  CHECK(failure_kind_of(make_error_code(std::errc::connection_refused)) == failure_kind::connect);
  CHECK(failure_kind_of(make_error_code(errc::operation_timedout),
                        "Connection timed out after 1001 milliseconds") == failure_kind::connect);
  CHECK(failure_kind_of(make_error_code(errc::operation_timedout),
                        "Operation timed out after 2000 milliseconds with 0 bytes received") ==
        failure_kind::read);
  CHECK(failure_kind_of(make_error_code(errc::operation_timedout)) == failure_kind::read);
  CHECK(failure_kind_of(make_error_code(errc::operation_timedout),
                        "Failed to connect to fd00::1 port 80 after 300 ms: Timeout was reached") ==
        failure_kind::connect);
  CHECK(failure_kind_of(make_error_code(errc::operation_timedout),
                        "Resolving timed out after 200 milliseconds") == failure_kind::connect);
  CHECK(failure_kind_of(make_error_code(errc::operation_timedout),
                        "request::timeout expired during the redirects") == failure_kind::read);
  for (auto e : {errc::send_error, errc::recv_error, errc::got_nothing, errc::partial_file,
                 errc::http2, errc::http2_stream})
    CHECK(failure_kind_of(make_error_code(e)) == failure_kind::read);
  CHECK(failure_kind_of(make_error_code(std::errc::connection_reset)) == failure_kind::read);
  CHECK_FALSE(failure_kind_of(make_error_code(errc::url_malformat)));
  CHECK_FALSE(failure_kind_of({}));
  CHECK_FALSE(coretry::curl::is_retryable(make_error_code(errc::couldnt_resolve_host)));
  CHECK(coretry::curl::is_retryable(make_error_code(errc::couldnt_resolve_host),
                                    {.retry_dns_failures = true}));
}

// Failed before (r9's finding, in both adapters): a response below 400 that the rules reject
// ("202 pending" polled again, a 302 in status_forcelist) carried no health code, so the
// breaker classified `errc::result_rejected` and counted a failure: a healthy server answering
// a poll opened the breaker. Every response now gives its status (condition::answered); the
// 503 run shows the same breaker still opening on failures.
TEST_CASE("a 2xx or 3xx the rules retry is no breaker failure; a 503 is") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  auto run = [&](int status) {
    server.set_default(closing(status));
    auto breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
        .consecutive_failures = 2, .break_duration = 1h, .seed = 1});
    auto policy = fast_policy(4);
    policy.breaker = breaker;
    coretry::retry_stats stats;
    auto out = run_retry(io, c, with_rules(get(server.url()), {.status_forcelist = {status}}),
                         std::move(policy), stats);
    return std::pair{breaker, out};
  };
  for (const int status : {202, 302}) {
    CAPTURE(status);
    const std::size_t before = server.requests();
    auto [breaker, out] = run(status);
    CHECK(out.r.status == status);
    CHECK(server.requests() - before == 4);
    CHECK(breaker->failures() == 0);
    CHECK(breaker->state() == coretry::breaker_state::closed);
  }
  auto [breaker, out] = run(503);
  CHECK(out.ec == coretry::errc::circuit_open);
  CHECK(breaker->failures() == 2);
  CHECK(breaker->state() == coretry::breaker_state::open);
}

TEST_CASE(
    "a classifier of the caller's own decides curl::retry, and the rules' limits still hold") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  coretry::retry_stats stats;
  coretry::retry_policy p = fast_policy(5);
  int asked = 0;
  p.classify = [&](const coretry::attempt_result& r) {
    ++asked;
    coretry::attempt_decision d = coretry::curl::classify(r);
    if (const auto* res = r.value<response>(); res && res->status == 409)
      d.retry = true;
    return d;
  };
  SUBCASE("a 409 retried until the 200") {
    server.push(closing(409));
    server.push(closing(503));
    auto r = run_retry(io, c, get(server.url()), p, stats);
    CHECK(r.r.status == 200);
    CHECK(server.requests() == 3);
    CHECK(asked == 3);
  }
  SUBCASE("a 404 returned at once") {
    server.push(closing(404));
    auto r = run_retry(io, c, get(server.url()), p, stats);
    CHECK(r.r.status == 404);
    CHECK(server.requests() == 1);
  }
  SUBCASE("status_retries = 1 stops the second retryable status, whatever it said") {
    server.push(closing(503));
    auto second = closing(502);
    second.body = "second";
    server.push(second);
    auto r = run_retry(io, c, with_rules(get(server.url()), {.status_retries = 1}), p, stats);
    CHECK(r.r.status == 502);
    CHECK(r.r.body == "second");
    CHECK(server.requests() == 2);
  }
  SUBCASE("beside a predicate it replaces, refused at the call") {
    p.retry_if = [](const std::error_code&) { return true; };
    CHECK_THROWS_AS(run_retry(io, c, get(server.url()), p, stats), std::invalid_argument);
    CHECK(server.requests() == 0);
    CHECK(asked == 0);
  }
}

TEST_CASE("curl::classify decides as curl::retry does by default") {
  const response ok{.status = 200};
  const response busy{.status = 503};
  CHECK_FALSE(coretry::curl::classify(coretry::attempt_result(1).with_value(ok)).retry);
  const coretry::attempt_decision d =
      coretry::curl::classify(coretry::attempt_result(1).with_value(busy));
  CHECK(d.retry);
  CHECK(d.throttle);
  CHECK_FALSE(d.pushback);
  CHECK(coretry::curl::classify(coretry::attempt_result(1, errc::couldnt_connect)).retry);
  CHECK(coretry::curl::classify(coretry::attempt_result(1, errc::operation_timedout)).throttle);
  CHECK_FALSE(
      coretry::curl::classify(coretry::attempt_result(1, errc::couldnt_resolve_host)).retry);
  CHECK(coretry::curl::classify(coretry::attempt_result(1, errc::couldnt_resolve_host),
                                {.retry_dns_failures = true})
            .retry);
}
