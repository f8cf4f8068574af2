// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `adaptive_rate_limiter`: a client-side sending rate that backs off when the upstream throttles
/// or times out and probes back up as it answers (the "adaptive" retry mode of the AWS SDKs).

#include <coretry/export.hpp>
#include <coretry/overload.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>

namespace coretry {

/// Settings of an `adaptive_rate_limiter`. The defaults are the constants of the AWS SDKs'
/// adaptive retry mode; rates are in attempts per second.
struct adaptive_rate_options {
  /// Multiplicative decrease: a throttle sets the rate to `beta` x the rate in use. In (0, 1).
  double beta = 0.7;
  /// CUBIC's scale constant C (rate per s^3): how fast the rate climbs back. Positive.
  double scale = 0.4;
  /// Weight of the newest interval in the smoothed measured rate. In (0, 1].
  double smoothing = 0.8;
  /// Length of one interval of the response-rate measurement. Positive.
  std::chrono::nanoseconds measure_interval = std::chrono::milliseconds(500);
  /// The rate never goes below this. Positive.
  double min_rate = 0.5;
  /// The bucket holds at most this much time's worth of tokens (and at least one token): the
  /// burst allowed after a quiet spell. Positive.
  std::chrono::nanoseconds burst = std::chrono::seconds(1);
  /// The rate before the first throttle; 0 (the default): unlimited until then, as in the AWS
  /// SDKs. In [0, 1e9].
  double initial_rate = 0;
  /// The longest wait `acquire` hands out: when the next free token is further away than this,
  /// it reserves nothing and refuses (returns `coretry::unlimited`; the operation stops with
  /// `errc::rate_limited`), so that a limiter at its floor rate never holds reservations for
  /// minutes. Positive.
  std::chrono::nanoseconds max_wait = std::chrono::seconds(10);
};

/// A token bucket whose fill rate follows TCP CUBIC. Shared through `std::shared_ptr` by the
/// operations towards one upstream (`retry_policy::rate_limit`); it paces first attempts and
/// retries alike. See docs/overload.md for the formulas and a worked example.
///
/// - `acquire(now)` takes a token and returns how long the caller must wait before sending
///   (zero: now). The token is reserved: a caller told to wait 40 ms sends in 40 ms without
///   asking again. A wait longer than `max_wait` is refused instead (nothing is reserved).
/// - `release(now)` hands back a token reserved and not sent (the caller gave up or was
///   cancelled): the next caller waits one interval (at the current rate) less.
/// - `on_throttle(now)` (the attempt was throttled or timed out): with `r` the measured response
///   rate (or the current rate, if lower), the rate drops to `max(min_rate, beta * r)`, the
///   bucket's saved tokens are dropped, and `r` becomes the top of the next cubic climb.
/// - `on_success(now)`: the rate becomes `min(W + C (t - K)^3, 2 * measured)` with `W` the rate
///   at the last throttle, `t` the seconds since it and `K = cbrt(W (1 - beta) / C)`: the climb
///   starts at `beta * W`, levels off at `W` after `K` seconds, then rises ever faster; it never
///   runs ahead of twice what the upstream was seen to answer.
///
/// Before the first throttle the limiter only measures (unless `initial_rate` is set).
///
/// Thread-safe and non-blocking: `acquire` is one compare-and-swap on the bucket; `on_throttle`
/// and `on_success` publish their event into atomics and apply it if no other thread is applying
/// events at the moment, else leave it to that thread (which looks again before leaving): no
/// thread ever waits for another. Events applied together are applied in time order, with the
/// throttles of one batch counting as one.
///
/// Throws `std::invalid_argument` naming the field and value when an option is out of range.
class CORETRY_API adaptive_rate_limiter final : public send_rate {
public:
  /// Throws `std::invalid_argument` naming the field when an option is out of range.
  explicit adaptive_rate_limiter(adaptive_rate_options options = {});

  std::chrono::nanoseconds acquire(std::chrono::nanoseconds now) noexcept override;
  void release(std::chrono::nanoseconds now) noexcept override;
  void on_throttle(std::chrono::nanoseconds now) noexcept override;
  void on_success(std::chrono::nanoseconds now) noexcept override;

  /// The current rate (attempts per second); +infinity while unlimited.
  double rate() const noexcept { return rate_.load(std::memory_order_acquire); }
  /// The smoothed response rate measured (responses per second); 0 until an interval has passed.
  double measured_rate() const noexcept { return measured_pub_.load(std::memory_order_relaxed); }
  /// Whether the rate is limited (a throttle was seen, or `initial_rate` was set).
  bool limiting() const noexcept { return rate() != unlimited_rate(); }
  /// Tokens handed out since construction.
  std::uint64_t acquired() const noexcept { return acquired_.load(std::memory_order_relaxed); }
  /// Tokens handed back unused (`release`) since construction.
  std::uint64_t released() const noexcept { return released_.load(std::memory_order_relaxed); }
  /// Waits refused since construction (longer than `adaptive_rate_options::max_wait`).
  std::uint64_t refused() const noexcept { return refused_.load(std::memory_order_relaxed); }
  /// Throttled attempts reported since construction.
  std::uint64_t throttles() const noexcept { return throttles_.load(std::memory_order_relaxed); }
  /// Other attempt outcomes reported since construction.
  std::uint64_t successes() const noexcept { return successes_.load(std::memory_order_relaxed); }

  /// The options it was built with.
  const adaptive_rate_options& options() const noexcept { return options_; }

private:
  static double unlimited_rate() noexcept;
  void apply_pending() noexcept;
  void measure(std::int64_t now_ns, std::uint64_t responses) noexcept;
  void apply_throttle(std::int64_t now_ns) noexcept;
  void apply_success(std::int64_t now_ns) noexcept;

  static constexpr std::int64_t none = std::numeric_limits<std::int64_t>::min();

  adaptive_rate_options options_;
  std::atomic<double> rate_;
  std::atomic<std::int64_t> bucket_; ///< virtual time: tokens = (now - bucket_) / interval
  std::atomic<double> measured_pub_{0};

  // Events waiting to be applied, and the flag of the thread applying them.
  std::atomic<std::uint64_t> pending_responses_{0};
  std::atomic<std::int64_t> pending_throttle_{none}; ///< latest throttle time not yet applied
  std::atomic<std::int64_t> pending_success_{none};  ///< latest success time not yet applied
  std::atomic<bool> applying_{false};

  // Touched only by the thread holding `applying_`.
  double measured_ = 0;
  bool have_measure_ = false;
  std::int64_t measure_bucket_ = none;
  std::uint64_t measure_count_ = 0;
  double last_max_rate_ = 0;
  std::int64_t last_throttle_ = 0;
  double time_window_ = 0; ///< K, seconds

  std::int64_t interval_ns(double rate) const noexcept;

  std::atomic<std::uint64_t> acquired_{0};
  std::atomic<std::uint64_t> released_{0};
  std::atomic<std::uint64_t> refused_{0};
  std::atomic<std::uint64_t> throttles_{0};
  std::atomic<std::uint64_t> successes_{0};
};

} // namespace coretry
