// Chaos over HTTP: retries through coretry::curl against a server that answers 200, 503,
// resets, hangs or answers late, with group cancellation from another thread, and clients or
// whole io_contexts destroyed mid-flight in some rounds. Every operation completes exactly once
// (or, with its io_context, is destroyed uncalled), and no descriptor is left open.
//
// CORETRY_CHAOS_HTTP_OPS sets the number of operations (default 2,000), CORETRY_CHAOS_SEED the
// seed (default: random, printed).

#include <coretry/curl/retry.hpp>
#include <coretry/random.hpp>

#include <doctest/doctest.h>
#include <support/http_fault_server.hpp>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using coretry::test::http_action;

namespace {

long open_fds() {
  long n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v ? std::atol(v) : fallback;
}

struct tally {
  std::atomic<long> ok{0}, failed{0}, cancelled{0}, uncalled{0}, twice{0};
};

/// Counts one call, or one destruction uncalled.
struct guarded_handler {
  struct state {
    explicit state(tally* t) : counts(t) {}
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state() {
      if (calls.load() == 0)
        counts->uncalled.fetch_add(1);
    }
    tally* counts;
    std::atomic<int> calls{0};
  };
  std::shared_ptr<state> s;
  void operator()(std::error_code ec, const coretry::curl::response&) const {
    if (s->calls.fetch_add(1) != 0)
      s->counts->twice.fetch_add(1);
    if (!ec)
      s->counts->ok.fetch_add(1);
    else if (ec == asio::error::operation_aborted)
      s->counts->cancelled.fetch_add(1);
    else
      s->counts->failed.fetch_add(1);
  }
};

} // namespace

TEST_CASE("chaos over HTTP: every retry completes once, through resets, hangs and teardown") {
  const long total = env_long("CORETRY_CHAOS_HTTP_OPS", 2'000);
  const auto seed =
      static_cast<std::uint64_t>(env_long("CORETRY_CHAOS_SEED", std::random_device{}()));
  CAPTURE(seed);
  std::printf("chaos over HTTP: %ld operations, seed %llu\n", total,
              static_cast<unsigned long long>(seed));
  coretry::fast_rng rng(seed);
  const long fds_before = open_fds();
  tally counts;
  long started = 0;
  const auto t0 = std::chrono::steady_clock::now();
  {
    // The server on a thread of its own.
    asio::io_context server_io(1);
    coretry::test::http_fault_server server(server_io.get_executor());
    server.set_chooser([seed](std::size_t index, const coretry::test::received_request&) {
      coretry::fast_rng r(seed ^ (index * 0x9e3779b97f4a7c15ull));
      switch (r() % 8) {
      case 0:
        return http_action::with_status(503);
      case 1:
        return http_action::reset();
      case 2:
        return http_action::hang();
      case 3:
        return http_action::delayed(std::chrono::milliseconds(r() % 20));
      default:
        return http_action::ok();
      }
    });
    auto server_work = asio::make_work_guard(server_io);
    std::thread server_thread([&] { server_io.run(); });

    constexpr long per_round = 200;
    for (long done = 0; done < total; done += per_round) {
      const auto ending = rng() % 4; // 0: destroy the client mid-flight, 1: the io_context
      auto io = std::make_unique<asio::io_context>(2);
      auto work = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
          io->get_executor());
      auto client = std::make_unique<coretry::curl::client>(
          io->get_executor(), coretry::curl::client_options{.max_total_connections = 16});
      std::vector<std::thread> threads;
      for (int i = 0; i < 2; ++i)
        threads.emplace_back([&io] { io->run(); });
      coretry::cancellation_source group;
      std::atomic<bool> starting{true};
      std::thread canceller([&, s = rng()] {
        coretry::fast_rng r(s);
        while (starting.load() && r() % 512 != 0)
          std::this_thread::yield();
        if (r() % 3 == 0)
          group.cancel(); // while operations are starting
      });
      for (long i = 0; i < per_round && done + i < total; ++i) {
        coretry::retry_policy p{.max_attempts = 1 + static_cast<unsigned>(rng() % 3),
                                .attempt_timeout = std::chrono::milliseconds(20 + rng() % 30),
                                .backoff = coretry::backoff::exponential(1ms, 2.0, 4ms)};
        if (rng() % 2)
          p.cancellation = group.token();
        coretry::curl::request req;
        req.url = server.url("/" + std::to_string(done + i));
        coretry::curl::async_retry(
            *client, std::move(req), std::move(p),
            guarded_handler{std::make_shared<guarded_handler::state>(&counts)});
        ++started;
      }
      starting = false;
      canceller.join();
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 30));
      if (ending == 0) {
        client.reset(); // while other threads run its io_context
        group.cancel();
        work.reset();
        for (auto& t : threads)
          t.join();
      } else if (ending == 1) {
        io->stop();
        for (auto& t : threads)
          t.join();
        client.reset(); // the usual order: the client first, then its io_context
        work.reset();
        io.reset();
        group.cancel(); // a source that outlives the context
      } else {
        group.cancel();
        work.reset();
        for (auto& t : threads)
          t.join(); // every hang ends at its attempt timeout
        client.reset();
      }
    }
    // The server's own thread stops it, then the context ends.
    asio::post(server_io, [&] { server.stop(); });
    server_work.reset();
    server_thread.join();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("chaos over HTTP: %ld started: %ld succeeded, %ld failed, %ld cancelled, %ld "
              "destroyed uncalled, in %.1f s\n",
              started, counts.ok.load(), counts.failed.load(), counts.cancelled.load(),
              counts.uncalled.load(), seconds);
  CHECK(counts.twice.load() == 0);
  CHECK(counts.ok + counts.failed + counts.cancelled + counts.uncalled == started);
  CHECK(open_fds() == fds_before);
}
