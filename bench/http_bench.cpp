// SPDX-License-Identifier: BSL-1.0
// HTTP under retries, against coretry_bench_server in its own process (started here, on
// loopback, fresh for every run). One variant per process.
//
//   coretry_http_bench --mode=throughput --variant=coretry|cores|multi|threads [--count=10000]
//     `count` GETs, a fixed half of them failing their first attempt with 503; at most 64 in
//     flight, at most 32 connections, retried after 1 ms, 3 attempts at most.
//       coretry   coretry::curl::retry on one thread
//       cores     coretry::curl::retry on every core: one io_context, client and thread per
//                 core, the in-flight and connection limits split between them
//       multi     a hand-written curl multi-socket loop driven by Asio, same retry rule
//       threads   64 threads, each retrying with curl_easy_perform and its own easy handle
//     Prints ok_per_s, attempts, peak_threads, peak_sockets, peak_rss_mb, run_rss_mb (peak RSS
//     less the RSS before the run), client_cpu_us and server_cpu_us (CPU time, user + system,
//     of this process and of the server per successful request).
//     --threads=N (cores only): that many threads, io_contexts and clients instead of one per
//     core.
//
//   coretry_http_bench --mode=waiting --variant=coretry|threads [--count=10000]
//     `count` GETs whose first attempt fails with 503, then all asleep in an hour's backoff.
//       coretry   coretry::curl::async_retry on one thread, cancelled by one group token
//       threads   one thread per request, asleep on a condition variable after its 503
//     Prints waiting_sockets (socket descriptors held while all sleep), waiting_rss_per_op,
//     waiting_threads.
//
//   coretry_http_bench --mode=soak [--count=1000000] [--every=50000]
//     The throughput run of coretry::curl::retry, long: `count` GETs (half retried after a 503),
//     64 in flight, sampling RSS and open descriptors every `every` completed requests; prints a
//     "soak <done> rss_kb <n> fds <n> sockets <n>" line per sample, then the growth from the
//     first sample after warm-up (10% of the run) to the last: soak_rss_growth_kb,
//     soak_fd_growth. Not part of .ci/bench: minutes in a Release build (see docs/curl.md).
#include <coretry/coretry.hpp>
#include <coretry/curl/curl.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <curl/curl.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "harness.hpp"
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

using namespace std::chrono_literals;
namespace cb = coretry::bench;

namespace {

constexpr long in_flight = 64;
constexpr long connection_limit = 32;
constexpr unsigned max_attempts = 3;
constexpr auto retry_delay = 1ms;
constexpr double run_limit_s = 120; // no run may take longer

/// The server process: started with fork/exec, stopped by closing its stdin.
class server_process {
public:
  server_process(const std::string& path, const std::string& fail, long ids) {
    int to[2], from[2];
    if (::pipe(to) != 0 || ::pipe(from) != 0)
      throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0)
      throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // (A pipe end may already be 0 or 1 when this process was started with those closed.)
      ::close(to[1]);
      ::close(from[0]);
      if (to[0] != 0)
        ::dup2(to[0], 0), ::close(to[0]);
      if (from[1] != 1)
        ::dup2(from[1], 1), ::close(from[1]);
      const std::string f = "--fail=" + fail, n = "--ids=" + std::to_string(ids);
      ::execl(path.c_str(), path.c_str(), f.c_str(), n.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    stdin_ = to[1];
    FILE* out = ::fdopen(from[0], "r");
    if (!out || std::fscanf(out, "port %u", &port_) != 1)
      throw std::runtime_error("no port from " + path);
    std::fclose(out);
  }
  ~server_process() {
    ::close(stdin_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  std::string url(long id) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/r/" + std::to_string(id);
  }
  /// CPU seconds (user + system) the server has used so far, from /proc/<pid>/stat.
  double cpu_seconds() const {
    std::FILE* f = std::fopen(("/proc/" + std::to_string(pid_) + "/stat").c_str(), "r");
    if (!f)
      return -1;
    char buf[1024];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // Fields after the command's closing parenthesis: 3 state ... 14 utime, 15 stime.
    const char* p = std::strrchr(buf, ')');
    unsigned long utime = 0, stime = 0;
    if (!p || std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                          &stime) != 2)
      return -1;
    return double(utime + stime) / double(::sysconf(_SC_CLK_TCK));
  }

private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  unsigned port_ = 0;
};

std::string default_server_path() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string s(exe, n > 0 ? static_cast<std::size_t>(n) : 0);
  return s.substr(0, s.rfind('/') + 1) + "coretry_bench_server";
}

