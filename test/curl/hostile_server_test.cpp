// SPDX-License-Identifier: BSL-1.0
// Issue 18: what a hostile or broken server cannot do to a client. No exception crosses a
// libcurl callback, responses are bounded, and the failures that repeat identically are never
// retried.

#include <coretry/curl/classify.hpp>
#include <coretry/curl/client.hpp>
#include <coretry/curl/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "transfer.hpp"

namespace {
constexpr auto nothrow = coretry::detail::as_tuple(asio::use_awaitable);
using coretry::curl::detail::armed_faults;
using coretry::curl::detail::fault_point;

void arm(fault_point p) {
  armed_faults.fetch_or(static_cast<unsigned>(p));
}

coretry::retry_policy fast(unsigned attempts) {
  coretry::retry_policy p;
  p.max_attempts = attempts;
  p.backoff = coretry::backoff::exponential(1ms, 2.0, 4ms);
  return p;
}

// What coretry::curl::retry made of `req` against `server`: the error (empty for a response)
// and the number of requests the server saw.
std::error_code retried_error(asio::io_context& io, client& c, request req) {
  std::error_code result;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await coretry::curl::async_retry(c, std::move(req), fast(4), nothrow);
    result = ec;
  }());
  return result;
}

std::string big_header_response(std::size_t header_bytes, std::size_t line = 8000) {
  std::string out = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n";
  for (std::size_t i = 0; header_bytes > 0; ++i) {
    const std::size_t n = std::min(line, header_bytes);
    out += "X-Fill-" + std::to_string(i) + ": " + std::string(n, 'a') + "\r\n";
    header_bytes -= n;
  }
  return out + "\r\nok";
}
} // namespace

TEST_CASE("an exception in a libcurl callback fails that transfer alone; the client stays usable") {
  // Issue 18, finding 1: std::bad_alloc in the body callback unwound through libcurl, out of
  // io.run(), and left the multi handle unusable (every later request: failed_init).
  for (auto point : {fault_point::body, fault_point::header, fault_point::socket}) {
    CAPTURE(static_cast<unsigned>(point));
    asio::io_context io;
    http_fault_server server(io.get_executor());
    server.set_default(http_action::ok("hello"));
    client c(io.get_executor());
    arm(point);
    auto failed = perform(io, c, get(server.url()));
    CHECK(failed.ec == errc::out_of_memory);
    CHECK(failed.r.error_detail.starts_with("coretry: exception"));
    CHECK_FALSE(coretry::curl::is_retryable(failed.ec));
    for (int i = 0; i < 3; ++i) {
      auto ok = perform(io, c, get(server.url()));
      CHECK_FALSE(ok.ec);
      CHECK(ok.r.body == "hello");
    }
    CHECK(c.stats().active_transfers == 0);
  }
}

TEST_CASE("a timer callback that throws is recovered from: the transfer still completes") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::ok("hello"));
  client c(io.get_executor());
  arm(fault_point::timer);
  auto first = perform(io, c, get(server.url()));
  CHECK_FALSE(first.ec);
  CHECK(first.r.body == "hello");
  CHECK(armed_faults.load() == 0);
  CHECK_FALSE(perform(io, c, get(server.url())).ec);
}

TEST_CASE("a body over max_response_body fails with filesize_exceeded, announced or not") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client_options o;
  o.max_response_body = 1000;
  client c(io.get_executor(), o);
  // Announced by Content-Length: refused before any of it is stored.
  server.push(http_action::ok(std::string(1001, 'x')));
  auto announced = perform(io, c, get(server.url()));
  CHECK(announced.ec == errc::filesize_exceeded);
  // Chunked, no length announced: fails once it grows past the limit.
  std::string chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i)
    chunked += "64\r\n" + std::string(100, 'y') + "\r\n";
  chunked += "0\r\n\r\n";
  server.push(http_action::raw(chunked));
  auto grown = perform(io, c, get(server.url()));
  CHECK(grown.ec == errc::filesize_exceeded);
  CHECK(grown.r.error_detail.find("max_response_body") != std::string::npos);
  // Exactly at the limit is fine.
  server.push(http_action::ok(std::string(1000, 'z')));
  auto exact = perform(io, c, get(server.url()));
  CHECK_FALSE(exact.ec);
  CHECK(exact.r.body.size() == 1000);
  // Not retried: the same response is as large the next time.
  server.set_default(http_action::ok(std::string(5000, 'x')));
  const auto before = server.requests();
  CHECK(retried_error(io, c, get(server.url())) == errc::filesize_exceeded);
  CHECK(server.requests() == before + 1);
}

