// retry_storm: the experiment of "Exponential Backoff or how not to crash a server", live.
// For each strategy: start a fresh retry_storm_server, let the swarm reach a steady state, freeze
// the server (SIGSTOP), thaw it (SIGCONT) and watch whether the service recovers. Writes a
// per-second CSV, a summary and a picture. `retry_storm swarm --url URL` runs the swarm alone
// against any HTTP server.
#include "support/fd_limit.hpp"
#include "support/plot.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/streambuf.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "swarm.hpp"
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using namespace retry_storm;
using clock_type = std::chrono::steady_clock;
constexpr auto as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

// --- The server child ----------------------------------------------------------------------

/// The running server, for the signal handler: it must not outlive us, even stopped.
volatile sig_atomic_t g_child = -1;

void kill_child() {
  const pid_t pid = g_child;
  if (pid > 0) {
    kill(pid, SIGKILL); // works on a stopped process too
    waitpid(pid, nullptr, 0);
    g_child = -1;
  }
}

extern "C" void on_fatal_signal(int sig) {
  const pid_t pid = g_child;
  if (pid > 0)
    kill(pid, SIGKILL);
  signal(sig, SIG_DFL);
  raise(sig);
}

struct server_process {
  pid_t pid = -1;
  int out_fd = -1; ///< The read end of the server's stdout.
  unsigned short port = 0;
};

/// Starts the server with `--port 0` and reads the port it prints. Throws on failure.
server_process start_server(const std::string& path, const std::vector<std::string>& extra_args) {
  int fds[2];
  if (pipe(fds) != 0)
    throw std::runtime_error("pipe failed");
  std::vector<std::string> args{path, "--port", "0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0)
    throw std::runtime_error("fork failed");
  if (pid == 0) {
    // Dies with the driver, whatever kills it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(path.c_str(), argv.data());
    std::perror(path.c_str());
    _exit(127);
  }
  g_child = pid;
  close(fds[1]);
  server_process s{pid, fds[0], 0};
  std::string line;
  const auto limit = clock_type::now() + std::chrono::seconds(5);
  while (clock_type::now() < limit) {
    pollfd p{s.out_fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0)
      continue;
    char c = 0;
    if (read(s.out_fd, &c, 1) != 1)
      break;
    if (c != '\n') {
      line += c;
      continue;
    }
    unsigned port = 0;
    if (std::sscanf(line.c_str(), "port %u", &port) == 1 && port > 0 && port < 65536) {
      s.port = static_cast<unsigned short>(port);
      return s;
    }
    line.clear();
  }
  kill_child();
  close(s.out_fd);
  throw std::runtime_error("the server did not report its port: " + path);
}

// --- Options -------------------------------------------------------------------------------

struct options {
  std::vector<std::string> strategies{"fixed", "full"};
  swarm_config swarm;
  double steady_s = 15, outage_s = 40, watch_s = 30;
  double hold_s = 5; ///< How long OK/s must stay up to count as recovered.
  double warmup_s = 2;
  std::string out_dir = "retry_storm_out";
  std::string server_path;
  std::vector<std::string> server_args;
  /// Multiplies every time of the model: server delays and tick, think time, timeout, backoff.
  /// Phases and the recovery hold are given in real seconds.
  double time_scale = 1.0;
  bool quick = false;
  bool plot = true;
  double swarm_duration_s = 60; ///< `swarm` subcommand only.
};

[[noreturn]] void usage(int code) {
  std::fprintf(
      code ? stderr : stdout,
      "usage: retry_storm [run] [options]         the experiment (default)\n"
      "       retry_storm swarm --url URL [options] only the swarm, against any HTTP server\n"
      "options:\n"
      "  --strategies a,b,...  default fixed,full; known: %.*s\n"
      "  --strategy S          (swarm) one strategy, default full\n"
      "  --clients N           default 1000        --think-s S   mean think time, default 10\n"
      "  --timeout-s S         per attempt, 2      --seed N      default 1\n"
      "  --steady-s S 15  --outage-s S 40  --watch-s S 30  --hold-s S 5 (recovery criterion)\n"
      "  --time-scale X        multiply every model time (server, think, timeout, backoff)\n"
      "  --quick               CI scale: time scale 0.25, phases 4/8/10 s, hold 3 s\n"
      "  --transport curl|asio default curl when built with coretry::curl\n"
      "  --out-dir DIR         default ./retry_storm_out\n"
      "  --server PATH         default: retry_storm_server next to this program\n"
      "  --server-arg ARG      passed to the server (repeatable), e.g. --server-arg --backlog\n"
      "  --duration-s S        (swarm) how long to run, default 60\n"
      "  --no-plot             write the CSVs only\n",
      static_cast<int>(strategy_names.size()), strategy_names.data());
  std::exit(code);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty())
      out.push_back(item);
  return out;
}

