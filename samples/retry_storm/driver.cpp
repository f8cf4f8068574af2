// SPDX-License-Identifier: BSL-1.0
// retry_storm: the experiment of "Exponential Backoff or how not to crash a server", live.
// For each outage length and each strategy: start a fresh retry_storm_server, let the swarm reach
// a steady state, freeze the server (SIGSTOP), thaw it (SIGCONT) and watch whether the service
// recovers. Writes a per-second CSV, a summary and a picture per outage.
// `retry_storm budget` runs the budget demo instead: the server answers 503 to everything for a
// while (SIGUSR1 / SIGUSR2), and the swarm's retries are counted with and without a budget.
// `retry_storm swarm --url URL` runs the swarm alone against any HTTP server.
//
// Every time in the options and in the output is model time: the article's seconds. With
// --time-scale X the whole model (server delays, think time, timeout, backoff, breaker and budget
// windows, phases) runs 1/X times as fast on the wall clock, and rates are still given per model
// second, so the numbers of a scaled run read like the article's.
#include "support/cli.hpp"
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
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "swarm.hpp"

#ifdef CORETRY_STORM_HAVE_PROMETHEUS
#include <coretry/prometheus.hpp>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#endif
#include <poll.h>
#include <sched.h>
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
  // The fleet's processes die with the driver (PR_SET_DEATHSIG).
  signal(sig, SIG_DFL);
  raise(sig);
}

struct server_process {
  pid_t pid = -1;
  int out_fd = -1; ///< The read end of the server's stdout.
  int in_fd = -1;  ///< The write end of the server's stdin: fault commands, one a line.
  unsigned short port = 0;
  int backlog = 0; ///< The listen backlog it reported.
};

/// A child process started by `spawn`.
struct child_process {
  pid_t pid = -1;
  int out_fd = -1; ///< The read end of its stdout.
  int in_fd = -1;  ///< The write end of its stdin, when asked for; else -1.
};

/// Starts `args` (`args[0]` the program) with its stdout piped back and, when `with_stdin`, its
/// stdin from a pipe too; the child dies with the driver (`PR_SET_PDEATHSIG`), whatever kills
/// it. Throws on failure.
child_process spawn(std::vector<std::string> args, bool with_stdin) {
  int out[2], in[2] = {-1, -1};
  if (pipe(out) != 0 || (with_stdin && pipe(in) != 0))
    throw std::runtime_error("pipe failed");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0)
    throw std::runtime_error("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    if (with_stdin) {
      dup2(in[0], STDIN_FILENO);
      close(in[0]);
      close(in[1]);
    }
    execv(argv[0], argv.data());
    std::perror(argv[0]);
    _exit(127);
  }
  close(out[1]);
  if (with_stdin)
    close(in[0]);
  return {pid, out[0], in[1]};
}

/// Starts the server with `--port 0` and reads the port it prints. Throws on failure.
server_process start_server(const std::string& path, const std::vector<std::string>& extra_args) {
  std::vector<std::string> args{path, "--port", "0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const child_process c = spawn(std::move(args), true);
  g_child = c.pid;
  server_process s{c.pid, c.out_fd, c.in_fd, 0, 0};
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
    int backlog = 0;
    if (std::sscanf(line.c_str(), "port %u backlog %d", &port, &backlog) == 2 && port > 0 &&
        port < 65536) {
      s.port = static_cast<unsigned short>(port);
      s.backlog = backlog;
      return s;
    }
    line.clear();
  }
  kill_child();
  close(s.out_fd);
  close(s.in_fd);
  throw std::runtime_error("the server did not report its port: " + path);
}

// --- Options -------------------------------------------------------------------------------

enum class mode { storm, budget, swarm };
enum class fault_kind { stop, fail };

/// The failure shapes of the storm (`--shape`): what happens to the server at the fault.
enum class shape_kind { freeze, brownout, ratelimit, partial, refuse, blackhole, slowdown };
inline constexpr std::string_view shape_names =
    "freeze, brownout, ratelimit, partial, refuse, blackhole, slowdown";

std::optional<shape_kind> shape_of(std::string_view name) {
  if (name == "freeze")
    return shape_kind::freeze;
  if (name == "brownout")
    return shape_kind::brownout;
  if (name == "ratelimit")
    return shape_kind::ratelimit;
  if (name == "partial")
    return shape_kind::partial;
  if (name == "refuse")
    return shape_kind::refuse;
  if (name == "blackhole")
    return shape_kind::blackhole;
  if (name == "slowdown")
    return shape_kind::slowdown;
  return std::nullopt;
}

/// The fault's default length (model seconds) for each shape, from issue 22's list.
double default_fault_s(shape_kind k) {
  switch (k) {
  case shape_kind::brownout:
  case shape_kind::partial:
    return 60;
  case shape_kind::slowdown:
    return 30;
  case shape_kind::ratelimit:
    return 30;
  default:
    return 10;
  }
}

/// The black hole's address: inside the lab's own network namespace, packets to it are routed
/// into a veth whose peer is down, where the kernel drops them, while the fault lasts.
constexpr const char* blackhole_host = "10.77.0.1";

struct options {
  mode what = mode::storm;
  std::vector<std::string> strategies{"fixed", "full", "safe"};
  swarm_config swarm;
  fault_kind fault = fault_kind::stop;
  shape_kind shape = shape_kind::freeze;
  std::string shape_name = "freeze";
  double brownout_factor = 2;   ///< brownout: every server delay times this.
  double slowdown_factor = 10;  ///< slowdown: every server delay times this.
  double ratelimit_share = 0.8; ///< ratelimit: the share answered 429.
  int retry_after_s = 1;        ///< ratelimit: Retry-After, model seconds.
  double partial_share = 0.3;   ///< partial: the share answered 503.
  unsigned processes = 1;       ///< --processes: client processes of --clients each (a fleet).
  std::string host = "127.0.0.1";
  // Model seconds.
  double steady_s = 15, watch_s = 30;
  std::vector<double> outages{10};
  double hold_s = 5; ///< How long OK/s must stay up to count as recovered.
  double warmup_s = 2;
  double swarm_duration_s = 60; ///< `swarm` only.
  double report_s = 1;          ///< `swarm` only: how often it prints a line (model seconds).
  int backlog = 0;              ///< 0: the server's default (the system's).
  std::string out_dir = "retry_storm_out";
  std::string server_path;
  std::vector<std::string> server_args;
  /// Wall-clock seconds per model second.
  double time_scale = 1.0;
  bool quick = false;
  bool plot = true;
  int metrics_port = -1; ///< --metrics-port; -1: none
};

void usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: retry_storm [run] [options]          the storm: freeze and thaw the server\n"
      "       retry_storm budget [options]         the budget demo: the server fails 100 %%\n"
      "       retry_storm swarm --url URL [options] only the swarm, against any HTTP server\n"
      "Times are model seconds (the article's); --time-scale X runs them X times as long.\n"
      "options:\n"
      "  --strategies a,b,...  default fixed,full,safe (budget: full,budget); known:\n"
      "                        %.*s\n"
      "  --strategy S          (swarm) one strategy, default full\n"
      "  --clients N           default 1000        --think-s S   mean think time, default 10\n"
      "  --timeout-s S         per attempt, 2      --seed N      default 1\n"
      "  --outage-s S[,S...]   default 10 (budget: 30, the failure); several: one run each\n"
      "  --steady-s S 15  --watch-s S 30  --hold-s S 5 (recovery criterion)\n"
      "  --backlog N           the server's listen backlog; default the system's (somaxconn)\n"
      "  --time-scale X        wall-clock seconds per model second, default 1\n"
      "  --quick               CI: fixed,safe,wait, outage 10, watch 15, time scale 0.5\n"
      "  --transport curl|asio default curl when built with coretry::curl\n"
      "  --out-dir DIR         default ./retry_storm_out\n"
      "  --server PATH         default: retry_storm_server next to this program\n"
      "  --server-arg ARG      passed to the server (repeatable)\n"
      "  --duration-s S        (swarm) how long to run, default 60\n"
      "  --report-s S          (swarm) one line every S model seconds, default 1\n"
      "  --shape S             the fault: freeze (default: SIGSTOP), brownout (every delay x2),\n"
      "                        ratelimit (429 + Retry-After: 1 to 80 %%), partial (503 to 30 %%),\n"
      "                        refuse (listener closed: RST), blackhole (packets dropped; root:\n"
      "                        a network namespace of its own); default lengths 10, 60, 30, 60,\n"
      "                        10, 10 s (--outage-s overrides); slowdown (every delay x10,\n"
      "                        --slowdown-factor; 30 s)\n"
      "  --brownout-factor F   brownout: every delay times F (default 2: half the capacity)\n"
      "  --slowdown-factor F   slowdown: every delay times F (default 10)\n"
      "  --ramp-s S            wait: the breaker's ramp after closing, default 5\n"
      "  --wait-interval-s S   wait: how often a refused waiter asks again, default 0.2\n"
      "  --max-in-flight N     every breaker's in-flight limit, default 50 (0: none)\n"
      "  --consecutive-failures N  every breaker's run of failures that opens it, default 10\n"
      "  --throttle-window-s S sre: the throttle's window, default 1\n"
      "  --processes N         a fleet: N client processes of --clients each, sharing nothing\n"
      "  --url URL             (swarm) the server\n"
      "  --no-plot             write the CSVs only\n"
      "  --metrics-port N      serve the swarm's Prometheus metrics on 127.0.0.1:N/metrics\n"
      "                        (0: any free port, printed; needs coretry::prometheus)\n",
      static_cast<int>(strategy_names.size()), strategy_names.data());
}

