// SPDX-License-Identifier: BSL-1.0
// The curl rows of docs/errors.md that no other test checks: too many open files, a failed TLS
// handshake, and what the retry loop makes of each.

#include <coretry/breaker.hpp>
#include <coretry/curl/classify.hpp>
#include <coretry/curl/error.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <memory>
#include <string>
#include <system_error>

#include "test_util.hpp"
#include <sys/resource.h>
#include <unistd.h>

using coretry::test::get;
using coretry::test::http_action;
using coretry::test::http_fault_server;
using coretry::test::run_until_done;

namespace {

constexpr auto nothrow = coretry::detail::as_tuple(asio::use_awaitable);

coretry::retry_policy quick(unsigned attempts) {
  return {.max_attempts = attempts, .backoff = coretry::backoff::fixed(1ms)};
}

std::error_code perform_error(asio::io_context& io, client& c, request r) {
  std::error_code result;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    auto [ec, resp] = co_await c.async_perform(std::move(r), nothrow);
    result = ec;
  }());
  return result;
}

/// Lowers the soft descriptor limit so that the next descriptor the process opens fails with
/// EMFILE; restores it when destroyed.
class descriptor_limit {
public:
  descriptor_limit() {
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved_) == 0);
    // The limit bounds descriptor numbers: set it to the lowest free one, so that no number
    // below it is left to open.
    const int lowest_free = ::dup(0);
    REQUIRE(lowest_free >= 0);
    ::close(lowest_free);
    rlimit low = saved_;
    low.rlim_cur = static_cast<rlim_t>(lowest_free);
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  }
  ~descriptor_limit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  descriptor_limit(const descriptor_limit&) = delete;
  descriptor_limit& operator=(const descriptor_limit&) = delete;

private:
  rlimit saved_{};
};

/// Accepts one connection and answers it in plain HTTP, whatever it sent: a TLS client sees
/// no TLS record and fails its handshake.
asio::awaitable<void> plain_http_once(asio::ip::tcp::acceptor& a) {
  auto s = co_await a.async_accept(asio::use_awaitable);
  const std::string reply = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
  co_await asio::async_write(s, asio::buffer(reply), nothrow);
}

struct refusing_budget final : coretry::retry_budget {
  void on_request(std::chrono::nanoseconds) noexcept override {}
  void on_success(std::chrono::nanoseconds) noexcept override {}
  void on_failure(std::chrono::nanoseconds) noexcept override {}
  bool try_retry(std::chrono::nanoseconds) noexcept override { return false; }
};

} // namespace

// Under the sanitizers this test is skipped: their runtime needs descriptors of its own (UBSan's
// vptr check tests whether memory is readable through a pipe, and without one reports a valid
// object as having an "invalid vptr"), so running out of descriptors breaks the checker, not
// the client. The dev build runs it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif

TEST_CASE("too many open files: the transfer fails with couldnt_connect, retried, then works" *
          doctest::skip(sanitized)) {
  asio::io_context io;
  // Listening, never accepting: a socket that could be opened would connect, then time out.
  asio::ip::tcp::acceptor silent(io, {asio::ip::make_address("127.0.0.1"), 0});
  const std::string url =
      "http://127.0.0.1:" + std::to_string(silent.local_endpoint().port()) + "/";
  request req = get(url);
  req.timeout = 5s;
  client c(io.get_executor());
  std::error_code ec;
  coretry::retry_stats stats;
  {
    descriptor_limit limit;
    CHECK(perform_error(io, c, req) == errc::couldnt_connect);
    try {
      run_until_done(io, [&]() -> asio::awaitable<void> {
        co_await coretry::curl::retry(c, req, quick(2), stats);
      }());
    } catch (const std::system_error& e) {
      ec = e.code();
    }
  }
  CHECK(ec == errc::couldnt_connect);
  CHECK(ec.message() == "Couldn't connect to server");
  CHECK(stats.attempts == 2); // retryable: descriptors may free up
  // With descriptors again, the same client works.
  http_fault_server server(io.get_executor());
  CHECK_FALSE(perform_error(io, c, get(server.url())));
  CHECK(server.requests() == 1);
}

TEST_CASE("a failed TLS handshake is ssl_connect_error, never retried") {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  asio::co_spawn(io, plain_http_once(a), asio::detached);
  client c(io.get_executor());
  const std::string url = "https://127.0.0.1:" + std::to_string(a.local_endpoint().port()) + "/";
  coretry::retry_stats stats;
  std::error_code ec;
  try {
    run_until_done(io, [&]() -> asio::awaitable<void> {
      co_await coretry::curl::retry(c, get(url), quick(3), stats);
    }());
  } catch (const std::system_error& e) {
    ec = e.code();
  }
  CHECK(ec == std::error_code(35, coretry::curl::curl_category())); // CURLE_SSL_CONNECT_ERROR
  CHECK(ec.message() == "TLS: the handshake failed (no common protocol version or cipher, or the "
                        "server rejected the client certificate)");
  CHECK_FALSE(coretry::curl::is_retryable(ec));
  CHECK(stats.attempts == 1);
  // An untrusted certificate (measured against a real TLS server by the nginx tests) is
  // CURLE_PEER_FAILED_VERIFICATION, final in the same way.
  const std::error_code untrusted(60, coretry::curl::curl_category());
  CHECK(untrusted.message() ==
        "TLS: the server's certificate was not verified (unknown or untrusted "
        "issuer, self-signed, expired, or not for this host name)");
  CHECK_FALSE(coretry::curl::is_retryable(untrusted));
}

TEST_CASE("an open breaker, an exhausted budget: the request is not sent, the reason says why") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  auto policy = quick(3);
  SUBCASE("circuit_open") {
    auto breaker = std::make_shared<coretry::circuit_breaker>(
        coretry::circuit_breaker_options{.consecutive_failures = 1, .break_duration = 1h});
    breaker->on_failure(std::chrono::steady_clock::now().time_since_epoch());
    policy.breaker = breaker;
    coretry::retry_stats stats;
    std::error_code ec;
    try {
      run_until_done(io, [&]() -> asio::awaitable<void> {
        co_await coretry::curl::retry(c, get(server.url()), policy, stats);
      }());
    } catch (const std::system_error& e) {
      ec = e.code();
    }
    CHECK(ec == coretry::errc::circuit_open);
    CHECK(ec.message() == "circuit breaker open: attempt not sent");
    CHECK(stats.attempts == 0);
    CHECK(server.requests() == 0);
  }
  SUBCASE("budget_exhausted") {
    policy.budget = std::make_shared<refusing_budget>();
    server.push(http_action::with_status(503));
    coretry::retry_stats stats;
    coretry::curl::response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::retry(c, get(server.url()), policy, stats);
    }());
    CHECK(r.status == 503); // the last response, returned
    CHECK(stats.reason == coretry::errc::budget_exhausted);
    CHECK(stats.reason.message() == "retry budget exhausted");
    CHECK(server.requests() == 1);
  }
}
