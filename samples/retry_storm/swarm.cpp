// SPDX-License-Identifier: BSL-1.0
#include "swarm.hpp"

#include <coretry/attempt.hpp>
#include <coretry/error.hpp>
#include <coretry/http.hpp>
#include <coretry/random.hpp>
#include <coretry/retry.hpp>

#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/error.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/read_until.hpp>
#include <asio/streambuf.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#ifdef CORETRY_STORM_HAVE_CURL
#include <coretry/curl/client.hpp>
#endif

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <istream>
#include <limits>
#include <stdexcept>
#include <system_error>

namespace retry_storm {

using namespace std::chrono_literals;
using asio::ip::tcp;

namespace {

std::chrono::nanoseconds scaled(std::chrono::nanoseconds d, double time_scale) {
  return std::chrono::nanoseconds(
      static_cast<std::int64_t>(std::llround(static_cast<double>(d.count()) * time_scale)));
}

bool uses_default_backoff(std::string_view name) {
  return name == "full" || name == "safe" || name == "breaker" || name == "budget" ||
         name == "adaptive" || name == "wait" || name == "wait-budget" || name == "sre" ||
         name == "slowcall";
}

} // namespace

std::optional<coretry::backoff> strategy_backoff(std::string_view name, double time_scale) {
  // The experiment's policies differ in their backoff and in their shared controls; "full" is
  // exactly what a default-constructed coretry::retry_policy uses (exponential from 100 ms, x2,
  // up to 32 s, full jitter), the other exponential ones share its curve, and the strategies
  // with controls keep the default backoff.
  const coretry::backoff jitter_only = coretry::retry_policy{}.backoff;
  const auto curve = coretry::backoff::exponential(scaled(jitter_only.initial(), time_scale),
                                                   jitter_only.multiplier(),
                                                   scaled(jitter_only.max_delay(), time_scale));
  if (name == "fixed")
    return coretry::backoff::fixed(scaled(100ms, time_scale));
  if (name == "exponential")
    return curve;
  if (uses_default_backoff(name))
    return time_scale == 1.0 ? jitter_only : curve.with_jitter(jitter_only.jitter_spec());
  if (name == "equal")
    return curve.with_jitter(coretry::jitter::equal());
  if (name == "decorrelated")
    return curve.with_jitter(coretry::jitter::decorrelated());
  if (name == "normal")
    return curve.with_jitter(coretry::jitter::normal(0.1));
  return std::nullopt;
}

shared_controls recommended_controls(double time_scale, waiting_options w) {
  // Written as README.md shows it, every time through `at` so that a scaled run scales them.
  const auto at = [time_scale](std::chrono::nanoseconds d) { return scaled(d, time_scale); };
  shared_controls c;
  // Stops sending after 10 failures in a row (or half the outcomes of the last 10 s failing),
  // then lets one probe through 1 s (+-20 %) after each failure; its success closes the breaker.
  // At most 50 attempts without an answer (about 5 times what 1000 clients thinking 10 s keep in
  // flight at 100 ms): what a server that stops answering receives before the breaker opens.
  c.breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
      .consecutive_failures = w.consecutive_failures,
      .failure_ratio = 0.5,
      .minimum_throughput = 20,
      .window = at(10s),
      .break_duration = at(1s),
      .break_jitter = 0.2,
      .half_open_probes = 1,
      .max_concurrent_calls = w.max_in_flight,
  });
  // Retries within 10 % of the requests of the last 10 s, plus 1 a second.
  c.budget = std::make_shared<coretry::ratio_budget>(coretry::ratio_budget_options{
      .ratio = 0.1,
      .min_retries_per_second = 1.0 / time_scale,
      .window = at(10s),
  });
  return c;
}