options parse(int argc, char** argv, int first) {
  options o;
  o.swarm.transport = have_curl_transport() ? transport_kind::curl : transport_kind::asio;
  // --quick first, so that explicit flags given with it still win.
  for (int i = first; i < argc; ++i)
    if (std::string_view(argv[i]) == "--quick") {
      // The storm needs many clients (see docs/retry_storm.md), so quick mode keeps all 1000 and
      // replays the model four times faster instead.
      o.quick = true;
      o.time_scale = 0.25;
      o.steady_s = 4;
      o.outage_s = 8;
      o.watch_s = 10;
      o.hold_s = 3;
      o.warmup_s = 1;
      o.swarm_duration_s = 10;
    }
  for (int i = first; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usage(2);
      return argv[++i];
    };
    auto number = [&]() {
      const std::string v = value();
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !std::isfinite(x) || x < 0)
        usage(2);
      return x;
    };
    if (a == "--help" || a == "-h")
      usage(0);
    else if (a == "--quick")
      continue;
    else if (a == "--strategies")
      o.strategies = split(value());
    else if (a == "--strategy")
      o.swarm.strategy = value();
    else if (a == "--clients")
      o.swarm.clients = static_cast<unsigned>(number());
    else if (a == "--think-s")
      o.swarm.think_mean_s = number();
    else if (a == "--timeout-s")
      o.swarm.timeout_s = number();
    else if (a == "--time-scale")
      o.time_scale = number();
    else if (a == "--seed")
      o.swarm.seed = static_cast<std::uint64_t>(number());
    else if (a == "--steady-s")
      o.steady_s = number();
    else if (a == "--outage-s")
      o.outage_s = number();
    else if (a == "--watch-s")
      o.watch_s = number();
    else if (a == "--hold-s")
      o.hold_s = number();
    else if (a == "--duration-s")
      o.swarm_duration_s = number();
    else if (a == "--url")
      o.swarm.url = value();
    else if (a == "--out-dir")
      o.out_dir = value();
    else if (a == "--server")
      o.server_path = value();
    else if (a == "--server-arg")
      o.server_args.push_back(value());
    else if (a == "--no-plot")
      o.plot = false;
    else if (a == "--transport") {
      const std::string t = value();
      if (t == "curl")
        o.swarm.transport = transport_kind::curl;
      else if (t == "asio")
        o.swarm.transport = transport_kind::asio;
      else
        usage(2);
    } else
      usage(2);
  }
  for (const auto& s : o.strategies)
    if (!strategy_backoff(s)) {
      std::fprintf(stderr, "unknown strategy '%s'\n", s.c_str());
      usage(2);
    }
  if (o.strategies.empty() || o.steady_s < 2 * o.warmup_s || o.watch_s < o.hold_s || o.hold_s < 1 ||
      !(o.time_scale > 0))
    usage(2);
  if (o.server_path.empty()) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    std::string dir = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string(argv[0]);
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    o.server_path = dir + "retry_storm_server";
  }
  return o;
}

// --- One run -------------------------------------------------------------------------------

struct row {
  int t = 0; ///< End of the one-second bin, seconds since the swarm started.
  std::string strategy;
  std::uint64_t ok = 0, errors = 0, timeouts = 0, attempts = 0;
  std::int64_t in_flight = 0, waiting = 0;
  long server_concurrency = 0;
  long server_peak = 0;
  double server_delay_ms = 0;
  std::string phase;
};

struct server_view {
  long concurrency = 0;
  long peak = 0; ///< Highest concurrency reported since the driver last looked.
  double delay_ms = 0;
};

/// Follows the server's stat lines until its stdout closes.
asio::awaitable<void> follow_server(asio::posix::stream_descriptor& out, server_view& view) {
  asio::streambuf buffer;
  for (;;) {
    auto [ec, n] = co_await asio::async_read_until(out, buffer, '\n', as_tuple);
    if (ec)
      co_return;
    std::string line(asio::buffers_begin(buffer.data()),
                     asio::buffers_begin(buffer.data()) + static_cast<std::ptrdiff_t>(n));
    buffer.consume(n);
    double t = 0, delay = 0;
    long concurrency = 0, peak = 0;
    if (std::sscanf(line.c_str(), "stat t=%lf concurrency=%ld delay_ms=%lf peak=%ld", &t,
                    &concurrency, &delay, &peak) == 4) {
      view.concurrency = concurrency;
      view.peak = std::max(view.peak, peak);
      view.delay_ms = delay;
    }
  }
}