struct peaks {
  long threads = 0;
  long sockets = 0;
  void sample_threads() { threads = std::max(threads, cb::proc_status("Threads")); }
};

/// Samples the thread count every few milliseconds on an io_context thread.
void watch_threads(asio::steady_timer& t, peaks& p) {
  p.sample_threads();
  t.expires_after(5ms);
  t.async_wait([&t, &p](std::error_code ec) {
    if (!ec)
      watch_threads(t, p);
  });
}

// Counting sockets the same way for both baselines: libcurl opens and closes them through us.
std::atomic<long> open_now{0};
std::atomic<long> open_peak{0};
curl_socket_t counting_open(void*, curlsocktype, curl_sockaddr* a) {
  const curl_socket_t s = ::socket(a->family, a->socktype, a->protocol);
  if (s >= 0) {
    const long now = ++open_now;
    long peak = open_peak.load();
    while (now > peak && !open_peak.compare_exchange_weak(peak, now)) {
    }
  }
  return s;
}
int counting_close(void*, curl_socket_t s) {
  --open_now;
  return ::close(s);
}

size_t discard(char*, size_t size, size_t n, void*) {
  return size * n;
}

void setup_easy(CURL* e, const std::string& url) {
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 60000L); // bounded: a stuck transfer fails
}

struct totals {
  long ok = 0;
  long attempts = 0;
  double seconds = 0;
  peaks peak;
};

/// CPU seconds (user + system) this process has used so far.
double own_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

void report(const char* variant, long n, const totals& t) {
  if (t.ok != n)
    std::fprintf(stderr, "coretry_http_bench: %s: %ld of %ld succeeded\n", variant, t.ok, n);
  cb::sample("http_ok_per_s", variant, double(t.ok) / t.seconds);
  cb::sample("http_attempts", variant, double(t.attempts));
  cb::sample("http_peak_threads", variant, double(t.peak.threads));
  cb::sample("http_peak_sockets", variant, double(t.peak.sockets));
  cb::sample("http_peak_rss_mb", variant, double(cb::proc_status("VmHWM")) / 1048576.0);
}

// --- coretry ----------------------------------------------------------------------------------

totals coretry_throughput(const server_process& server, long n) {
  totals t;
  asio::io_context io(1);
  coretry::curl::client c(io.get_executor(),
                          {.max_total_connections = connection_limit,
                           .max_host_connections = connection_limit,
                           .max_concurrent_requests = std::size_t(connection_limit),
                           .pool_size = std::size_t(in_flight)});
  const coretry::retry_policy policy{.max_attempts = max_attempts,
                                     .backoff = coretry::backoff::fixed(retry_delay)};
  long next = 0;
  auto worker = [&]() -> asio::awaitable<void> {
    while (next < n) {
      coretry::retry_stats stats;
      const long id = next++;
      // A named request: g++ 12 destroys an aggregate temporary inside a co_await expression
      // twice (a double free here), so none is built there.
      coretry::curl::request req{.url = server.url(id)};
      auto r = co_await coretry::curl::retry(c, std::move(req), policy, stats);
      t.attempts += stats.attempts;
      t.ok += r.status == 200;
    }
  };
  asio::steady_timer watch(io);
  watch_threads(watch, t.peak);
  const auto t0 = cb::steady::now();
  long done = 0;
  for (long w = 0; w < in_flight; ++w)
    asio::co_spawn(io, worker(), [&](std::exception_ptr e) {
      if (e)
        std::rethrow_exception(e);
      if (++done == in_flight)
        watch.cancel();
    });
  // Bounded: a stuck run reports what it was waiting for and fails, never hangs.
  while (done < in_flight && cb::seconds_since(t0) < run_limit_s)
    io.run_one_for(100ms);
  if (done < in_flight) {
    const auto st = c.stats();
    std::fprintf(stderr,
                 "coretry_http_bench: coretry stuck after %.0f s: %ld of %ld workers done, %ld ok; "
                 "client: %zu active, %zu queued, %zu open connections, %zu waiting retries\n",
                 cb::seconds_since(t0), done, in_flight, t.ok, st.active_transfers,
                 st.queued_requests, st.open_connections, st.waiting_retries);
    std::_Exit(3);
  }
  t.seconds = cb::seconds_since(t0);
  t.peak.sockets = long(c.stats().peak_open_connections);
  return t;
}

