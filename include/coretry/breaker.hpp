// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `circuit_breaker`: stops sending to an upstream that keeps failing, and probes it before
/// sending again.

#include <coretry/export.hpp>
#include <coretry/overload.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

namespace coretry {
namespace detail {
class window_counter;
class call_window;
struct call_window_sums;
} // namespace detail

/// Where a `circuit_breaker` stands.
enum class breaker_state : std::uint8_t {
  closed,    ///< attempts pass; outcomes are watched
  open,      ///< attempts are refused until the break is over
  half_open, ///< a bounded number of probe attempts pass; their outcomes decide
  isolated,  ///< forced open by `isolate()`: every attempt is refused until `reset()`
};

/// "closed", "open", "half_open" or "isolated".
CORETRY_API const char* to_string(breaker_state s) noexcept;

/// Which outcomes a `circuit_breaker`'s ratios (`failure_ratio`, `slow_call_ratio`) look at, as
/// resilience4j's `slidingWindowType`.
enum class sliding_window : std::uint8_t {
  time_based,  ///< the outcomes of the last `circuit_breaker_options::window`
  count_based, ///< the last `circuit_breaker_options::window_calls` outcomes, however old
};

/// "time_based" or "count_based".
CORETRY_API const char* to_string(sliding_window w) noexcept;

/// Settings of a `circuit_breaker`. Each trigger can be switched off (0; the slow-call one by
/// leaving `slow_call_duration` unlimited), not all of them. The defaults of `consecutive_failures`
/// and `break_duration` are the recommended ones (`presets::overload_safe_breaker()`).
CORETRY_ALLOW_DEPRECATED_BEGIN // the implicit members copy `max_in_flight` without a warning
struct circuit_breaker_options {
  /// Opens after this many failures in a row while closed (a success resets the run).
  /// 0: this trigger is off. At most 1,000,000. The default, 10 (5 before 0.3), is the
  /// recommended value: at a 30 % error rate 5 failures in a row come by chance every few hundred
  /// attempts, 10 about once in 170,000, and a stopped upstream's timeouts still come together.
  unsigned consecutive_failures = 10;
  /// Opens when, over the last `window`, failures / (successes + failures) reaches this ratio
  /// with at least `minimum_throughput` outcomes seen. In [0, 1]; 0: this trigger is off.
  double failure_ratio = 0.5;
  /// Outcomes the window must hold before either ratio (`failure_ratio`, `slow_call_ratio`)
  /// applies: resilience4j's `minimumNumberOfCalls`. At least 1. A count window smaller than it
  /// (`window_calls`) is judged once full, as resilience4j does. Both ratios are judged after
  /// every outcome counted while closed.
  unsigned minimum_throughput = 20;
  /// How far back `failure_ratio` looks. Positive.
  std::chrono::nanoseconds window = std::chrono::seconds(10);
  /// How finely the window slides (`window / window_buckets` at a time). In [1, 1000].
  unsigned window_buckets = 10;
  /// Which outcomes the ratios look at: those of the last `window` (`time_based`, the default)
  /// or the last `window_calls` outcomes (`count_based`, resilience4j's default), however old.
  sliding_window window_type = sliding_window::time_based;
  /// How many outcomes a count-based window holds: the (N+1)-th newest is forgotten. In
  /// [1, 100000]. Unused by a time-based window.
  unsigned window_calls = 100;
  /// A healthy attempt that took longer than this, from its grant to its outcome, is a slow call
  /// (resilience4j's `slowCallDurationThreshold`): the upstream answers, but too slowly (a
  /// brownout). `coretry::unlimited` (the default): no call is slow, and
  /// this trigger is off. Positive.
  std::chrono::nanoseconds slow_call_duration = unlimited;
  /// Opens when slow calls / outcomes in the window reach this ratio, with at least
  /// `minimum_throughput` outcomes (resilience4j's `slowCallRateThreshold`). In (0, 1]; used only
  /// with a `slow_call_duration`.
  double slow_call_ratio = 1.0;
  /// How long the breaker stays open before it lets probes through. Positive. The default, 1 s
  /// (5 s before 0.3), is the recommended value: a short break probes a recovered upstream soon,
  /// and a failed probe opens the breaker again at once.
  std::chrono::nanoseconds break_duration = std::chrono::seconds(1);
  /// Each break lasts `break_duration * u`, u uniform in [1 - break_jitter, 1 + break_jitter],
  /// so that clients which opened together do not probe together. In [0, 1).
  double break_jitter = 0.2;
  /// Probe attempts let through at once while half-open; that many successes close the breaker.
  /// In [1, 65535].
  unsigned half_open_probes = 1;
  /// Slow start after closing: for this long after the breaker closes again, an attempt passes
  /// with probability `t / ramp` (`t` the time since it closed), so that operations waiting
  /// for it (`on_open::wait`) and new traffic reach a recovering upstream gradually, not at
  /// one instant. A refused attempt fails with `errc::circuit_open`, or waits again. Zero (the
  /// default): no ramp, every attempt passes once closed. Not negative.
  std::chrono::nanoseconds ramp = std::chrono::nanoseconds::zero();
  /// How long an operation waiting for the breaker (`on_open::wait`) waits after a refusal
  /// while half-open or ramping, jittered to `retry_interval * u`, u uniform in [0.5, 1.5]; and
  /// how widely waiters are spread past the end of a break (`open_until() + retry_interval * u`,
  /// u uniform in [0, 1]), so that they do not all ask at the same instant. Positive.
  std::chrono::nanoseconds retry_interval = std::chrono::milliseconds(100);
  /// 0.2's name of `max_concurrent_calls`, in its place (a positional initializer keeps its
  /// meaning); read only while `max_concurrent_calls` is left at its default (0), so it wins over
  /// a `max_concurrent_calls` set to 0 too. Set both to different non-zero values and the breaker
  /// refuses the options (`std::invalid_argument` naming both).
  [[deprecated("use max_concurrent_calls")]] unsigned max_in_flight = 0;
  /// The breaker's own health classification of an attempt's outcome (`attempt_gate::classify`),
  /// apart from what the policy retries: what it counts as a failure (`health::unhealthy`), a
  /// push-back, or healthy. Empty (the default): `default_health`, which counts transport
  /// failures, timeouts, rejected results without a health code and HTTP 5xx as failures, an
  /// HTTP 429 as a push-back, an HTTP 4xx otherwise and an HTTP 1xx to 3xx (even one the policy
  /// rejected, a "202 pending") as healthy. A success reaches it as no error, whatever status
  /// the attempt gave as its health code. It may throw (the attempt is then abandoned and the
  /// operation ends with what was thrown). Polly's `ShouldHandle`, resilience4j's
  /// `recordExceptions`.
  std::function<health(const std::error_code&)> classify{};
  /// Seed of the break jitter (and of the ramp and the waiters' jitter); unset, one is drawn
  /// from entropy.
  std::optional<std::uint64_t> seed{};
  /// Called on every change of state, by the thread that made it, after it is visible. Must not
  /// throw (the breaker's members are `noexcept`) and should be quick: it runs inside the
  /// attempt that caused the change.
  std::function<void(breaker_state from, breaker_state to, std::chrono::nanoseconds now)>
      on_transition{};
  /// Concurrency limit (a bulkhead): at most this many granted attempts without an outcome yet,
  /// in every state; one more is refused (`errc::circuit_open`, or a wait of `retry_interval`
  /// under `on_open::wait`) and counted in `in_flight_refusals()`. It bounds what an upstream
  /// that stopped answering receives before the first timeouts open the breaker: without it,
  /// every request of the detection window (the attempt timeout) is sent and queued there.
  /// Size it above the attempts normally in flight (request rate × latency) with room for bursts
  /// and slow periods. 0 (the default): no limit. At most 1,000,000. resilience4j's bulkhead
  /// `maxConcurrentCalls`; 0.2 called it `max_in_flight`. Last, after the fields that were there
  /// before it: in a designated initializer it comes after `on_transition`.
  unsigned max_concurrent_calls = 0;
};
CORETRY_ALLOW_DEPRECATED_END

namespace detail {
/// The bulkhead limit `o` asks for: `max_concurrent_calls`, or the deprecated `max_in_flight`
/// while `max_concurrent_calls` is 0. The library's one read of `max_in_flight`.
inline unsigned max_concurrent_calls(const circuit_breaker_options& o) noexcept {
  CORETRY_ALLOW_DEPRECATED_BEGIN
  return o.max_concurrent_calls != 0 ? o.max_concurrent_calls : o.max_in_flight;
  CORETRY_ALLOW_DEPRECATED_END
}
} // namespace detail

/// A circuit breaker, shared through `std::shared_ptr` by every operation towards one upstream
/// (`retry_policy::breaker`).
///
/// - **closed**: every attempt passes. After `consecutive_failures` failures in a row, or when
///   the failure ratio over the last `window` reaches `failure_ratio` with at least
///   `minimum_throughput` outcomes, it opens.
/// - **open**: `try_acquire` refuses (the loop then stops with `errc::circuit_open`, sending
///   nothing, or waits under `on_open::wait`) until the break, `break_duration` jittered, is over; the first `try_acquire` after
///   that moves to half-open and is the first probe.
/// - **half_open**: up to `half_open_probes` attempts in flight; each success counts and frees
///   its slot, `half_open_probes` successes close the breaker (with an empty window and run of
///   failures); one failure opens it again for a new jittered break; an abandoned attempt frees
///   its slot and counts for nothing. The gate does not know which attempt an outcome belongs
///   to: an outcome reported while half-open counts as a probe's, even for an attempt granted
///   before the breaker opened (a late success closes it a little early; a late failure keeps it
///   open a little longer).
/// - **slow calls** (when `slow_call_duration` is set): a healthy outcome reported through
///   `on_outcome` with a duration above `slow_call_duration` is a slow call. While closed it
///   counts as a success (it ends the run of failures) and as slow in the window; the breaker
///   opens when slow calls reach `slow_call_ratio` of the window's outcomes (with at least
///   `minimum_throughput` of them). While half-open a slow probe opens the breaker again, as a
///   failed one does. `on_success` called directly is never slow (it has no duration).
/// - **count-based window** (`window_type = sliding_window::count_based`): the ratios look at
///   the last `window_calls` outcomes instead of the last `window`.
/// - **push-back** (`on_pushback`: an HTTP 429 or an answer carrying `Retry-After`, see
///   `retry_policy::pushback_if`): the upstream answered and asked for less traffic; the loop
///   honours its hint, and the breaker counts it as neither failure nor success.
/// - **bulkhead** (when `max_concurrent_calls` is set): in every state, an attempt is refused
///   while that many granted attempts have no outcome yet.
/// - **ramp** (when `ramp` is set): for `ramp` after closing, the breaker is closed but lets
///   an attempt through with probability rising linearly from 0 to 1.
///
/// An operation that waits instead of failing (`retry_policy::when_open = on_open::wait`) asks
/// `retry_after` after a refusal: while open, until the end of the break plus a jitter of up to
/// `retry_interval`; while half-open or ramping, `retry_interval` jittered; while isolated,
/// `coretry::unlimited` ("cannot say when": only `reset` ends an isolation, so a waiting
/// operation stops at once).
///
/// - **isolated** (manual control, as Polly's `Isolate` and resilience4j's forced-open state):
///   `isolate(now)` refuses every attempt, whatever the outcomes and the time, until
///   `reset(now)`; `reset(now)` closes the breaker from any state with its window and run of
///   failures cleared, and the ramp started afresh. Both call `on_transition` when the state changes (`reset` of a closed
///   breaker only clears the counts). Outcomes of attempts granted before an isolation count for
///   nothing but the totals.
///
/// Outcomes reported while open change nothing but the counts. `state()` is the stored state:
/// a breaker whose break is over reads `open` until the next `try_acquire`.
///
/// Every member is thread-safe, lock-free and `noexcept`; `now` is the time since the epoch of
/// the caller's clock (the loop passes `Timer::clock_type::now().time_since_epoch()`), and is
/// never read inside, so tests drive it with exact values. The whole state machine lives in one
/// atomic word (state plus, when closed, the run of failures; when open, the end of the break;
/// when half-open, the probes in flight and their successes), changed by compare-and-swap.
///
/// Throws `std::invalid_argument` naming the field and value when an option is out of range.
class CORETRY_API circuit_breaker final : public attempt_gate {
public:
  /// A closed breaker; throws `std::invalid_argument` when an option is out of range.
  explicit circuit_breaker(circuit_breaker_options options = {});
  ~circuit_breaker() override;
  circuit_breaker(const circuit_breaker&) = delete;
  circuit_breaker& operator=(const circuit_breaker&) = delete;

