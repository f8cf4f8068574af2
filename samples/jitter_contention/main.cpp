// Many clients race to update one optimistic-concurrency row: the classic comparison of
// backoff jitter kinds, run as a discrete-event simulation in model time (no clock, no network).
//
// Each client reads the row's version, then writes with that version; the write succeeds only
// if nobody else wrote in between. A client whose write fails backs off, then reads again.
// Every message takes |N(10, 2)| time units; the server answers instantly. The question is how
// many writes the server has to process, and how long until the last client is done, for each
// way of spacing retries.
//
// The delays come from coretry::backoff itself, so this also checks that the library's
// strategies behave as the literature says. One model time unit is one microsecond of
// coretry's nanosecond delays: fine enough that uniform draws are not rounded away.
#include <coretry/backoff.hpp>
#include <coretry/random.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <queue>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "svg_plot.hpp"

namespace {

using std::chrono::nanoseconds;

constexpr double ns_per_unit = 1000.0;

struct strategy {
  std::string_view name;
  coretry::backoff backoff;
};

/// The five strategies of the comparison: base 5 units, cap 2000 units.
std::vector<strategy> make_strategies() {
  const nanoseconds base{static_cast<std::int64_t>(5 * ns_per_unit)};
  const nanoseconds cap{static_cast<std::int64_t>(2000 * ns_per_unit)};
  const auto exp = coretry::backoff::exponential(base, 2.0, cap);
  return {
      {"none", coretry::backoff::fixed(nanoseconds::zero())},
      {"exponential", exp},
      {"equal", exp.with_jitter(coretry::jitter::equal())},
      {"full", exp.with_jitter(coretry::jitter::full())},
      {"decorrelated", exp.with_jitter(coretry::jitter::decorrelated())},
  };
}

enum class event_kind : std::uint8_t { read_at_server, read_reply, write_at_server, write_reply };

struct event {
  double time;
  std::uint64_t seq; ///< Tie-breaker: equal times are processed in scheduling order.
  event_kind kind;
  std::uint32_t client;
  std::uint64_t version; ///< The version a read reply carries / a write is based on.
  bool ok;               ///< For write replies.
  bool operator>(const event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

struct client_state {
  unsigned attempt = 0;   ///< Failed writes so far; the first retry uses attempt 1.
  nanoseconds previous{}; ///< The previous sleep, for decorrelated jitter.
};

struct outcome {
  std::uint64_t writes = 0;
  double completion_time = 0;
};

/// One simulation: `clients` clients, one strategy, one random stream.
outcome simulate(unsigned clients, const coretry::backoff& backoff, std::uint64_t seed) {
  coretry::fast_rng rng(seed);
  auto latency = [&] { return std::abs(10.0 + 2.0 * rng.normal()); };

  std::priority_queue<event, std::vector<event>, std::greater<>> queue;
  std::uint64_t seq = 0;
  auto schedule = [&](double t, event_kind kind, std::uint32_t c, std::uint64_t version = 0,
                      bool ok = false) {
    queue.push(event{t, seq++, kind, c, version, ok});
  };

  std::vector<client_state> state(clients);
  for (std::uint32_t c = 0; c < clients; ++c) {
    state[c].previous = backoff.initial();
    schedule(latency(), event_kind::read_at_server, c);
  }

  std::uint64_t row_version = 0;
  outcome out;
  unsigned done = 0;
  while (!queue.empty() && done < clients) {
    const event e = queue.top();
    queue.pop();
    switch (e.kind) {
    case event_kind::read_at_server:
      schedule(e.time + latency(), event_kind::read_reply, e.client, row_version);
      break;
    case event_kind::read_reply:
      schedule(e.time + latency(), event_kind::write_at_server, e.client, e.version);
      break;
    case event_kind::write_at_server: {
      ++out.writes;
      const bool ok = e.version == row_version;
      if (ok)
        ++row_version;
      schedule(e.time + latency(), event_kind::write_reply, e.client, 0, ok);
      break;
    }
    case event_kind::write_reply:
      if (e.ok) {
        ++done;
        out.completion_time = e.time;
      } else {
        client_state& s = state[e.client];
        ++s.attempt;
        // coretry numbers retries from 0 with d(0) = base; passing the model's attempt (from 1)
        // as the retry index gives the model's base * 2^attempt.
        const nanoseconds sleep = backoff.delay(s.attempt, s.previous, rng);
        s.previous = sleep;
        schedule(e.time + latency() + static_cast<double>(sleep.count()) / ns_per_unit,
                 event_kind::read_at_server, e.client);
      }
      break;
    }
  }
  return out;
}

struct options {
  std::vector<unsigned> sizes;
  unsigned runs = 100;
  std::uint64_t seed = 42;
  std::string out_dir = ".";
  bool plot = true;
};

[[noreturn]] void usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: jitter_contention [--quick] [--runs N] [--seed S] [--clients A,B,...]\n"
               "                         [--out-dir DIR] [--no-plot]\n"
               "  default: clients 10..190 step 10, 100 runs each, seed 42, files in .\n"
               "  --quick: clients 10,50,100, 30 runs (for CI)\n"
               "  writes jitter_contention.csv (clients,strategy,calls,time) and a picture\n");
  std::exit(code);
}

options parse(int argc, char** argv) {
  options o;
  for (unsigned c = 10; c <= 190; c += 10)
    o.sizes.push_back(c);
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usage(2);
      return argv[++i];
    };
    try {
      if (a == "--quick") {
        o.sizes = {10, 50, 100};
        o.runs = 30;
      } else if (a == "--runs") {
        o.runs = static_cast<unsigned>(std::stoul(value()));
      } else if (a == "--seed") {
        o.seed = std::stoull(value());
      } else if (a == "--clients") {
        o.sizes.clear();
        const std::string list = value();
        std::size_t pos = 0;
        while (pos < list.size()) {
          std::size_t used = 0;
          o.sizes.push_back(static_cast<unsigned>(std::stoul(list.substr(pos), &used)));
          pos += used + 1;
        }
      } else if (a == "--out-dir") {
        o.out_dir = value();
      } else if (a == "--no-plot") {
        o.plot = false;
      } else if (a == "--help" || a == "-h") {
        usage(0);
      } else {
        usage(2);
      }
    } catch (const std::logic_error&) {
      usage(2);
    }
  }
  if (o.sizes.empty() || o.runs == 0)
    usage(2);
  return o;
}

