// SPDX-License-Identifier: BSL-1.0
// Cancelling a whole group of in-flight retries from another thread, as a service does at
// shutdown. 1000 operations retry a dependency that is down, on an io_context run by two
// threads; some are sleeping between attempts, some are stuck inside a slow attempt. The main
// thread calls cancel() once: every operation completes promptly with operation_aborted,
// exactly once, and is never retried.
#include <coretry/coretry.hpp>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

int main() {
  asio::io_context io(2);
  auto work = asio::make_work_guard(io);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&] { io.run(); });

  constexpr int n = 1000;
  coretry::cancellation_source shutdown;
  std::atomic<int> attempts{0}, completed{0}, aborted{0}, twice{0};
  auto seen = std::make_unique<std::atomic<int>[]>(n);

  for (int i = 0; i < n; ++i) {
    coretry::retry_policy policy{
        .max_attempts = 1000,
        .attempt_timeout = 30s,
        .backoff =
            coretry::backoff::exponential(20ms, 2.0, 5s).with_jitter(coretry::jitter::full()),
        .cancellation = shutdown.token(),
    };
    // Odd operations hang in their attempt (a dependency that accepted and never answers);
    // even ones fail fast and back off.
    auto call_dependency = [&attempts, hang = i % 2 == 1]() -> asio::awaitable<int> {
      attempts.fetch_add(1);
      if (hang) {
        asio::steady_timer never(co_await asio::this_coro::executor, 1h);
        co_await never.async_wait(asio::use_awaitable);
      }
      throw std::system_error(make_error_code(std::errc::connection_refused));
    };
    coretry::async_retry(io.get_executor(), call_dependency, policy,
                         [&, i](std::error_code ec, int) {
                           if (seen[i].fetch_add(1) > 0)
                             twice.fetch_add(1);
                           if (ec == asio::error::operation_aborted)
                             aborted.fetch_add(1);
                           completed.fetch_add(1);
                         });
  }

  std::this_thread::sleep_for(300ms); // let them fail, back off, retry
  const int attempts_before = attempts.load();
  const auto t0 = std::chrono::steady_clock::now();
  shutdown.cancel();
  while (completed.load() < n && std::chrono::steady_clock::now() - t0 < 10s)
    std::this_thread::sleep_for(100us);
  const auto took =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0);
  work.reset();
  for (auto& t : threads)
    t.join();

  std::printf("%d operations, %d attempts before shutdown, %d after\n", n, attempts_before,
              attempts.load() - attempts_before);
  std::printf("cancel(): %d/%d completed with operation_aborted in %.1f ms, %d completed twice\n",
              aborted.load(), n, took.count(), twice.load());
  const bool ok = completed.load() == n && aborted.load() == n && twice.load() == 0;
  std::puts(ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
