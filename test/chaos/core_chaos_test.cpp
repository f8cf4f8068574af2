// SPDX-License-Identifier: BSL-1.0
// Chaos: many operations through every front end, with random outcomes, timeouts, deadlines and
// cancellation from another thread (slots, individual and shared group sources, cancels racing
// starts), on a 2-thread io_context, some rounds of which are destroyed mid-flight.
//
// Asserts that every completion handler runs exactly once (or, in a destroyed round, is
// destroyed uncalled), that outcomes add up to the operations started, that no attempt starts
// after its operation completed, that run() returns, and that no descriptor leaks.
//
// CORETRY_CHAOS_OPS sets the number of operations (default 100,000; the sanitizer builds use
// fewer), CORETRY_CHAOS_SEED the seed (default: random, printed).

#include <coretry/cancellation.hpp>
#include <coretry/random.hpp>
#include <coretry/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "chaos/chaos_support.hpp"

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

namespace {
using coretry::test::chaos_seed;
using coretry::test::env_long;
using coretry::test::open_fds;

enum class front : int { awaitable, callback, future, use_awaitable, slot, race, count };
enum class outcome : int { success, failure, cancelled, count };

/// What one operation did; shared by its attempts and its handler.
struct record {
  std::atomic<int> completions{0};
  std::atomic<int> late_attempts{0}; ///< attempts begun after the completion
  std::atomic<int> result{-1};
};

struct stats_t {
  std::atomic<long> started{0};
  std::atomic<long> by_outcome[int(outcome::count)]{};
  std::atomic<long> destroyed_uncalled{0};
  std::atomic<long> violations{0};
};

/// One attempt: per draw, succeed, fail retryably (thrown or returned), fail for good, or hang
/// on a real timer until cancelled.
struct chaos_op {
  std::shared_ptr<record> rec;
  std::uint64_t seed;
  int attempt = 0;
  asio::awaitable<std::tuple<std::error_code, int>> operator()() {
    if (rec->completions.load() != 0)
      rec->late_attempts.fetch_add(1);
    coretry::fast_rng rng(seed + static_cast<std::uint64_t>(++attempt) * 0x9e37u);
    const auto draw = rng() % 10;
    if (draw < 3)
      co_return std::tuple{std::error_code{}, 1};
    if (draw < 5)
      throw std::system_error(make_error_code(std::errc::connection_refused));
    if (draw < 7)
      co_return std::tuple{make_error_code(std::errc::connection_reset), 0};
    if (draw < 8)
      co_return std::tuple{make_error_code(std::errc::permission_denied), 0};
    asio::steady_timer t(co_await asio::this_coro::executor, 1h);
    auto [ec] = co_await t.async_wait(coretry::detail::as_tuple(asio::use_awaitable));
    co_return std::tuple{ec ? std::error_code(ec) : make_error_code(std::errc::timed_out), 0};
  }
};

/// The same draws as a token-based attempt (an initiating function): every outcome arrives by
/// value through a post, or, hanging, when the attempt's slot cancels its timer.
struct chaos_token_op {
  std::shared_ptr<record> rec;
  std::uint64_t seed;
  int attempt = 0;
  template <class Token> auto operator()(Token&& token) {
    if (rec->completions.load() != 0)
      rec->late_attempts.fetch_add(1);
    coretry::fast_rng rng(seed + static_cast<std::uint64_t>(++attempt) * 0x9e37u);
    const auto draw = rng() % 10;
    return asio::async_initiate<Token, void(coretry::test::error_code, int)>(
        [draw](auto handler) {
          auto ex = asio::get_associated_executor(handler);
          if (draw < 8) {
            const std::error_code ec = draw < 3   ? std::error_code{}
                                       : draw < 7 ? make_error_code(std::errc::connection_reset)
                                                  : make_error_code(std::errc::permission_denied);
            asio::post(ex, [h = std::move(handler), ec]() mutable {
              std::move(h)(coretry::detail::to_asio_error(ec), ec ? 0 : 1);
            });
            return;
          }
          auto t = std::make_shared<asio::steady_timer>(ex, std::chrono::hours(1));
          auto slot = asio::get_associated_cancellation_slot(handler);
          t->async_wait(asio::bind_cancellation_slot(
              slot, asio::bind_executor(ex, [t, h = std::move(handler)](
                                                coretry::test::error_code ec) mutable {
                std::move(h)(
                    ec ? ec : coretry::detail::to_asio_error(make_error_code(std::errc::timed_out)),
                    0);
              })));
        },
        token);
  }
};

/// The same as an attempt returning a deferred operation.
struct chaos_deferred_op {
  chaos_token_op inner;
  auto operator()() { return inner(coretry::test::deferred); }
};

/// Owns a handler's bookkeeping: counts one completion, or one destruction uncalled.
struct completion_guard {
  std::shared_ptr<record> rec;
  stats_t* stats;
  std::shared_ptr<bool> called = std::make_shared<bool>(false);
  struct on_destroy {
    on_destroy(std::shared_ptr<bool> c, stats_t* s) : called(std::move(c)), stats(s) {}
    on_destroy(const on_destroy&) = delete;
    on_destroy& operator=(const on_destroy&) = delete;
    std::shared_ptr<bool> called;
    stats_t* stats;
    ~on_destroy() {
      if (!*called)
        stats->destroyed_uncalled.fetch_add(1);
    }
  };
  std::shared_ptr<on_destroy> watcher = std::make_shared<on_destroy>(called, stats);