options parse(int argc, char** argv, int first, mode what) {
  options o;
  o.what = what;
  o.swarm.transport = have_curl_transport() ? transport_kind::curl : transport_kind::asio;
  if (what == mode::budget) {
    o.strategies = {"full", "budget"};
    o.fault = fault_kind::fail;
    o.steady_s = 10;
    o.outages = {30};
    o.watch_s = 10;
  }
  namespace cli = sample_support::cli;
  std::vector<std::pair<std::string, std::string>> given;
  cli::parse("retry_storm", argc, argv, first,
             {{"quick"},
              {"strategies", true},
              {"strategy", true},
              {"clients", true},
              {"think-s", true},
              {"timeout-s", true},
              {"time-scale", true},
              {"seed", true},
              {"steady-s", true},
              {"outage-s", true},
              {"watch-s", true},
              {"hold-s", true},
              {"duration-s", true},
              {"backlog", true},
              {"url", true},
              {"out-dir", true},
              {"server", true},
              {"server-arg", true},
              {"no-plot"},
              {"shape", true},
              {"processes", true},
              {"brownout-factor", true},
              {"slowdown-factor", true},
              {"ramp-s", true},
              {"wait-interval-s", true},
              {"max-in-flight", true},
              {"report-s", true},
              {"consecutive-failures", true},
              {"throttle-window-s", true},
              {"transport", true},
              {"metrics-port", true}},
             usage, [&](std::string_view a, const std::string& v) { given.emplace_back(a, v); });
  // --quick first, so that explicit flags given with it still win.
  for (const auto& [a, v] : given)
    if (a == "quick") {
      // The storm needs many clients (see docs/retry_storm.md), so quick mode keeps all 1000 and
      // replays the model twice as fast instead.
      o.quick = true;
      o.time_scale = 0.5;
      if (what == mode::storm) {
        o.strategies = {"fixed", "safe", "wait"};
        o.watch_s = 15;
      } else if (what == mode::budget) {
        o.steady_s = 5;
        o.outages = {15};
        o.watch_s = 5;
      }
      o.swarm_duration_s = 20;
    }
  bool outages_given = false;
  for (const auto& [a, v] : given)
    outages_given = outages_given || a == "outage-s";
  for (const auto& [a, v] : given) {
    auto number = [&, &a = a, &v = v]() { return cli::number(a, v); };
    if (a == "strategies")
      o.strategies = cli::list(v);
    else if (a == "strategy")
      o.swarm.strategy = v;
    else if (a == "clients")
      o.swarm.clients = static_cast<unsigned>(cli::whole(a, v, 1, 10000000));
    else if (a == "think-s")
      o.swarm.think_mean_s = number();
    else if (a == "timeout-s")
      o.swarm.timeout_s = number();
    else if (a == "time-scale")
      o.time_scale = number();
    else if (a == "seed")
      o.swarm.seed = cli::whole(a, v);
    else if (a == "steady-s")
      o.steady_s = number();
    else if (a == "outage-s") {
      o.outages.clear();
      for (const auto& item : cli::list(v))
        o.outages.push_back(cli::number(a, item, 1));
    } else if (a == "watch-s")
      o.watch_s = number();
    else if (a == "hold-s")
      o.hold_s = number();
    else if (a == "duration-s")
      o.swarm_duration_s = number();
    else if (a == "backlog")
      o.backlog = static_cast<int>(cli::whole(a, v, 1, 1000000));
    else if (a == "url")
      o.swarm.url = v;
    else if (a == "out-dir")
      o.out_dir = v;
    else if (a == "server")
      o.server_path = v;
    else if (a == "server-arg")
      o.server_args.push_back(v);
    else if (a == "no-plot")
      o.plot = false;
    else if (a == "shape") {
      const auto k = shape_of(v);
      if (!k)
        cli::fail("--shape: '" + v + "' is not one of " + std::string(shape_names));
      o.shape = *k;
      o.shape_name = v;
      if (!outages_given)
        o.outages = {default_fault_s(*k)};
    } else if (a == "ramp-s")
      o.swarm.waiting.ramp_s = cli::number(a, v);
    else if (a == "wait-interval-s")
      o.swarm.waiting.retry_interval_s = cli::number(a, v, 0.001);
    else if (a == "report-s")
      o.report_s = cli::number(a, v, 0.01);
    else if (a == "max-in-flight")
      o.swarm.waiting.max_in_flight = static_cast<unsigned>(cli::whole(a, v, 0, 1000000));
    else if (a == "consecutive-failures")
      o.swarm.waiting.consecutive_failures = static_cast<unsigned>(cli::whole(a, v, 1, 1000000));
    else if (a == "throttle-window-s")
      o.swarm.waiting.throttle_window_s = cli::number(a, v, 0.001);
    else if (a == "brownout-factor")
      o.brownout_factor = cli::number(a, v, 1);
    else if (a == "slowdown-factor")
      o.slowdown_factor = cli::number(a, v, 1);
    else if (a == "processes")
      o.processes = static_cast<unsigned>(cli::whole(a, v, 1, 64));
    else if (a == "metrics-port")
      o.metrics_port = static_cast<int>(cli::whole(a, v, 0, 65535));
    else if (a == "transport") {
      if (v == "curl")
        o.swarm.transport = transport_kind::curl;
      else if (v == "asio")
        o.swarm.transport = transport_kind::asio;
      else
        cli::fail("--transport: '" + v + "' is neither curl nor asio");
    }
  }
  if (what == mode::swarm)
    o.strategies = {o.swarm.strategy};
  if (o.shape != shape_kind::freeze && what != mode::storm)
    cli::fail("--shape is for the storm only");
  if (o.shape == shape_kind::blackhole)
    o.host = blackhole_host;
  for (const auto& s : o.strategies)
    if (!strategy_backoff(s))
      cli::fail("unknown strategy '" + s + "' (see --help)");
  if (o.strategies.empty())
    cli::fail("no strategy given");
  if (o.outages.empty())
    cli::fail("--outage-s: no outage given");
  if (o.steady_s < 2 * o.warmup_s)
    cli::fail("--steady-s must be at least " + std::to_string(2 * o.warmup_s));
  if (o.hold_s < 1)
    cli::fail("--hold-s must be at least 1");
  if (o.watch_s < o.hold_s)
    cli::fail("--watch-s must be at least --hold-s");
  if (!(o.time_scale > 0))
    cli::fail("--time-scale must be positive");
  if (o.server_path.empty()) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    std::string dir = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string(argv[0]);
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    o.server_path = dir + "retry_storm_server";
  }
  return o;
}

/// The swarm's settings at the wall clock's scale.
swarm_config scaled_swarm(const options& o, const std::string& strategy) {
  swarm_config config = o.swarm;
  config.strategy = strategy;
  config.time_scale = o.time_scale;
  config.think_mean_s *= o.time_scale;
  config.timeout_s *= o.time_scale;
  return config;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  if (!(in >> a >> b >> c))
    return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", a, b, c);
  return buf;
}

std::string format_outage(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// --- One run -------------------------------------------------------------------------------

struct row {
  int t = 0; ///< End of the bin, model seconds since the swarm started.
  double outage_s = 0;
  std::string strategy;
  std::string phase;
  std::uint64_t ok = 0, requests = 0, retries = 0, failed = 0, errors = 0, timeouts = 0,
                attempts = 0;
  std::uint64_t expired = 0; ///< Failed requests whose deadline passed (part of `failed`).
  std::int64_t in_flight = 0, waiting = 0;
  long server_concurrency = 0;
  long server_peak = 0;
  double server_delay_ms = 0;
  std::string breaker = "-";
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

struct run_result {
  std::vector<row> rows;
  int backlog = 0;
  std::map<std::string, std::uint64_t> error_kinds;
  std::map<long, std::uint64_t> statuses;
  std::string load_before, load_after;
};

const char* phase_of(const options& o, double outage_s, int t) {
  if (t <= o.steady_s)
    return "steady";
  if (t <= o.steady_s + outage_s)
    return "outage";
  return "recovery";
}

std::chrono::nanoseconds wall(const options& o, double model_s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(model_s * o.time_scale));
}

/// Fills the rate columns of `r` from two samples of the counters.
void take_difference(row& r, const swarm_counters& now, const swarm_counters& last) {
  r.ok = now.ok - last.ok;
  r.requests = now.requests - last.requests;
  r.failed = now.failed() - last.failed();
  r.expired = now.deadline_exceeded - last.deadline_exceeded;
  r.errors = now.errors - last.errors;
  r.timeouts = now.timeouts - last.timeouts;
  r.attempts = now.attempts - last.attempts;
  r.retries = now.retries - last.retries;
  r.in_flight = now.in_flight;
  r.waiting = now.waiting();
}

/// The fleet's client processes, for the exit paths: none may outlive the driver.
std::vector<pid_t> g_swarms;

void kill_swarms() {
  for (const pid_t pid : g_swarms) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  g_swarms.clear();
}

std::string self_path() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    throw std::runtime_error("cannot read /proc/self/exe");
  return std::string(self, static_cast<std::size_t>(n));
}

