// SPDX-License-Identifier: BSL-1.0
// Uses coretry through its umbrella header only, as an installed package.
#include <coretry/coretry.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <cstdio>

int main() {
  using namespace std::chrono_literals;
  asio::io_context io;
  int calls = 0;
  int result = 0;
  asio::co_spawn(io,
                 coretry::retry_async(
                     [&]() -> asio::awaitable<int> {
                       if (++calls < 2)
                         throw std::system_error(make_error_code(std::errc::connection_refused));
                       co_return 5;
                     },
                     coretry::retry_policy{.backoff = coretry::backoff::fixed(1ms)}),
                 [&](std::exception_ptr e, int v) { result = e ? -1 : v; });
  io.run();
  std::printf("consumer: result %d after %d calls\n", result, calls);
  return result == 5 && calls == 2 ? 0 : 1;
}
