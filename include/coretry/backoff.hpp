// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Backoff strategies: how long to wait before each retry.

#include <coretry/export.hpp>
#include <coretry/random.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coretry {

using std::chrono::nanoseconds;

/// How randomness is added to a delay `d` taken from the growth curve.
///
/// | kind           | delay                                   | source                         |
/// |----------------|-----------------------------------------|--------------------------------|
/// | `none`         | `d`                                     |                                |
/// | `full`         | `U(0, d)`                               | AWS "full jitter"; "Why Exponential Backoff Needs Jitter" |
/// | `equal`        | `d/2 + U(0, d/2)`                       | AWS "equal jitter"             |
/// | `decorrelated` | `min(max, U(initial, 3 * previous))`    | AWS; `previous` starts at `initial`; ignores the growth curve |
/// | `normal`       | `max(0, d + N(0, (d * relative_stddev)^2))` | proportional normal variate ("Exponential Backoff or how not to crash a server") |
/// | `additive`     | `d + U(0, max_extra)`, or with `truncated` `min(d + U(0, max_extra), max)` | cloud form `2^n s + random_ms` ("Exponential backoff", Memorystore for Redis; "Retry strategy", Cloud Storage) |
enum class jitter_kind : std::uint8_t { none, full, equal, decorrelated, normal, additive };

/// The name of a jitter kind ("none", "full", ...), for flags and reports.
CORETRY_API std::string_view to_string(jitter_kind kind) noexcept;
/// Parses the names printed by `to_string`; `std::nullopt` for anything else.
CORETRY_API std::optional<jitter_kind> parse_jitter_kind(std::string_view name) noexcept;

/// A jitter kind with its parameter. Build it with the named constructors.
struct CORETRY_API jitter {
  /// The kind of jitter.
  jitter_kind kind = jitter_kind::none;
  double relative_stddev = 0.0; ///< `normal` only: standard deviation as a fraction of `d`.
  nanoseconds max_extra{0};     ///< `additive` only: the upper bound of the added uniform delay.
  /// `additive` only: the sum is capped at the curve's `max` too, `min(d + U(0, max_extra), max)`,
  /// the "truncated exponential backoff" of the cloud providers (see `additive_truncated`).
  bool truncated = false;

  /// No jitter: the curve's delay as is.
  static constexpr jitter none() noexcept { return {}; }
  /// Full jitter: uniform in [0, d].
  static constexpr jitter full() noexcept { return {jitter_kind::full}; }
  /// Equal jitter: d/2 plus uniform in [0, d/2].
  static constexpr jitter equal() noexcept { return {jitter_kind::equal}; }
  /// Decorrelated jitter: uniform between the initial delay and three times the previous one, capped.
  static constexpr jitter decorrelated() noexcept { return {jitter_kind::decorrelated}; }
  /// Throws `std::invalid_argument` unless `0 <= relative_stddev <= 10` (and finite).
  static jitter normal(double relative_stddev = 0.1);
  /// Throws `std::invalid_argument` when `max_extra` is negative.
  static jitter additive(nanoseconds max_extra = std::chrono::seconds(1));
  /// `min(d + U(0, max_extra), max)`: additive jitter whose sum never exceeds the curve's cap,
  /// as Google Cloud's "truncated exponential backoff" (`min((2^n + random_number_milliseconds),
  /// maximum_backoff)`) defines it. Throws `std::invalid_argument` when `max_extra` is negative.
  static jitter additive_truncated(nanoseconds max_extra = std::chrono::seconds(1));
};

