// A name lookup that never answers must not block the io thread when its transfer is timed out
// or cancelled. getaddrinfo is replaced, in this test binary only, by one that blocks for one
// host name until the test releases it, and delegates to the C library otherwise.

#include <coretry/curl/retry.hpp>

#include <doctest/doctest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <dlfcn.h>
#include <netdb.h>

using namespace std::chrono_literals;

namespace {

constexpr const char* stuck_host = "never-answers.test";

struct stuck_resolver {
  std::mutex m;
  std::condition_variable cv;
  bool released = false;
  int blocked = 0; ///< lookups waiting right now
  int started = 0; ///< lookups of the stuck host so far

  void release() {
    std::lock_guard lock(m);
    released = true;
    cv.notify_all();
  }
  /// Waits until every stuck lookup has returned, so no thread is left inside at exit.
  void drain() {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return blocked == 0; });
  }
};

stuck_resolver& resolver() {
  static stuck_resolver r;
  return r;
}

} // namespace

extern "C" int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                           struct addrinfo** res) {
  if (node && std::strcmp(node, stuck_host) == 0) {
    auto& r = resolver();
    std::unique_lock lock(r.m);
    ++r.started;
    ++r.blocked;
    r.cv.notify_all();
    r.cv.wait(lock, [&] { return r.released; });
    --r.blocked;
    r.cv.notify_all();
    return EAI_AGAIN;
  }
  using fn = int (*)(const char*, const char*, const struct addrinfo*, struct addrinfo**);
  static const fn next = reinterpret_cast<fn>(dlsym(RTLD_NEXT, "getaddrinfo"));
  return next(node, service, hints, res);
}

namespace {

/// Counts ticks of a 5 ms timer on the io_context and the longest gap between two.
struct ticker {
  explicit ticker(asio::io_context& io) : timer(io) { arm(); }
  void arm() {
    timer.expires_after(5ms);
    timer.async_wait([this](std::error_code ec) {
      if (ec)
        return;
      const auto now = std::chrono::steady_clock::now();
      if (ticks++ > 0)
        longest = std::max(longest, now - last);
      last = now;
      arm();
    });
  }
  asio::steady_timer timer;
  int ticks = 0;
  std::chrono::steady_clock::time_point last{};
  std::chrono::steady_clock::duration longest{};
};

} // namespace

TEST_CASE("a transfer stuck in name resolution is timed out and cancelled without blocking") {
  auto& r = resolver();
  // Should the io thread block on a stuck lookup after all, this releases it after 5 s so that
  // the test fails instead of hanging.
  std::atomic<bool> finished{false};
  std::atomic<bool> watchdog_fired{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 500 && !finished; ++i)
      std::this_thread::sleep_for(10ms);
    if (!finished) {
      watchdog_fired = true;
      r.release();
    }
  });
  {
    asio::io_context io;
    coretry::curl::client c(io.get_executor());
    ticker tick(io);
    coretry::curl::request req;
    req.url = std::string("http://") + stuck_host + ":1/";

    // An attempt timeout while the lookup is stuck.
    coretry::retry_policy policy{.max_attempts = 1, .attempt_timeout = 100ms};
    int done = 0;
    std::error_code result;
    coretry::curl::async_retry(c, req, policy, [&](std::error_code ec, coretry::curl::response) {
      ++done;
      result = ec;
    });
    // Cancellation through a slot while the lookup is stuck.
    asio::cancellation_signal cancel;
    int cancelled_done = 0;
    std::error_code cancelled_result;
    coretry::curl::async_retry(c, req, coretry::retry_policy{.max_attempts = 1},
                               asio::bind_cancellation_slot(
                                   cancel.slot(), [&](std::error_code ec, coretry::curl::response) {
                                     ++cancelled_done;
                                     cancelled_result = ec;
                                   }));
    // Run until both lookups are stuck, then cancel the second.
    while (r.started < 2 && io.run_one_for(1s)) {
      std::lock_guard lock(r.m); // r.started is written by the lookup threads
    }
    {
      std::lock_guard lock(r.m);
      REQUIRE(r.started == 2);
    }
    cancel.emit(asio::cancellation_type::terminal);
    // Both complete while the lookups are still stuck: nothing waited for them.
    while ((done == 0 || cancelled_done == 0) && io.run_one_for(5s)) {
    }
    CHECK(done == 1);
    CHECK(result == coretry::errc::attempt_timeout);
    CHECK(cancelled_done == 1);
    CHECK(cancelled_result == asio::error::operation_aborted);
    {
      std::lock_guard lock(r.m);
      CHECK(r.blocked == 2); // still stuck: the io thread never waited for them
    }
    // And the io thread kept serving its other handlers.
    const int before = tick.ticks;
    io.run_for(50ms);
    CHECK(tick.ticks > before);
    CHECK(tick.longest < 1s);
  }
  finished = true;
  watchdog.join();
  CHECK_FALSE(watchdog_fired.load());
  r.release();
  r.drain();
}
