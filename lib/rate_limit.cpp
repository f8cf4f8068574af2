// SPDX-License-Identifier: BSL-1.0
#include <coretry/rate_limit.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reject.hpp"
#include "saturate.hpp"

namespace coretry {
namespace {

using detail::add_sat;
using detail::ns_sat;
using detail::sub_sat;
using std::chrono::nanoseconds;

[[noreturn]] void reject(const char* field, double value, const char* rule) {
  detail::refuse("coretry::adaptive_rate_options", field, value, rule);
}

constexpr double ns_per_s = 1e9;

// Stores `t` into `a` unless `a` already holds a later time.
void store_max(std::atomic<std::int64_t>& a, std::int64_t t) noexcept {
  std::int64_t cur = a.load(std::memory_order_relaxed);
  while (cur < t &&
         !a.compare_exchange_weak(cur, t, std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
}

} // namespace

double adaptive_rate_limiter::unlimited_rate() noexcept {
  return std::numeric_limits<double>::infinity();
}

adaptive_rate_limiter::adaptive_rate_limiter(adaptive_rate_options options)
    : options_(options), rate_(unlimited_rate()),
      // A bucket full since the dawn of time: a first burst passes at once.
      bucket_(std::numeric_limits<std::int64_t>::min() / 2) {
  const auto& o = options_;
  if (!(o.beta > 0 && o.beta < 1))
    reject("beta", o.beta, "must be in (0, 1)");
  if (!(o.scale > 0 && o.scale <= 1e9))
    reject("scale", o.scale, "must be in (0, 1e9]");
  if (!(o.smoothing > 0 && o.smoothing <= 1))
    reject("smoothing", o.smoothing, "must be in (0, 1]");
  if (o.measure_interval <= nanoseconds::zero())
    reject("measure_interval (ns)", static_cast<double>(o.measure_interval.count()),
           "must be positive");
  if (!(o.min_rate > 0 && o.min_rate <= 1e9))
    reject("min_rate", o.min_rate, "must be in (0, 1e9]");
  if (o.burst <= nanoseconds::zero())
    reject("burst (ns)", static_cast<double>(o.burst.count()), "must be positive");
  if (!(o.initial_rate >= 0 && o.initial_rate <= 1e9))
    reject("initial_rate", o.initial_rate, "must be in [0, 1e9]");
  if (o.max_wait <= nanoseconds::zero())
    reject("max_wait (ns)", static_cast<double>(o.max_wait.count()), "must be positive");
  if (o.initial_rate > 0)
    rate_.store(std::max(o.initial_rate, o.min_rate), std::memory_order_relaxed);
}

// Nanoseconds between tokens at `rate`, saturating: a rate below ~1e-10/s needs more than
// int64 nanoseconds, and must not wrap to a tiny interval.
std::int64_t adaptive_rate_limiter::interval_ns(double rate) const noexcept {
  return std::max<std::int64_t>(1, ns_sat(ns_per_s / rate).count());
}

nanoseconds adaptive_rate_limiter::acquire(nanoseconds now) noexcept {
  const double r = rate_.load(std::memory_order_acquire);
  if (r == unlimited_rate()) {
    acquired_.fetch_add(1, std::memory_order_relaxed);
    return nanoseconds::zero();
  }
  // Virtual scheduling: the bucket holds (now - bucket_) / interval tokens, at most `cap` worth.
  const std::int64_t interval = interval_ns(r);
  const std::int64_t cap = std::max(interval, options_.burst.count());
  const std::int64_t t = now.count();
  std::int64_t b = bucket_.load(std::memory_order_relaxed);
  std::int64_t next = 0;
  do {
    next = add_sat(std::max(b, sub_sat(t, cap)), interval);
    // This caller's token is due at `next`.
    if (sub_sat(next, t) > options_.max_wait.count()) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return unlimited;
    }
  } while (!bucket_.compare_exchange_weak(b, next, std::memory_order_acq_rel,
                                          std::memory_order_relaxed));
  acquired_.fetch_add(1, std::memory_order_relaxed);
  return nanoseconds(std::max<std::int64_t>(0, sub_sat(next, t)));
}

void adaptive_rate_limiter::release(nanoseconds now) noexcept {
  released_.fetch_add(1, std::memory_order_relaxed);
  const double r = rate_.load(std::memory_order_acquire);
  if (r == unlimited_rate())
    return;
  // Moves the bucket back by one interval at today's rate (the token's own may have been
  // another), never below where `acquire` would put it anyway.
  const std::int64_t interval = interval_ns(r);
  const std::int64_t floor = sub_sat(now.count(), std::max(interval, options_.burst.count()));
  std::int64_t b = bucket_.load(std::memory_order_relaxed);
  std::int64_t next = 0;
  do {
    next = std::max(sub_sat(b, interval), floor);
    if (next >= b)
      return;
  } while (!bucket_.compare_exchange_weak(b, next, std::memory_order_acq_rel,
                                          std::memory_order_relaxed));
}

void adaptive_rate_limiter::on_throttle(nanoseconds now) noexcept {
  throttles_.fetch_add(1, std::memory_order_relaxed);
  // Saved tokens go at once: an upstream that throttles is no place for a burst.
  store_max(bucket_, now.count());
  pending_responses_.fetch_add(1, std::memory_order_seq_cst);
  store_max(pending_throttle_, now.count());
  apply_pending();
}

void adaptive_rate_limiter::on_success(nanoseconds now) noexcept {
  successes_.fetch_add(1, std::memory_order_relaxed);
  pending_responses_.fetch_add(1, std::memory_order_seq_cst);
  store_max(pending_success_, now.count());
  apply_pending();
}

void adaptive_rate_limiter::apply_pending() noexcept {
  // Whoever finds the flag clear applies every pending event; whoever finds it set leaves its
  // event (already published above) to the holder, who looks again after clearing the flag. The
  // flag is only ever tried, never waited for.
  while (!applying_.exchange(true, std::memory_order_seq_cst)) {
    const std::uint64_t n = pending_responses_.exchange(0, std::memory_order_seq_cst);
    const std::int64_t tt = pending_throttle_.exchange(none, std::memory_order_seq_cst);
    const std::int64_t ts = pending_success_.exchange(none, std::memory_order_seq_cst);
    if (n > 0 || tt != none || ts != none) {
      measure(std::max(tt, ts), n);
      if (ts != none && (tt == none || ts < tt))
        apply_success(ts);
      if (tt != none)
        apply_throttle(tt);
      if (ts != none && tt != none && ts >= tt)
        apply_success(ts);
    }
    applying_.store(false, std::memory_order_seq_cst);
    if (pending_responses_.load(std::memory_order_seq_cst) == 0 &&
        pending_throttle_.load(std::memory_order_seq_cst) == none &&
        pending_success_.load(std::memory_order_seq_cst) == none)
      return;
  }
}

void adaptive_rate_limiter::measure(std::int64_t now_ns, std::uint64_t responses) noexcept {
  if (now_ns == none) {
    // A response published its count but not yet its time: count it, it will bring its time.
    measure_count_ += responses;
    return;
  }
  const std::int64_t width = options_.measure_interval.count();
  const std::int64_t k = now_ns >= 0 ? now_ns / width : -((-now_ns + width - 1) / width);
  if (measure_bucket_ == none) {
    measure_bucket_ = k;
    measure_count_ = responses;
    return;
  }
  if (k <= measure_bucket_) {
    measure_count_ += responses;
    return;
  }
  // The responses since the start of interval `measure_bucket_`, over the time to interval k.
  const double span =
      static_cast<double>(k - measure_bucket_) * static_cast<double>(width) / ns_per_s;
  const double current = static_cast<double>(measure_count_) / span;
  measured_ =
      have_measure_ ? options_.smoothing * current + (1 - options_.smoothing) * measured_ : current;
  have_measure_ = true;
  measured_pub_.store(measured_, std::memory_order_relaxed);
  measure_bucket_ = k;
  measure_count_ = responses;
}

void adaptive_rate_limiter::apply_throttle(std::int64_t now_ns) noexcept {
  const double current = rate_.load(std::memory_order_relaxed);
  double in_use = current;
  if (have_measure_)
    in_use = std::min(measured_, current);
  if (in_use == unlimited_rate()) // no measure and no rate yet: nothing to go by
    in_use = options_.min_rate / options_.beta;
  last_max_rate_ = in_use;
  last_throttle_ = now_ns;
  time_window_ = std::cbrt(in_use * (1 - options_.beta) / options_.scale);
  rate_.store(std::max(options_.min_rate, in_use * options_.beta), std::memory_order_release);
}

void adaptive_rate_limiter::apply_success(std::int64_t now_ns) noexcept {
  if (last_max_rate_ == 0)
    return; // no throttle yet: unlimited, or the fixed initial rate
  const double t = static_cast<double>(now_ns - last_throttle_) / ns_per_s;
  const double d = t - time_window_;
  double next = options_.scale * d * d * d + last_max_rate_;
  if (have_measure_)
    next = std::min(next, 2 * measured_);
  rate_.store(std::max(options_.min_rate, next), std::memory_order_release);
}

} // namespace coretry
