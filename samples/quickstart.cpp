// SPDX-License-Identifier: BSL-1.0
// The README's first example: retry a flaky operation with jittered exponential backoff.
#include <coretry/coretry.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <cstdio>

using namespace std::chrono_literals;

// A stand-in for a call to a flaky dependency: fails twice, then answers.
asio::awaitable<int> flaky_call(int& calls) {
  if (++calls < 3)
    throw std::system_error(make_error_code(std::errc::connection_refused));
  co_return 42;
}

asio::awaitable<void> run() {
  int calls = 0;
  coretry::retry_policy policy{
      .max_attempts = 5,
      .deadline = 2s,
      .backoff =
          coretry::backoff::exponential(10ms, 2.0, 200ms).with_jitter(coretry::jitter::full()),
      .on_retry =
          [](const coretry::retry_event& e) {
            std::printf("attempt %u failed (%s); retrying in %.1f ms\n", e.attempt,
                        e.error.message().c_str(), e.delay.count() / 1e6);
          },
  };
  const int answer = co_await coretry::retry_async([&] { return flaky_call(calls); }, policy);
  std::printf("answer %d after %d calls\n", answer, calls);
}

int main() {
  asio::io_context io;
  bool ok = false;
  asio::co_spawn(io, run(), [&](std::exception_ptr e) { ok = !e; });
  io.run();
  return ok ? 0 : 1;
}
