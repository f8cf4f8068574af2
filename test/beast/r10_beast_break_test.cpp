// SPDX-License-Identifier: BSL-1.0
// Reviewer r10: reproducers against 794c43a's "every response is a health code" rule, through
// <coretry/beast.hpp> and the loopback fault server (Boost.Asio). Built in coretry_beast_tests.
#include <coretry/beast.hpp>
#include <coretry/coretry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace http = boost::beast::http;
using coretry::test::http_action;
using coretry::test::http_fault_server;
using namespace std::chrono_literals;

namespace {

template <class Predicate> void run_until(asio::io_context& io, Predicate done) {
  const auto limit = std::chrono::steady_clock::now() + 20s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > limit)
      throw std::runtime_error("test timed out");
    if (io.stopped())
      io.restart();
    io.run_one_for(100ms);
  }
}

http::request<http::string_body> make_request() {
  http::request<http::string_body> req{http::verb::get, "/", 11};
  req.set(http::field::host, "127.0.0.1");
  return req;
}

coretry::beast::endpoint at(unsigned short port) {
  coretry::beast::endpoint e;
  e.host = "127.0.0.1";
  e.service = std::to_string(port);
  return e;
}

struct outcome {
  std::error_code ec;
  unsigned status = 0;
  std::vector<std::error_code> classified; ///< what the breaker's classifier was handed
};

// One beast::retry on `io` with `policy`, its error caught.
outcome run_once(asio::io_context& io, unsigned short port, coretry::retry_policy policy) {
  outcome out;
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          auto r = co_await coretry::beast::retry(io.get_executor(), at(port), make_request(),
                                                  std::move(policy));
          out.status = r.result_int();
        } catch (const std::system_error& e) {
          out.ec = e.code();
        }
      },
      [&](std::exception_ptr) { done = true; });
  run_until(io, [&] { return done; });
  return out;
}

} // namespace

// Failed at 794c43a (fixed since) (passes at 34382f8). A breaker classifier written against the
// documented contract ("success: healthy"; `condition::client_error` healthy; anything else a
// failure), Polly's ShouldHandle shape: before 794c43a a 200 reached it as an empty code; now every
// response's status is the attempt's health code, so each *successful* 200 reaches the classifier
// as `HTTP 200` (a non-empty error_code) and counts as a failure: a perfectly healthy upstream
// opens the breaker after two OKs, and the third request fails with circuit_open. Observed at
// 794c43a: classifier handed "HTTP 200" three times... the third call ends with errc::circuit_open.
// Expected: three 200s, failures() == 0, breaker closed.
TEST_CASE("r10: a success reaches a custom breaker classifier as HTTP 200, not as no error") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::ok("fine"));
  std::vector<std::error_code> seen;
  auto breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
      .consecutive_failures = 2,
      .break_duration = 1h,
      .classify =
          [&seen](const std::error_code& ec) {
            seen.push_back(ec);
            return !ec || ec == coretry::condition::client_error ? coretry::health::healthy
                                                                 : coretry::health::unhealthy;
          },
      .seed = 1});
  coretry::retry_policy policy;
  policy.max_attempts = 3;
  policy.backoff = coretry::backoff::fixed(1ms);
  policy.breaker = breaker;
  std::vector<outcome> outs;
  for (int i = 0; i < 3; ++i)
    outs.push_back(run_once(io, server.port(), policy));
  for (const auto& e : seen)
    MESSAGE("classifier was handed: '", e.message(), "' (", std::string(e.category().name()), ")");
  for (const auto& o : outs) {
    CHECK_FALSE(o.ec);
    CHECK(o.status == 200);
  }
  CHECK(breaker->failures() == 0);
  CHECK(breaker->state() == coretry::breaker_state::closed);
}

// Failed at 794c43a (fixed since) (passes at 34382f8). Beast parses any three digits as the status,
// "099" included (boost/beast/http/detail/basic_parser.ipp parse_status). The policy accepts a 99
// (not in status_forcelist): the operation *succeeds*. The adapter now sets `health_code(HTTP 99)`
// for it (`last_status != 0`), and 99 is in no condition (`equivalent` puts only 100..399 in
// `answered`), so `default_health` counts this successful attempt as a breaker failure; two of them
// open the breaker. Before, `>= 400` left a 99 success without a health code: healthy. Observed at
// 794c43a: failures() == 2, state open, third call circuit_open.
TEST_CASE("r10: beast: an accepted response with status 099 is counted as a breaker failure") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::raw("HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n"
                                      "Connection: close\r\n\r\nok"));
  auto breaker = std::make_shared<coretry::circuit_breaker>(
      coretry::circuit_breaker_options{.consecutive_failures = 2, .break_duration = 1h, .seed = 1});
  coretry::retry_policy policy;
  policy.max_attempts = 3;
  policy.backoff = coretry::backoff::fixed(1ms);
  policy.breaker = breaker;
  std::vector<outcome> outs;
  for (int i = 0; i < 3; ++i)
    outs.push_back(run_once(io, server.port(), policy));
  for (const auto& o : outs) {
    CHECK_FALSE(o.ec);
    CHECK(o.status == 99);
  }
  CHECK(breaker->failures() == 0);
  CHECK(breaker->state() == coretry::breaker_state::closed);
}