  void complete(std::error_code ec) const {
    if (rec->completions.fetch_add(1) != 0)
      stats->violations.fetch_add(1);
    *called = true;
    const outcome o = !ec                                      ? outcome::success
                      : ec == coretry::test::operation_aborted ? outcome::cancelled
                                                               : outcome::failure;
    stats->by_outcome[int(o)].fetch_add(1);
  }
};

} // namespace

TEST_CASE("chaos: every operation completes exactly once, whatever happens around it") {
  const long total = env_long("CORETRY_CHAOS_OPS", 100'000);
  const auto seed = chaos_seed("chaos", total);
  CAPTURE(seed);
  coretry::fast_rng rng(seed);
  stats_t stats;
  const long fds_before = open_fds();
  const auto t0 = std::chrono::steady_clock::now();
  constexpr long per_round = 500;
  long destroyed_rounds = 0;

  for (long done = 0; done < total; done += per_round) {
    const bool destroy_mid_flight = rng() % 8 == 0;
    auto io = std::make_unique<asio::io_context>(2);
    auto work = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
        io->get_executor());
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
      threads.emplace_back([&io] { io->run(); });

    std::vector<coretry::cancellation_source> shared(4);
    std::vector<coretry::cancellation_source> own(static_cast<std::size_t>(per_round));
    std::vector<std::shared_ptr<asio::cancellation_signal>> signals;
    std::vector<asio::strand<asio::io_context::executor_type>> signal_strands;
    std::vector<std::future<int>> futures;
    std::vector<std::shared_ptr<record>> records;
    std::atomic<bool> starting{true};

    // The third thread: cancels shared sources at random moments, also while starting.
    std::thread canceller([&, s = rng()] {
      coretry::fast_rng r(s);
      while (starting.load()) {
        if (r() % 64 == 0)
          shared[r() % shared.size()].cancel();
        std::this_thread::yield();
      }
      for (auto& src : shared)
        if (r() % 2)
          src.cancel();
    });

    for (long i = 0; i < per_round && done + i < total; ++i) {
      auto rec = std::make_shared<record>();
      records.push_back(rec);
      stats.started.fetch_add(1);
      coretry::retry_policy p{
          .max_attempts = 1 + static_cast<unsigned>(rng() % 4),
          .backoff =
              coretry::backoff::exponential(100us, 2.0, 2ms).with_jitter(coretry::jitter::full())};
      switch (rng() % 4) {
      case 0:
        p.attempt_timeout = std::chrono::microseconds(200 + rng() % 3000);
        break;
      case 1:
        p.deadline = std::chrono::microseconds(500 + rng() % 8000);
        break;
      default:
        break;
      }
      switch (rng() % 3) {
      case 0:
        p.cancellation = shared[rng() % shared.size()].token();
        break;
      case 1:
        p.cancellation = own[static_cast<std::size_t>(i)].token();
        break;
      default:
        break;
      }
      if (p.attempt_timeout == coretry::unlimited && p.deadline == coretry::unlimited &&
          !p.cancellation.can_be_cancelled())
        p.attempt_timeout = 2ms; // something must end a hanging attempt
      completion_guard g{rec, &stats};
      auto ex = io->get_executor();
      const auto f = static_cast<front>(rng() % int(front::count));
      // Every front end with every attempt shape: awaitable, token-based, deferred.
      auto start = [&](auto op) {
        switch (f) {
        case front::awaitable:
          asio::co_spawn(
              ex,
              [op, p, g]() mutable -> asio::awaitable<void> {
                std::error_code ec;
                try {
                  co_await coretry::retry_async(std::move(op), std::move(p));
                } catch (const std::system_error& e) {
                  ec = e.code();
                }
                g.complete(ec);
              },
              asio::detached);
          break;
        case front::callback:
          coretry::async_retry(ex, op, p, [g](std::error_code ec, int) { g.complete(ec); });
          break;
        case front::future:
          futures.push_back(coretry::async_retry(
              ex, op, p, asio::bind_executor(ex, asio::use_future([g](std::error_code ec, int v) {
                                               g.complete(ec);
                                               return v;
                                             }))));
          break;
        case front::use_awaitable:
          asio::co_spawn(
              ex,
              [ex, op, p, g]() mutable -> asio::awaitable<void> {
                auto [ec, v] =
                    co_await coretry::async_retry(ex, std::move(op), std::move(p),
                                                  coretry::detail::as_tuple(asio::use_awaitable));
                (void)v;
                g.complete(ec);
              },
              asio::detached);
          break;
        case front::slot: {
          // The slot is emitted on the strand the handler runs on, as Asio requires.
          auto strand = asio::make_strand(ex);
          auto sig = std::make_shared<asio::cancellation_signal>();
          coretry::async_retry(
              ex, op, p,
              asio::bind_cancellation_slot(
                  sig->slot(), asio::bind_executor(
                                   strand, [g, sig](std::error_code ec, int) { g.complete(ec); })));
          signals.push_back(sig);
          signal_strands.push_back(strand);
          break;
        }
        case front::race: {
          auto strand = asio::make_strand(ex);
          asio::co_spawn(
              strand,
              [op, p, g]() mutable -> asio::awaitable<void> {
                asio::steady_timer t(co_await asio::this_coro::executor,
                                     std::chrono::microseconds(300));
                std::error_code ec;
                try {
                  auto r = co_await (coretry::retry_async(std::move(op), std::move(p)) ||
                                     t.async_wait(asio::use_awaitable));
                  if (r.index() == 1)
                    ec = coretry::test::operation_aborted; // the timer won: the retry was cancelled
                } catch (const std::system_error& e) {
                  ec = e.code();
                } catch (...) {
                  // || reports an outer cancellation as parallel_group's multiple_exceptions.
                  ec = coretry::test::operation_aborted;
                }
                g.complete(ec);
              },
              asio::detached);
          break;
        }
        default:
          break;
        }
      };
      switch (rng() % 3) {
      case 0:
        start(chaos_op{rec, rng()});
        break;
      case 1:
        start(chaos_token_op{rec, rng()});
        break;
      default:
        start(chaos_deferred_op{chaos_token_op{rec, rng()}});
        break;
      }
      if (rng() % 16 == 0)
        own[static_cast<std::size_t>(i)].cancel(); // cancelled while starting, or before
    }
    starting = false;
    canceller.join();
    // Slot cancellations, each emitted on its handler's strand.
    for (std::size_t k = 0; k < signals.size(); ++k)
      if (rng() % 2)
        asio::post(signal_strands[k],
                   [s = signals[k]] { s->emit(asio::cancellation_type::terminal); });
    for (auto& src : own)
      if (rng() % 4 == 0)
        src.cancel();

    if (destroy_mid_flight) {
      ++destroyed_rounds;
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
      io->stop();
      for (auto& t : threads)
        t.join();
      work.reset();
      signal_strands.clear(); // strands die before their io_context
      io.reset();             // destroys every pending frame and handler, uncalled
      for (auto& src : shared)
        src.cancel(); // sources outliving the context: must touch nothing
      for (auto& src : own)
        src.cancel();
    } else {
      for (auto& src : shared)
        src.cancel(); // end every hang
      for (auto& src : own)
        src.cancel();
      work.reset();
      for (auto& t : threads)
        t.join(); // run() returns: nothing was left behind
    }
    for (const auto& rec : records) {
      const int c = rec->completions.load();
      if (c > 1 || (!destroy_mid_flight && c != 1) || rec->late_attempts.load() != 0)
        stats.violations.fetch_add(1);
    }
    signals.clear();
    futures.clear();
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long ok = stats.by_outcome[int(outcome::success)];
  const long failed = stats.by_outcome[int(outcome::failure)];
  const long cancelled = stats.by_outcome[int(outcome::cancelled)];
  std::printf(
      "chaos: %ld started: %ld succeeded, %ld failed, %ld cancelled, %ld destroyed uncalled "
      "(%ld of %ld rounds destroyed mid-flight) in %.1f s\n",
      stats.started.load(), ok, failed, cancelled, stats.destroyed_uncalled.load(),
      destroyed_rounds, (total + per_round - 1) / per_round, seconds);
  CHECK(stats.violations.load() == 0);
  CHECK(ok + failed + cancelled + stats.destroyed_uncalled.load() == stats.started.load());
  CHECK(open_fds() == fds_before);
}