TEST_CASE("header bytes over max_response_headers fail with filesize_exceeded, not retried") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client_options o;
  o.max_response_headers = 4096;
  client c(io.get_executor(), o);
  server.set_default(http_action::raw(big_header_response(5000), true));
  CHECK(retried_error(io, c, get(server.url())) == errc::filesize_exceeded);
  CHECK(server.requests() == 1);
  server.set_default(http_action::raw(big_header_response(3000), true));
  CHECK_FALSE(perform(io, c, get(server.url())).ec);
}

TEST_CASE("libcurl's own header limits give the same error, never retried") {
  // Issue 18, finding 8: a block over libcurl's 300 KiB cap (CURLE_RECV_ERROR) was retried and
  // downloaded max_attempts times; one line over 100 KiB gave out_of_memory.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client_options o;
  o.max_response_headers = std::size_t{4} << 20; // above libcurl's caps, which then apply
  client c(io.get_executor(), o);
  server.set_default(http_action::raw(big_header_response(400 * 1024)));
  CHECK(retried_error(io, c, get(server.url())) == errc::filesize_exceeded);
  CHECK(server.requests() == 1);
  server.set_default(http_action::raw(big_header_response(150 * 1024, 150 * 1024)));
  CHECK(retried_error(io, c, get(server.url())) == errc::filesize_exceeded);
  CHECK(server.requests() == 2);
  // With the default limit (256 KiB), the block is refused by the client first.
  client d(io.get_executor());
  server.set_default(http_action::raw(big_header_response(400 * 1024)));
  CHECK(retried_error(io, d, get(server.url())) == errc::filesize_exceeded);
  CHECK(server.requests() == 3);
}

TEST_CASE("response size limits are validated") {
  asio::io_context io;
  client_options o;
  o.max_response_headers = 0;
  CHECK_THROWS_WITH_AS(client(io.get_executor(), o), doctest::Contains("max_response_headers = 0"),
                       std::invalid_argument);
  o = {};
  o.max_response_body = 0; // no limit: allowed
  CHECK_NOTHROW(client(io.get_executor(), o));
}

TEST_CASE("a trailer line starting with HTTP/ does not start a response of its own") {
  // After a final response's chunked body, a trailer "HTTP/1.1 503 ..." was taken for the status
  // line of a next response: the real fields were erased and the trailers after it became the
  // response's fields, a Retry-After among them.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::raw("HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n"
                               "X-Head: h\r\n\r\n4\r\nbusy\r\n0\r\nHTTP/1.1 503: Again\r\n"
                               "Retry-After: 30\r\n\r\n",
                               true));
  client c(io.get_executor());
  auto first = perform(io, c, get(server.url()));
  REQUIRE_FALSE(first.ec);
  CHECK(first.r.status == 503);
  CHECK(first.r.header("X-Head") == "h");
  CHECK_FALSE(first.r.header("Retry-After"));
}

TEST_CASE("trailer fields are not response headers: a Retry-After trailer is ignored") {
  // Issue 18, finding 9: trailers were merged into response::headers and obeyed.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::raw("HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n"
                               "X-Head: h\r\n\r\n4\r\nbusy\r\n0\r\nRetry-After: 30\r\n"
                               "X-Trailer: t\r\n\r\n",
                               true));
  client c(io.get_executor());
  auto first = perform(io, c, get(server.url()));
  REQUIRE_FALSE(first.ec);
  CHECK(first.r.status == 503);
  CHECK(first.r.body == "busy");
  CHECK(first.r.header("X-Head") == "h");
  CHECK_FALSE(first.r.header("Retry-After"));
  CHECK_FALSE(first.r.header("X-Trailer"));
  // Through retry: the 30 s trailer is not a hint; the backoff's few milliseconds are used.
  server.push(http_action::raw("HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n"
                               "\r\n0\r\nRetry-After: 30\r\n\r\n",
                               true));
  server.push(http_action::ok("done"));
  coretry::retry_stats stats;
  response r;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    r = co_await coretry::curl::retry(c, get(server.url()), fast(3), stats);
  }());
  CHECK(r.body == "done");
  CHECK(stats.attempts == 2);
  CHECK(stats.slept < 1s);
}

