// SPDX-License-Identifier: BSL-1.0
// retry_storm_server: an HTTP/1.1 server whose response time follows the latency model of
// "Exponential Backoff or how not to crash a server".
//
// Every request waits `base` while at most `limit` requests are in progress, and
// `base * factor^((concurrency - limit) / k)` beyond that. The delay is not fixed when the request
// arrives: it is recomputed from the *current* concurrency on every tick (and on every
// completion), and a request completes once its age reaches the delay of the moment. So a crowd
// slows down everyone already waiting, and the crowd thins only as requests complete. A request
// whose client gave up (timed out, closed its socket) is not noticed: it keeps its place, and
// counts towards concurrency, until its delay has passed, as in a real server that does the work
// anyway.
//
// One thread, one io_context. Each connection carries one request and is closed after the
// response ("Connection: close"): the storm is about requests, and a fresh connection per
// request keeps the accounting simple (a client that timed out has closed its connection anyway).
//
// The listen backlog is the system's default unless --backlog says otherwise: the value of
// /proc/sys/net/core/somaxconn (what Go's net package, and so the article's server, passes to
// listen), else SOMAXCONN. It bounds how many requests queue up while the process is stopped.
//
// SIGUSR1 makes the server fail: every request read from then on is answered at once with
// "503 Service Unavailable" (it never enters the model); SIGUSR2 makes it healthy again. The
// budget demo uses this for an upstream that fails 100 % without slowing down.
//
// The other failure shapes are commands, one a line on stdin (the driver writes them):
//   fail <fraction> <status> <retry_after_s>   answer <fraction> of the requests at once with
//                                             <status> (503, 429, ...) and, when
//                                             <retry_after_s> > 0, "Retry-After: <retry_after_s>"
//                                             (model seconds: the lab's clients scale it)
//   slow <factor>                             every delay of the model times <factor>
//   refuse                                    close the listening socket: connections are refused
//                                             (RST); requests already read are still served
//   accept                                    listen again, on the same port
//   healthy                                   undo fail and slow
//
// Output (stdout, line-buffered), machine-readable:
//   port <n> backlog <b>                          once, when listening
//   stat t=<s> concurrency=<n> delay_ms=<d> peak=<n> accepted=<n> completed=<n> failed=<n>
//     every --stats-interval; peak is the highest concurrency since the previous line
#include "support/cli.hpp"
#include "support/fd_limit.hpp"

#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/read_until.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <asio/streambuf.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>

#include <sys/socket.h>
#include <unistd.h>

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::duration;
using seconds_d = duration<double>;
using asio::ip::tcp;
constexpr auto as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

struct model {
  double base_s = 0.100;     ///< --base-ms
  unsigned limit = 30;       ///< --limit
  double factor = 1.05;      ///< --factor
  double k = 15;             ///< --k
  double max_delay_s = 3600; ///< --max-delay-s: the saturation point of the curve.
  double slowdown = 1;       ///< `slow <factor>`: a brownout multiplies every delay.

  /// The delay at a given concurrency; saturates at `max_delay_s` instead of overflowing.
  double delay(std::size_t concurrency) const {
    if (concurrency <= limit)
      return base_s * slowdown;
    const double exponent = static_cast<double>(concurrency - limit) / k;
    // Compare logarithms: factor^exponent may overflow long before the cap is reached.
    const double log_delay = std::log(base_s * slowdown) + exponent * std::log(factor);
    return log_delay >= std::log(max_delay_s) ? max_delay_s : std::exp(log_delay);
  }
};

struct options {
  std::string host = "127.0.0.1";
  unsigned short port = 8070;
  model m;
  double tick_s = 0.050;
  double stats_interval_s = 1.0;
  int backlog = 0; ///< 0: the system's default (see system_backlog).
};

/// The backlog a server gets when it asks for "the default": Linux caps listen()'s argument at
/// net.core.somaxconn, and Go's net package reads that file and passes its value.
int system_backlog() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  long n = 0;
  if (in >> n && n > 0)
    return static_cast<int>(std::min<long>(n, INT_MAX));
  return SOMAXCONN;
}

/// One request being "served": the coroutine waiting on `wake` is released by the scheduler.
struct pending {
  clock_type::time_point start;
  asio::steady_timer wake;
  bool done = false;
};