const char* phase_of(const options& o, int t) {
  if (t <= o.steady_s)
    return "steady";
  if (t <= o.steady_s + o.outage_s)
    return "outage";
  return "recovery";
}

std::vector<row> run_strategy(const options& o, const std::string& strategy) {
  std::vector<std::string> server_args{"--base-ms", std::to_string(100 * o.time_scale), "--tick-ms",
                                       std::to_string(50 * o.time_scale)};
  server_args.insert(server_args.end(), o.server_args.begin(), o.server_args.end());
  server_process server = start_server(o.server_path, server_args);
  asio::io_context io(1);
  asio::posix::stream_descriptor server_out(io, server.out_fd);
  server_view view;
  asio::co_spawn(io, follow_server(server_out, view), asio::detached);

  swarm_config config = o.swarm;
  config.strategy = strategy;
  config.time_scale = o.time_scale;
  config.think_mean_s *= o.time_scale;
  config.timeout_s *= o.time_scale;
  config.url = "http://127.0.0.1:" + std::to_string(server.port) + "/";
  swarm clients(io, config);
  std::printf("== %s against %s (server pid %d), %u clients, think %.1f s, timeout %.1f s\n",
              clients.describe().c_str(), config.url.c_str(), static_cast<int>(server.pid),
              config.clients, config.think_mean_s, config.timeout_s);

  std::vector<row> rows;
  const int total = static_cast<int>(std::lround(o.steady_s + o.outage_s + o.watch_s));
  const int stop_at = static_cast<int>(std::lround(o.steady_s));
  const int resume_at = static_cast<int>(std::lround(o.steady_s + o.outage_s));

  auto drive = [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(io);
    const auto start = clock_type::now();
    swarm_counters last = clients.counters();
    for (int t = 1; t <= total; ++t) {
      timer.expires_at(start + std::chrono::seconds(t));
      co_await timer.async_wait(as_tuple);
      const swarm_counters& now = clients.counters();
      row r;
      r.t = t;
      r.strategy = strategy;
      r.ok = now.ok - last.ok;
      r.errors = now.errors - last.errors;
      r.timeouts = now.timeouts - last.timeouts;
      r.attempts = now.attempts - last.attempts;
      r.in_flight = now.in_flight;
      r.waiting = now.waiting();
      r.server_concurrency = view.concurrency;
      r.server_peak = view.peak;
      view.peak = view.concurrency;
      r.server_delay_ms = view.delay_ms;
      r.phase = phase_of(o, t);
      last = now;
      std::printf("t=%3d %-8s ok/s %5llu  errors/s %5llu  timeouts/s %5llu  in flight %5lld  "
                  "waiting %5lld  server concurrency %6ld  delay %9.1f ms\n",
                  t, r.phase.c_str(), static_cast<unsigned long long>(r.ok),
                  static_cast<unsigned long long>(r.errors),
                  static_cast<unsigned long long>(r.timeouts), static_cast<long long>(r.in_flight),
                  static_cast<long long>(r.waiting), r.server_concurrency, r.server_delay_ms);
      std::fflush(stdout);
      rows.push_back(std::move(r));
      if (t == stop_at) {
        kill(server.pid, SIGSTOP);
        std::printf("-- server stopped (SIGSTOP)\n");
      } else if (t == resume_at) {
        kill(server.pid, SIGCONT);
        std::printf("-- server resumed (SIGCONT)\n");
      }
    }
    for (const auto& [kind, count] : clients.counters().error_kinds)
      std::printf("   failed attempts: %8llu  %s\n", static_cast<unsigned long long>(count),
                  kind.c_str());
    clients.stop();
    // Let every client unwind (cancelled attempts close their connections) before teardown.
    for (int i = 0; i < 1000 && clients.counters().alive > 0; ++i) {
      timer.expires_after(std::chrono::milliseconds(10));
      co_await timer.async_wait(as_tuple);
    }
    kill_child();
    io.stop();
  };
  clients.start();
  asio::co_spawn(io, drive(), asio::detached);
  io.run();
  kill_child();
  return rows;
}

// --- The report ----------------------------------------------------------------------------

struct summary {
  std::string strategy;
  double steady_ok = 0;
  long peak_concurrency = 0;
  double recovery_s = -1; ///< Negative: never.
  std::uint64_t attempts = 0, successes = 0, window_attempts = 0, window_successes = 0;
};