TEST_CASE("a header line starting with HTTP/ inside the block erases no earlier field") {
  // Issue 18, finding 9: it was taken for a new status line, dropping Retry-After.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::raw("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\n"
                               "HTTP/2-Settings: x\r\nContent-Length: 0\r\n\r\n",
                               true));
  client c(io.get_executor());
  auto got = perform(io, c, get(server.url()));
  REQUIRE_FALSE(got.ec);
  CHECK(got.r.status == 503);
  CHECK(got.r.header("Retry-After") == "7");
  CHECK(got.r.header("Content-Length") == "0");
}

TEST_CASE("interim and redirect responses still start a new header block") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::raw("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                               "HTTP/1.1 302 Found\r\nLocation: /next\r\nContent-Length: 0\r\n\r\n",
                               true));
  server.push({.status = 200, .headers = {{"X-Final", "1"}}, .body = "end"});
  client c(io.get_executor());
  auto req = get(server.url());
  req.follow_redirects = true;
  auto got = perform(io, c, req);
  REQUIRE_FALSE(got.ec);
  CHECK(got.r.status == 200);
  CHECK(got.r.header("X-Final") == "1");
  CHECK_FALSE(got.r.header("Location"));
  CHECK_FALSE(got.r.header("Link"));
}

TEST_CASE("an early 413 before an upload was read is the response, not a retried send error") {
  // Issue 18, finding 7: the server answers 413 and closes without reading the PUT; libcurl's
  // send then fails (a reset), which was retried, re-sending the upload max_attempts times.
  for (std::size_t size : {std::size_t{64} << 10, std::size_t{200} << 10, std::size_t{900} << 10,
                           std::size_t{3} << 20, std::size_t{16} << 20}) {
    CAPTURE(size);
    for (int round = 0; round < 4; ++round) {
      asio::io_context io;
      http_fault_server server(io.get_executor());
      http_action early = http_action::with_status(413, "too large");
      early.early = true;
      early.delay = std::chrono::milliseconds(round % 2 * 20);
      early.keep_alive = round < 2;
      server.push(early);
      client c(io.get_executor());
      request put;
      put.method = "PUT";
      put.url = server.url("/upload");
      put.body = std::string(size, 'u');
      put.headers = {{"Expect", ""}}; // no 100-continue: the body goes out at once
      std::error_code error;
      response r;
      run_until_done(io, [&]() -> asio::awaitable<void> {
        auto [ec, got] = co_await coretry::curl::async_retry(c, put, fast(4), nothrow);
        error = ec;
        r = std::move(got);
      }());
      CHECK_FALSE(error);
      CHECK(r.status == 413);
      CHECK(server.requests() == 1);
    }
  }
}

TEST_CASE("property: no deterministic failure is retried") {
  // Each case fails the same way on every attempt: retrying it would only repeat the transfer.
  // Seeded order, four attempts allowed; the server must see exactly one request.
  struct failure {
    const char* name;
    http_action action;
    bool upload;
  };
  auto early = [](int status) {
    auto a = http_action::with_status(status, "no");
    a.early = true;
    a.delay = 20ms;
    a.keep_alive = false;
    return a;
  };
  std::vector<failure> cases{
      {"body over the limit", http_action::ok(std::string(70u << 20, 'x')), false},
      {"header block over the limit", http_action::raw(big_header_response(300u << 10)), false},
      {"header line over libcurl's cap",
       http_action::raw(big_header_response(150u << 10, 150u << 10)), false},
      {"not HTTP at all", http_action::raw("SSH-2.0-OpenSSH\r\n\r\n"), false},
      {"early 413 on an upload", early(413), true},
      {"early 400 on an upload", early(400), true},
      {"early 401 on an upload", early(401), true},
      {"early 404 on an upload", early(404), true},
      {"a 404", http_action::with_status(404), false},
      {"a 409", http_action::with_status(409), false},
  };
  std::mt19937 rng(18);
  std::shuffle(cases.begin(), cases.end(), rng);
  for (const auto& f : cases) {
    CAPTURE(f.name);
    asio::io_context io;
    http_fault_server server(io.get_executor());
    server.push(f.action);
    server.set_default(http_action::ok("would have worked"));
    client c(io.get_executor());
    request req = get(server.url());
    if (f.upload) {
      req.method = "PUT";
      req.body = std::string(std::size_t{8} << 20, 'u');
      req.headers = {{"Expect", ""}};
    }
    std::error_code error;
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      auto [ec, got] = co_await coretry::curl::async_retry(c, req, fast(4), nothrow);
      error = ec;
      r = std::move(got);
    }());
    CHECK(server.requests() == 1);
    CHECK((error || r.status >= 400));
  }
}