/// Owns the queue of requests in progress, oldest first, and decides when each completes.
class scheduler {
public:
  scheduler(asio::io_context& io, options& o) : io_(io), o_(o), tick_(io) {}

  /// A brownout: every delay times `factor` from now on.
  void set_slowdown(double factor) { o_.m.slowdown = factor; }

  std::size_t concurrency() const { return queue_.size(); }
  /// The model's delay at the current concurrency (the last one computed when idle).
  double current_delay() const { return queue_.empty() ? last_delay_ : o_.m.delay(queue_.size()); }

  /// The highest concurrency since the last call (the per-second samples would miss a burst).
  std::size_t take_peak() {
    const std::size_t peak = peak_;
    peak_ = queue_.size();
    return peak;
  }

  std::shared_ptr<pending> admit() {
    auto p = std::make_shared<pending>(pending{clock_type::now(), asio::steady_timer(io_), false});
    p->wake.expires_at(clock_type::time_point::max());
    queue_.push_back(p);
    peak_ = std::max(peak_, queue_.size());
    // More concurrency only lengthens delays: the next tick is soon enough, unless the queue was
    // empty and nothing is scheduled.
    if (queue_.size() == 1)
      reschedule(clock_type::now() + to_duration(o_.m.delay(queue_.size())));
    return p;
  }

private:
  static clock_type::duration to_duration(double s) {
    return std::chrono::duration_cast<clock_type::duration>(seconds_d(s));
  }

  /// Completes every request whose age has reached the current delay. Requests are in arrival
  /// order, so the oldest is checked first; each completion lowers concurrency, which may
  /// shorten the delay for the next one.
  void run_tick() {
    const auto now = clock_type::now();
    while (!queue_.empty()) {
      last_delay_ = o_.m.delay(queue_.size());
      auto& front = queue_.front();
      if (now - front->start < to_duration(last_delay_))
        break;
      front->done = true;
      front->wake.cancel();
      queue_.pop_front();
    }
    if (queue_.empty())
      return;
    // Wake at the next tick, or earlier if the oldest request is due before it.
    const auto due = queue_.front()->start + to_duration(last_delay_);
    reschedule(std::min(now + to_duration(o_.tick_s), due));
  }

  void reschedule(clock_type::time_point at) {
    if (armed_ && at >= armed_at_)
      return;
    armed_ = true;
    armed_at_ = at;
    tick_.expires_at(at);
    tick_.async_wait([this, at](std::error_code ec) {
      if (ec || at != armed_at_)
        return; // superseded by an earlier wake-up
      armed_ = false;
      run_tick();
    });
  }

  asio::io_context& io_;
  options& o_;
  asio::steady_timer tick_;
  bool armed_ = false;
  clock_type::time_point armed_at_{};
  std::deque<std::shared_ptr<pending>> queue_;
  double last_delay_ = 0;
  std::size_t peak_ = 0;
};

struct counters {
  unsigned long accepted = 0;
  unsigned long completed = 0;
  unsigned long failed = 0; ///< Answered with an error status (SIGUSR1, `fail`).
  bool failing = false;     ///< SIGUSR1: everything fails with 503.
  double fail_fraction = 0; ///< `fail`: this share of the requests fails with `fail_status`.
  int fail_status = 503;
  int retry_after_s = 0;
  std::minstd_rand rng{12345};
  std::uniform_real_distribution<double> uniform{0.0, 1.0};

  /// The status to answer at once, or 0 to serve the request.
  int failure() {
    if (failing)
      return 503;
    if (fail_fraction > 0 && uniform(rng) < fail_fraction)
      return fail_status;
    return 0;
  }
};

std::string error_answer(int status, int retry_after_s) {
  std::string reason = status == 429   ? "Too Many Requests"
                       : status == 503 ? "Service Unavailable"
                                       : "Error";
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                    "\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n";
  if (retry_after_s > 0)
    out += "Retry-After: " + std::to_string(retry_after_s) + "\r\n";
  return out + "Connection: close\r\n\r\nFAIL\n";
}