/// Starts fleet member `k`, a `retry_storm swarm` of `--clients` clients running `strategy`
/// against `url` for `duration_s`, with the run's settings; returns its stdout.
int start_swarm_process(const options& o, const std::string& url, const std::string& strategy,
                        unsigned k, int duration_s) {
  const auto g = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  const waiting_options& w = o.swarm.waiting;
  const child_process c = spawn({self_path(),
                                 "swarm",
                                 "--url",
                                 url,
                                 "--strategy",
                                 strategy,
                                 "--clients",
                                 std::to_string(o.swarm.clients),
                                 "--think-s",
                                 g(o.swarm.think_mean_s),
                                 "--timeout-s",
                                 g(o.swarm.timeout_s),
                                 "--time-scale",
                                 g(o.time_scale),
                                 "--seed",
                                 std::to_string(o.swarm.seed * 1000 + k),
                                 "--duration-s",
                                 std::to_string(duration_s),
                                 "--transport",
                                 o.swarm.transport == transport_kind::curl ? "curl" : "asio",
                                 "--ramp-s",
                                 g(w.ramp_s),
                                 "--wait-interval-s",
                                 g(w.retry_interval_s),
                                 "--max-in-flight",
                                 std::to_string(w.max_in_flight),
                                 "--consecutive-failures",
                                 std::to_string(w.consecutive_failures),
                                 "--throttle-window-s",
                                 g(w.throttle_window_s),
                                 "--report-s",
                                 "0.1"},
                                false);
  g_swarms.push_back(c.pid);
  return c.out_fd;
}

/// One fleet member's per-second lines (`retry_storm swarm`'s output), added into `total`;
/// `latest` keeps its gauges (in flight, waiting), which the driver sums over the fleet.
asio::awaitable<void> follow_swarm(asio::posix::stream_descriptor& out, swarm_counters& total,
                                   std::pair<std::int64_t, std::int64_t>& latest) {
  asio::streambuf buffer;
  for (;;) {
    auto [ec, n] = co_await asio::async_read_until(out, buffer, '\n', as_tuple);
    if (ec)
      co_return;
    std::string line(asio::buffers_begin(buffer.data()),
                     asio::buffers_begin(buffer.data()) + static_cast<std::ptrdiff_t>(n));
    buffer.consume(n);
    int t = 0;
    unsigned long long ok = 0, failed = 0, errors = 0, timeouts = 0, attempts = 0, requests = 0,
                       retries = 0, expired = 0;
    long long in_flight = 0, waiting = 0;
    if (std::sscanf(line.c_str(),
                    "t=%d ok %llu failed %llu errors %llu timeouts %llu attempts %llu in flight "
                    "%lld waiting %lld requests %llu retries %llu expired %llu",
                    &t, &ok, &failed, &errors, &timeouts, &attempts, &in_flight, &waiting,
                    &requests, &retries, &expired) == 11) {
      total.ok += ok;
      total.deadline_exceeded += expired;
      total.other_failed += failed - expired; // failed requests, whatever said no
      total.errors += errors;
      total.timeouts += timeouts;
      total.attempts += attempts;
      total.requests += requests;
      total.retries += retries;
      latest = {in_flight, waiting};
    }
  }
}