/// HTTP on every core: a client per thread, each on its own io_context (the client runs every
/// libcurl call under its own lock, so one client on a multi-threaded context would serialize).
totals cores_throughput(const server_process& server, long n, long cores) {
  totals t;
  std::atomic<long> next{0}, ok{0}, attempts{0}, sockets{0};
  const coretry::retry_policy policy{.max_attempts = max_attempts,
                                     .backoff = coretry::backoff::fixed(retry_delay)};
  auto run_core = [&](long core) {
    asio::io_context io(1);
    const long conns = connection_limit / cores + (core < connection_limit % cores ? 1 : 0);
    const long workers = in_flight / cores + (core < in_flight % cores ? 1 : 0);
    coretry::curl::client c(io.get_executor(), {.max_total_connections = conns,
                                                .max_host_connections = conns,
                                                .max_concurrent_requests = std::size_t(conns),
                                                .pool_size = std::size_t(workers)});
    auto worker = [&]() -> asio::awaitable<void> {
      for (long id; (id = next++) < n;) {
        coretry::retry_stats stats;
        coretry::curl::request req{.url = server.url(id)};
        auto r = co_await coretry::curl::retry(c, std::move(req), policy, stats);
        attempts += stats.attempts;
        ok += r.status == 200;
      }
    };
    for (long w = 0; w < workers; ++w)
      asio::co_spawn(io, worker(), [](std::exception_ptr e) {
        if (e)
          std::rethrow_exception(e);
      });
    io.run_for(std::chrono::seconds(long(run_limit_s)));
    sockets += long(c.stats().peak_open_connections);
  };
  asio::io_context watch_io(1);
  asio::steady_timer watch(watch_io);
  watch_threads(watch, t.peak);
  std::thread watcher([&] { watch_io.run(); });
  const auto t0 = cb::steady::now();
  std::vector<std::thread> threads;
  for (long core = 1; core < cores; ++core)
    threads.emplace_back(run_core, core);
  run_core(0);
  for (auto& th : threads)
    th.join();
  t.seconds = cb::seconds_since(t0);
  // Not a posted cancel(): a wait that has already expired, its handler queued, would re-arm.
  watch_io.stop();
  watcher.join();
  t.ok = ok;
  t.attempts = attempts;
  t.peak.sockets = sockets; // the sum of each client's peak: an upper bound
  t.peak.threads -= 1;      // the watcher
  return t;
}

// --- soak ------------------------------------------------------------------------------------

long open_descriptors() {
  long n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      n += e->d_name[0] != '.';
    closedir(d);
  }
  return n - 1; // the directory stream's own
}

