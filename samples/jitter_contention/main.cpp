// SPDX-License-Identifier: BSL-1.0
// Many clients race to update one optimistic-concurrency row: the classic comparison of
// backoff jitter kinds, run in model time on coretry's public test clock (no wall clock, no
// network).
//
// Each client reads the row's version, then writes with that version; the write succeeds only
// if nobody else wrote in between. A client whose write fails backs off, then reads again.
// Every message takes |N(10, 2)| time units; the server answers instantly. The question is how
// many writes the server has to process, and how long until the last client is done, for each
// way of spacing retries.
//
// Every client is one `coretry::retry_async` on `coretry::testing::manual_timer`: the attempts,
// the delays between them and their jitter are the library's own loop, and the messages are
// waits on the same clock. `coretry::testing::drive` jumps from one wait to the next, so a
// sweep of hours of model time runs in seconds. One model time unit is one microsecond of the
// clock's nanoseconds: fine enough that uniform draws over a few units are not rounded away.
#include <coretry/backoff.hpp>
#include <coretry/policy.hpp>
#include <coretry/random.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include "support/cli.hpp"
#include "support/plot.hpp"

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using coretry::testing::manual_clock;
using std::chrono::nanoseconds;

constexpr double ns_per_unit = 1000.0;

nanoseconds units(double u) {
  return nanoseconds{std::llround(u * ns_per_unit)};
}

struct strategy {
  std::string_view name;
  coretry::backoff backoff;
};

/// The five strategies of the comparison: base 5 units, cap 2000 units. The loop asks the
/// backoff for `delay(n)` before retry n + 1 with n from 0, and the model's first retry waits
/// 5 * 2^1: the growth curve therefore starts at 10. Decorrelated jitter ignores the curve and
/// starts from the backoff's initial delay, which must stay the model's base of 5.
std::vector<strategy> make_strategies() {
  const auto exp = coretry::backoff::exponential(units(10), 2.0, units(2000));
  return {
      {"none", coretry::backoff::fixed(nanoseconds::zero())},
      {"exponential", exp},
      {"equal", exp.with_jitter(coretry::jitter::equal())},
      {"full", exp.with_jitter(coretry::jitter::full())},
      {"decorrelated", coretry::backoff::exponential(units(5), 2.0, units(2000))
                           .with_jitter(coretry::jitter::decorrelated())},
  };
}

struct outcome {
  std::uint64_t writes = 0;
  double completion_time = 0;
};

/// A message arriving: resumes its coroutine, through the executor, when the clock gets there.
template <class Handler> struct arrival final : manual_clock::waiter {
  arrival(Handler h, asio::any_io_executor ex) : handler(std::move(h)), executor(std::move(ex)) {}
  void complete(std::error_code, bool) override { asio::post(executor, std::move(handler)); }
  Handler handler;
  asio::any_io_executor executor;
};

/// The row and the network of one simulation.
struct world {
  coretry::fast_rng rng;
  std::uint64_t row_version = 0;
  std::uint64_t writes = 0;

  nanoseconds latency() { return units(std::abs(10.0 + 2.0 * rng.normal())); }

  /// One message on its way: a wait of one latency on the test clock. Queued on the clock
  /// directly rather than through a `manual_timer`, whose `cancel()` scans every pending wait:
  /// a message is never cancelled, and the sweep sends millions of them.
  asio::awaitable<void> travel() {
    auto ex = co_await asio::this_coro::executor;
    co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
        [this, ex](auto handler) {
          manual_clock::enqueue(
              manual_clock::now() + latency(),
              std::make_shared<arrival<decltype(handler)>>(std::move(handler), ex));
        },
        asio::use_awaitable);
  }

  /// One attempt: read the version, write with it. Fails (without throwing) when another client
  /// wrote in between.
  asio::awaitable<std::tuple<std::error_code>> read_then_write() {
    co_await travel(); // the read reaches the server
    const std::uint64_t seen = row_version;
    co_await travel(); // the reply comes back; the client writes at once
    co_await travel(); // the write reaches the server
    ++writes;
    const bool ok = seen == row_version;
    if (ok)
      ++row_version;
    co_await travel(); // the reply comes back
    co_return std::tuple<std::error_code>{
        ok ? std::error_code{} : std::make_error_code(std::errc::device_or_resource_busy)};
  }
};

/// One simulation: `clients` retry operations under one strategy, one random stream.
outcome simulate(unsigned clients, const coretry::backoff& backoff, std::uint64_t seed) {
  manual_clock::reset();
  asio::io_context io;
  world w{coretry::fast_rng(seed)};
  // Retry until it works: only the spacing of the retries differs between strategies. The seed
  // makes the run reproducible; each operation still draws its own jitter stream from it.
  const coretry::retry_policy policy{
      .max_attempts = coretry::unlimited_attempts,
      .backoff = backoff,
      .seed = coretry::jitter_seed(seed ^ 0x9e3779b97f4a7c15ull),
  };
  outcome out;
  unsigned done = 0;
  std::exception_ptr failure;
  for (unsigned c = 0; c < clients; ++c)
    asio::co_spawn(io,
                   coretry::retry_async<coretry::testing::manual_timer>(
                       [&w] { return w.read_then_write(); }, policy),
                   [&](std::exception_ptr e) {
                     if (e && !failure)
                       failure = e;
                     ++done;
                     out.completion_time =
                         static_cast<double>(manual_clock::elapsed().count()) / ns_per_unit;
                   });
  if (!coretry::testing::drive(io, [&] { return done == clients; }))
    throw std::logic_error("jitter_contention: the clients stalled");
  if (failure)
    std::rethrow_exception(failure);
  out.writes = w.writes;
  return out;
}

