// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Retry budgets: limits shared by many operations so that retries cannot multiply an outage.

#include <coretry/export.hpp>
#include <coretry/limits.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace coretry {
namespace detail {
class window_counter;
} // namespace detail

/// What a retry loop tells a budget, and asks of it. Implementations are thread-safe and
/// lock-free; share one through `std::shared_ptr` in the `retry_policy` of every operation that
/// calls the same dependency.
///
/// The loop calls `on_request()` once per operation, `on_success()` / `on_failure()` once per
/// attempt outcome, and `try_retry()` before each retry (but one a rate limiter invited, unless
/// `limits_scheduled_retries()` says so); a `false` there ends the operation with
/// `errc::budget_exhausted` in `retry_stats::reason`. A retry granted and then not sent (the
/// breaker refused it, the deadline or a cancellation stopped the operation first) is handed
/// back with `refund(granted_at)`, exactly once, so that it spends nothing.
class CORETRY_API retry_budget {
public:
  virtual ~retry_budget() = default;
  // `now`: time since the epoch of the loop's clock (`Timer::clock_type`).
  /// Once per operation.
  virtual void on_request(std::chrono::nanoseconds /*now*/) noexcept {}
  /// An attempt succeeded.
  virtual void on_success(std::chrono::nanoseconds /*now*/) noexcept {}
  /// An attempt failed.
  virtual void on_failure(std::chrono::nanoseconds /*now*/) noexcept {}
  /// Before each retry: whether it may be sent.
  virtual bool try_retry(std::chrono::nanoseconds now) noexcept = 0;
  /// Takes back a retry `try_retry(granted_at)` granted that was not sent. The default does
  /// nothing.
  virtual void refund(std::chrono::nanoseconds /*granted_at*/) noexcept {}
  /// 0.2's name for `coretry::unlimited` as `retry_after`'s answer "cannot say when".
  [[deprecated("use coretry::unlimited")]] static constexpr std::chrono::nanoseconds never =
      unlimited;
  /// Asked after `try_retry` refused at `now` by an operation willing to wait
  /// (`retry_policy::when_open = on_open::wait`): how long until the budget may have room again,
  /// as a positive duration. The operation sleeps that long (jittered up by as much as half
  /// again), holding nothing, then asks `try_retry` again. `coretry::unlimited` (the default: the
  /// budget cannot say when), zero or a negative value: it stops with `errc::budget_exhausted`
  /// at once.
  virtual std::chrono::nanoseconds retry_after(std::chrono::nanoseconds /*now*/) noexcept {
    return unlimited;
  }
  /// Whether a retry a rate limiter invited needs this budget's grant: one after an answer in
  /// `coretry::condition::pushback` (an HTTP 429, as the attempt's health code or error) that
  /// carried a `Retry-After` hint (`attempt_context::retry_after`, more than zero) and that no
  /// timer cut; the loop waits at least the hint. A hint on any other failure (a 503 with
  /// `Retry-After`: an overloaded upstream) is no invitation: its retry is asked as any other.
  /// The default (true) asks the budget for every retry, as gRFC A6's retry throttling does
  /// (`token_bucket_budget`); `ratio_budget` lets invited retries through uncounted unless
  /// `ratio_budget_options::limit_scheduled_retries` is set. A hedge asks the budget for every
  /// copy and retry: it does not wait for hints.
  virtual bool limits_scheduled_retries() const noexcept { return true; }
};