int coretry_soak(const server_process& server, long n, long every) {
  constexpr double soak_limit_s = 900;
  asio::io_context io(1);
  coretry::curl::client c(io.get_executor(),
                          {.max_total_connections = connection_limit,
                           .max_host_connections = connection_limit,
                           .max_concurrent_requests = std::size_t(connection_limit),
                           .pool_size = std::size_t(in_flight)});
  const coretry::retry_policy policy{.max_attempts = max_attempts,
                                     .backoff = coretry::backoff::fixed(retry_delay)};
  long next = 0;
  long finished = 0;
  long ok = 0;
  long attempts = 0;
  struct point {
    long done, rss_kb, fds, sockets;
  };
  std::vector<point> points;
  const auto t0 = cb::steady::now();
  auto take_sample = [&] {
    points.push_back(
        {finished, cb::proc_status("VmRSS") / 1024, open_descriptors(), cb::open_ip_sockets()});
    const point& p = points.back();
    std::printf("soak %ld rss_kb %ld fds %ld sockets %ld t_s %.1f\n", p.done, p.rss_kb, p.fds,
                p.sockets, cb::seconds_since(t0));
    std::fflush(stdout);
  };
  auto worker = [&]() -> asio::awaitable<void> {
    while (next < n) {
      coretry::retry_stats stats;
      const long id = next++;
      coretry::curl::request req{.url = server.url(id)};
      auto r = co_await coretry::curl::retry(c, std::move(req), policy, stats);
      attempts += stats.attempts;
      ok += r.status == 200;
      if (++finished % every == 0)
        take_sample();
    }
  };
  long done = 0;
  for (long w = 0; w < in_flight; ++w)
    asio::co_spawn(io, worker(), [&](std::exception_ptr e) {
      if (e)
        std::rethrow_exception(e);
      ++done;
    });
  while (done < in_flight && cb::seconds_since(t0) < soak_limit_s)
    io.run_one_for(100ms);
  if (done < in_flight) {
    std::fprintf(stderr, "coretry_http_bench: soak stuck after %.0f s: %ld of %ld done\n",
                 cb::seconds_since(t0), finished, n);
    return 3;
  }
  const double seconds = cb::seconds_since(t0);
  if (points.empty())
    take_sample();
  // Warm-up: the pool, the connection cache and the allocator's arenas fill in the first 10%.
  std::size_t warm = 0;
  while (warm + 1 < points.size() && points[warm].done < n / 10)
    ++warm;
  const point& a = points[warm];
  const point& b = points.back();
  long rss_max = 0;
  long fds_max = 0;
  for (std::size_t i = warm; i < points.size(); ++i) {
    rss_max = std::max(rss_max, points[i].rss_kb);
    fds_max = std::max(fds_max, points[i].fds);
  }
  cb::sample("soak_requests", "coretry", double(finished));
  cb::sample("soak_ok", "coretry", double(ok));
  cb::sample("soak_attempts", "coretry", double(attempts));
  cb::sample("soak_seconds", "coretry", seconds);
  cb::sample("soak_rss_warm_kb", "coretry", double(a.rss_kb));
  cb::sample("soak_rss_max_kb", "coretry", double(rss_max));
  cb::sample("soak_rss_growth_kb", "coretry", double(b.rss_kb - a.rss_kb));
  cb::sample("soak_fds_warm", "coretry", double(a.fds));
  cb::sample("soak_fds_max", "coretry", double(fds_max));
  cb::sample("soak_fd_growth", "coretry", double(b.fds - a.fds));
  return ok == n ? 0 : 1;
}

// --- a raw curl multi loop on Asio ---------------------------------------------------------------

/// What a careful programmer writes without a retry library: libcurl's multi-socket API driven
/// by Asio (socket and timer callbacks, at most one wait per direction per socket), `in_flight`
/// easy handles reused from request to request, and a 1 ms timer per handle before a retry.
class raw_multi {
public:
  raw_multi(asio::io_context& io, const server_process& server, long n)
      : io_(io), server_(server), n_(n), timer_(io), multi_(curl_multi_init()) {
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &raw_multi::on_socket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &raw_multi::on_timer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS, connection_limit);
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, connection_limit);
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, connection_limit);
    for (long i = 0; i < in_flight; ++i) {
      auto s = std::make_unique<slot>(io);
      s->easy = curl_easy_init();
      curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s.get());
      curl_easy_setopt(s->easy, CURLOPT_OPENSOCKETFUNCTION, &raw_multi::on_open);
      curl_easy_setopt(s->easy, CURLOPT_OPENSOCKETDATA, this);
      curl_easy_setopt(s->easy, CURLOPT_CLOSESOCKETFUNCTION, &raw_multi::on_close);
      curl_easy_setopt(s->easy, CURLOPT_CLOSESOCKETDATA, this);
      slots_.push_back(std::move(s));
    }
  }
  ~raw_multi() {
    for (auto& s : slots_) {
      curl_multi_remove_handle(multi_, s->easy);
      curl_easy_cleanup(s->easy);
    }
    curl_multi_cleanup(multi_); // closes cached connections through on_close
  }

  void start() {
    for (auto& s : slots_)
      next_request(*s);
  }

  long ok = 0;
  long finished = 0;
  long attempts = 0;
  long peak_sockets = 0;