struct options {
  std::vector<unsigned> sizes;
  unsigned runs = 100;
  std::uint64_t seed = 42;
  std::string out_dir = ".";
  bool plot = true;
};

void usage(std::FILE* out) {
  std::fprintf(out, "usage: jitter_contention [--quick] [--runs N] [--seed S] [--clients A,B,...]\n"
                    "                         [--out-dir DIR] [--no-plot]\n"
                    "  default: clients 10..190 step 10, 100 runs each, seed 42, files in .\n"
                    "  --quick: clients 10,50,100, 30 runs (for CI)\n"
                    "  writes jitter_contention.csv (clients,strategy,calls,time) and a picture\n");
}

options parse(int argc, char** argv) {
  namespace cli = sample_support::cli;
  options o;
  for (unsigned c = 10; c <= 190; c += 10)
    o.sizes.push_back(c);
  cli::parse("jitter_contention", argc, argv, 1,
             {{"quick"},
              {"runs", true},
              {"seed", true},
              {"clients", true},
              {"out-dir", true},
              {"no-plot"}},
             usage, [&](std::string_view a, const std::string& v) {
               if (a == "quick") {
                 o.sizes = {10, 50, 100};
                 o.runs = 30;
               } else if (a == "runs") {
                 o.runs = static_cast<unsigned>(cli::whole(a, v, 1, 1000000));
               } else if (a == "seed") {
                 o.seed = cli::whole(a, v);
               } else if (a == "clients") {
                 o.sizes.clear();
                 for (const auto& item : cli::list(v))
                   o.sizes.push_back(static_cast<unsigned>(cli::whole(a, item, 1, 100000)));
                 if (o.sizes.empty())
                   cli::fail("--clients: no number in '" + v + "'");
               } else if (a == "out-dir") {
                 o.out_dir = v;
               } else if (a == "no-plot") {
                 o.plot = false;
               }
             });
  return o;
}

void draw(const options& o, const std::vector<strategy>& strategies,
          const std::map<std::pair<unsigned, std::string_view>, std::pair<double, double>>& means) {
  std::vector<sample_support::panel> panels(2);
  panels[0] = {"Writes the server received (mean of " + std::to_string(o.runs) + " runs)",
               "clients",
               "calls",
               {},
               {}};
  panels[1] = {"Time until the last client is done (mean)", "clients", "model time units", {}, {}};
  panels[1].log_y = true;
  for (const auto& s : strategies) {
    sample_support::series calls{std::string(s.name), {}}, time{std::string(s.name), {}};
    for (unsigned c : o.sizes) {
      const auto& m = means.at({c, s.name});
      calls.points.emplace_back(c, m.first);
      time.points.emplace_back(c, m.second);
    }
    panels[0].lines.push_back(calls);
    panels[1].lines.push_back(time);
  }
  const std::string picture = sample_support::draw(o.out_dir + "/jitter_contention", panels);
  if (!picture.empty())
    std::printf("picture: %s\n", picture.c_str());
}

} // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  const auto strategies = make_strategies();

  std::error_code dir_error;
  std::filesystem::create_directories(o.out_dir, dir_error);
  const std::string csv_path = o.out_dir + "/jitter_contention.csv";
  std::ofstream csv(csv_path);
  if (!csv) {
    std::fprintf(stderr, "cannot write %s\n", csv_path.c_str());
    return 2;
  }
  csv << "clients,strategy,calls,time\n";

  std::map<std::pair<unsigned, std::string_view>, std::pair<double, double>> means;
  std::printf("%-8s", "clients");
  for (const auto& s : strategies)
    std::printf(" %24s", (std::string(s.name) + " calls/time").c_str());
  std::printf("\n");
  for (unsigned clients : o.sizes) {
    std::printf("%-8u", clients);
    for (std::size_t si = 0; si < strategies.size(); ++si) {
      double calls = 0, time = 0;
      for (unsigned run = 0; run < o.runs; ++run) {
        // Independent, reproducible streams per (size, strategy, run).
        coretry::fast_rng mixer(o.seed ^ (std::uint64_t{clients} << 40) ^
                                (std::uint64_t{si} << 32) ^ run);
        const outcome r = simulate(clients, strategies[si].backoff, mixer());
        calls += static_cast<double>(r.writes);
        time += r.completion_time;
      }
      calls /= o.runs;
      time /= o.runs;
      means[{clients, strategies[si].name}] = {calls, time};
      csv << clients << ',' << strategies[si].name << ',' << calls << ',' << time << '\n';
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.0f / %.0f", calls, time);
      std::printf(" %24s", cell);
    }
    std::printf("\n");
  }
  csv.close();
  std::printf("csv: %s (%u runs per point, seed %llu)\n", csv_path.c_str(), o.runs,
              static_cast<unsigned long long>(o.seed));
  if (o.plot)
    draw(o, strategies, means);

  return 0;
}
