// SPDX-License-Identifier: BSL-1.0
// A braced policy in the HTTP front ends inside co_await: g++ 12 refuses it at compile time,
// saying what to write (package.braced_policy_curl_gcc12, issue 32 finding 20), as the core
// front ends do (braced_policy.cpp).
#include <coretry/curl/curl.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <cstdio>

int main() {
  asio::io_context io;
  coretry::curl::client client(io.get_executor());
  coretry::curl::request req{.url = "http://127.0.0.1:1/x"};
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto r = co_await coretry::curl::retry(client, req, {.max_attempts = 2});
        auto h = co_await coretry::curl::hedge(client, req, {.max_attempts = 2});
        std::printf("%ld %ld\n", r.status, h.status);
      },
      asio::detached);
  io.run();
}