/// gRPC's retry throttling: a bucket of `max_tokens` tokens, full at the start. Each failed attempt
/// takes one token, each successful attempt gives back `token_ratio`; retries are allowed only
/// while more than half the bucket is left. With the defaults (10, 0.1) retries stop after about
/// 5 failures more than 10 × the successes, and come back as successes refill the bucket.
///
/// Throws `std::invalid_argument` unless `0 < max_tokens <= 1'000'000` and
/// `0 < token_ratio <= max_tokens`.
class CORETRY_API token_bucket_budget final : public retry_budget {
public:
  /// A full bucket of `max_tokens`; throws `std::invalid_argument` unless `0 < token_ratio <= max_tokens`.
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

/// Settings of a `ratio_budget`; the defaults are Finagle's window and reserve with the 10 %
/// share that "Preventing Retry Storms: Exponential Backoff and Jitter Design" recommends.
CORETRY_ALLOW_DEPRECATED_BEGIN // the implicit members copy `buckets` without a warning
struct ratio_budget_options {
  /// Retries allowed per request seen in the window. In [0, 100].
  double ratio = 0.1;
  /// Retries allowed per second of window whatever the traffic, so that a quiet client can still
  /// retry. In [0, 1e9]. The default, 10, is a per-process reserve (Finagle's default);
  /// `presets::overload_safe_budget()` keeps 1, for a fleet whose reserves add up.
  double min_retries_per_second = 10.0;
  /// How far back requests and retries are remembered. Positive.
  std::chrono::nanoseconds window = std::chrono::seconds(10);
  /// 0.2's name of `window_buckets`, in its 0.2 place (a positional initializer keeps its
  /// meaning); read only while `window_buckets` is left at its default (10), so it wins over a
  /// `window_buckets` set to 10 too. Set both to different values other than 10 and the budget
  /// refuses the options (`std::invalid_argument` naming both).
  [[deprecated("use window_buckets")]] unsigned buckets = 10;
  /// Whether a retry a rate limiter invited (an HTTP 429 with `Retry-After`, waited; see
  /// `retry_budget::limits_scheduled_retries`) is asked of this budget too. False (the default):
  /// it goes through uncounted, since the budget bounds the retries clients decide on their own,
  /// and a rate limiter that names a time has said when it takes the request; the hint paces
  /// them, and `max_attempts` and the deadline bound them. True: every retry counts, as
  /// Finagle's budget counts them. Retries after a 503 with `Retry-After` always count.
  bool limit_scheduled_retries = false;
  /// How finely the window slides: it moves on by `window / window_buckets` at a time. In
  /// [1, 1000], and `window / window_buckets` must be at least 1 ns. The name the breaker and the
  /// throttle use for the same thing; 0.2 called it `buckets`. Last, after the fields that were
  /// there before it: in a designated initializer it comes after `limit_scheduled_retries`.
  unsigned window_buckets = 10;
};
CORETRY_ALLOW_DEPRECATED_END

namespace detail {
/// The window's bucket count `o` asks for: `window_buckets`, or the deprecated `buckets` while
/// `window_buckets` is left at its default. The library's one read of `buckets`.
inline unsigned window_buckets(const ratio_budget_options& o) noexcept {
  CORETRY_ALLOW_DEPRECATED_BEGIN
  return o.window_buckets != ratio_budget_options{}.window_buckets ? o.window_buckets : o.buckets;
  CORETRY_ALLOW_DEPRECATED_END
}
} // namespace detail

/// A sliding-window retry budget (Finagle's): a retry is allowed while, counting it, the retries
/// of the last `window` do not exceed `ratio` x the requests of the last `window` plus a reserve
/// of `min_retries_per_second` x the window in seconds:
///
///     retries_in_window + 1 <= ratio * requests_in_window + min_retries_per_second * window_s
///
/// Old traffic expires, so an outage is forgiven once it leaves the window, and the reserve is
/// a standing allowance, not a loan: nothing granted from it is charged to later requests.
/// With the defaults, 1,000 requests in the last 10 s allow 100 + 100 retries in those 10 s.
///
/// The window is made of `window_buckets` buckets of `window / window_buckets`; an event is
/// counted from its bucket's start for `window_buckets` buckets, that is for between
/// `window - window / window_buckets` and `window`. Only requests and granted retries are counted
/// (attempt outcomes do not matter).
///
/// Thread-safe and lock-free: one atomic word per bucket. A retry is counted first and taken
/// back when it turns out over the limit, so threads racing for the last retries of a window
/// may both be refused, never both granted: the limit holds exactly, at the price of a retry
/// now and then refused that a slower caller would have got.
///
/// Throws `std::invalid_argument` naming the field when an option is out of range.
class CORETRY_API ratio_budget final : public retry_budget {
public:
  /// Throws `std::invalid_argument` naming the field when an option is out of range.
  explicit ratio_budget(ratio_budget_options options = {});
  ~ratio_budget() override;
  ratio_budget(const ratio_budget&) = delete;
  ratio_budget& operator=(const ratio_budget&) = delete;

  void on_request(std::chrono::nanoseconds now) noexcept override;
  bool try_retry(std::chrono::nanoseconds now) noexcept override;
  /// Uncounts the retry granted at `granted_at`, if its bucket is still in the window.
  void refund(std::chrono::nanoseconds granted_at) noexcept override;
  /// `ratio_budget_options::limit_scheduled_retries`.
  bool limits_scheduled_retries() const noexcept override;
  /// Until the window next slides (the start of the next bucket), when its oldest retries leave
  /// it; `coretry::unlimited` (cannot say when) when no window can ever grant a retry (`ratio` 0
  /// and a reserve of less than one retry per window), so that a waiting operation stops at once.
  std::chrono::nanoseconds retry_after(std::chrono::nanoseconds now) noexcept override;

  /// The options it was built with.
  const ratio_budget_options& options() const noexcept { return options_; }
  /// Requests counted in the window ending at `now`.
  std::uint64_t requests(std::chrono::nanoseconds now) const noexcept;
  /// Retries granted in the window ending at `now`.
  std::uint64_t retries(std::chrono::nanoseconds now) const noexcept;
  /// Retries the window ending at `now` allows in total (granted ones included).
  double allowance(std::chrono::nanoseconds now) const noexcept;
  /// Retries granted and refused since construction.
  std::uint64_t granted() const noexcept { return granted_.load(std::memory_order_relaxed); }
  /// Retries refused since construction.
  std::uint64_t refused() const noexcept { return refused_.load(std::memory_order_relaxed); }

private:
  ratio_budget_options options_;
  double reserve_;
  std::unique_ptr<detail::window_counter> requests_;
  std::unique_ptr<detail::window_counter> retries_;
  std::atomic<std::uint64_t> granted_{0};
  std::atomic<std::uint64_t> refused_{0};
};

} // namespace coretry