private:
  struct slot {
    explicit slot(asio::io_context& io) : backoff(io) {}
    CURL* easy = nullptr;
    std::string url;
    unsigned attempt = 0;
    asio::steady_timer backoff;
  };
  struct watched {
    watched(asio::io_context& io, int fd, unsigned long id) : sd(io, fd), id(id) {}
    asio::posix::stream_descriptor sd;
    unsigned long id;
    int want = 0;
    bool reading = false, writing = false;
  };

  void next_request(slot& s) {
    if (next_id_ >= n_)
      return;
    s.url = server_.url(next_id_++);
    s.attempt = 0;
    add(s);
  }
  void add(slot& s) {
    ++s.attempt;
    ++attempts;
    setup_easy(s.easy, s.url);
    curl_multi_add_handle(multi_, s.easy);
  }

  // Sockets: opened by libcurl through us, owned by Asio, closed by libcurl through us.
  static curl_socket_t on_open(void* self_, curlsocktype, curl_sockaddr* a) {
    auto* self = static_cast<raw_multi*>(self_);
    const int fd = ::socket(a->family, a->socktype, a->protocol);
    if (fd < 0)
      return CURL_SOCKET_BAD;
    self->sockets_[fd] = std::make_unique<watched>(self->io_, fd, ++self->generation_);
    self->peak_sockets = std::max(self->peak_sockets, long(self->sockets_.size()));
    return fd;
  }
  static int on_close(void* self_, curl_socket_t fd) {
    auto* self = static_cast<raw_multi*>(self_);
    self->sockets_.erase(fd); // the descriptor closes with its stream_descriptor
    return 0;
  }

  static int on_socket(CURL*, curl_socket_t fd, int what, void* self_, void*) {
    auto* self = static_cast<raw_multi*>(self_);
    const auto it = self->sockets_.find(fd);
    if (it == self->sockets_.end())
      return 0;
    watched& w = *it->second;
    w.want = what == CURL_POLL_REMOVE ? 0 : what;
    if (w.want == 0)
      w.sd.cancel();
    else
      self->arm(w);
    return 0;
  }
  void arm(watched& w) {
    if ((w.want & CURL_POLL_IN) && !w.reading) {
      w.reading = true;
      w.sd.async_wait(asio::posix::descriptor_base::wait_read,
                      [this, fd = w.sd.native_handle(), id = w.id](std::error_code ec) {
                        ready(fd, id, ec, CURL_CSELECT_IN);
                      });
    }
    if ((w.want & CURL_POLL_OUT) && !w.writing) {
      w.writing = true;
      w.sd.async_wait(asio::posix::descriptor_base::wait_write,
                      [this, fd = w.sd.native_handle(), id = w.id](std::error_code ec) {
                        ready(fd, id, ec, CURL_CSELECT_OUT);
                      });
    }
  }
  watched* find(int fd, unsigned long id) {
    const auto it = sockets_.find(fd);
    return it != sockets_.end() && it->second->id == id ? it->second.get() : nullptr;
  }
  void ready(int fd, unsigned long id, std::error_code ec, int direction) {
    watched* w = find(fd, id);
    if (!w)
      return; // closed (and maybe reused) since
    (direction == CURL_CSELECT_IN ? w->reading : w->writing) = false;
    const int wanted = direction == CURL_CSELECT_IN ? CURL_POLL_IN : CURL_POLL_OUT;
    if (ec || !(w->want & wanted)) {
      if (w->want)
        arm(*w);
      return;
    }
    int running = 0;
    curl_multi_socket_action(multi_, fd, direction, &running);
    drain();
    if ((w = find(fd, id)) != nullptr && w->want)
      arm(*w);
  }

  static int on_timer(CURLM*, long ms, void* self_) {
    auto* self = static_cast<raw_multi*>(self_);
    if (ms < 0) {
      self->timer_.cancel();
      return 0;
    }
    self->timer_.expires_after(std::chrono::milliseconds(ms));
    self->timer_.async_wait([self](std::error_code ec) {
      if (ec)
        return;
      int running = 0;
      curl_multi_socket_action(self->multi_, CURL_SOCKET_TIMEOUT, 0, &running);
      self->drain();
    });
    return 0;
  }

  void drain() {
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
      if (m->msg != CURLMSG_DONE)
        continue;
      CURL* e = m->easy_handle;
      const CURLcode result = m->data.result;
      slot* s = nullptr;
      curl_easy_getinfo(e, CURLINFO_PRIVATE, reinterpret_cast<char**>(&s));
      long status = 0;
      curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
      curl_multi_remove_handle(multi_, e);
      const bool retryable = result != CURLE_OK || status == 503;
      if (!retryable || s->attempt >= max_attempts) {
        ok += result == CURLE_OK && status == 200;
        ++finished;
        next_request(*s);
        continue;
      }
      s->backoff.expires_after(retry_delay);
      s->backoff.async_wait([this, s](std::error_code ec) {
        if (!ec)
          add(*s);
      });
    }
  }

  asio::io_context& io_;
  const server_process& server_;
  long n_;
  long next_id_ = 0;
  asio::steady_timer timer_;
  CURLM* multi_;
  std::vector<std::unique_ptr<slot>> slots_;
  std::unordered_map<int, std::unique_ptr<watched>> sockets_;
  unsigned long generation_ = 0;
};