asio::awaitable<void> serve(tcp::socket socket, scheduler& sched, counters& count) {
  asio::streambuf head(64 * 1024);
  auto [read_error, n] = co_await asio::async_read_until(socket, head, "\r\n\r\n", as_tuple);
  (void)n;
  if (read_error)
    co_return; // no complete request: nothing to serve
  std::error_code ignored;
  if (const int status = count.failure()) {
    ++count.failed;
    const std::string answer = error_answer(status, count.retry_after_s);
    co_await asio::async_write(socket, asio::buffer(answer), as_tuple);
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    co_return;
  }
  auto p = sched.admit();
  co_await p->wake.async_wait(as_tuple); // released (cancelled) by the scheduler
  ++count.completed;
  static constexpr std::string_view reply = "HTTP/1.1 200 OK\r\n"
                                            "Content-Type: text/plain\r\n"
                                            "Content-Length: 3\r\n"
                                            "Connection: close\r\n\r\n"
                                            "OK\n";
  // The client may have given up long ago: a failed write is the expected fate of such requests.
  co_await asio::async_write(socket, asio::buffer(reply), as_tuple);
  socket.shutdown(tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, scheduler& sched, counters& count) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(as_tuple);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open())
        co_return;
      // Out of descriptors or similar: wait a little rather than spin.
      asio::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(10));
      co_await pause.async_wait(as_tuple);
      continue;
    }
    ++count.accepted;
    asio::co_spawn(acceptor.get_executor(), serve(std::move(socket), sched, count), asio::detached);
  }
}

asio::awaitable<void> report_loop(const options& o, scheduler& sched, counters& count) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto start = clock_type::now();
  auto next = start;
  const auto interval =
      std::chrono::duration_cast<clock_type::duration>(seconds_d(o.stats_interval_s));
  for (;;) {
    next += interval;
    timer.expires_at(next);
    auto [ec] = co_await timer.async_wait(as_tuple);
    if (ec)
      co_return;
    // After a SIGSTOP several ticks are overdue at once: report once and skip ahead.
    const auto now = clock_type::now();
    while (next + interval <= now)
      next += interval;
    std::printf("stat t=%.3f concurrency=%zu delay_ms=%.1f peak=%zu accepted=%lu completed=%lu "
                "failed=%lu\n",
                seconds_d(now - start).count(), sched.concurrency(), sched.current_delay() * 1e3,
                sched.take_peak(), count.accepted, count.completed, count.failed);
  }
}

/// Opens, binds and listens (again, after `refuse`) on `endpoint`.
void listen_on(tcp::acceptor& acceptor, const tcp::endpoint& endpoint, int backlog) {
  acceptor.open(endpoint.protocol());
  acceptor.set_option(tcp::acceptor::reuse_address(true));
  acceptor.bind(endpoint);
  acceptor.listen(backlog);
}

/// Reads the fault commands of the header comment from stdin until it closes.
asio::awaitable<void> command_loop(asio::posix::stream_descriptor& in, tcp::acceptor& acceptor,
                                   tcp::endpoint endpoint, int backlog, scheduler& sched,
                                   counters& count) {
  asio::streambuf buffer;
  for (;;) {
    auto [ec, n] = co_await asio::async_read_until(in, buffer, '\n', as_tuple);
    if (ec)
      co_return;
    std::string line(asio::buffers_begin(buffer.data()),
                     asio::buffers_begin(buffer.data()) + static_cast<std::ptrdiff_t>(n));
    buffer.consume(n);
    std::istringstream words(line);
    std::string verb;
    words >> verb;
    if (verb == "fail") {
      double fraction = 0;
      int status = 503, retry_after = 0;
      words >> fraction >> status >> retry_after;
      count.fail_fraction = std::clamp(fraction, 0.0, 1.0);
      count.fail_status = status;
      count.retry_after_s = std::max(retry_after, 0);
    } else if (verb == "slow") {
      double factor = 1;
      words >> factor;
      sched.set_slowdown(factor > 0 ? factor : 1);
    } else if (verb == "healthy") {
      count.fail_fraction = 0;
      count.retry_after_s = 0;
      sched.set_slowdown(1);
    } else if (verb == "refuse") {
      std::error_code ignored;
      acceptor.close(ignored); // the kernel now answers SYNs with RST
    } else if (verb == "accept" && !acceptor.is_open()) {
      listen_on(acceptor, endpoint, backlog);
      asio::co_spawn(acceptor.get_executor(), accept_loop(acceptor, sched, count), asio::detached);
    } else if (!verb.empty()) {
      std::fprintf(stderr, "retry_storm_server: unknown command '%s'\n", verb.c_str());
    }
  }
}

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: retry_storm_server [--host 127.0.0.1] [--port N (0 = any; default 8070)]\n"
               "         [--base-ms 100]\n"
               "         [--limit 30] [--factor 1.05] [--k 15] [--max-delay-s 3600]\n"
               "         [--tick-ms 50] [--stats-interval-s 1] [--backlog N]\n"
               "Response delay: base while concurrency <= limit, else\n"
               "base * factor^((concurrency - limit) / k), capped at max-delay, re-evaluated\n"
               "every tick from the current concurrency. The backlog defaults to the system's\n"
               "(/proc/sys/net/core/somaxconn, else SOMAXCONN). SIGUSR1: answer 503 to every\n"
               "request from now on; SIGUSR2: serve again. Fault commands on stdin, one a line:\n"
               "fail <fraction> <status> <retry_after_s>, slow <factor>, refuse, accept,\n"
               "healthy.\n");
}