/// A backoff strategy: a growth curve (fixed, linear or capped exponential) plus a jitter.
///
/// A cheap value type (64 bytes, no allocation), validated when built: every factory throws
/// `std::invalid_argument` naming the parameter and its value when it is out of range. Retries
/// are numbered from 0: `delay(0, ...)` is the wait before the second attempt.
///
/// The growth curve `d(n)` for retry `n`:
///
/// | factory                                 | `d(n)`                              |
/// |-----------------------------------------|-------------------------------------|
/// | `fixed(delay)`                          | `delay`                             |
/// | `linear(initial, step, max)`            | `min(max, initial + n * step)`      |
/// | `exponential(initial, multiplier, max)` | `min(max, initial * multiplier^n)`  |
///
/// Worked example, `exponential(100ms, 2.0, 10s)` (the defaults of `retry_policy` use 32 s):
///
/// | retry n | d(n)   | full jitter  | equal jitter   | normal(0.1), ~95 % of draws | additive(1s)    |
/// |---------|--------|--------------|----------------|-----------------------------|-----------------|
/// | 0       | 100 ms | 0 – 100 ms   | 50 – 100 ms    | 80 – 120 ms                 | 100 – 1100 ms   |
/// | 1       | 200 ms | 0 – 200 ms   | 100 – 200 ms   | 160 – 240 ms                | 200 – 1200 ms   |
/// | 2       | 400 ms | 0 – 400 ms   | 200 – 400 ms   | 320 – 480 ms                | 400 – 1400 ms   |
/// | 3       | 800 ms | 0 – 800 ms   | 400 – 800 ms   | 640 – 960 ms                | 800 – 1800 ms   |
/// | 6       | 6.4 s  | 0 – 6.4 s    | 3.2 – 6.4 s    | 5.1 – 7.7 s                 | 6.4 – 7.4 s     |
/// | 7+      | 10 s   | 0 – 10 s     | 5 – 10 s       | 8 – 12 s                    | 10 – 11 s       |
///
/// Decorrelated jitter with the same parameters draws `U(100ms, 3 * previous)` capped at 10 s:
/// 100–300 ms first, then up to 900 ms, 2.7 s, 8.1 s, 10 s.
class CORETRY_API backoff {
public:
  /// The same delay before every retry. `delay` may be zero (retry at once); negative throws.
  static backoff fixed(nanoseconds delay);
  /// `initial`, `initial + step`, ... up to `max`. Needs `0 <= initial <= max`, `step >= 0`.
  static backoff linear(nanoseconds initial, nanoseconds step, nanoseconds max);
  /// `initial * multiplier^n` up to `max`. Needs `initial > 0`, `1 <= multiplier <= 1000`
  /// (finite), `max >= initial`.
  static backoff exponential(nanoseconds initial, double multiplier = 2.0,
                             nanoseconds max = std::chrono::seconds(32));

  /// A copy with the given jitter. `decorrelated` needs `initial > 0`.
  backoff with_jitter(jitter j) const;

  /// The deterministic growth curve `d(n)`, saturating at `max_delay()`.
  nanoseconds base_delay(unsigned retry) const noexcept;

  /// The jittered delay for retry `retry`; `previous` is the delay returned for the retry before
  /// (ignored unless the jitter is decorrelated; pass `initial()` or zero for the first retry).
  /// Never negative; at most `max_delay()` except for `normal` and (untruncated) `additive` jitter, which are
  /// added on top of the capped curve as their articles define them.
  nanoseconds delay(unsigned retry, nanoseconds previous, fast_rng& rng) const noexcept;

  /// The first delay of the curve.
  nanoseconds initial() const noexcept { return initial_; }
  /// The increment of a linear curve (zero otherwise).
  nanoseconds step() const noexcept { return step_; }
  /// The growth factor of an exponential curve.
  double multiplier() const noexcept { return multiplier_; }
  /// The cap of the curve.
  nanoseconds max_delay() const noexcept { return max_; }
  /// The jitter applied to the curve.
  const coretry::jitter& jitter_spec() const noexcept { return jitter_; }

  /// A one-line description such as "exponential(100ms, x2, max 32s) + full jitter".
  std::string to_string() const;

private:
  enum class curve : std::uint8_t { fixed, linear, exponential };
  backoff(curve c, nanoseconds initial, nanoseconds step, double multiplier, nanoseconds max)
      : curve_(c), initial_(initial), step_(step), multiplier_(multiplier), max_(max) {}

  curve curve_;
  /// `exponential` only: the first retry whose curve value is surely capped, so that most
  /// draws need no power at all and the rest need a few multiplies instead of `std::pow`.
  unsigned capped_from_ = 0;
  nanoseconds initial_;
  nanoseconds step_;
  double multiplier_;
  nanoseconds max_;
  coretry::jitter jitter_;
};

} // namespace coretry
