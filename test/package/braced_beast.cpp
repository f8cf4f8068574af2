// SPDX-License-Identifier: BSL-1.0
// Braced arguments to <coretry/beast.hpp>'s front ends inside co_await: g++ 12 refuses each at
// compile time, saying what to write (package.braced_beast_gcc12), as coretry::curl refuses a
// braced request (braced_request.cpp) and the core a braced policy (braced_policy.cpp). Each
// call below lands in a different refusing overload; braced_beast_check.cmake counts the
// refusals and fails on any other error (an ambiguity, a call no overload takes).
#include <coretry/beast.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

namespace http = boost::beast::http;

int main() {
  boost::asio::io_context io;
  const boost::asio::any_io_executor ex = io.get_executor();
  const coretry::beast::endpoint api{"127.0.0.1", "1"};
  const coretry::retry_policy policy;
  const coretry::http::retry_rules rules;
  coretry::retry_stats stats;
  http::request<http::empty_body> req(http::verb::get, "/", 11);
  auto done = [](boost::system::error_code, http::response<http::string_body>) {};
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        // A braced endpoint: four forms of retry, the exchange.
        co_await coretry::beast::retry(ex, {"127.0.0.1", "1"}, req, policy);
        co_await coretry::beast::retry(ex, {.host = "127.0.0.1"}, req, policy, stats);
        co_await coretry::beast::retry(ex, {"127.0.0.1", "1"}, req, policy, rules);
        co_await coretry::beast::retry(ex, {"127.0.0.1", "1"}, req, policy, rules, stats);
        co_await coretry::beast::async_exchange(ex, {"127.0.0.1", "1"}, req,
                                                boost::asio::use_awaitable);
        // Braced rules.
        co_await coretry::beast::retry(ex, api, req, policy, {.status_forcelist = {503}});
        co_await coretry::beast::retry(ex, api, req, policy, {.status_retries = 1}, stats);
        // A braced policy.
        co_await coretry::beast::retry(ex, api, req, {.max_attempts = 2});
        co_await coretry::beast::retry(ex, api, req, {.max_attempts = 2}, stats);
        co_await coretry::beast::retry(ex, api, req, {.max_attempts = 2}, rules);
        co_await coretry::beast::retry(ex, api, req, {.max_attempts = 2}, rules, stats);
      },
      boost::asio::detached);
  // async_retry: a braced endpoint or braced rules (a braced policy is taken).
  coretry::beast::async_retry(ex, {"127.0.0.1", "1"}, req, policy, rules, done);
  coretry::beast::async_retry(ex, {"127.0.0.1", "1"}, req, policy, done);
  coretry::beast::async_retry(ex, api, req, policy, {.status_retries = 1}, done);
  io.run();
}