shared_controls waiting_controls(double time_scale, waiting_options w) {
  const auto at = [time_scale](std::chrono::nanoseconds d) { return scaled(d, time_scale); };
  shared_controls c;
  // No retry budget: its refusal fails a request at once, which a caller willing to wait does
  // not want (the first timeouts of an outage would exhaust it); the breaker alone stops the
  // sending. The recommended breaker, with a slow start: for 5 s after it closes, an attempt
  // passes with a probability rising from 0 to 1, and a refused request asks again 200 ms
  // (+-50 %) later. A waiter then passes after about sqrt(2 * ramp * interval) = 1.4 s
  // (Rayleigh-distributed): the thousand requests that waited through an outage reach the server
  // at up to about 600 a second, which it serves at about 150 concurrent. With a 1 s ramp and
  // 100 ms they came within half a second and its concurrency reached 950 (docs/retry_storm.md).
  c.breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
      .consecutive_failures = w.consecutive_failures,
      .failure_ratio = 0.5,
      .minimum_throughput = 20,
      .window = at(10s),
      .break_duration = at(1s),
      .break_jitter = 0.2,
      .half_open_probes = 1,
      .ramp = at(std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(w.ramp_s))),
      .retry_interval = at(std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(w.retry_interval_s))),
      .max_concurrent_calls = w.max_in_flight,
  });
  c.when_open = coretry::on_open::wait;
  c.deadline = at(60s);
  return c;
}

std::string shared_controls::breaker_state() const {
  if (const auto* b = dynamic_cast<const coretry::circuit_breaker*>(breaker.get()))
    return std::string(coretry::to_string(b->state()));
  return "-";
}

shared_controls strategy_controls(std::string_view name, double time_scale, waiting_options w) {
  shared_controls c;
  if (name == "wait")
    return waiting_controls(time_scale, w);
  if (name == "wait-budget") {
    // `wait` with the recommended retry budget kept: what the budget costs a waiting caller.
    c = waiting_controls(time_scale, w);
    c.budget = recommended_controls(time_scale, w).budget;
    return c;
  }
  if (name == "sre") {
    // The SRE book's client-side throttling in place of the breaker, with the same budget. The
    // book counts over 2 minutes; a window that long remembers two minutes of accepts and lets a
    // frozen server's queue fill for as long, and after a total outage the share it lets through
    // grows by K per window, so the lab's is 1 s (--throttle-window-s; docs/retry_storm.md).
    c.budget = recommended_controls(time_scale, w).budget;
    c.breaker = std::make_shared<coretry::adaptive_throttle>(coretry::adaptive_throttle_options{
        .k = 2.0,
        .window = scaled(std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::duration<double>(w.throttle_window_s)),
                         time_scale),
        .window_buckets = 20,
    });
    return c;
  }
  if (name == "slowcall") {
    // `safe` with a breaker that also opens on slow calls (resilience4j's slowCallRateThreshold):
    // when half of the last 100 answers took over 500 ms (five times the model's usual 100 ms),
    // with at least 20 of them, it opens as on failures.
    c = recommended_controls(time_scale, w);
    auto o = dynamic_cast<const coretry::circuit_breaker&>(*c.breaker).options();
    o.window_type = coretry::sliding_window::count_based;
    o.window_calls = 100;
    o.slow_call_duration = scaled(500ms, time_scale);
    o.slow_call_ratio = 0.5;
    c.breaker = std::make_shared<coretry::circuit_breaker>(o);
    return c;
  }
  if (name == "safe" || name == "adaptive")
    c = recommended_controls(time_scale, w);
  else if (name == "breaker")
    c.breaker = recommended_controls(time_scale, w).breaker;
  else if (name == "budget")
    c.budget = recommended_controls(time_scale, w).budget;
  if (name == "adaptive") {
    // The AWS SDKs' constants in model time. Rates r become r / s per real second and times t
    // become t * s, so the cubic's C (rate per s^3) becomes C / s^4.
    const double s2 = time_scale * time_scale;
    c.rate_limit = std::make_shared<coretry::adaptive_rate_limiter>(coretry::adaptive_rate_options{
        .scale = 0.4 / (s2 * s2),
        .measure_interval = scaled(500ms, time_scale),
        .min_rate = 0.5 / time_scale,
        .burst = scaled(1s, time_scale),
    });
  }
  return c;
}