totals multi_throughput(const server_process& server, long n) {
  totals t;
  asio::io_context io(1);
  {
    raw_multi m(io, server, n);
    asio::steady_timer watch(io);
    watch_threads(watch, t.peak);
    const auto t0 = cb::steady::now();
    m.start();
    // Bounded: a stuck loop fails the run, never hangs it.
    while (m.finished < n && cb::seconds_since(t0) < run_limit_s)
      io.run_one_for(100ms);
    t.seconds = cb::seconds_since(t0);
    watch.cancel();
    t.ok = m.ok;
    t.attempts = m.attempts;
    t.peak.sockets = m.peak_sockets;
  }
  return t;
}

// --- thread per request -------------------------------------------------------------------------

totals threads_throughput(const server_process& server, long n) {
  totals t;
  std::atomic<long> next{0}, ok{0}, attempts{0};
  const auto t0 = cb::steady::now();
  std::vector<std::thread> threads;
  for (long w = 0; w < in_flight; ++w)
    threads.emplace_back([&] {
      CURL* e = curl_easy_init();
      curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, counting_open);
      curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, counting_close);
      for (long id; (id = next++) < n;) {
        const std::string url = server.url(id);
        for (unsigned attempt = 1;; ++attempt) {
          setup_easy(e, url);
          ++attempts;
          const CURLcode r = curl_easy_perform(e);
          long status = 0;
          curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
          if ((r == CURLE_OK && status != 503) || attempt == max_attempts) {
            ok += r == CURLE_OK && status == 200;
            break;
          }
          std::this_thread::sleep_for(retry_delay);
        }
      }
      curl_easy_cleanup(e);
    });
  t.peak.sample_threads();
  for (auto& th : threads)
    th.join();
  t.seconds = cb::seconds_since(t0);
  t.ok = ok;
  t.attempts = attempts;
  t.peak.sockets = open_peak;
  return t;
}

// --- many waiting -------------------------------------------------------------------------------

void report_waiting(const char* variant, long n, long rss0, long sockets, long threads) {
  cb::sample("waiting_sockets", variant, double(sockets));
  cb::sample("waiting_rss_per_op", variant, double(cb::proc_status("VmRSS") - rss0) / double(n));
  cb::sample("waiting_threads", variant, double(threads));
}

int coretry_waiting(const server_process& server, long n) {
  asio::io_context io(1);
  coretry::curl::client c(io.get_executor(), {.max_total_connections = connection_limit,
                                              .max_host_connections = connection_limit});
  coretry::cancellation_source source;
  const coretry::retry_policy policy{
      .max_attempts = 2, .backoff = coretry::backoff::fixed(1h), .cancellation = source.token()};
  const long rss0 = cb::proc_status("VmRSS");
  long completed = 0;
  for (long i = 0; i < n; ++i)
    coretry::curl::async_retry(c, coretry::curl::request{.url = server.url(i)}, policy,
                               [&](std::error_code, coretry::curl::response) { ++completed; });
  const auto t0 = cb::steady::now();
  while (c.stats().waiting_retries < std::size_t(n) && cb::seconds_since(t0) < 120)
    io.run_one_for(100ms);
  if (c.stats().waiting_retries != std::size_t(n)) {
    std::fprintf(stderr, "coretry_http_bench: only %zu of %ld asleep\n", c.stats().waiting_retries,
                 n);
    return 1;
  }
  report_waiting("coretry", n, rss0, cb::open_ip_sockets(), cb::proc_status("Threads"));
  source.cancel();
  io.run();
  return completed == n ? 0 : 1;
}