/// Applies (`on`) or lifts the fault of `o.shape` on the server.
void apply_fault(const options& o, const server_process& server, bool on) {
  auto command = [&](const std::string& line) {
    const std::string text = line + "\n";
    if (write(server.in_fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      std::fprintf(stderr, "retry_storm: could not send '%s' to the server\n", line.c_str());
  };
  char buf[128];
  switch (o.shape) {
  case shape_kind::freeze:
    if (o.fault == fault_kind::stop)
      kill(server.pid, on ? SIGSTOP : SIGCONT);
    else
      kill(server.pid, on ? SIGUSR1 : SIGUSR2);
    break;
  case shape_kind::brownout:
    std::snprintf(buf, sizeof buf, "slow %g", o.brownout_factor);
    command(on ? buf : "healthy");
    break;
  case shape_kind::slowdown:
    std::snprintf(buf, sizeof buf, "slow %g", o.slowdown_factor);
    command(on ? buf : "healthy");
    break;
  case shape_kind::ratelimit:
    std::snprintf(buf, sizeof buf, "fail %g 429 %d", o.ratelimit_share, o.retry_after_s);
    command(on ? buf : "healthy");
    break;
  case shape_kind::partial:
    std::snprintf(buf, sizeof buf, "fail %g 503 0", o.partial_share);
    command(on ? buf : "healthy");
    break;
  case shape_kind::refuse:
    command(on ? "refuse" : "accept");
    break;
  case shape_kind::blackhole: {
    const std::string rule = std::string(on ? "ip rule add" : "ip rule del") + " pref 10 to " +
                             blackhole_host + " lookup 100";
    if (std::system(rule.c_str()) != 0)
      std::fprintf(stderr, "retry_storm: '%s' failed\n", rule.c_str());
    break;
  }
  }
  const char* what[] = {"stopped (SIGSTOP)",    "in a brownout",        "rate limiting (429)",
                        "failing partly (503)", "refusing connections", "in a black hole",
                        "slowed down"};
  if (on)
    std::printf("-- server %s\n", o.fault == fault_kind::fail ? "failing (SIGUSR1)"
                                                              : what[static_cast<int>(o.shape)]);
  else
    std::printf("-- fault over\n");
}

/// Puts the driver (and so the server and the fleet it starts) in a network namespace of its own
/// where `blackhole_host` is a local address that `apply_fault` can cut off: an `ip rule` then
/// routes everything sent to it into a veth whose peer is down, and the kernel drops it.
void enter_blackhole_namespace() {
  if (geteuid() != 0)
    throw std::runtime_error("--shape blackhole needs root (a network namespace of its own)");
  if (unshare(CLONE_NEWNET) != 0)
    throw std::runtime_error("unshare(CLONE_NEWNET) failed: --shape blackhole needs it");
  const std::string setup =
      std::string("set -e; ip link set lo up; ") +
      "ip link add rs_hole type veth peer name rs_peer; " + "ip link set rs_hole up; ip addr add " +
      blackhole_host + "/32 dev lo; ip route add " + blackhole_host +
      "/32 dev rs_hole table 100; ip rule add pref 100 lookup local; " + "ip rule del pref 0";
  if (std::system(setup.c_str()) != 0)
    throw std::runtime_error("could not set up the black hole's namespace (needs `ip` and veth)");
}

run_result run_strategy(const options& o, double outage_s, const std::string& strategy) {
  run_result result;
  result.load_before = load_average();
  std::vector<std::string> server_args{"--host",
                                       o.host,
                                       "--base-ms",
                                       std::to_string(100 * o.time_scale),
                                       "--tick-ms",
                                       std::to_string(50 * o.time_scale),
                                       "--max-delay-s",
                                       std::to_string(3600 * o.time_scale),
                                       "--stats-interval-s",
                                       std::to_string(o.time_scale)};
  if (o.backlog > 0) {
    server_args.emplace_back("--backlog");
    server_args.push_back(std::to_string(o.backlog));
  }
  server_args.insert(server_args.end(), o.server_args.begin(), o.server_args.end());
  server_process server = start_server(o.server_path, server_args);
  result.backlog = server.backlog;
  asio::io_context io(1);
  asio::posix::stream_descriptor server_out(io, server.out_fd);
  server_view view;
  asio::co_spawn(io, follow_server(server_out, view), asio::detached);

  swarm_config config = scaled_swarm(o, strategy);
  config.url = "http://" + o.host + ":" + std::to_string(server.port) + "/";
  const int total_s = static_cast<int>(std::lround(o.steady_s + outage_s + o.watch_s));
  std::unique_ptr<swarm> local;
  // A fleet: processes that share nothing, each a `retry_storm swarm` of --clients clients.
  swarm_counters fleet;
  std::vector<std::pair<std::int64_t, std::int64_t>> fleet_gauges(o.processes);
  std::vector<std::unique_ptr<asio::posix::stream_descriptor>> fleet_out;
  std::string description;
  if (o.processes == 1) {
    local = std::make_unique<swarm>(io, config);
    description = local->describe();
  } else {
    for (unsigned k = 0; k < o.processes; ++k) {
      const int fd = start_swarm_process(o, config.url, strategy, k, total_s + 1);
      fleet_out.push_back(std::make_unique<asio::posix::stream_descriptor>(io, fd));
      asio::co_spawn(io, follow_swarm(*fleet_out.back(), fleet, fleet_gauges[k]), asio::detached);
    }
    description = strategy + " x " + std::to_string(o.processes) + " processes";
  }
  auto counters_now = [&]() -> swarm_counters {
    if (local)
      return local->counters();
    swarm_counters c = fleet;
    c.in_flight = 0;
    c.retrying = 0;
    for (const auto& [in_flight, waiting] : fleet_gauges) {
      c.in_flight += in_flight;
      c.retrying += in_flight + waiting;
    }
    return c;
  };
  std::printf("== %s; shape %s, fault %s s; %s (server pid %d, backlog %d); %u x %u clients, "
              "think %.1f s, timeout %.1f s, time scale %.2f; load average %s\n",
              description.c_str(), o.shape_name.c_str(), format_outage(outage_s).c_str(),
              config.url.c_str(), static_cast<int>(server.pid), server.backlog, o.processes,
              config.clients, o.swarm.think_mean_s, o.swarm.timeout_s, o.time_scale,
              result.load_before.c_str());

  const int total = static_cast<int>(std::lround(o.steady_s + outage_s + o.watch_s));
  const int fault_at = static_cast<int>(std::lround(o.steady_s));
  const int resume_at = static_cast<int>(std::lround(o.steady_s + outage_s));

  auto drive = [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(io);
    const auto start = clock_type::now();
    swarm_counters last = counters_now();
    for (int t = 1; t <= total; ++t) {
      timer.expires_at(start + wall(o, t));
      co_await timer.async_wait(as_tuple);
      const swarm_counters now = counters_now();
      row r;
      r.t = t;
      r.outage_s = outage_s;
      r.strategy = strategy;
      take_difference(r, now, last);
      r.server_concurrency = view.concurrency;
      r.server_peak = view.peak;
      view.peak = view.concurrency;
      r.server_delay_ms = view.delay_ms / o.time_scale;
      r.phase = phase_of(o, outage_s, t);
      if (local)
        r.breaker = local->controls().breaker_state();
      last = now;
      std::printf("t=%3d %-8s ok %5llu  failed %5llu  timeouts %5llu  errors %5llu  attempts "
                  "%5llu  in flight %5lld  waiting %5lld  server conc %6ld  delay %9.1f ms%s%s\n",
                  t, r.phase.c_str(), static_cast<unsigned long long>(r.ok),
                  static_cast<unsigned long long>(r.failed),
                  static_cast<unsigned long long>(r.timeouts),
                  static_cast<unsigned long long>(r.errors),
                  static_cast<unsigned long long>(r.attempts), static_cast<long long>(r.in_flight),
                  static_cast<long long>(r.waiting), r.server_concurrency, r.server_delay_ms,
                  r.breaker == "-" ? "" : "  breaker ", r.breaker == "-" ? "" : r.breaker.c_str());
      std::fflush(stdout);
      result.rows.push_back(std::move(r));
      if (t == fault_at)
        apply_fault(o, server, true);
      else if (t == resume_at)
        apply_fault(o, server, false);
    }
    {
      const swarm_counters c = counters_now();
      std::printf("   failed requests: %llu circuit open, %llu out of budget, %llu deadline, %llu "
                  "other\n",
                  static_cast<unsigned long long>(c.circuit_open),
                  static_cast<unsigned long long>(c.budget_exhausted),
                  static_cast<unsigned long long>(c.deadline_exceeded),
                  static_cast<unsigned long long>(c.other_failed));
    }
    result.error_kinds = counters_now().error_kinds;
    result.statuses = counters_now().statuses;
    for (const auto& [kind, count] : result.error_kinds)
      std::printf("   failed attempts: %8llu  %s\n", static_cast<unsigned long long>(count),
                  kind.c_str());
    if (local) {
      local->stop();
      // Let every client unwind (cancelled attempts close their connections) before teardown.
      for (int i = 0; i < 1000 && local->counters().alive > 0; ++i) {
        timer.expires_after(std::chrono::milliseconds(10));
        co_await timer.async_wait(as_tuple);
      }
    }
    kill_swarms();
    kill_child();
    io.stop();
  };
  if (local)
    local->start();
  asio::co_spawn(io, drive(), asio::detached);
  io.run();
  kill_swarms();
  kill_child();
  close(server.in_fd);
  result.load_after = load_average();
  return result;
}

// --- The report ----------------------------------------------------------------------------

struct summary {
  double outage_s = 0;
  std::string strategy;
  int backlog = 0;
  double steady_ok = 0;
  double ok_after_thaw = 0; ///< Mean OK/s over the 5 s after the thaw.
  double fault_ok = 0;      ///< Mean OK/s during the fault.
  long peak_concurrency = 0;
  double recovery_s = -1; ///< Negative: never.
  std::uint64_t attempts = 0, successes = 0;
  // Over the outage and the watch after it.
  std::uint64_t window_attempts = 0, window_successes = 0, window_failed = 0, window_expired = 0;
  // During the fault only.
  std::uint64_t fault_requests = 0, fault_retries = 0, fault_attempts = 0, fault_failed = 0;
  /// Requests of the 10 s before the fault: a windowed budget still remembers them.
  std::uint64_t pre_fault_requests = 0;
  std::string load_before, load_after;
};

summary summarise(const options& o, double outage_s, const std::string& strategy,
                  const run_result& run) {
  summary s;
  s.outage_s = outage_s;
  s.strategy = strategy;
  s.backlog = run.backlog;
  s.load_before = run.load_before;
  s.load_after = run.load_after;
  const auto& rows = run.rows;
  const int resume_at = static_cast<int>(std::lround(o.steady_s + outage_s));
  const int hold = static_cast<int>(std::lround(o.hold_s));
  double sum = 0, after = 0;
  int n = 0, n_after = 0;
  for (const row& r : rows) {
    if (r.phase == "steady" && r.t > o.warmup_s) {
      sum += static_cast<double>(r.ok);
      ++n;
    }
    if (r.t > resume_at && r.t <= resume_at + 5) {
      after += static_cast<double>(r.ok);
      ++n_after;
    }
    s.peak_concurrency = std::max(s.peak_concurrency, r.server_peak);
    s.attempts += r.attempts;
    s.successes += r.ok;
    if (r.phase != "steady") {
      s.window_attempts += r.attempts;
      s.window_successes += r.ok;
      s.window_failed += r.failed;
      s.window_expired += r.expired;
    }
    if (r.phase == "steady" && r.t > o.steady_s - 10)
      s.pre_fault_requests += r.requests;
    if (r.phase == "outage") {
      s.fault_ok += static_cast<double>(r.ok);
      s.fault_requests += r.requests;
      s.fault_retries += r.retries;
      s.fault_attempts += r.attempts;
      s.fault_failed += r.failed;
    }
  }
  s.steady_ok = n ? sum / n : 0;
  s.fault_ok /= std::max(1.0, std::round(outage_s));
  s.ok_after_thaw = n_after ? after / n_after : 0;
  // Recovered from the start of bin i if, over the next `hold` bins, OK/s averages at least 90 %
  // of the steady rate and no single bin falls below half of it. One-second counts are noisy: at
  // 100/s a Poisson count is below 90 one second in six even when nothing is wrong, and on a
  // loaded machine a stall of the swarm or the server can cut a bin by a third. The floor keeps a
  // burst of successes followed by silence from counting.
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].t <= resume_at || i + static_cast<std::size_t>(hold) > rows.size())
      continue;
    double window = 0, lowest = 1e300;
    for (std::size_t j = i; j < i + static_cast<std::size_t>(hold); ++j) {
      window += static_cast<double>(rows[j].ok);
      lowest = std::min(lowest, static_cast<double>(rows[j].ok));
    }
    if (window / hold >= 0.9 * s.steady_ok && lowest >= 0.5 * s.steady_ok) {
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

void draw(const options& o, double outage_s, const std::vector<std::string>& strategies,
          const std::vector<row>& rows) {
  const double fault = o.steady_s, resume = o.steady_s + outage_s;
  const std::string shade = o.fault == fault_kind::fail ? "seconds (shaded: server failing)"
                            : o.shape == shape_kind::freeze
                                ? "seconds (shaded: server stopped)"
                                : "seconds (shaded: " + o.shape_name + ")";
  // One OK/s panel per strategy, on one scale, so that no line hides another; then the server's
  // concurrency for all of them (log scale, one dash style each).
  double top = 1;
  for (const row& r : rows)
    if (r.outage_s == outage_s)
      top = std::max(top, static_cast<double>(std::max(r.ok, r.failed)));
  std::vector<sample_support::panel> panels;
  sample_support::panel conc{"Server concurrency (highest each second; frozen while stopped)",
                             shade,
                             "concurrency",
                             {},
                             {{fault, resume}}};
  conc.log_y = true;
  conc.marks = false;
  conc.dashes = true;
  for (std::size_t k = 0; k < strategies.size(); ++k) {
    const std::string& s = strategies[k];
    sample_support::panel ok{
        s + ": requests per second", shade, "per second", {}, {{fault, resume}}};
    ok.marks = false;
    ok.y_max = top * 1.1;
    const int colour = static_cast<int>(k);
    sample_support::series ok_line{s + " OK/s", {}, colour},
        failed_line{s + " failed requests/s", {}, 6}, conc_line{s, {}, colour};
    bool any_failed = false;
    for (const row& r : rows)
      if (r.strategy == s && r.outage_s == outage_s) {
        ok_line.points.emplace_back(r.t, static_cast<double>(r.ok));
        failed_line.points.emplace_back(r.t, static_cast<double>(r.failed));
        any_failed = any_failed || r.failed > 0;
        conc_line.points.emplace_back(r.t, static_cast<double>(r.server_peak));
      }
    ok.lines.push_back(ok_line);
    if (any_failed)
      ok.lines.push_back(failed_line);
    panels.push_back(ok);
    conc.lines.push_back(conc_line);
  }
  if (o.fault == fault_kind::stop)
    panels.push_back(conc);
  const std::string prefix = o.shape == shape_kind::freeze ? "" : o.shape_name + "_";
  const std::string picture = sample_support::draw(
      o.out_dir + "/retry_storm_" + prefix + format_outage(outage_s) + "s", panels);
  if (!picture.empty())
    std::printf("picture: %s\n", picture.c_str());
}

std::string storm_table(const options& o, double outage_s, const std::vector<summary>& all) {
  std::string out;
  char line[512];
  int backlog = 0;
  std::string load_before, load_after;
  for (const summary& s : all)
    if (s.outage_s == outage_s) {
      backlog = s.backlog;
      if (load_before.empty())
        load_before = s.load_before;
      load_after = s.load_after;
    }
  std::snprintf(
      line, sizeof line, "\nshape %s%s", o.shape_name.c_str(),
      o.processes > 1 ? (", fleet of " + std::to_string(o.processes) + " processes").c_str() : "");
  out += line;
  std::snprintf(line, sizeof line,
                "; outage %s s: %u clients, think %.0f s (exponential), timeout %.0f s, backlog "
                "%d; steady %.0f s, outage %s s, watch %.0f s; time scale %.2f (rates per model "
                "second); load average %s before, %s after\n",
                format_outage(outage_s).c_str(), o.swarm.clients, o.swarm.think_mean_s,
                o.swarm.timeout_s, backlog, o.steady_s, format_outage(outage_s).c_str(), o.watch_s,
                o.time_scale, load_before.c_str(), load_after.c_str());
  out += line;
  std::snprintf(line, sizeof line, "%-12s %11s %10s %14s %10s %10s %10s %10s %14s %16s\n",
                "strategy", "steady OK/s", "OK/s", "OK/s 0-5s after", "peak conc", "recovery",
                "failed", "of which", "attempts/succ", "attempts/succ in");
  out += line;
  std::snprintf(line, sizeof line, "%-12s %11s %10s %14s %10s %10s %10s %10s %14s %16s\n", "", "",
                "in fault", "the thaw", "", "", "requests", "deadline", "(whole run)",
                "outage+watch");
  out += line;
  for (const summary& s : all) {
    if (s.outage_s != outage_s)
      continue;
    char recovery[32];
    if (s.recovery_s >= 0)
      std::snprintf(recovery, sizeof recovery, "%.0f s", s.recovery_s);
    else
      std::snprintf(recovery, sizeof recovery, "never");
    std::snprintf(
        line, sizeof line, "%-12s %11.1f %10.1f %14.1f %10ld %10s %10llu %10llu %14s %16s\n",
        s.strategy.c_str(), s.steady_ok, s.fault_ok, s.ok_after_thaw, s.peak_concurrency, recovery,
        static_cast<unsigned long long>(s.window_failed),
        static_cast<unsigned long long>(s.window_expired), ratio(s.attempts, s.successes).c_str(),
        ratio(s.window_attempts, s.window_successes).c_str());
    out += line;
  }
  return out;
}

std::string budget_table(const options& o, const std::vector<summary>& all) {
  std::string out;
  char line[512];
  const auto b = recommended_controls().budget->options();
  for (double outage_s : o.outages) {
    std::snprintf(line, sizeof line,
                  "\nbudget demo: the server answers 503 to everything for %s s; %u clients, "
                  "think %.0f s, timeout %.0f s; time scale %.2f; budget: retries <= %.2f x "
                  "requests + %.0f/s over the last %.0f s\n",
                  format_outage(outage_s).c_str(), o.swarm.clients, o.swarm.think_mean_s,
                  o.swarm.timeout_s, o.time_scale, b.ratio, b.min_retries_per_second,
                  std::chrono::duration<double>(b.window).count());
    out += line;
    std::snprintf(line, sizeof line, "%-12s %10s %10s %10s %12s %14s %12s %14s\n", "strategy",
                  "requests", "attempts", "retries", "retries per", "attempts per", "failed",
                  "OK/s 0-5s");
    out += line;
    std::snprintf(line, sizeof line, "%-12s %10s %10s %10s %12s %14s %12s %14s\n", "", "(failing)",
                  "(failing)", "(failing)", "request", "request", "requests", "after");
    out += line;
    for (const summary& s : all) {
      if (s.outage_s != outage_s)
        continue;
      std::snprintf(line, sizeof line, "%-12s %10llu %10llu %10llu %12s %14s %12llu %14.1f\n",
                    s.strategy.c_str(), static_cast<unsigned long long>(s.fault_requests),
                    static_cast<unsigned long long>(s.fault_attempts),
                    static_cast<unsigned long long>(s.fault_retries),
                    ratio(s.fault_retries, s.fault_requests).c_str(),
                    ratio(s.fault_attempts, s.fault_requests).c_str(),
                    static_cast<unsigned long long>(s.fault_failed), s.ok_after_thaw);
      out += line;
    }
  }
  return out;
}

int run_experiment(const options& o) {
  std::error_code dir_error;
  std::filesystem::create_directories(o.out_dir, dir_error);
  std::vector<row> all;
  std::vector<summary> summaries;
  const auto started = clock_type::now();
  for (double outage_s : o.outages) {
    std::vector<row> rows;
    for (const auto& strategy : o.strategies) {
      const run_result run = run_strategy(o, outage_s, strategy);
      summaries.push_back(summarise(o, outage_s, strategy, run));
      rows.insert(rows.end(), run.rows.begin(), run.rows.end());
    }
    if (o.plot)
      draw(o, outage_s, o.strategies, rows);
    all.insert(all.end(), rows.begin(), rows.end());
  }

  const std::string csv_path = o.out_dir + "/retry_storm.csv";
  {
    std::ofstream csv(csv_path);
    csv << "outage_s,time,strategy,phase,ok,requests,retries,failed,errors,timeouts,attempts,"
           "in_flight,waiting,server_concurrency,server_peak,server_delay_ms,breaker,expired\n";
    for (const row& r : all)
      csv << r.outage_s << ',' << r.t << ',' << r.strategy << ',' << r.phase << ',' << r.ok << ','
          << r.requests << ',' << r.retries << ',' << r.failed << ',' << r.errors << ','
          << r.timeouts << ',' << r.attempts << ',' << r.in_flight << ',' << r.waiting << ','
          << r.server_concurrency << ',' << r.server_peak << ',' << r.server_delay_ms << ','
          << r.breaker << ',' << r.expired << '\n';
  }
  const std::string summary_path = o.out_dir + "/summary.csv";
  {
    std::ofstream out(summary_path);
    out << "outage_s,strategy,clients,time_scale,backlog,steady_ok_per_s,ok_per_s_after_thaw,"
           "peak_concurrency,recovery_s,attempts,successes,attempts_per_success,window_attempts,"
           "window_successes,window_attempts_per_success,window_failed,fault_requests,"
           "fault_attempts,fault_retries,fault_failed,pre_fault_requests,shape,processes,fault_ok_"
           "per_s,window_expired\n";
    for (const summary& s : summaries) {
      out << s.outage_s << ',' << s.strategy << ',' << o.swarm.clients << ',' << o.time_scale << ','
          << s.backlog << ',' << s.steady_ok << ',' << s.ok_after_thaw << ',' << s.peak_concurrency
          << ',';
      if (s.recovery_s >= 0)
        out << s.recovery_s;
      else
        out << "never";
      out << ',' << s.attempts << ',' << s.successes << ',' << ratio(s.attempts, s.successes) << ','
          << s.window_attempts << ',' << s.window_successes << ','
          << ratio(s.window_attempts, s.window_successes) << ',' << s.window_failed << ','
          << s.fault_requests << ',' << s.fault_attempts << ',' << s.fault_retries << ','
          << s.fault_failed << ',' << s.pre_fault_requests << ',' << o.shape_name << ','
          << o.processes << ',' << s.fault_ok << ',' << s.window_expired << '\n';
    }
  }

  std::string report;
  if (o.what == mode::budget) {
    report = budget_table(o, summaries);
  } else {
    for (double outage_s : o.outages)
      report += storm_table(o, outage_s, summaries);
    char note[256];
    std::snprintf(note, sizeof note,
                  "recovery: from the thaw until OK/s averages >= 90%% of steady over %.0f s "
                  "(no second below 50%%); failed requests: given up when the breaker refused to "
                  "send or the budget to retry\n",
                  o.hold_s);
    report += note;
  }
  std::printf("%s", report.c_str());
  std::ofstream(o.out_dir + "/report.txt") << report;
  std::printf("csv: %s\nsummary: %s\n", csv_path.c_str(), summary_path.c_str());
  std::printf("wall time: %.1f s\n",
              std::chrono::duration<double>(clock_type::now() - started).count());
  return 0;
}

int run_swarm_only(const options& o) {
  asio::io_context io(1);
  swarm clients(io, scaled_swarm(o, o.swarm.strategy));
  std::printf("swarm: %s against %s, %u clients, think %.1f s, timeout %.1f s, time scale %.2f "
              "(rates per model second)\n",
              clients.describe().c_str(), o.swarm.url.c_str(), o.swarm.clients,
              o.swarm.think_mean_s, o.swarm.timeout_s, o.time_scale);
  auto drive = [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(io);
    const auto start = clock_type::now();
    swarm_counters last = clients.counters();
    // Every --report-s (a fleet member reports every 0.1 s, so that the driver's sum of the
    // fleet lags its one-second rows by no more than that).
    const int total = static_cast<int>(std::lround(o.swarm_duration_s / o.report_s));
    for (int t = 1; t <= total; ++t) {
      timer.expires_at(start + wall(o, t * o.report_s));
      co_await timer.async_wait(as_tuple);
      const swarm_counters& now = clients.counters();
      row r;
      take_difference(r, now, last);
      std::printf(
          "t=%3d ok %5llu  failed %5llu  errors %5llu  timeouts %5llu  attempts %5llu  "
          "in flight %5lld  waiting %5lld  requests %5llu  retries %5llu  expired %5llu\n",
          t, static_cast<unsigned long long>(r.ok), static_cast<unsigned long long>(r.failed),
          static_cast<unsigned long long>(r.errors), static_cast<unsigned long long>(r.timeouts),
          static_cast<unsigned long long>(r.attempts), static_cast<long long>(r.in_flight),
          static_cast<long long>(r.waiting), static_cast<unsigned long long>(r.requests),
          static_cast<unsigned long long>(r.retries), static_cast<unsigned long long>(r.expired));
      std::fflush(stdout);
      last = now;
    }
    const swarm_counters& c = clients.counters();
    for (const auto& [status, count] : c.statuses)
      std::printf("HTTP %ld: %8llu answers\n", status, static_cast<unsigned long long>(count));
    for (const auto& [kind, count] : c.error_kinds)
      std::printf("failed attempts: %8llu  %s\n", static_cast<unsigned long long>(count),
                  kind.c_str());
    std::printf("requests %llu, succeeded %llu, failed fast %llu, out of budget %llu\n",
                static_cast<unsigned long long>(c.requests), static_cast<unsigned long long>(c.ok),
                static_cast<unsigned long long>(c.circuit_open),
                static_cast<unsigned long long>(c.budget_exhausted));
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

/// With --metrics-port: a Prometheus observer on every client's policy, served on /metrics.
std::shared_ptr<void> serve_metrics(options& o) {
  if (o.metrics_port < 0)
    return nullptr;
#ifdef CORETRY_STORM_HAVE_PROMETHEUS
  auto registry = std::make_shared<prometheus::Registry>();
  o.swarm.observer = std::make_shared<coretry::prometheus_observer>(registry);
  auto exposer =
      std::make_shared<prometheus::Exposer>("127.0.0.1:" + std::to_string(o.metrics_port));
  exposer->RegisterCollectable(registry);
  std::printf("metrics on http://127.0.0.1:%d/metrics\n", exposer->GetListeningPorts().at(0));
  std::fflush(stdout);
  return exposer;
#else
  cli::fail("--metrics-port: built without coretry::prometheus (prometheus-cpp-dev)");
#endif
}

} // namespace

int main(int argc, char** argv) {
  int first = 1;
  mode what = mode::storm;
  if (argc > 1) {
    const std::string_view sub = argv[1];
    if (sub == "swarm")
      what = mode::swarm;
    else if (sub == "budget")
      what = mode::budget;
    if (sub == "swarm" || sub == "budget" || sub == "run")
      first = 2;
  }
  options o = parse(argc, argv, first, what);
  const auto metrics = serve_metrics(o);
  sample_support::raise_fd_limit();
  signal(SIGINT, on_fatal_signal);
  signal(SIGTERM, on_fatal_signal);
  signal(SIGHUP, on_fatal_signal);
  signal(SIGPIPE, SIG_IGN);
  std::atexit(kill_child);
  std::atexit(kill_swarms);
  try {
    if (o.shape == shape_kind::blackhole)
      enter_blackhole_namespace();
    return what == mode::swarm ? run_swarm_only(o) : run_experiment(o);
  } catch (const std::exception& e) {
    kill_child();
    std::fprintf(stderr, "retry_storm: %s\n", e.what());
    return 2;
  }
}
