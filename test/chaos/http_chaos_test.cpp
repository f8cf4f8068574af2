// SPDX-License-Identifier: BSL-1.0
// HTTP chaos: retrying requests through coretry::curl against the loopback fault server, which
// answers each request at random with a response, a 503 (with or without Retry-After), a
// connection reset, a close without reply, a hang or a late reply. Each round runs on a
// 2-thread io_context, through every front end of the curl adapter (`curl::retry` awaited,
// `curl::async_retry` with a callback, `use_future`, a bound cancellation slot, `||`), with
// random attempt timeouts, deadlines and cancellation from a third thread through a shared
// source, also while operations are starting. Some rounds destroy the client mid-flight (its
// operations must complete once with operation_aborted), some destroy the io_context mid-flight
// (client first, then the context: the usual declaration order; handlers are then destroyed
// uncalled, and nothing may touch them afterwards).
//
// CORETRY_CHAOS_HTTP_OPS sets the number of operations (default 10,000), CORETRY_CHAOS_SEED the
// seed (default: random, printed).

#include <coretry/cancellation.hpp>
#include <coretry/curl/client.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/random.hpp>

#include "support/http_fault_server.hpp"
#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <atomic>
#include <chrono>
#include <cstddef> // before Asio: see test/support/http_fault_server.hpp
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "chaos/chaos_support.hpp"

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

namespace {
using coretry::test::chaos_seed;
using coretry::test::env_long;
using coretry::test::open_fds;

enum class front : int { awaitable, callback, future, slot, race, count };
enum class outcome : int { success, failure, cancelled, count };
enum class round_kind : int { normal, client_destroyed, context_destroyed, count };

struct counters {
  std::atomic<long> started{0};
  std::atomic<long> by_outcome[int(outcome::count)]{};
  std::atomic<long> destroyed_uncalled{0};
  std::atomic<long> double_completions{0};
  std::atomic<long> late_completions{0};      ///< a handler called after its round was torn down
  std::atomic<long> live_handlers{0};         ///< handler states alive now
  std::atomic<bool> torn_down{false};         ///< set once a destroyed round's context is gone
  std::atomic<long> unexpected_exceptions{0}; ///< anything but std::system_error from retry
};

/// One operation's completion state, shared by every copy of its handler. Counts itself alive
/// while any copy exists; on destruction, counts a destruction uncalled if it never ran.
struct handler_state {
  explicit handler_state(counters* c) : stats(c) { stats->live_handlers.fetch_add(1); }
  handler_state(const handler_state&) = delete;
  handler_state& operator=(const handler_state&) = delete;
  ~handler_state() {
    if (calls.load() == 0)
      stats->destroyed_uncalled.fetch_add(1);
    stats->live_handlers.fetch_sub(1);
  }
  void complete(std::error_code ec) {
    if (calls.fetch_add(1) != 0)
      stats->double_completions.fetch_add(1);
    if (stats->torn_down.load())
      stats->late_completions.fetch_add(1);
    const outcome o = !ec                                      ? outcome::success
                      : ec == coretry::test::operation_aborted ? outcome::cancelled
                                                               : outcome::failure;
    stats->by_outcome[int(o)].fetch_add(1);
  }
  counters* stats;
  std::atomic<int> calls{0};
};

coretry::curl::request get_request(std::string url) {
  coretry::curl::request r;
  r.url = std::move(url);
  return r;
}

/// The fault server on a thread of its own (it is single-threaded), answering at random.
class server_thread {
public:
  explicit server_thread(std::uint64_t seed)
      : work_(io_.get_executor()), server_(io_.get_executor()), rng_(seed) {
    server_.set_chooser([this](std::size_t, const coretry::test::received_request&) {
      using coretry::test::http_action;
      switch (rng_() % 10) {
      case 0:
      case 1:
      case 2:
        return http_action::ok();
      case 3:
        return http_action::with_status(503);
      case 4:
        return http_action::retry_after(503, "0");
      case 5:
        return http_action::reset();
      case 6:
        return http_action::close();
      case 7:
        return http_action::hang();
      case 8:
        return http_action::delayed(std::chrono::milliseconds(rng_() % 5));
      default:
        return http_action::with_status(404); // a final answer, not retried
      }
    });
    thread_ = std::thread([this] { io_.run(); });
  }
  ~server_thread() {
    asio::post(io_, [this] { server_.stop(); });
    work_.reset();
    io_.stop();
    thread_.join();
  }
  server_thread(const server_thread&) = delete;
  server_thread& operator=(const server_thread&) = delete;
  std::string url() const { return server_.url("/chaos"); }

private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  coretry::test::http_fault_server server_;
  coretry::fast_rng rng_;
  std::thread thread_;
};

} // namespace

