#pragma once
/// \file
/// Retry budgets: limits shared by many operations so that retries cannot multiply an outage.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace coretry {

/// What a retry loop tells a budget, and asks of it. Implementations are thread-safe and
/// lock-free; share one through `std::shared_ptr` in the `retry_policy` of every operation that
/// calls the same dependency.
///
/// The loop calls `on_request()` once per operation, `on_success()` / `on_failure()` once per
/// attempt outcome, and `try_retry()` before each retry; a `false` there ends the operation with
/// `errc::budget_exhausted` in `retry_stats::reason`.
class retry_budget {
public:
  virtual ~retry_budget() = default;
  // `now`: time since the epoch of the loop's clock (`Timer::clock_type`).
  virtual void on_request(std::chrono::nanoseconds /*now*/) noexcept {}
  virtual void on_success(std::chrono::nanoseconds /*now*/) noexcept {}
  virtual void on_failure(std::chrono::nanoseconds /*now*/) noexcept {}
  virtual bool try_retry(std::chrono::nanoseconds now) noexcept = 0;
};

/// gRPC's retry throttling: a bucket of `max_tokens` tokens, full at the start. Each failed attempt
/// takes one token, each successful attempt gives back `token_ratio`; retries are allowed only
/// while more than half the bucket is left. With the defaults (10, 0.1) retries stop after about
/// 5 failures more than 10 × the successes, and come back as successes refill the bucket.
///
/// Throws `std::invalid_argument` unless `0 < max_tokens <= 1'000'000` and
/// `0 < token_ratio <= max_tokens`.
class token_bucket_budget final : public retry_budget {
public:
  explicit token_bucket_budget(double max_tokens = 10.0, double token_ratio = 0.1);

  void on_success(std::chrono::nanoseconds now) noexcept override;
  void on_failure(std::chrono::nanoseconds now) noexcept override;
  bool try_retry(std::chrono::nanoseconds now) noexcept override;

  /// Current tokens (for reports and tests).
  double tokens() const noexcept;

private:
  // Tokens are kept in thousandths so one atomic integer holds them.
  static constexpr std::int64_t scale = 1000;
  std::int64_t max_;
  std::int64_t ratio_;
  std::atomic<std::int64_t> tokens_;
};

/// The ratio budget of article 001 (Finagle's idea): retries may add at most `ratio` of the
/// requests seen, after a bootstrap of `min_requests` requests during which retries are free.
/// Counts since construction; `reset()` starts a new window.
///
/// Throws `std::invalid_argument` unless `0 <= ratio <= 100`.
class ratio_budget final : public retry_budget {
public:
  explicit ratio_budget(double ratio = 0.1, std::uint64_t min_requests = 100);

  void on_request(std::chrono::nanoseconds now) noexcept override;
  bool try_retry(std::chrono::nanoseconds now) noexcept override;

  std::uint64_t requests() const noexcept { return requests_.load(std::memory_order_relaxed); }
  std::uint64_t retries() const noexcept { return retries_.load(std::memory_order_relaxed); }
  void reset() noexcept;

private:
  double ratio_;
  std::uint64_t min_requests_;
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> retries_{0};
};

} // namespace coretry
