#include <coretry/budget.hpp>

#include <cmath>
#include <stdexcept>
#include <string>

namespace coretry {
namespace {

[[noreturn]] void reject(const char* where, const char* field, double value, const char* rule) {
  throw std::invalid_argument(std::string(where) + ": " + field + " = " + std::to_string(value) +
                              " (" + rule + ")");
}

} // namespace

token_bucket_budget::token_bucket_budget(double max_tokens, double token_ratio) {
  if (!(max_tokens > 0 && max_tokens <= 1'000'000))
    reject("coretry::token_bucket_budget", "max_tokens", max_tokens, "must be in (0, 1e6]");
  if (!(token_ratio > 0 && token_ratio <= max_tokens))
    reject("coretry::token_bucket_budget", "token_ratio", token_ratio,
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

ratio_budget::ratio_budget(double ratio, std::uint64_t min_requests)
    : ratio_(ratio), min_requests_(min_requests) {
  if (!(ratio >= 0 && ratio <= 100))
    reject("coretry::ratio_budget", "ratio", ratio, "must be in [0, 100]");
}

void ratio_budget::on_request(std::chrono::nanoseconds) noexcept {
  requests_.fetch_add(1, std::memory_order_relaxed);
}

bool ratio_budget::try_retry(std::chrono::nanoseconds) noexcept {
  const std::uint64_t requests = requests_.load(std::memory_order_relaxed);
  std::uint64_t retries = retries_.load(std::memory_order_relaxed);
  for (;;) {
    if (requests >= min_requests_ &&
        static_cast<double>(retries + 1) > ratio_ * static_cast<double>(requests))
      return false;
    if (retries_.compare_exchange_weak(retries, retries + 1, std::memory_order_relaxed))
      return true;
  }
}

void ratio_budget::reset() noexcept {
  requests_.store(0, std::memory_order_relaxed);
  retries_.store(0, std::memory_order_relaxed);
}

} // namespace coretry
