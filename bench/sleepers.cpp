// Memory and cancellation cost of many operations waiting in backoff on one thread, next to its
// baseline: bare coroutines each awaiting a steady_timer and each with its own
// cancellation_signal, cancelled one signal at a time.
//
//   coretry_sleepers [count]      (default 1,000,000)
//
// Prints, for each variant, bytes of RSS per waiting operation, the time to start them all and
// the time from the cancel call until every operation has completed.
#include <coretry/coretry.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

long rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

double ms_since(steady::time_point t0) {
  return std::chrono::duration<double, std::milli>(steady::now() - t0).count();
}

struct result {
  double bytes_per_op;
  double start_ms;
  double cancel_ms;
  long completed;
};

result bare(long n) {
  asio::io_context io(1);
  std::vector<asio::cancellation_signal> signals(static_cast<std::size_t>(n));
  long completed = 0;
  const long rss0 = rss_bytes();
  auto t0 = steady::now();
  for (long i = 0; i < n; ++i)
    asio::co_spawn(
        io,
        []() -> asio::awaitable<void> {
          asio::steady_timer t(co_await asio::this_coro::executor, 1h);
          co_await t.async_wait(asio::use_awaitable);
        },
        asio::bind_cancellation_slot(signals[static_cast<std::size_t>(i)].slot(),
                                     [&](std::exception_ptr) { ++completed; }));
  io.poll(); // every coroutine is now waiting on its timer
  const double start_ms = ms_since(t0);
  const long rss1 = rss_bytes();
  t0 = steady::now();
  for (auto& s : signals)
    s.emit(asio::cancellation_type::terminal);
  io.run();
  return {double(rss1 - rss0) / double(n), start_ms, ms_since(t0), completed};
}

result with_coretry(long n) {
  asio::io_context io(1);
  coretry::cancellation_source shutdown;
  coretry::retry_policy policy{
      .max_attempts = 10,
      .backoff = coretry::backoff::fixed(1h),
      .cancellation = shutdown.token(),
  };
  long completed = 0;
  const long rss0 = rss_bytes();
  auto t0 = steady::now();
  for (long i = 0; i < n; ++i)
    coretry::async_retry(
        io.get_executor(),
        []() -> asio::awaitable<int> {
          throw std::system_error(make_error_code(std::errc::connection_refused));
          co_return 0;
        },
        policy, [&](std::error_code, int) { ++completed; });
  io.poll(); // every operation has failed once and is now sleeping an hour
  const double start_ms = ms_since(t0);
  const long rss1 = rss_bytes();
  t0 = steady::now();
  shutdown.cancel();
  io.run();
  return {double(rss1 - rss0) / double(n), start_ms, ms_since(t0), completed};
}

void print(const char* name, long n, const result& r) {
  std::printf("%-34s %9ld ops  %7.0f B/op  start %7.0f ms  cancel all %7.0f ms  completed %ld\n",
              name, n, r.bytes_per_op, r.start_ms, r.cancel_ms, r.completed);
}

} // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1'000'000;
  const result b = bare(n);
  print("bare coroutine + timer + signal", n, b);
  const result c = with_coretry(n);
  print("coretry, sleeping, group token", n, c);
  std::printf("ratio coretry/bare: memory %.2fx, cancel %.2fx\n", c.bytes_per_op / b.bytes_per_op,
              c.cancel_ms / b.cancel_ms);
  return b.completed == n && c.completed == n ? 0 : 1;
}