int threads_waiting(const server_process& server, long n) {
  // Each waiting thread holds three descriptors: its connection and the wake-up socket pair of
  // curl_easy_perform's internal multi handle. Beyond the descriptor limit thread-per-request
  // cannot hold its operations at all; it runs as many as fit (the figures are per operation).
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  const long fit = (static_cast<long>(lim.rlim_cur) - 64) / 3;
  if (n > fit) {
    std::fprintf(stderr,
                 "# thread per request: %ld of %ld waiting operations fit under the descriptor "
                 "limit of %ld (3 descriptors each); measured with %ld\n",
                 fit, n, static_cast<long>(lim.rlim_cur), fit);
    n = fit;
  }
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  long asleep = 0;
  std::atomic<long> failed{0};
  const long rss0 = cb::proc_status("VmRSS");
  std::vector<std::thread> threads;
  threads.reserve(std::size_t(n));
  for (long i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      CURL* e = curl_easy_init();
      setup_easy(e, server.url(i));
      // 503: the first attempt fails; the handle keeps its connection.
      long status = 0;
      if (curl_easy_perform(e) != CURLE_OK ||
          curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK || status != 503)
        ++failed;
      std::unique_lock lock(m);
      ++asleep;
      cv.notify_all();
      cv.wait_for(lock, 1h, [&] { return stop; }); // the backoff, interruptible
      lock.unlock();
      curl_easy_cleanup(e);
    });
  {
    std::unique_lock lock(m);
    cv.wait_for(lock, 120s, [&] { return asleep == n; });
  }
  const bool all = asleep == n && failed == 0;
  if (all)
    report_waiting("threads", n, rss0, cb::open_ip_sockets(), cb::proc_status("Threads"));
  else
    std::fprintf(stderr, "coretry_http_bench: threads: %ld of %ld asleep, %ld failed\n", asleep, n,
                 failed.load());
  {
    std::lock_guard lock(m);
    stop = true;
  }
  cv.notify_all();
  for (auto& th : threads)
    th.join();
  return all ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) try {
  const std::string mode = cb::option(argc, argv, "mode", "throughput");
  const std::string variant = cb::option(argc, argv, "variant", "coretry");
  const long n = cb::count_option(argc, argv, "count", mode == "soak" ? 1'000'000 : 10'000);
  const std::string server_path = cb::option(argc, argv, "server", default_server_path());
  std::signal(SIGPIPE, SIG_IGN);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server_process server(server_path, mode == "waiting" ? "first" : "half", n);
  if (mode == "waiting") {
    if (variant == "coretry")
      return coretry_waiting(server, n);
    if (variant == "threads")
      return threads_waiting(server, n);
  } else if (mode == "soak") {
    return coretry_soak(server, n, cb::count_option(argc, argv, "every", std::max(1L, n / 20)));
  } else if (mode == "throughput") {
    totals t;
    const double client0 = own_cpu_seconds(), server0 = server.cpu_seconds();
    const long rss0 = cb::proc_status("VmRSS");
    if (variant == "coretry")
      t = coretry_throughput(server, n);
    else if (variant == "cores")
      t = cores_throughput(
          server, n,
          cb::count_option(argc, argv, "threads",
                           std::max(1L, long(std::thread::hardware_concurrency()))));
    else if (variant == "multi")
      t = multi_throughput(server, n);
    else if (variant == "threads")
      t = threads_throughput(server, n);
    else
      throw std::invalid_argument("--variant must be coretry, cores, multi or threads, not '" +
                                  variant + "'");
    report(variant.c_str(), n, t);
    // Where the CPU went, per successful request: this process's, and the server's.
    const double ok = double(std::max(1L, t.ok));
    cb::sample("http_client_cpu_us", variant, (own_cpu_seconds() - client0) * 1e6 / ok);
    cb::sample("http_server_cpu_us", variant, (server.cpu_seconds() - server0) * 1e6 / ok);
    // What the run added to the process: its peak RSS less the RSS before it (libraries, the
    // server's pipe and the like are in both and say nothing of the variant).
    cb::sample("http_run_rss_mb", variant, double(cb::proc_status("VmHWM") - rss0) / 1048576.0);
    return t.ok == n ? 0 : 1;
  }
  throw std::invalid_argument("unknown --mode/--variant: '" + mode + "'/'" + variant + "'");
} catch (const std::exception& e) {
  std::fprintf(stderr, "coretry_http_bench: %s\n", e.what());
  return 2;
}
