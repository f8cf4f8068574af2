// SPDX-License-Identifier: BSL-1.0
// The spelling a user writes first, a braced policy inside co_await. g++ 12 miscompiles it (the
// temporary is copied bitwise and destroyed twice: free(): invalid pointer at run time); coretry
// makes g++ 12 refuse it at compile time with a message that says what to write
// (package.braced_policy_gcc12, issue 32 finding 20); other compilers run it.
#include <coretry/hedge.hpp>
#include <coretry/retry.hpp>

#include <asio/detached.hpp>

#include <cstdio>

namespace {
asio::awaitable<int> answer() {
  co_return 42;
}
} // namespace

int main() {
  asio::io_context io;
  asio::co_spawn(
      io,
      []() -> asio::awaitable<void> {
        const int v = co_await coretry::retry_async(answer, {.max_attempts = 2, .label = "x"});
        const int h = co_await coretry::hedge_async(answer, {.max_attempts = 2});
        std::printf("%d %d\n", v, h);
      },
      asio::detached);
  io.run();
}
