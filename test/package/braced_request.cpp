// SPDX-License-Identifier: BSL-1.0
// The HTTP spelling a user writes first, a braced request inside co_await. g++ 12 miscompiles it
// (free(): invalid pointer at run time); coretry makes g++ 12 refuse it at compile time with a
// message that says what to write (package.braced_request_gcc12); other compilers run it.
#include <coretry/curl/curl.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <cstdio>
#include <string>

int main() {
  using namespace std::chrono_literals;
  asio::io_context io;
  coretry::curl::client client(io.get_executor());
  std::string url = "http://127.0.0.1:1/x";
  coretry::retry_policy policy{.max_attempts = 2, .backoff = coretry::backoff::fixed(1ms)};
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          auto r = co_await coretry::curl::retry(client, {.url = url, .timeout = 2s}, policy);
          std::printf("status %ld\n", r.status);
        } catch (const std::exception& e) {
          std::printf("error: %s\n", e.what());
        }
      },
      asio::detached);
  io.run();
}