  /// May an attempt be sent at `now`? Counts a refusal when not.
  bool try_acquire(std::chrono::nanoseconds now) noexcept override;
  void on_success(std::chrono::nanoseconds now) noexcept override;
  void on_failure(std::chrono::nanoseconds now) noexcept override;
  void on_abandoned(std::chrono::nanoseconds now) noexcept override;
  /// As `attempt_gate::on_outcome`, and a healthy outcome whose `duration` is above
  /// `slow_call_duration` is a slow call (see the class comment).
  void on_outcome(health h, std::chrono::nanoseconds now,
                  std::chrono::nanoseconds duration) noexcept override;
  /// A push-back (an HTTP 429, an answer with `Retry-After`): neither a failure nor a success.
  /// It leaves the run of failures and the window alone and, while half-open, frees its probe
  /// slot as an abandoned attempt does; counted in `pushbacks()`.
  void on_pushback(std::chrono::nanoseconds now) noexcept override;
  /// `options().classify(ec)` when set, else `default_health(ec)`.
  health classify(const std::error_code& ec) const override;
  /// After a refusal at `now`: how long a waiting operation should wait before asking again
  /// (always positive; see the class comment).
  std::chrono::nanoseconds retry_after(std::chrono::nanoseconds now) noexcept override;

  /// Forces the breaker open until `reset`: every `try_acquire` is refused (and counted as a
  /// refusal); `state()` reads `isolated`. Calls `on_transition(from, isolated, now)` unless it
  /// was isolated already.
  void isolate(std::chrono::nanoseconds now) noexcept;
  /// Closes the breaker from any state (isolated included), with an empty window and run of
  /// failures; probes in flight are forgotten (their outcomes then count as a closed breaker's).
  /// Closing from another state starts the `ramp` at `now`, as a probe's closing does, so an
  /// operator's reset after an isolation does not release every waiter at once. Calls
  /// `on_transition(from, closed, now)` unless it was closed already (a closed breaker keeps its
  /// ramp).
  void reset(std::chrono::nanoseconds now) noexcept;