namespace {

class http_status_category_impl final : public std::error_category {
public:
  const char* name() const noexcept override { return "http"; }
  std::string message(int status) const override { return "HTTP " + std::to_string(status); }
  // What a status says of the server's health, for the breaker (coretry::default_health): 429
  // is a push-back, another 4xx the request's own fault; a 5xx is in neither (a failure).
  bool equivalent(int status, const std::error_condition& c) const noexcept override {
    if (c == coretry::condition::pushback)
      return status == 429;
    if (c == coretry::condition::client_error)
      return status >= 400 && status < 500 && status != 408 && status != 429;
    return std::error_category::equivalent(status, c);
  }
};

} // namespace

const std::error_category& http_status_category() noexcept {
  static const http_status_category_impl category;
  return category;
}

bool have_curl_transport() noexcept {
#ifdef CORETRY_STORM_HAVE_CURL
  return true;
#else
  return false;
#endif
}

namespace {

/// The parts of an `http://host:port/path` URL the plain-Asio transport needs. Only numeric
/// IPv4/IPv6 hosts and "localhost": the experiment runs on loopback, and a resolver per attempt
/// would only add noise.
struct parsed_url {
  tcp::endpoint endpoint;
  std::string host_header;
  std::string path;
};

parsed_url parse_url(const std::string& url) {
  constexpr std::string_view scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0)
    throw std::invalid_argument("only http:// URLs are supported by the asio transport: " + url);
  const std::string rest = url.substr(scheme.size());
  const auto slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  parsed_url out;
  out.path = slash == std::string::npos ? "/" : rest.substr(slash);
  out.host_header = authority;
  std::string host = authority;
  unsigned short port = 80;
  if (const auto colon = authority.rfind(':');
      colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    host = authority.substr(0, colon);
    port = static_cast<unsigned short>(std::stoul(authority.substr(colon + 1)));
  }
  if (host.size() > 1 && host.front() == '[')
    host = host.substr(1, host.size() - 2);
  if (host == "localhost")
    host = "127.0.0.1";
  std::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec)
    throw std::invalid_argument("the asio transport needs a numeric host: " + url);
  out.endpoint = tcp::endpoint(address, port);
  return out;
}

/// One GET over a fresh connection, read to the end; returns the status. Cancellation (the retry
/// loop's attempt timeout) reaches every socket operation through the coroutine's cancellation
/// slot, and the socket is closed when the frame unwinds.
asio::awaitable<http_answer> asio_get(const parsed_url& target, const std::string& request) {
  tcp::socket socket(co_await asio::this_coro::executor);
  co_await socket.async_connect(target.endpoint, asio::use_awaitable);
  co_await asio::async_write(socket, asio::buffer(request), asio::use_awaitable);
  asio::streambuf response;
  co_await asio::async_read_until(socket, response, "\r\n", asio::use_awaitable);
  std::istream in(&response);
  std::string version;
  long status = 0;
  in >> version >> status;
  if (status < 100 || status > 999)
    throw std::system_error(make_error_code(std::errc::protocol_error)); // not HTTP
  // Drain the rest (the server closes after its answer); EOF is the normal end.
  auto [ec, n] = co_await asio::async_read(socket, response,
                                           asio::experimental::as_tuple(asio::use_awaitable));
  (void)n;
  if (ec && ec != asio::error::eof)
    throw std::system_error(ec);
  http_answer answer{status, 0};
  std::string line;
  while (std::getline(in, line) && line != "\r")
    if (line.rfind("Retry-After:", 0) == 0)
      answer.retry_after_s = std::atof(line.c_str() + 12);
  co_return answer;
}

