// SPDX-License-Identifier: BSL-1.0
// A name lookup that never answers must not hold the io thread: libcurl's threaded resolver
// runs getaddrinfo, and this executable defines getaddrinfo itself (the dynamic linker prefers
// the executable's definition to libc's, and to a sanitizer's interceptor), so a lookup of
// `never-answers.test` blocks until the test releases it, deterministically and without root.
// Every other name goes to the next definition (the sanitizer's or libc's).

#include <coretry/curl/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include <dlfcn.h>
#include <netdb.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

constexpr const char* stuck_name = "never-answers.test";

struct stuck_resolver {
  std::mutex mutex;
  std::condition_variable released_cv;
  bool released = false;
  std::atomic<int> entered{0};  ///< lookups of stuck_name that started
  std::atomic<int> returned{0}; ///< and that returned
  std::atomic<int> delegated{0};
  std::vector<pid_t> threads; ///< the resolver threads that looked stuck_name up
};

stuck_resolver& resolver() {
  static stuck_resolver r;
  return r;
}

using getaddrinfo_fn = int (*)(const char*, const char*, const addrinfo*, addrinfo**);

/// Lets every stuck lookup return (EAI_NONAME) and waits for the resolver threads to be gone,
/// so that none is left blocked, or still freeing its data, when the test ends.
void release_stuck_lookups() {
  auto& r = resolver();
  {
    std::lock_guard lock(r.mutex);
    r.released = true;
  }
  r.released_cv.notify_all();
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (r.returned.load() < r.entered.load() && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::lock_guard lock(r.mutex);
  r.released = false;
}

/// Waits (bounded) until every resolver thread that was stuck has exited: the detached
/// threads have finished their cleanup, nothing is left running at the end of the test. (The
/// threads are followed by id: a sanitizer's runtime may start threads of its own.)
void wait_resolver_threads_gone() {
  std::vector<pid_t> tids;
  {
    std::lock_guard lock(resolver().mutex);
    tids.swap(resolver().threads);
  }
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (pid_t tid : tids) {
    const auto path = "/proc/self/task/" + std::to_string(tid);
    while (std::filesystem::exists(path) && std::chrono::steady_clock::now() < limit)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK_FALSE(std::filesystem::exists(path));
  }
}

/// Counts ticks every millisecond on `io` until `stop` is set.
asio::awaitable<void> ticker(std::atomic<int>& ticks, const bool& stop) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  while (!stop) {
    t.expires_after(1ms);
    co_await t.async_wait(asio::use_awaitable);
    ++ticks;
  }
}

} // namespace

extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints,
                           addrinfo** res) {
  auto& r = resolver();
  if (node && std::strcmp(node, stuck_name) == 0) {
    {
      std::unique_lock lock(r.mutex);
      r.threads.push_back(static_cast<pid_t>(::syscall(SYS_gettid)));
      ++r.entered;
      // Bounded, so that a regression fails the test instead of hanging it forever.
      r.released_cv.wait_for(lock, std::chrono::seconds(30), [&] { return r.released; });
    }
    ++r.returned;
    return EAI_NONAME;
  }
  ++r.delegated;
  static const auto next = reinterpret_cast<getaddrinfo_fn>(dlsym(RTLD_NEXT, "getaddrinfo"));
  return next(node, service, hints, res);
}

TEST_CASE("an attempt timed out while its host name is resolved does not block the io thread") {
  auto& r = resolver();
  const int entered_before = r.entered.load();
  {
    asio::io_context io;
    std::atomic<int> ticks{0};
    bool stop = false;
    asio::co_spawn(io, ticker(ticks, stop), asio::detached);
    client c(io.get_executor());
    coretry::retry_policy policy;
    policy.max_attempts = 2;
    policy.backoff = coretry::backoff::fixed(1ms);
    policy.attempt_timeout = 200ms;
    coretry::retry_stats stats;
    int completions = 0;
    std::error_code result;
    bool lookups_stuck_at_completion = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          try {
            co_await coretry::curl::retry(c, get(std::string("http://") + stuck_name + ":1/"),
                                          policy, stats);
          } catch (const std::system_error& e) {
            result = e.code();
          }
          ++completions;
          lookups_stuck_at_completion = r.returned.load() < r.entered.load();
        },
        asio::detached);
    run_until(io, [&] { return completions == 1; });
    // The lookups went through the interposed getaddrinfo (a sanitizer's interceptor or a static
    // link bypassing it would make this test vacuous), and both attempts timed out and were removed while their lookups were still stuck: the
    // removal did not wait for them.
    CHECK(r.entered.load() - entered_before == 2);
    CHECK(lookups_stuck_at_completion);
    CHECK(stats.attempts == 2);
    CHECK(result == coretry::errc::attempt_timeout);
    // The io thread still runs other handlers while the lookups stay stuck.
    const int ticks_then = ticks.load();
    run_until(io, [&] { return ticks.load() >= ticks_then + 5; });
    CHECK(r.returned.load() < r.entered.load());
    CHECK(completions == 1);
    CHECK(c.stats().active_transfers == 0);
    stop = true;
  }
  release_stuck_lookups();
  wait_resolver_threads_gone();
}

TEST_CASE("cancelling a transfer while its host name is resolved completes at once") {
  auto& r = resolver();
  {
    asio::io_context io;
    std::atomic<int> ticks{0};
    bool stop = false;
    asio::co_spawn(io, ticker(ticks, stop), asio::detached);
    auto c = std::make_unique<client>(io.get_executor());
    asio::cancellation_signal signal;
    int completions = 0;
    std::error_code result;
    const int entered_before = r.entered.load();
    auto handler = asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, response) {
      ++completions;
      result = ec;
    });
    bool by_destruction = false;
    SUBCASE("through the handler's slot") {}
    SUBCASE("by destroying the client") {
      by_destruction = true;
    }
    coretry::retry_policy policy;
    policy.max_attempts = 3;
    coretry::curl::async_retry(*c, get(std::string("http://") + stuck_name + ":1/"), policy,
                               handler);
    run_until(io, [&] { return r.entered.load() > entered_before; });
    if (by_destruction)
      c.reset(); // returns although the lookup is stuck
    else
      signal.emit(asio::cancellation_type::terminal);
    run_until(io, [&] { return completions == 1; });
    CHECK(result == coretry::test::operation_aborted);
    CHECK(r.returned.load() < r.entered.load()); // the lookup is still stuck
    CHECK(r.entered.load() - entered_before == 1);
    const int ticks_then = ticks.load();
    run_until(io, [&] { return ticks.load() >= ticks_then + 5; });
    CHECK(completions == 1);
    if (c)
      CHECK(c->stats().active_transfers == 0);
    stop = true;
  }
  release_stuck_lookups();
  wait_resolver_threads_gone();
}