summary summarise(const options& o, const std::string& strategy, const std::vector<row>& rows) {
  summary s;
  s.strategy = strategy;
  const int resume_at = static_cast<int>(std::lround(o.steady_s + o.outage_s));
  const int hold = static_cast<int>(std::lround(o.hold_s));
  double sum = 0;
  int n = 0;
  for (const row& r : rows) {
    if (r.phase == "steady" && r.t > o.warmup_s) {
      sum += static_cast<double>(r.ok);
      ++n;
    }
    s.peak_concurrency = std::max(s.peak_concurrency, r.server_peak);
    s.attempts += r.attempts;
    s.successes += r.ok;
    if (r.phase != "steady") {
      s.window_attempts += r.attempts;
      s.window_successes += r.ok;
    }
  }
  s.steady_ok = n ? sum / n : 0;
  // Recovered from the start of bin i if, over the next `hold` bins, OK/s averages at least 90 %
  // of the steady rate and no single bin falls below 70 % (one-second counts are noisy: at 100/s
  // a Poisson count is below 90 one second in six even when nothing is wrong).
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].t <= resume_at || i + static_cast<std::size_t>(hold) > rows.size())
      continue;
    double window = 0, lowest = 1e300;
    for (std::size_t j = i; j < i + static_cast<std::size_t>(hold); ++j) {
      window += static_cast<double>(rows[j].ok);
      lowest = std::min(lowest, static_cast<double>(rows[j].ok));
    }
    if (window / hold >= 0.9 * s.steady_ok && lowest >= 0.7 * s.steady_ok) {
      s.recovery_s = rows[i].t - 1 - resume_at;
      break;
    }
  }
  return s;
}

std::string ratio(std::uint64_t a, std::uint64_t b) {
  if (b == 0)
    return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(a) / static_cast<double>(b));
  return buf;
}

void draw(const options& o, const std::vector<std::string>& strategies,
          const std::vector<row>& rows) {
  const double stop = o.steady_s, resume = o.steady_s + o.outage_s;
  std::vector<sample_support::panel> panels(2);
  panels[0] = {"Successful requests per second",
               "seconds (shaded: server stopped)",
               "OK/s",
               {},
               {{stop, resume}}};
  // The highest concurrency of each second: a burst at resume lasts less than a second.
  panels[1] = {"Server concurrency (highest each second; frozen while stopped)",
               "seconds (shaded: server stopped)",
               "concurrency",
               {},
               {{stop, resume}}};
  panels[1].log_y = true;
  for (auto& p : panels)
    p.marks = false;
  for (const auto& s : strategies) {
    sample_support::series ok{s, {}}, conc{s, {}};
    for (const row& r : rows)
      if (r.strategy == s) {
        ok.points.emplace_back(r.t, static_cast<double>(r.ok));
        conc.points.emplace_back(r.t, static_cast<double>(r.server_peak));
      }
    panels[0].lines.push_back(ok);
    panels[1].lines.push_back(conc);
  }
  const std::string picture = sample_support::draw(o.out_dir + "/retry_storm", panels);
  if (!picture.empty())
    std::printf("picture: %s\n", picture.c_str());
}

