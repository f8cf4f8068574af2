// SPDX-License-Identifier: BSL-1.0
#include <coretry/curl/classify.hpp>
#include <coretry/curl/client.hpp>
#include <coretry/curl/error.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/error.hpp>
#include <coretry/http.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_decision_cases.hpp>

#include <memory>
#include <string>

using namespace coretry::curl;

TEST_CASE("transient transport errors are retryable, permanent ones are not") {
  CHECK(is_retryable(errc::couldnt_connect));
  CHECK(is_retryable(errc::operation_timedout));
  CHECK(is_retryable(errc::send_error));
  CHECK(is_retryable(errc::recv_error));
  CHECK(is_retryable(errc::got_nothing));
  CHECK(is_retryable(errc::partial_file));
  CHECK(is_retryable(coretry::errc::attempt_timeout));
  CHECK(is_retryable(make_error_code(std::errc::connection_reset)));

  CHECK_FALSE(is_retryable(errc::url_malformat));
  CHECK_FALSE(is_retryable(errc::unsupported_protocol));
  CHECK_FALSE(is_retryable(errc::couldnt_resolve_host));
  CHECK_FALSE(is_retryable(errc::too_many_redirects));
  CHECK_FALSE(is_retryable(errc::proxy_refused)); // the proxy refuses the tunnel again
  CHECK_FALSE(breaks_connection(errc::proxy_refused));
  CHECK(make_error_code(errc::proxy_refused).message().find("proxy refused") != std::string::npos);
  CHECK_FALSE(is_retryable(coretry::test::operation_aborted));
  CHECK_FALSE(is_retryable(std::error_code()));
}

TEST_CASE("errors that may break a connection send the next attempt on a new one") {
  CHECK(breaks_connection(errc::http2));
  CHECK(breaks_connection(errc::http2_stream));
  CHECK(breaks_connection(errc::weird_server_reply));
  CHECK(breaks_connection(errc::recv_error));
  CHECK(breaks_connection(errc::send_error));
  CHECK(breaks_connection(errc::got_nothing));
  CHECK(breaks_connection(errc::partial_file));
  CHECK(breaks_connection(make_error_code(std::errc::connection_reset)));
  CHECK_FALSE(breaks_connection({}));
  CHECK_FALSE(breaks_connection(errc::operation_timedout));
  CHECK_FALSE(breaks_connection(errc::couldnt_connect));
  CHECK_FALSE(breaks_connection(errc::peer_failed_verification));
  CHECK_FALSE(breaks_connection(coretry::errc::attempt_timeout));
  CHECK_FALSE(breaks_connection(coretry::test::operation_aborted));
}

TEST_CASE("only 408, 429, 500, 502, 503 and 504 are retryable statuses") {
  for (long s : {408L, 429L, 500L, 502L, 503L, 504L})
    CHECK(is_retryable_status(s));
  for (long s : {0L, 200L, 204L, 301L, 400L, 401L, 403L, 404L, 409L, 422L, 501L, 505L})
    CHECK_FALSE(is_retryable_status(s));
}

TEST_CASE("only idempotent methods may be retried unless an idempotency key is given") {
  for (const char* m : {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
    CHECK(is_idempotent(m));
  for (const char* m : {"POST", "PATCH", "CONNECT", "get"})
    CHECK_FALSE(is_idempotent(m));

  request post{.method = "POST", .url = "http://127.0.0.1/"};
  CHECK_FALSE(may_retry(post));
  post.headers.emplace_back("idempotency-key", "k1");
  CHECK(may_retry(post));
  request patch{.method = "PATCH", .url = "http://127.0.0.1/", .retry_non_idempotent = true};
  CHECK(may_retry(patch));
}

TEST_CASE("curl errors have a curl category with libcurl's messages") {
  const std::error_code ec = errc::couldnt_connect;
  CHECK(std::string(ec.category().name()) == "curl");
  CHECK(ec.message() == "Couldn't connect to server");
}

TEST_CASE("header lookup ignores case") {
  response r{.status = 200, .headers = {{"Content-Type", "text/plain"}, {"X-A", "1"}}};
  CHECK(r.header("content-type") == "text/plain");
  CHECK(r.header("X-a") == "1");
  CHECK_FALSE(r.header("missing"));
}

TEST_CASE("HTTP/2 connection and stream errors are retried; TLS failures are not") {
  CHECK(is_retryable(errc::http2));        // GOAWAY, a framing error
  CHECK(is_retryable(errc::http2_stream)); // a stream reset, REFUSED_STREAM
  for (errc e : {errc::peer_failed_verification, errc::ssl_connect_error, errc::ssl_certproblem,
                 errc::ssl_cacert_badfile}) {
    CAPTURE(static_cast<int>(e));
    CHECK(is_tls_error(e));
    CHECK_FALSE(is_retryable(e));
    CHECK(make_error_code(e).message().starts_with("TLS: "));
  }
  CHECK_FALSE(is_tls_error(errc::couldnt_connect));
  CHECK_FALSE(is_tls_error(std::make_error_code(std::errc::connection_reset)));
  CHECK(make_error_code(errc::peer_failed_verification).message().find("not verified") !=
        std::string::npos);
}

TEST_CASE("HTTP versions have names") {
  CHECK(std::string(to_string(http_version::http1_1)) == "HTTP/1.1");
  CHECK(std::string(to_string(http_version::http2)) == "HTTP/2");
  CHECK(std::string(to_string(http_version::unknown)) == "unknown");
}

// The one response classifier (issue 28): coretry::beast's default classifier is held to the
// same function and the same totals (test/beast/beast_test.cpp).
TEST_CASE("curl::retry decides every status as http::classify_response does, GET or POST") {
  asio::io_context io;
  client c(io.get_executor());
  const coretry::http::retry_rules rules{};
  coretry::test::decision_tally tally;
  coretry::test::for_each_http_decision_case([&](const coretry::test::http_decision_case& k) {
    CAPTURE(k.status);
    CAPTURE(k.retry_after);
    CAPTURE(k.method);
    auto st = std::make_shared<detail::http_retry_state>(
        c, request{.method = std::string(k.method), .url = "http://127.0.0.1/"});
    const coretry::retry_policy p = detail::make_http_policy({.max_attempts = 4}, st);
    // A POST is sent once: idempotency is the request's, settled before the loop.
    CHECK(p.max_attempts == (k.method == "GET" ? 4u : 1u));
    response res{.status = k.status};
    if (!k.retry_after.empty())
      res.headers.emplace_back("Retry-After", std::string(k.retry_after));
    coretry::attempt_result r(1);
    r.with_value(res);
    const coretry::attempt_decision d = p.classify(r);
    CHECK(coretry::test::same_decision(
        d, coretry::http::classify_response(k.status, k.retry_after, rules)));
    // The public classifier is the adapter's default.
    CHECK(coretry::test::same_decision(d, classify(r, rules)));
    tally.add(d);
  });
  CHECK(tally == coretry::test::expected_default_tally);
}