options parse(int argc, char** argv) {
  namespace cli = sample_support::cli;
  options o;
  auto positive = [](std::string_view a, const std::string& v) {
    const double x = cli::number(a, v);
    if (!(x > 0))
      cli::fail("--" + std::string(a) + ": '" + v + "' is not positive");
    return x;
  };
  cli::parse("retry_storm_server", argc, argv, 1,
             {{"host", true},
              {"port", true},
              {"base-ms", true},
              {"limit", true},
              {"factor", true},
              {"k", true},
              {"max-delay-s", true},
              {"tick-ms", true},
              {"stats-interval-s", true},
              {"backlog", true}},
             usage, [&](std::string_view a, const std::string& v) {
               if (a == "host")
                 o.host = v;
               else if (a == "port")
                 o.port = static_cast<unsigned short>(cli::whole(a, v, 0, 65535));
               else if (a == "base-ms")
                 o.m.base_s = positive(a, v) / 1e3;
               else if (a == "limit")
                 o.m.limit = static_cast<unsigned>(cli::whole(a, v, 0, 1000000000));
               else if (a == "factor")
                 o.m.factor = cli::number(a, v, 1);
               else if (a == "k")
                 o.m.k = positive(a, v);
               else if (a == "max-delay-s")
                 o.m.max_delay_s = positive(a, v);
               else if (a == "tick-ms")
                 o.tick_s = positive(a, v) / 1e3;
               else if (a == "stats-interval-s")
                 o.stats_interval_s = positive(a, v);
               else if (a == "backlog")
                 o.backlog = static_cast<int>(cli::whole(a, v, 1, 1000000));
             });
  o.m.max_delay_s = std::max(o.m.max_delay_s, o.m.base_s);
  return o;
}

} // namespace

int main(int argc, char** argv) {
  options o = parse(argc, argv);
  sample_support::raise_fd_limit();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  // The fault commands' descriptor, taken before any socket is opened: with stdin closed, a
  // socket could otherwise become descriptor 0.
  const int command_fd = ::dup(STDIN_FILENO);
  asio::io_context io(1);
  tcp::acceptor acceptor(io);
  tcp::endpoint endpoint(asio::ip::make_address(o.host), o.port);
  // The accept queue is where requests pile up while the process is stopped: its length bounds
  // the burst of stale requests the server finds when it resumes (see docs/retry_storm.md).
  const int backlog = o.backlog > 0 ? o.backlog : system_backlog();
  listen_on(acceptor, endpoint, backlog);
  endpoint = acceptor.local_endpoint(); // `accept` listens again on the port chosen now
  std::printf("port %u backlog %d\n", static_cast<unsigned>(acceptor.local_endpoint().port()),
              backlog);

  scheduler sched(io, o);
  counters count;
  asio::co_spawn(io, accept_loop(acceptor, sched, count), asio::detached);
  asio::co_spawn(io, report_loop(o, sched, count), asio::detached);
  asio::posix::stream_descriptor commands(io);
  if (command_fd >= 0) {
    commands.assign(command_fd);
    asio::co_spawn(io, command_loop(commands, acceptor, endpoint, backlog, sched, count),
                   asio::detached);
  }

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](std::error_code, int) { io.stop(); });
  asio::signal_set faults(io, SIGUSR1, SIGUSR2);
  std::function<void(std::error_code, int)> on_fault = [&](std::error_code ec, int sig) {
    if (ec)
      return;
    count.failing = sig == SIGUSR1;
    faults.async_wait(on_fault);
  };
  faults.async_wait(on_fault);
  io.run();
  return 0;
}
