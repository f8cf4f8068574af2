// SPDX-License-Identifier: BSL-1.0
#include <coretry/budget.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reject.hpp"
#include "window.hpp"

namespace coretry {
namespace {

using detail::refuse;

} // namespace

token_bucket_budget::token_bucket_budget(double max_tokens, double token_ratio) {
  if (!(max_tokens > 0 && max_tokens <= 1'000'000))
    refuse("coretry::token_bucket_budget", "max_tokens", max_tokens, "must be in (0, 1e6]");
  if (!(token_ratio > 0 && token_ratio <= max_tokens))
    refuse("coretry::token_bucket_budget", "token_ratio", token_ratio,
           "must be in (0, max_tokens]");
  max_ = std::llround(max_tokens * scale);
  ratio_ = std::max<std::int64_t>(1, std::llround(token_ratio * scale));
  tokens_.store(max_, std::memory_order_relaxed);
}

void token_bucket_budget::on_success(std::chrono::nanoseconds) noexcept {
  std::int64_t current = tokens_.load(std::memory_order_relaxed);
  while (current < max_ && !tokens_.compare_exchange_weak(current, std::min(max_, current + ratio_),
                                                          std::memory_order_relaxed)) {
  }
}

void token_bucket_budget::on_failure(std::chrono::nanoseconds) noexcept {
  std::int64_t current = tokens_.load(std::memory_order_relaxed);
  while (current > 0 &&
         !tokens_.compare_exchange_weak(current, std::max<std::int64_t>(0, current - scale),
                                        std::memory_order_relaxed)) {
  }
}

bool token_bucket_budget::try_retry(std::chrono::nanoseconds) noexcept {
  return tokens_.load(std::memory_order_relaxed) * 2 > max_;
}

double token_bucket_budget::tokens() const noexcept {
  return static_cast<double>(tokens_.load(std::memory_order_relaxed)) / scale;
}

ratio_budget::ratio_budget(ratio_budget_options options) : options_(options) {
  constexpr const char* where = "coretry::ratio_budget";
  CORETRY_ALLOW_DEPRECATED_BEGIN
  constexpr unsigned fallback = ratio_budget_options{}.window_buckets;
  if (options.window_buckets != fallback && options.buckets != fallback &&
      options.window_buckets != options.buckets)
    detail::refuse_both(where, "window_buckets", std::to_string(options.window_buckets), "buckets",
                        std::to_string(options.buckets));
  // Both names hold the count in effect, so that `options()` reads alike under either.
  options.window_buckets = options.buckets = detail::window_buckets(options);
  options_ = options;
  CORETRY_ALLOW_DEPRECATED_END
  if (!(options.ratio >= 0 && options.ratio <= 100))
    refuse(where, "ratio", options.ratio, "must be in [0, 100]");
  if (!(options.min_retries_per_second >= 0 && options.min_retries_per_second <= 1e9))
    refuse(where, "min_retries_per_second", options.min_retries_per_second, "must be in [0, 1e9]");
  if (options.window <= std::chrono::nanoseconds::zero())
    refuse(where, "window (ns)", static_cast<double>(options.window.count()), "must be positive");
  if (options.window_buckets < 1 || options.window_buckets > 1000)
    refuse(where, "window_buckets", options.window_buckets, "must be in [1, 1000]");
  const std::chrono::nanoseconds width = options.window / options.window_buckets;
  if (width <= std::chrono::nanoseconds::zero())
    refuse(where, "window_buckets", options.window_buckets,
           "window / window_buckets must be at least 1 ns");
  reserve_ = options.min_retries_per_second * std::chrono::duration<double>(options.window).count();
  requests_ = std::make_unique<detail::window_counter>(width, options.window_buckets);
  retries_ = std::make_unique<detail::window_counter>(width, options.window_buckets);
}

ratio_budget::~ratio_budget() = default;

void ratio_budget::on_request(std::chrono::nanoseconds now) noexcept {
  requests_->add(now);
}

double ratio_budget::allowance(std::chrono::nanoseconds now) const noexcept {
  return options_.ratio * static_cast<double>(requests_->sum(now)) + reserve_;
}

bool ratio_budget::try_retry(std::chrono::nanoseconds now) noexcept {
  // Count first, then look: of two callers racing for the last retry, at least one sees the
  // other's count, so the limit is never exceeded.
  const std::int64_t bucket = retries_->add(now);
  if (static_cast<double>(retries_->sum(now)) <= allowance(now)) {
    granted_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  retries_->undo(bucket);
  refused_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void ratio_budget::refund(std::chrono::nanoseconds granted_at) noexcept {
  retries_->undo(retries_->bucket(granted_at));
}

bool ratio_budget::limits_scheduled_retries() const noexcept {
  return options_.limit_scheduled_retries;
}

std::chrono::nanoseconds ratio_budget::retry_after(std::chrono::nanoseconds now) noexcept {
  // No request earns a retry and the reserve is less than one: no slide of the window can ever
  // make room, so a waiting operation must stop rather than sleep for ever.
  if (options_.ratio == 0 && reserve_ < 1)
    return unlimited;
  const std::chrono::nanoseconds width = options_.window / options_.window_buckets;
  const std::int64_t next = retries_->bucket(now) + 1;
  const std::int64_t edge = next > std::numeric_limits<std::int64_t>::max() / width.count()
                                ? std::numeric_limits<std::int64_t>::max()
                                : next * width.count();
  return std::max(std::chrono::nanoseconds(1), std::chrono::nanoseconds(edge) - now);
}

std::uint64_t ratio_budget::requests(std::chrono::nanoseconds now) const noexcept {
  return requests_->sum(now);
}

std::uint64_t ratio_budget::retries(std::chrono::nanoseconds now) const noexcept {
  return retries_->sum(now);
}

} // namespace coretry