TEST_CASE("redirects: 301/302 turn POST into GET, 303 everything but HEAD, others keep the body") {
  // Issue 18, finding 5: a PUT or DELETE redirected by 301/302/303 went out with its method and
  // without its body; a DELETE redirected by 303 stayed a DELETE.
  struct hop {
    const char* method;
    int status;
    const char* then_method;
    bool keeps_body;
  };
  for (const hop& h :
       {hop{"POST", 301, "GET", false}, hop{"POST", 302, "GET", false},
        hop{"POST", 303, "GET", false}, hop{"POST", 307, "POST", true},
        hop{"POST", 308, "POST", true}, hop{"PUT", 301, "PUT", true}, hop{"PUT", 302, "PUT", true},
        hop{"PUT", 303, "GET", false}, hop{"PUT", 307, "PUT", true}, hop{"PUT", 308, "PUT", true},
        hop{"DELETE", 302, "DELETE", true}, hop{"DELETE", 303, "GET", false},
        hop{"PATCH", 301, "PATCH", true}, hop{"PATCH", 303, "GET", false}}) {
    const std::string what = std::string(h.method) + " " + std::to_string(h.status);
    CAPTURE(what);
    asio::io_context io;
    http_fault_server server(io.get_executor());
    server.push({.status = h.status, .headers = {{"Location", "/next"}}, .body = ""});
    server.push(http_action::ok("landed"));
    client c(io.get_executor());
    request req;
    req.method = h.method;
    req.url = server.url("/first");
    req.body = "payload";
    req.follow_redirects = true;
    req.retry_non_idempotent = true;
    auto got = perform(io, c, req);
    REQUIRE_FALSE(got.ec);
    CHECK(got.r.status == 200);
    CHECK(got.r.body == "landed");
    REQUIRE(server.log().size() == 2);
    const auto& second = server.log()[1];
    CHECK(second.target == "/next");
    CHECK(second.method == h.then_method);
    CHECK(second.body == (h.keeps_body ? "payload" : ""));
    if (!h.keeps_body)
      CHECK(second.header("Content-Length").empty());
  }
}

TEST_CASE("a redirect followed by the client drops credentials when the host changes") {
  asio::io_context io;
  http_fault_server first(io.get_executor()), other(io.get_executor());
  first.push({.status = 307, .headers = {{"Location", other.url("/there")}}, .body = ""});
  client c(io.get_executor());
  request req;
  req.method = "PUT";
  req.url = first.url("/here");
  req.body = "payload";
  req.headers = {{"Authorization", "Bearer secret"},
                 {"X-Keep", "1"},
                 {"Host", "first.example"},
                 {"Cookie", "session=1"}};
  req.follow_redirects = true;
  auto got = perform(io, c, req);
  REQUIRE_FALSE(got.ec);
  REQUIRE(other.log().size() == 1);
  CHECK(other.log()[0].header("Authorization").empty());
  CHECK(other.log()[0].header("Cookie").empty());
  // A Host header names the first origin: the next one gets its own, as libcurl does for the
  // redirects it follows.
  CHECK(other.log()[0].header("Host") == "127.0.0.1:" + std::to_string(other.port()));
  CHECK(other.log()[0].header("X-Keep") == "1");
  CHECK(other.log()[0].body == "payload");
}

TEST_CASE("request::timeout covers every redirect the client follows itself") {
  // Each hop of a PUT's redirects was a new transfer with the whole timeout again: three hops
  // of 0.4 s passed a 0.6 s timeout (libcurl's own redirects count against one timeout).
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push({.status = 307, .headers = {{"Location", "/b"}}, .body = "", .delay = 400ms});
  server.push({.status = 307, .headers = {{"Location", "/c"}}, .body = "", .delay = 400ms});
  server.push(http_action::delayed(400ms, "done"));
  client c(io.get_executor());
  request req;
  req.method = "PUT";
  req.url = server.url("/a");
  req.body = "b";
  req.follow_redirects = true;
  req.timeout = 600ms;
  const auto start = std::chrono::steady_clock::now();
  auto got = perform(io, c, req);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(got.ec == errc::operation_timedout);
  CHECK(took < 1000ms);
  CHECK(server.requests() == 2);
}