void draw(const options& o, const std::vector<strategy>& strategies,
          const std::map<std::pair<unsigned, std::string_view>, std::pair<double, double>>& means) {
  if (sample_plot::have_gnuplot()) {
    const std::string png = o.out_dir + "/jitter_contention.png";
    // One inline data block per strategy, so that each line is drawn unbroken.
    std::string script;
    for (const auto& s : strategies) {
      script += '$';
      script += s.name;
      script += " << EOD\n";
      for (unsigned c : o.sizes) {
        const auto& m = means.at({c, s.name});
        char line[96];
        std::snprintf(line, sizeof line, "%u %.3f %.3f\n", c, m.first, m.second);
        script += line;
      }
      script += "EOD\n";
    }
    script += "set terminal pngcairo size 1000,800\nset output '" + png +
              "'\nset key top left\nset grid\nset multiplot layout 2,1\nset xlabel 'clients'\n";
    for (int panel = 0; panel < 2; ++panel) {
      script += panel == 0 ? "set title 'Writes the server received (mean of " +
                                 std::to_string(o.runs) + " runs)'\nset ylabel 'calls'\n"
                           : "set title 'Time until the last client is done (mean)'\n"
                             "set ylabel 'model time units (log)'\nset logscale y\n";
      script += "plot ";
      // Appended piece by piece: `"literal" + std::string&&` trips g++ 12's -Wrestrict at -O3.
      for (std::size_t i = 0; i < strategies.size(); ++i) {
        script += i ? ", $" : "$";
        script += strategies[i].name;
        script += panel == 0 ? " using 1:2" : " using 1:3";
        script += " with linespoints lw 2 title '";
        script += strategies[i].name;
        script += "'";
      }
      script += "\n";
    }
    script += "unset multiplot\n";
    if (sample_plot::run_gnuplot(script)) {
      std::printf("picture: %s\n", png.c_str());
      return;
    }
  }
  std::vector<sample_plot::panel> panels(2);
  panels[0] = {"Writes the server received (mean)", "clients", "calls", {}, {}};
  panels[1] = {"Time until the last client is done (mean)", "clients", "model time units", {}, {}};
  for (const auto& s : strategies) {
    sample_plot::series calls{std::string(s.name), {}}, time{std::string(s.name), {}};
    for (unsigned c : o.sizes) {
      const auto& m = means.at({c, s.name});
      calls.points.emplace_back(c, m.first);
      time.points.emplace_back(c, m.second);
    }
    panels[0].lines.push_back(calls);
    panels[1].lines.push_back(time);
  }
  const std::string svg = o.out_dir + "/jitter_contention.svg";
  if (sample_plot::write_svg(svg, panels))
    std::printf("picture: %s\n", svg.c_str());
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