TEST_CASE("http chaos: every curl retry completes exactly once, whoever is destroyed first") {
  const long total = env_long("CORETRY_CHAOS_HTTP_OPS", 10'000);
  const auto seed = chaos_seed("http chaos", total);
  CAPTURE(seed);
  coretry::fast_rng rng(seed);
  { // libcurl's one-time global set-up is not a leak: do it before counting descriptors.
    asio::io_context warm;
    coretry::curl::client c(warm.get_executor());
  }
  const long fds_before = open_fds();
  const auto t0 = std::chrono::steady_clock::now();
  counters stats;
  long rounds_by_kind[int(round_kind::count)]{};
  long live_after_teardown = 0;
  long stuck_rounds = 0;
  long uncalled_in_running_rounds = 0;
  {
    server_thread server(rng());
    const std::string url = server.url();
    constexpr long per_round = 100;
    for (long done = 0; done < total; done += per_round) {
      const auto kind = static_cast<round_kind>(rng() % 4 == 0 ? 1 + rng() % 2 : 0);
      ++rounds_by_kind[int(kind)];
      const long uncalled_before = stats.destroyed_uncalled.load();
      stats.torn_down = false;
      auto io = std::make_unique<asio::io_context>(2);
      auto client = std::make_unique<coretry::curl::client>(io->get_executor());
      auto work = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
          io->get_executor());
      std::vector<std::thread> threads;
      for (int i = 0; i < 2; ++i)
        threads.emplace_back([&io] { io->run(); });

      coretry::cancellation_source shared;
      std::vector<std::shared_ptr<asio::cancellation_signal>> signals;
      std::vector<asio::strand<asio::io_context::executor_type>> signal_strands;
      std::vector<std::future<coretry::curl::response>> futures;
      std::atomic<bool> starting{true};
      std::atomic<long> round_started{0};

      // The third thread: cancels the shared source once, at a random moment, maybe while
      // operations are still starting.
      std::thread canceller([&, s = rng()] {
        coretry::fast_rng r(s);
        const auto wait_for = static_cast<long>(r() % per_round);
        while (starting.load() && round_started.load() < wait_for)
          std::this_thread::yield();
        if (r() % 2)
          shared.cancel();
      });

      const long n = std::min(per_round, total - done);
      for (long i = 0; i < n; ++i) {
        coretry::retry_policy p{
            .max_attempts = 1 + static_cast<unsigned>(rng() % 4),
            .backoff = coretry::backoff::exponential(std::chrono::microseconds(100), 2.0, 2ms)
                           .with_jitter(coretry::jitter::full())};
        // Something must end a hang: an attempt timeout, a deadline, or both.
        p.attempt_timeout = std::chrono::milliseconds(5 + rng() % 40);
        if (rng() % 3 == 0)
          p.deadline = std::chrono::milliseconds(5 + rng() % 80);
        if (rng() % 2)
          p.cancellation = shared.token();
        auto state = std::make_shared<handler_state>(&stats);
        auto ex = io->get_executor();
        stats.started.fetch_add(1);
        round_started.fetch_add(1);
        switch (static_cast<front>(rng() % int(front::count))) {
        case front::awaitable:
          // The retry is made here, while the client lives: it holds the client weakly from
          // then on. (A coroutine that reached the client through a reference only when it first
          // ran would find it destroyed in a client_destroyed round.)
          asio::co_spawn(
              ex,
              [a = coretry::curl::retry(*client, get_request(url), std::move(p)),
               state]() mutable -> asio::awaitable<void> {
                std::error_code ec;
                try {
                  (void)co_await std::move(a);
                } catch (const std::system_error& e) {
                  ec = e.code();
                }
                state->complete(ec);
              },
              asio::detached);
          break;
        case front::callback:
          coretry::curl::async_retry(
              *client, get_request(url), p,
              [state](std::error_code ec, const coretry::curl::response&) { state->complete(ec); });
          break;
        case front::future:
          futures.push_back(coretry::curl::async_retry(
              *client, get_request(url), p,
              asio::bind_executor(
                  ex, asio::use_future([state](std::error_code ec, coretry::curl::response r) {
                    state->complete(ec);
                    return r;
                  }))));
          break;
        case front::slot: {
          auto strand = asio::make_strand(ex);
          auto sig = std::make_shared<asio::cancellation_signal>();
          coretry::curl::async_retry(
              *client, get_request(url), p,
              asio::bind_cancellation_slot(
                  sig->slot(), asio::bind_executor(strand, [state](std::error_code ec,
                                                                   const coretry::curl::response&) {
                    state->complete(ec);
                  })));
          signals.push_back(sig);
          signal_strands.push_back(strand);
          break;
        }
        case front::race: {
          auto strand = asio::make_strand(ex);
          const auto limit = std::chrono::milliseconds(rng() % 20);
          asio::co_spawn(
              strand,
              [a = coretry::curl::retry(*client, get_request(url), std::move(p)), state,
               limit]() mutable -> asio::awaitable<void> {
                asio::steady_timer t(co_await asio::this_coro::executor, limit);
                std::error_code ec;
                try {
                  auto r = co_await (std::move(a) || t.async_wait(asio::use_awaitable));
                  if (r.index() == 1)
                    ec = coretry::test::operation_aborted; // the timer won
                } catch (const std::system_error& e) {
                  ec = e.code();
                } catch (...) {
                  state->stats->unexpected_exceptions.fetch_add(1);
                  ec = coretry::test::operation_aborted;
                }
                state->complete(ec);
              },
              asio::detached);
          break;
        }
        default:
          break;
        }
      }
      starting = false;
      canceller.join();
      for (std::size_t k = 0; k < signals.size(); ++k)
        if (rng() % 3 == 0)
          asio::post(signal_strands[k],
                     [s = signals[k]] { s->emit(asio::cancellation_type::terminal); });

      if (kind == round_kind::context_destroyed) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        io->stop();
        for (auto& t : threads)
          t.join();
        client.reset(); // the usual order: the client goes first, then its context
        work.reset();
        signal_strands.clear(); // strands die before their io_context
        io.reset();
        stats.torn_down = true;
        shared.cancel(); // a source outliving the context touches nothing
        futures.clear();
        signals.clear();
        if (stats.live_handlers.load() != 0)
          ++live_after_teardown;
      } else {
        if (kind == round_kind::client_destroyed) {
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
          client.reset(); // while its operations run: each completes with operation_aborted
        }
        // Every operation ends by itself (timeouts, deadlines, attempts): wait for them all.
        const auto limit = std::chrono::steady_clock::now() + 20s;
        auto finished = [&] {
          long called = 0;
          for (int o = 0; o < int(outcome::count); ++o)
            called += stats.by_outcome[o].load();
          return called + stats.destroyed_uncalled.load() >= stats.started.load();
        };
        while (!finished() && std::chrono::steady_clock::now() < limit)
          std::this_thread::sleep_for(1ms);
        if (!finished())
          ++stuck_rounds;
        client.reset();
        work.reset();
        signal_strands.clear(); // strands die before their io_context
        for (auto& t : threads)
          t.join(); // run() returns: nothing was left behind
        for (auto& f : futures)
          if (f.valid())
            (void)f.wait_for(0s);
        futures.clear();
        signals.clear();
        io.reset();
        if (stats.destroyed_uncalled.load() != uncalled_before)
          ++uncalled_in_running_rounds; // only a destroyed context may drop a handler
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long ok = stats.by_outcome[int(outcome::success)];
  const long failed = stats.by_outcome[int(outcome::failure)];
  const long cancelled = stats.by_outcome[int(outcome::cancelled)];
  std::printf("http chaos: %ld started: %ld succeeded, %ld failed, %ld cancelled, %ld destroyed "
              "uncalled; rounds: %ld normal, %ld client destroyed, %ld context destroyed; "
              "%.1f s\n",
              stats.started.load(), ok, failed, cancelled, stats.destroyed_uncalled.load(),
              rounds_by_kind[0], rounds_by_kind[1], rounds_by_kind[2], seconds);
  CHECK(stuck_rounds == 0);
  CHECK(uncalled_in_running_rounds == 0);
  CHECK(stats.unexpected_exceptions.load() == 0);
  CHECK(stats.double_completions.load() == 0);
  CHECK(stats.late_completions.load() == 0);
  CHECK(live_after_teardown == 0);
  CHECK(stats.live_handlers.load() == 0);
  CHECK(ok + failed + cancelled + stats.destroyed_uncalled.load() == stats.started.load());
  CHECK(open_fds() == fds_before);
}