/// The retry loop's own attempt timeout (seen inside the attempt as its cancellation), or a
/// transport's.
bool is_timeout(const std::error_code& ec) {
#ifdef CORETRY_STORM_HAVE_CURL
  if (ec == coretry::curl::errc::operation_timedout)
    return true;
#endif
  return ec == asio::error::operation_aborted || ec == coretry::errc::attempt_timeout ||
         ec == std::errc::timed_out;
}

} // namespace

struct swarm::transport_state {
  transport_fn perform;
  parsed_url target;
  std::string request;
#ifdef CORETRY_STORM_HAVE_CURL
  std::unique_ptr<coretry::curl::client> curl;
#endif
};

swarm::swarm(asio::io_context& io, swarm_config config)
    : io_(io), config_(std::move(config)),
      backoff_(strategy_backoff(config_.strategy, config_.time_scale)
                   .value_or(coretry::backoff::fixed(std::chrono::nanoseconds::zero()))),
      controls_(strategy_controls(config_.strategy, config_.time_scale, config_.waiting)),
      transport_(std::make_unique<transport_state>()) {
  if (!strategy_backoff(config_.strategy))
    throw std::invalid_argument("unknown strategy '" + config_.strategy +
                                "'; known: " + std::string(strategy_names));
  if (config_.clients == 0 || !(config_.think_mean_s > 0) || !(config_.timeout_s > 0))
    throw std::invalid_argument("clients, think time and timeout must be positive");
  transport_state& t = *transport_;
  if (config_.transport == transport_kind::curl) {
#ifdef CORETRY_STORM_HAVE_CURL
    coretry::curl::client_options opts;
    // Every client may have an attempt in flight: the storm needs as many connections as
    // clients, or the HTTP client itself would throttle the retries the experiment is about.
    opts.max_total_connections = static_cast<long>(config_.clients);
    t.curl = std::make_unique<coretry::curl::client>(io_.get_executor(), opts);
    t.perform = [this, &t]() -> asio::awaitable<http_answer> {
      coretry::curl::request req;
      req.url = config_.url;
      // The retry loop's attempt timeout is the one that counts; curl's is only a backstop.
      req.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::duration<double>(config_.timeout_s * 2));
      const auto res = co_await t.curl->perform(std::move(req));
      http_answer answer{res.status, 0};
      if (const auto hint = res.header("Retry-After"))
        answer.retry_after_s = std::atof(std::string(*hint).c_str());
      co_return answer;
    };
#else
    throw std::invalid_argument("this build has no curl transport; use --transport asio");
#endif
  } else {
    t.target = parse_url(config_.url);
    t.request = "GET " + t.target.path + " HTTP/1.1\r\nHost: " + t.target.host_header +
                "\r\nConnection: close\r\n\r\n";
    t.perform = [&t]() { return asio_get(t.target, t.request); };
  }
}

swarm::~swarm() = default;

std::string swarm::describe() const {
  std::string d = config_.strategy + ": " + backoff_.to_string();
  if (std::dynamic_pointer_cast<coretry::adaptive_throttle>(controls_.breaker))
    d += " + adaptive throttle";
  else if (controls_.breaker)
    d += " + circuit breaker";
  if (controls_.budget)
    d += " + retry budget";
  if (controls_.rate_limit)
    d += " + adaptive rate";
  return d;
}

void swarm::start() {
  think_timers_.reserve(config_.clients);
  for (unsigned i = 0; i < config_.clients; ++i) {
    think_timers_.push_back(std::make_unique<asio::steady_timer>(io_));
    ++counters_.alive;
    asio::co_spawn(io_, client_loop(i), asio::detached);
  }
}

void swarm::stop() {
  stopping_ = true;
  stop_source_.cancel();
  for (auto& t : think_timers_)
    t->cancel();
}