TEST_CASE("max_response_headers counts every hop of a redirect the client follows itself") {
  // As for libcurl's own redirects (a GET): the count restarted at each hop of a PUT's.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  const std::string big(600, 'x');
  client_options o;
  o.max_response_headers = 1000;
  client c(io.get_executor(), o);
  for (const char* method : {"GET", "PUT"}) {
    CAPTURE(method);
    server.push({.status = 307, .headers = {{"Location", "/b"}, {"X-Big", big}}, .body = ""});
    server.push({.headers = {{"X-Big", big}}, .body = "done"});
    request req;
    req.method = method;
    req.url = server.url("/a");
    req.follow_redirects = true;
    CHECK(perform(io, c, req).ec == errc::filesize_exceeded);
  }
}

TEST_CASE("max_redirects counts the hops the client followed before libcurl follows the rest") {
  // A PUT turned into a GET by a 303 is followed by libcurl from there on, which was given the
  // whole max_redirects again: 1 + 2 redirects for a limit of 2.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push({.status = 303, .headers = {{"Location", "/b"}}, .body = ""});
  server.set_default({.status = 302, .headers = {{"Location", "/again"}}, .body = ""});
  client c(io.get_executor());
  request req;
  req.method = "PUT";
  req.url = server.url("/a");
  req.body = "b";
  req.follow_redirects = true;
  req.max_redirects = 2;
  CHECK(perform(io, c, req).ec == errc::too_many_redirects);
  CHECK(server.requests() == 3);
}

TEST_CASE("a redirect loop on a PUT stops at max_redirects") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default({.status = 302, .headers = {{"Location", "/again"}}, .body = ""});
  client c(io.get_executor());
  request req;
  req.method = "PUT";
  req.url = server.url();
  req.body = "b";
  req.follow_redirects = true;
  req.max_redirects = 2;
  CHECK(perform(io, c, req).ec == errc::too_many_redirects);
  CHECK(server.requests() == 3);
}

TEST_CASE("admission: huge stream limits are validated, and no request times out in libcurl's "
          "queue") {
  // Issue 18, finding 4: max_streams_per_connection = LONG_MAX passed validation and overflowed
  // the capacity into "unlimited": every transfer went into libcurl, which queued them, and the
  // queued ones timed out.
  asio::io_context io;
  client_options bad;
  bad.max_streams_per_connection = LONG_MAX;
  CHECK_THROWS_WITH_AS(client(io.get_executor(), bad),
                       doctest::Contains("max_streams_per_connection = 9223372036854775807"),
                       std::invalid_argument);
  http_fault_server server(io.get_executor());
  server.set_default(http_action::delayed(100ms, "slow"));
  client_options o;
  o.max_total_connections = 2;
  o.max_streams_per_connection = INT32_MAX;
  client c(io.get_executor(), o);
  int done = 0, timed_out = 0;
  for (int i = 0; i < 16; ++i) {
    auto req = get(server.url());
    req.timeout = 450ms; // 4 server replies; the whole batch takes 8
    c.async_perform(req, [&](std::error_code ec, response) {
      ++done;
      timed_out += ec == errc::operation_timedout;
    });
  }
  run_until(io, [&] { return done == 16; });
  CHECK(timed_out == 0);
  CHECK(c.stats().peak_active_transfers <= 2);
}

TEST_CASE("a body is sent without libcurl's form Content-Type, and without Expect by default") {
  // Issue 18, findings 10 and 12.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  auto p = post(server.url());
  REQUIRE_FALSE(perform(io, c, p).ec);
  CHECK(server.log().back().header("Content-Type").empty());
  p.headers = {{"Content-Type", "application/json"}};
  REQUIRE_FALSE(perform(io, c, p).ec);
  CHECK(server.log().back().header("Content-Type") == "application/json");
  // A 2 MiB PUT to a server that never sends 100 Continue: no Expect, no 1 s wait.
  request put;
  put.method = "PUT";
  put.url = server.url();
  put.body = std::string(std::size_t{2} << 20, 'p');
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_FALSE(perform(io, c, put).ec);
  CHECK(std::chrono::steady_clock::now() - start < 800ms);
  CHECK(server.log().back().header("Expect").empty());
  CHECK(server.log().back().body.size() == put.body.size());
  // Asked for: sent, the wait bounded by the option.
  client_options o;
  o.expect_continue_timeout = 100ms;
  client expecting(io.get_executor(), o);
  REQUIRE_FALSE(perform(io, expecting, put).ec);
  CHECK(server.log().back().header("Expect") == "100-continue");
  CHECK(server.log().back().body.size() == put.body.size());
}

