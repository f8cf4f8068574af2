// SPDX-License-Identifier: BSL-1.0
#pragma once
// The client swarm: N independent users in closed loops, each retrying failed requests with one
// retry strategy, all on one thread.

#include <coretry/backoff.hpp>
#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/cancellation.hpp>
#include <coretry/policy.hpp>
#include <coretry/rate_limit.hpp>
#include <coretry/throttle.hpp>

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace retry_storm {

/// The retry strategies of the experiment, by name:
/// - `fixed`: 100 ms, no jitter (the article's naive client);
/// - `exponential`: 100 ms doubling to 32 s, no jitter; the same curve with `full` (coretry's
///   default, jitter only), `equal`, `decorrelated` or `normal` (relative deviation 0.1, as in
///   "Exponential Backoff or how not to crash a server") jitter;
/// - `safe`: the recommended overload-safe policy, `full` plus a circuit breaker and a windowed
///   retry budget shared by the whole swarm (see `recommended_controls`);
/// - `breaker`, `budget`: `full` plus only one of the two;
/// - `adaptive`: `safe` plus an adaptive rate limiter;
/// - `wait`: `safe`, but a request the breaker refuses waits (no socket held) until the breaker
///   lets it through, within a deadline of 60 s per request; the breaker ramps traffic up over
///   1 s when it closes, and no retry budget (see `waiting_controls`); `wait-budget` keeps the
///   budget;
/// - `sre`: `full` plus the retry budget and, instead of the breaker, client-side adaptive
///   throttling (the Google SRE book's form, K = 2 over 2 minutes).
/// `time_scale` shrinks every delay (quick runs replay the experiment faster); 1 is the article's.
std::optional<coretry::backoff> strategy_backoff(std::string_view name, double time_scale = 1.0);
/// The names above, for usage messages.
inline constexpr std::string_view strategy_names =
    "fixed, exponential, full, equal, decorrelated, normal, safe (recommended), breaker, budget, "
    "adaptive, wait, wait-budget, sre, slowcall";

/// The overload controls one strategy shares between all the clients of a swarm (all of them
/// call one upstream). Empty for the backoff-only strategies.
struct shared_controls {
  std::shared_ptr<coretry::attempt_gate> breaker; ///< A circuit breaker or `sre`'s throttle.
  std::shared_ptr<coretry::ratio_budget> budget;
  std::shared_ptr<coretry::adaptive_rate_limiter> rate_limit;
  /// What a request does when the breaker refuses it (`wait`: waits, within `deadline`).
  coretry::on_open when_open = coretry::on_open::fail;
  /// Per request (model time times the time scale); `coretry::unlimited` but for `wait`.
  std::chrono::nanoseconds deadline = coretry::unlimited;
  /// The breaker's state for the CSV, "-" when there is none (or it is a throttle).
  std::string breaker_state() const;
};

/// The waiting variant's settings, model seconds (`--ramp-s`, `--wait-interval-s`).
struct waiting_options {
  double ramp_s = 5;             ///< `circuit_breaker_options::ramp`
  double retry_interval_s = 0.2; ///< `circuit_breaker_options::retry_interval`
  /// `circuit_breaker_options::max_concurrent_calls` of every breaker (`--max-in-flight`; 0: none).
  unsigned max_in_flight = 50;
  /// `circuit_breaker_options::consecutive_failures` of every breaker (`--consecutive-failures`).
  unsigned consecutive_failures = 10;
  /// `sre`'s `adaptive_throttle_options::window`, model seconds (`--throttle-window-s`).
  double throttle_window_s = 1;
};

/// The controls of the recommended policy (`safe`), at the article's time scale when
/// `time_scale` is 1; README.md shows the same construction. `w` gives the breaker's
/// `max_concurrent_calls` and `consecutive_failures`.
shared_controls recommended_controls(double time_scale = 1.0, waiting_options w = {});

/// The recommended breaker made to wait instead of failing (`wait`): a ramp, `on_open::wait`, a
/// 60 s deadline per request, no budget.
shared_controls waiting_controls(double time_scale = 1.0, waiting_options w = {});

/// The controls of strategy `name`, fresh (one set per swarm).
shared_controls strategy_controls(std::string_view name, double time_scale = 1.0,
                                  waiting_options w = {});

enum class transport_kind { curl, asio };

struct swarm_config {
  std::string url = "http://127.0.0.1:8070/";
  unsigned clients = 1000;
  double think_mean_s = 10.0; ///< Mean of the exponential think time between requests.
  double timeout_s = 2.0;     ///< Per-attempt timeout.
  std::string strategy = "full";
  /// Multiplies the backoff delays and the controls' times (think time and timeout are given).
  double time_scale = 1.0;
  std::uint64_t seed = 1;
  transport_kind transport = transport_kind::curl;
  waiting_options waiting{};
  /// Set on every client's policy (`--metrics-port`); the operations are labelled with the
  /// URL's `scheme://host:port`.
  std::shared_ptr<coretry::retry_observer> observer{};
};

/// Running totals; the driver samples them once a (model) second and takes differences.
struct swarm_counters {
  std::uint64_t ok = 0;       ///< Requests that succeeded (one per closed-loop cycle).
  std::uint64_t requests = 0; ///< Requests started (retry operations, not attempts).
  std::uint64_t errors = 0;   ///< Failed attempts other than timeouts.
  std::uint64_t timeouts = 0; ///< Attempts that hit the per-attempt timeout.
  std::uint64_t attempts = 0; ///< Attempts sent.
  std::uint64_t retries = 0;  ///< Attempts sent after the first of their request.
  /// Requests given up because the breaker refused to send (`errc::circuit_open`): failed fast.
  std::uint64_t circuit_open = 0;
  /// Requests given up because the budget refused a retry (`errc::budget_exhausted`).
  std::uint64_t budget_exhausted = 0;
  /// Requests whose deadline (the `wait` strategy's 60 s) passed before one attempt succeeded.
  std::uint64_t deadline_exceeded = 0;
  /// Requests given up for any other reason (a gate's refusal, a Retry-After past the
  /// deadline, ...).
  std::uint64_t other_failed = 0;
  std::int64_t in_flight = 0; ///< Attempts in progress now.
  std::int64_t retrying = 0;  ///< Clients inside a retry operation now (in an attempt or asleep).
  std::int64_t alive = 0;     ///< Client loops still running.
  std::map<std::string, std::uint64_t> error_kinds; ///< Failed attempts by error message.
  std::map<long, std::uint64_t> statuses;           ///< HTTP answers by status code.

  /// Clients sleeping in backoff (or waiting for a send token) between attempts.
  std::int64_t waiting() const { return retrying - in_flight; }
  /// Requests that ended without success (the breaker, the budget or a gate said no, or the
  /// deadline passed).
  std::uint64_t failed() const {
    return circuit_open + budget_exhausted + deadline_exceeded + other_failed;
  }
};

/// The error of an attempt answered with a non-2xx HTTP status: the value is the status, the
/// message "HTTP 404".
const std::error_category& http_status_category() noexcept;

/// What one HTTP attempt got: the status and the `Retry-After` header in seconds (0 if none).
struct http_answer {
  long status = 0;
  double retry_after_s = 0;
};

/// One HTTP attempt: returns the answer; throws `std::system_error` when there was none
/// (connection refused, cancelled, ...).
using transport_fn = std::function<asio::awaitable<http_answer>()>;

/// Whether this build has coretry's curl adapter.
bool have_curl_transport() noexcept;

/// The swarm. Lives on one io_context; `start()` spawns the clients, `stop()` cancels them all
/// (their think sleeps, their backoff sleeps through a coretry group token, and their attempts),
/// after which the io_context runs out of the swarm's work.
class swarm {
public:
  /// Throws `std::invalid_argument` for an unknown strategy or an unusable URL.
  swarm(asio::io_context& io, swarm_config config);
  ~swarm();
  swarm(const swarm&) = delete;
  swarm& operator=(const swarm&) = delete;

  void start();
  void stop();
  const swarm_counters& counters() const noexcept { return counters_; }
  const swarm_config& config() const noexcept { return config_; }
  const shared_controls& controls() const noexcept { return controls_; }
  std::string describe() const;

private:
  asio::awaitable<void> client_loop(unsigned index);

  asio::io_context& io_;
  swarm_config config_;
  coretry::backoff backoff_;
  shared_controls controls_;
  swarm_counters counters_;
  coretry::cancellation_source stop_source_;
  bool stopping_ = false;
  std::vector<std::unique_ptr<asio::steady_timer>> think_timers_;
  struct transport_state;
  std::unique_ptr<transport_state> transport_;
};

} // namespace retry_storm