asio::awaitable<void> swarm::client_loop(unsigned index) {
  struct alive_guard {
    std::int64_t& n;
    ~alive_guard() { --n; }
  } guard{counters_.alive};
  coretry::fast_rng rng(config_.seed * 0x9e3779b97f4a7c15ull + index);
  asio::steady_timer& think = *think_timers_[index];

  coretry::retry_policy policy{
      .max_attempts = coretry::unlimited_attempts, // retry until success, or told not to
      .deadline = controls_.deadline,
      .attempt_timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(config_.timeout_s)),
      .backoff = backoff_,
      .budget = controls_.budget,
      .breaker = controls_.breaker,
      .when_open = controls_.when_open,
      .rate_limit = controls_.rate_limit,
      .cancellation = stop_source_.token(),
      // circuit_open and budget_exhausted rather than the last attempt's error: the counts below
      // need to know why a request was given up.
      .report = coretry::final_error::policy_reason,
      .observer = config_.observer,
      .label = config_.url.substr(0, config_.url.find('/', config_.url.find("://") + 3)),
  };

  // Every failed attempt is counted here, where it fails: a retry operation's hook would miss the
  // attempt after which a budget says no.
  auto note_failure = [this](const std::error_code& ec) {
    if (stopping_)
      return;
    if (is_timeout(ec)) {
      ++counters_.timeouts;
      ++counters_.error_kinds["timed out"];
    } else {
      ++counters_.errors;
      ++counters_.error_kinds[ec.message()];
    }
  };
  unsigned sent = 0; // attempts of the current request
  auto attempt = [this, &note_failure,
                  &sent](coretry::attempt_context& context) -> asio::awaitable<void> {
    struct in_flight_guard {
      std::int64_t& n;
      explicit in_flight_guard(std::int64_t& c) : n(c) { ++n; }
      ~in_flight_guard() { --n; }
    } in_flight{counters_.in_flight};
    ++counters_.attempts;
    if (++sent > 1)
      ++counters_.retries;
    http_answer answer;
    try {
      answer = co_await transport_->perform();
    } catch (const std::system_error& e) {
      note_failure(e.code());
      throw;
    }
    const long status = answer.status;
    // The lab's server gives Retry-After in model seconds: scaled like every other time.
    if (answer.retry_after_s > 0)
      context.retry_after(std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(answer.retry_after_s * config_.time_scale)));
    ++counters_.statuses[status];
    // For the observer's HTTP metric.
    context.set_attribute(coretry::http::attribute::request_method, "GET");
    context.set_attribute(coretry::http::attribute::response_status_code, status);
    if (status < 200 || status > 299) {
      const std::error_code ec(static_cast<int>(status), http_status_category());
      note_failure(ec);
      throw std::system_error(ec);
    }
  };

  while (!stopping_) {
    // Exponential think time: memoryless, so the load is steady from the first second.
    const double think_s = -std::log(1.0 - rng.uniform()) * config_.think_mean_s;
    think.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(
        std::chrono::duration<double>(think_s)));
    auto [ec] = co_await think.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    if (ec || stopping_)
      break;
    policy.seed = rng();
    sent = 0;
    ++counters_.retrying;
    ++counters_.requests;
    try {
      co_await coretry::retry_async(attempt, policy);
      ++counters_.ok;
    } catch (const std::system_error& e) {
      // A failed request: the user sees an error and, like everyone, thinks before the next one.
      // A request that waits for the breaker (`wait`) is refused only when the wait would end
      // past its deadline: that is its deadline passing, counted as such.
      if (e.code() == coretry::errc::circuit_open && controls_.when_open == coretry::on_open::wait)
        ++counters_.deadline_exceeded;
      else if (e.code() == coretry::errc::circuit_open)
        ++counters_.circuit_open;
      else if (e.code() == coretry::errc::budget_exhausted)
        ++counters_.budget_exhausted;
      else if (e.code() == coretry::errc::deadline_exceeded)
        ++counters_.deadline_exceeded;
      else if (!stopping_)
        ++counters_.other_failed;
      // Otherwise cancelled by stop(): the loop ends below.
    }
    --counters_.retrying;
  }
}

} // namespace retry_storm