  /// The current state.
  breaker_state state() const noexcept;
  /// While open: when the break ends (time since the clock's epoch). Otherwise zero.
  std::chrono::nanoseconds open_until() const noexcept;
  /// While half-open: probes granted and not yet reported. Otherwise zero.
  unsigned probes_in_flight() const noexcept;
  /// While closed: the current run of failures. Otherwise zero.
  unsigned failure_run() const noexcept;
  /// Successes in the window ending at `now` (counted while closed only; a count-based window
  /// ignores `now`).
  std::uint64_t window_successes(std::chrono::nanoseconds now) const noexcept;
  /// Failures in the window ending at `now` (counted while closed only; a count-based window
  /// ignores `now`).
  std::uint64_t window_failures(std::chrono::nanoseconds now) const noexcept;

  /// Slow calls in the window ending at `now` (counted while closed only; a count-based window
  /// ignores `now`).
  std::uint64_t window_slow_calls(std::chrono::nanoseconds now) const noexcept;
  /// Slow calls reported since construction (also counted in `successes()`).
  std::uint64_t slow_calls() const noexcept { return slow_calls_.load(std::memory_order_relaxed); }

  /// Totals since construction.
  std::uint64_t successes() const noexcept { return successes_.load(std::memory_order_relaxed); }
  /// Failures reported since construction.
  std::uint64_t failures() const noexcept { return failures_.load(std::memory_order_relaxed); }
  /// Push-backs reported since construction (`on_pushback`).
  std::uint64_t pushbacks() const noexcept { return pushbacks_.load(std::memory_order_relaxed); }
  /// Granted attempts without an outcome yet (counted only with `max_concurrent_calls`).
  unsigned in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }
  /// Attempts refused by `max_concurrent_calls` since construction (also counted in `refusals()`).
  std::uint64_t in_flight_refusals() const noexcept {
    return in_flight_refusals_.load(std::memory_order_relaxed);
  }
  /// Granted attempts abandoned since construction.
  std::uint64_t abandoned() const noexcept { return abandoned_.load(std::memory_order_relaxed); }
  /// Attempts refused since construction.
  std::uint64_t refusals() const noexcept { return refusals_.load(std::memory_order_relaxed); }
  /// Times the breaker opened since construction.
  std::uint64_t times_opened() const noexcept { return opened_.load(std::memory_order_relaxed); }
  /// Times the breaker went half-open since construction.
  std::uint64_t times_half_opened() const noexcept {
    return half_opened_.load(std::memory_order_relaxed);
  }
  /// Attempts the ramp refused since construction (also counted in `refusals()`).
  std::uint64_t ramp_refusals() const noexcept {
    return ramp_refusals_.load(std::memory_order_relaxed);
  }
  /// Times `isolate` isolated it since construction.
  std::uint64_t times_isolated() const noexcept {
    return isolated_.load(std::memory_order_relaxed);
  }
  /// Times the breaker closed again since construction (by probes or by `reset`).
  std::uint64_t times_closed() const noexcept { return closed_.load(std::memory_order_relaxed); }

