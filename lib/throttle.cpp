// SPDX-License-Identifier: BSL-1.0
#include <coretry/random.hpp>
#include <coretry/throttle.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "reject.hpp"
#include "window.hpp"

namespace coretry {
namespace {

using std::chrono::nanoseconds;

[[noreturn]] void reject(const char* field, double value, const char* rule) {
  detail::refuse("coretry::adaptive_throttle_options", field, value, rule);
}

} // namespace

adaptive_throttle::adaptive_throttle(adaptive_throttle_options options)
    : options_(std::move(options)),
      rng_(options_.seed ? *options_.seed : fast_rng::from_entropy()()) {
  const auto& o = options_;
  if (!(o.k >= 1 && o.k <= 1e6))
    reject("k", o.k, "must be in [1, 1e6]");
  if (o.window <= nanoseconds::zero())
    reject("window (ns)", static_cast<double>(o.window.count()), "must be positive");
  if (o.window_buckets < 1 || o.window_buckets > 1000)
    reject("window_buckets", o.window_buckets, "must be in [1, 1000]");
  if (o.window / o.window_buckets <= nanoseconds::zero())
    reject("window_buckets", o.window_buckets, "window / window_buckets must be at least 1 ns");
  requests_ =
      std::make_unique<detail::window_counter>(o.window / o.window_buckets, o.window_buckets);
  accepts_ =
      std::make_unique<detail::window_counter>(o.window / o.window_buckets, o.window_buckets);
}

adaptive_throttle::~adaptive_throttle() = default;

double adaptive_throttle::rejection_probability(nanoseconds now) const noexcept {
  // Requests first (and `on_success` counts the request first): an outcome counted between the
  // two reads shows at most in `accepts`, and the estimate errs towards letting through.
  const auto r = static_cast<double>(requests_->sum(now));
  const auto a = static_cast<double>(accepts_->sum(now));
  return std::max(0.0, (r - options_.k * a) / (r + 1));
}

bool adaptive_throttle::try_acquire(nanoseconds now) noexcept {
  const double p = rejection_probability(now);
  if (p > 0) {
    // One SplitMix64 step per draw, taken with fetch_add: safe from any thread, and the stream
    // of a `fast_rng` seeded with `seed` on one.
    fast_rng draw(rng_.fetch_add(0x9e3779b97f4a7c15ull, std::memory_order_relaxed));
    if (draw.uniform() < p) {
      requests_->add(now);
      rejected_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }
  granted_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void adaptive_throttle::on_success(nanoseconds now) noexcept {
  requests_->add(now);
  accepts_->add(now);
}

void adaptive_throttle::on_failure(nanoseconds now) noexcept {
  requests_->add(now);
}

void adaptive_throttle::on_abandoned(nanoseconds) noexcept {}

health adaptive_throttle::classify(const std::error_code& ec) const {
  return options_.classify ? options_.classify(ec) : default_health(ec);
}

std::uint64_t adaptive_throttle::requests(nanoseconds now) const noexcept {
  return requests_->sum(now);
}

std::uint64_t adaptive_throttle::accepts(nanoseconds now) const noexcept {
  return accepts_->sum(now);
}

} // namespace coretry
