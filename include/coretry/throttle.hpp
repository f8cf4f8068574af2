// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `adaptive_throttle`: client-side adaptive throttling, the form the Google SRE book gives in
/// "Handling Overload": each client rejects locally the share of its traffic its upstream has
/// lately been refusing.

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
} // namespace detail

/// Settings of an `adaptive_throttle`.
struct adaptive_throttle_options {
  /// The multiplier K: the client sends up to K times what the upstream accepts before it
  /// rejects anything. Lower is more aggressive (the SRE book suggests 2; 1.1 for expensive
  /// requests). In [1, 1e6].
  double k = 2.0;
  /// How far back `requests` and `accepts` are counted. Positive.
  std::chrono::nanoseconds window = std::chrono::minutes(2);
  /// How finely the window slides (`window / window_buckets` at a time). In [1, 1000].
  unsigned window_buckets = 60;
  /// The throttle's own health classification of an attempt's outcome
  /// (`attempt_gate::classify`), apart from what the policy retries: `health::healthy` is an
  /// accept, `unhealthy` and `pushback` a refusal. Empty (the default): `default_health`.
  std::function<health(const std::error_code&)> classify{};
  /// Seed of the rejection draws; unset, one is drawn from entropy.
  std::optional<std::uint64_t> seed{};
};

/// An `attempt_gate` (set it as `retry_policy::breaker`) that rejects attempts locally with
/// probability
///
///     max(0, (requests - k * accepts) / (requests + 1))
///
/// where, over the trailing `window`, `requests` counts the attempts asked for whose fate is
/// known: those the upstream accepted, those it refused (a retryable failure, `on_failure`),
/// and those this throttle rejected itself (a push-back, `on_pushback`, is a refusal: the
/// default `attempt_gate::on_pushback` calls `on_failure`); and `accepts` counts those the
/// upstream accepted
/// (`on_success`: what its health classification, `adaptive_throttle_options::classify`, calls
/// healthy: a success, an answer that blames the request, or an HTTP 1xx to 3xx the policy
/// rejected). While the upstream accepts everything nothing is rejected; when it refuses
/// everything the rejection probability approaches 1, so the client sends a trickle that finds
/// out when the upstream is back.
///
/// Two choices differ from a literal reading of the book, both documented in docs/overload.md:
/// - an attempt counts in `requests` when its outcome is reported, not when it is let through:
///   counted at once, N attempts in flight with no answer yet would reject the next one with
///   probability N / (N + 1) at a cold start. Local rejections count at once, as in the book.
/// - an abandoned attempt (the caller cancelled it, a hedge lost its race) counts in neither:
///   the upstream's verdict on it is unknown.
///
/// A rejected attempt is not sent and the operation stops with `errc::throttled_locally`
/// (`refusal()`); this gate cannot say when an attempt would pass (`retry_after` is
/// `coretry::unlimited`), so an operation with `on_open::wait` stops too.
///
/// Thread-safe and lock-free: the counts are sliding windows of atomic buckets, and each draw
/// is one fetch-and-add on a SplitMix64 counter (a seeded throttle on one thread draws the same
/// stream every run). Every `now` is the time since the epoch of the caller's clock.
///
/// Throws `std::invalid_argument` naming the field and value when an option is out of range.
class CORETRY_API adaptive_throttle final : public attempt_gate {
public:
  /// Throws `std::invalid_argument` naming the field when an option is out of range.
  explicit adaptive_throttle(adaptive_throttle_options options = {});
  ~adaptive_throttle() override;
  adaptive_throttle(const adaptive_throttle&) = delete;
  adaptive_throttle& operator=(const adaptive_throttle&) = delete;

  /// Draws against `rejection_probability(now)`; a rejection counts as a request at once.
  bool try_acquire(std::chrono::nanoseconds now) noexcept override;
  /// The upstream accepted the attempt: one request, one accept.
  void on_success(std::chrono::nanoseconds now) noexcept override;
  /// The upstream refused the attempt: one request.
  void on_failure(std::chrono::nanoseconds now) noexcept override;
  /// Counts nothing.
  void on_abandoned(std::chrono::nanoseconds now) noexcept override;
  /// `options().classify(ec)` when set, else `default_health(ec)`.
  health classify(const std::error_code& ec) const override;
  /// `errc::throttled_locally`.
  errc refusal() const noexcept override { return errc::throttled_locally; }

  /// `max(0, (requests - k * accepts) / (requests + 1))` over the window ending at `now`.
  double rejection_probability(std::chrono::nanoseconds now) const noexcept;
  /// Requests in the window ending at `now`.
  std::uint64_t requests(std::chrono::nanoseconds now) const noexcept;
  /// Accepts in the window ending at `now`.
  std::uint64_t accepts(std::chrono::nanoseconds now) const noexcept;

  /// Attempts let through since construction.
  std::uint64_t granted() const noexcept { return granted_.load(std::memory_order_relaxed); }
  /// Attempts rejected locally since construction.
  std::uint64_t rejected() const noexcept { return rejected_.load(std::memory_order_relaxed); }

  /// The options it was built with.
  const adaptive_throttle_options& options() const noexcept { return options_; }

private:
  adaptive_throttle_options options_;
  std::atomic<std::uint64_t> rng_;
  std::unique_ptr<detail::window_counter> requests_;
  std::unique_ptr<detail::window_counter> accepts_;
  std::atomic<std::uint64_t> granted_{0};
  std::atomic<std::uint64_t> rejected_{0};
};

} // namespace coretry