  /// The options it was built with.
  const circuit_breaker_options& options() const noexcept { return options_; }

private:
  std::chrono::nanoseconds draw_break() noexcept;
  bool ratio_tripped(std::chrono::nanoseconds now) const noexcept;
  bool slow_tripped(std::chrono::nanoseconds now) const noexcept;
  detail::call_window_sums window_sums(std::chrono::nanoseconds now) const noexcept;
  void count_outcome(std::chrono::nanoseconds now, bool failure, bool slow) noexcept;
  void clear_window() noexcept;
  void succeed(std::chrono::nanoseconds now, bool slow) noexcept;
  void trip(std::chrono::nanoseconds now) noexcept;
  double draw_uniform(double lo, double hi) noexcept;
  bool ramp_admits(std::chrono::nanoseconds now) noexcept;
  void transition(breaker_state from, breaker_state to, std::chrono::nanoseconds now) noexcept;
  bool acquire_state(std::chrono::nanoseconds now) noexcept;
  void release_slot() noexcept;
  void free_probe() noexcept;

  circuit_breaker_options options_;
  std::atomic<std::uint64_t> word_;
  std::atomic<std::uint64_t> rng_;
  /// When the breaker last closed (ns since the clock's epoch), for the ramp.
  std::atomic<std::int64_t> closed_at_;
  std::unique_ptr<detail::window_counter> window_successes_;
  std::unique_ptr<detail::window_counter> window_failures_;
  std::unique_ptr<detail::window_counter> window_slow_;
  std::unique_ptr<detail::call_window> calls_; ///< the count-based window, when chosen
  std::atomic<std::uint64_t> successes_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::atomic<std::uint64_t> abandoned_{0};
  std::atomic<std::uint64_t> refusals_{0};
  std::atomic<std::uint64_t> opened_{0};
  std::atomic<std::uint64_t> half_opened_{0};
  std::atomic<std::uint64_t> closed_{0};
  std::atomic<std::uint64_t> ramp_refusals_{0};
  std::atomic<std::uint64_t> isolated_{0};
  std::atomic<std::uint64_t> pushbacks_{0};
  std::atomic<std::uint64_t> in_flight_refusals_{0};
  std::atomic<std::uint64_t> slow_calls_{0};
  std::atomic<unsigned> in_flight_{0};
};

} // namespace coretry