TEST_CASE("proxies: the environment is ignored unless asked; an explicit proxy is used") {
  // Issue 18, finding 11: http_proxy was obeyed silently.
  asio::io_context io;
  http_fault_server target(io.get_executor()), proxy(io.get_executor());
  proxy.set_default(http_action::ok("via proxy"));
  target.set_default(http_action::ok("direct"));
  struct env_guard {
    explicit env_guard(const std::string& v) { ::setenv("http_proxy", v.c_str(), 1); }
    ~env_guard() { ::unsetenv("http_proxy"); }
  } env(proxy.url(""));
  ::unsetenv("no_proxy");
  ::unsetenv("NO_PROXY");
  client plain(io.get_executor());
  CHECK(perform(io, plain, get(target.url("/x"))).r.body == "direct");
  client_options from_env;
  from_env.proxy_from_environment = true;
  client env_client(io.get_executor(), from_env);
  CHECK(perform(io, env_client, get(target.url("/x"))).r.body == "via proxy");
  REQUIRE(proxy.log().size() == 1);
  CHECK(proxy.log()[0].target == target.url("/x")); // absolute form, as to a proxy
  ::unsetenv("http_proxy");
  client_options explicit_proxy;
  explicit_proxy.proxy = proxy.url("");
  client via(io.get_executor(), explicit_proxy);
  CHECK(perform(io, via, get(target.url("/y"))).r.body == "via proxy");
  explicit_proxy.no_proxy = "127.0.0.1";
  client bypass(io.get_executor(), explicit_proxy);
  CHECK(perform(io, bypass, get(target.url("/z"))).r.body == "direct");
}

TEST_CASE("a stalled transfer ends after stall_timeout, even without a request timeout") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::slow_body(std::string(100, 's'), 400ms));
  client_options o;
  o.stall_timeout = 1s;
  o.stall_min_bytes_per_second = 100;
  client c(io.get_executor(), o);
  const auto start = std::chrono::steady_clock::now();
  CHECK(perform(io, c, get(server.url())).ec == errc::operation_timedout);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("decompress sends Accept-Encoding and decodes the body") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  const std::string gz("\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\xcb\x48\xcd\xc9\xc9\xd7\x51\x48"
                       "\x49\x4d\xce\xcf\x2d\x28\x4a\x2d\x2e\x4e\x4d\x01\x00\x6a\xec\xd8\xff\x13"
                       "\x00\x00\x00",
                       39);
  server.set_default({.headers = {{"Content-Encoding", "gzip"}}, .body = gz});
  client plain(io.get_executor());
  auto raw = perform(io, plain, get(server.url()));
  CHECK(raw.r.body == gz);
  CHECK(server.log().back().header("Accept-Encoding").empty());
  client_options o;
  o.decompress = true;
  client c(io.get_executor(), o);
  auto got = perform(io, c, get(server.url()));
  CHECK(got.r.body == "hello, decompressed");
  CHECK(server.log().back().header("Accept-Encoding").find("gzip") != std::string::npos);
}

TEST_CASE("the new client options are validated") {
  asio::io_context io;
  auto refused = [&](auto change) {
    client_options o;
    change(o);
    try {
      client c(io.get_executor(), o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused([](client_options& o) { o.stall_timeout = -1s; }).find("stall_timeout = -1s") !=
        std::string::npos);
  CHECK(refused([](client_options& o) {
          o.stall_min_bytes_per_second = 0;
        }).find("stall_min_bytes_per_second = 0") != std::string::npos);
  CHECK(refused([](client_options& o) {
          o.expect_continue_timeout = -5ms;
        }).find("expect_continue_timeout = -5ms") != std::string::npos);
  CHECK(refused([](client_options& o) { o.proxy = "proxy:3128"; }).find("proxy = \"proxy:3128\"") !=
        std::string::npos);
  CHECK(refused([](client_options& o) { o.proxy = "http://p:1"; }) == "accepted");
}