int run_experiment(const options& o) {
  std::error_code dir_error;
  std::filesystem::create_directories(o.out_dir, dir_error);
  std::vector<row> all;
  std::vector<summary> summaries;
  const auto started = clock_type::now();
  for (const auto& strategy : o.strategies) {
    auto rows = run_strategy(o, strategy);
    summaries.push_back(summarise(o, strategy, rows));
    all.insert(all.end(), rows.begin(), rows.end());
  }

  const std::string csv_path = o.out_dir + "/retry_storm.csv";
  {
    std::ofstream csv(csv_path);
    csv << "time,strategy,ok,errors,timeouts,in_flight,waiting,server_concurrency,phase,"
           "attempts,server_delay_ms,server_peak\n";
    for (const row& r : all)
      csv << r.t << ',' << r.strategy << ',' << r.ok << ',' << r.errors << ',' << r.timeouts << ','
          << r.in_flight << ',' << r.waiting << ',' << r.server_concurrency << ',' << r.phase << ','
          << r.attempts << ',' << r.server_delay_ms << ',' << r.server_peak << '\n';
  }
  const std::string summary_path = o.out_dir + "/summary.csv";
  {
    std::ofstream out(summary_path);
    out << "strategy,clients,steady_ok_per_s,peak_concurrency,recovery_s,attempts,successes,"
           "attempts_per_success,window_attempts,window_successes,window_attempts_per_success\n";
    for (const summary& s : summaries) {
      out << s.strategy << ',' << o.swarm.clients << ',' << s.steady_ok << ',' << s.peak_concurrency
          << ',';
      if (s.recovery_s >= 0)
        out << s.recovery_s;
      else
        out << "never";
      out << ',' << s.attempts << ',' << s.successes << ',' << ratio(s.attempts, s.successes) << ','
          << s.window_attempts << ',' << s.window_successes << ','
          << ratio(s.window_attempts, s.window_successes) << '\n';
    }
  }

  std::printf("\n%s: %u clients, think %.2f s, timeout %.2f s, time scale %.2f; steady %.0f s, "
              "outage %.0f s, watch %.0f s; recovered = OK/s >= 90%% of steady for %.0f s%s\n",
              o.quick ? "quick mode" : "full run", o.swarm.clients,
              o.swarm.think_mean_s * o.time_scale, o.swarm.timeout_s * o.time_scale, o.time_scale,
              o.steady_s, o.outage_s, o.watch_s, o.hold_s,
              o.quick ? " (scaled down from 5 s)" : "");
  std::printf("%-14s %10s %10s %12s %10s %10s %14s %18s\n", "strategy", "steady OK/s", "peak conc",
              "recovery", "attempts", "successes", "attempts/succ", "outage+recovery a/s");
  for (const summary& s : summaries) {
    char recovery[32];
    if (s.recovery_s >= 0)
      std::snprintf(recovery, sizeof recovery, "%.0f s", s.recovery_s);
    else
      std::snprintf(recovery, sizeof recovery, "never");
    std::printf(
        "%-14s %11.1f %10ld %12s %10llu %10llu %14s %18s\n", s.strategy.c_str(), s.steady_ok,
        s.peak_concurrency, recovery, static_cast<unsigned long long>(s.attempts),
        static_cast<unsigned long long>(s.successes), ratio(s.attempts, s.successes).c_str(),
        ratio(s.window_attempts, s.window_successes).c_str());
  }
  std::printf("csv: %s\nsummary: %s\n", csv_path.c_str(), summary_path.c_str());
  if (o.plot)
    draw(o, o.strategies, all);
  std::printf("wall time: %.1f s\n",
              std::chrono::duration<double>(clock_type::now() - started).count());
  return 0;
}

int run_swarm_only(const options& o) {
  asio::io_context io(1);
  swarm clients(io, o.swarm);
  std::printf("swarm: %s against %s, %u clients\n", clients.describe().c_str(), o.swarm.url.c_str(),
              o.swarm.clients);
  auto drive = [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(io);
    const auto start = clock_type::now();
    swarm_counters last = clients.counters();
    const int total = static_cast<int>(std::lround(o.swarm_duration_s));
    for (int t = 1; t <= total; ++t) {
      timer.expires_at(start + std::chrono::seconds(t));
      co_await timer.async_wait(as_tuple);
      const swarm_counters& now = clients.counters();
      std::printf("t=%3d ok/s %5llu  errors/s %5llu  timeouts/s %5llu  in flight %5lld  "
                  "waiting %5lld\n",
                  t, static_cast<unsigned long long>(now.ok - last.ok),
                  static_cast<unsigned long long>(now.errors - last.errors),
                  static_cast<unsigned long long>(now.timeouts - last.timeouts),
                  static_cast<long long>(now.in_flight), static_cast<long long>(now.waiting()));
      std::fflush(stdout);
      last = now;
    }
    for (const auto& [kind, count] : clients.counters().error_kinds)
      std::printf("failed attempts: %8llu  %s\n", static_cast<unsigned long long>(count),
                  kind.c_str());
    clients.stop();
    for (int i = 0; i < 1000 && clients.counters().alive > 0; ++i) {
      timer.expires_after(std::chrono::milliseconds(10));
      co_await timer.async_wait(as_tuple);
    }
    io.stop();
  };
  clients.start();
  asio::co_spawn(io, drive(), asio::detached);
  io.run();
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  int first = 1;
  bool swarm_only = false;
  if (argc > 1 && std::string_view(argv[1]) == "swarm") {
    swarm_only = true;
    first = 2;
  } else if (argc > 1 && std::string_view(argv[1]) == "run") {
    first = 2;
  }
  const options o = parse(argc, argv, first);
  sample_support::raise_fd_limit();
  signal(SIGINT, on_fatal_signal);
  signal(SIGTERM, on_fatal_signal);
  signal(SIGHUP, on_fatal_signal);
  signal(SIGPIPE, SIG_IGN);
  std::atexit(kill_child);
  try {
    return swarm_only ? run_swarm_only(o) : run_experiment(o);
  } catch (const std::exception& e) {
    kill_child();
    std::fprintf(stderr, "retry_storm: %s\n", e.what());
    return 2;
  }
}
