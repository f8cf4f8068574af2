// SPDX-License-Identifier: BSL-1.0
// Instantiates coretry's function templates the ways an application does, so that the warnings
// consumer (CMakeLists.txt here) checks their bodies as well as their declarations.
#include <coretry/coretry.hpp>
#include <coretry/http.hpp>
#if CORETRY_WITH_CURL
#include <coretry/curl/curl.hpp>
#endif

#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <cstdio>
#include <string>
#include <system_error>
#include <utility>

namespace {

asio::awaitable<int> value_attempt() {
  co_return 42;
}

asio::awaitable<int> coroutine_caller() {
  // Policies named, never braced temporaries inside co_await: g++ 12 (docs/core.md).
  const coretry::retry_policy three{.max_attempts = 3};
  const coretry::retry_policy defaults;
  int n = co_await coretry::retry_async([] { return value_attempt(); }, three);
  coretry::retry_stats stats;
  n += co_await coretry::retry_async([] { return value_attempt(); }, defaults, stats);
  co_return n;
}

void callback_caller(asio::io_context& io) {
  static asio::steady_timer timer(io);
  auto op = [](auto&& token) { return timer.async_wait(std::forward<decltype(token)>(token)); };
  coretry::async_retry(io.get_executor(), op, coretry::retry_policy{},
                       [](std::error_code ec) { std::printf("%s\n", ec.message().c_str()); });
  coretry::async_retry(
      io.get_executor(), [] { return value_attempt(); }, coretry::retry_policy{},
      [](std::error_code ec, int v) { std::printf("%s %d\n", ec.message().c_str(), v); });
}

// coretry/http.hpp as a client without libcurl calls it: designated rules, one operation's
// counts.
bool http_rules_caller(int status, const std::string& method) {
  const coretry::http::retry_rules rules{.status_forcelist = {429, 503}, .status_retries = 2};
  coretry::http::failure_counts counts;
  return coretry::http::may_retry(method, false, rules) &&
         coretry::http::is_retryable_status(status, rules) &&
         counts.record(coretry::http::failure_kind::status, rules) &&
         !coretry::http::parse_retry_after("5").has_value();
}

#if CORETRY_WITH_CURL
asio::awaitable<long> http_coroutine(coretry::curl::client& c, coretry::curl::request req) {
  const coretry::retry_policy policy{.max_attempts = 3}; // named: g++ 12 (docs/core.md)
  auto r = co_await coretry::curl::retry(c, std::move(req), policy);
  co_return r.status;
}

void http_callback(coretry::curl::client& c, coretry::curl::request req) {
  coretry::retry_stats stats;
  coretry::curl::async_retry(c, req, {}, [](std::error_code ec, coretry::curl::response r) {
    std::printf("%s %ld\n", ec.message().c_str(), r.status);
  });
  coretry::curl::async_retry(c, std::move(req), {}, stats,
                             [](std::error_code, coretry::curl::response) {});
}
#endif

} // namespace

void coretry_headers_instantiate(asio::io_context& io) {
  asio::co_spawn(io, coroutine_caller(), asio::detached);
  callback_caller(io);
  std::printf("%d\n", http_rules_caller(503, "GET") ? 1 : 0);
#if CORETRY_WITH_CURL
  coretry::curl::client c(io.get_executor());
  asio::co_spawn(io, http_coroutine(c, coretry::curl::request{}), asio::detached);
  http_callback(c, coretry::curl::request{});
#endif
}
