// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// What the retry loop asks of the overload controls that many operations share: a gate that
/// may refuse an attempt (a circuit breaker) and a sending rate that may delay one (adaptive
/// rate limiting). `coretry::circuit_breaker` and `coretry::adaptive_rate_limiter` implement
/// them; a service may plug in its own. Implementations are shared through `std::shared_ptr`,
/// called from any thread, and must not block.
///
/// Every `now` is the time since the epoch of the loop's clock (`Timer::clock_type`), so the
/// same object works under the manual test clock.

#include <coretry/error.hpp>
#include <coretry/export.hpp>

#include <chrono>
#include <memory>

namespace coretry {

/// May refuse an attempt before it is sent. The loop calls `try_acquire` before each attempt;
/// when it returns false the attempt is not sent and the operation stops with `refusal()`
/// (`errc::circuit_open` unless the gate says otherwise), or, under
/// `retry_policy::when_open = on_open::wait`, asks `retry_after` when to try again and waits
/// that long on its timer. After an attempt it was granted, the loop calls exactly one of
/// `on_success` (it succeeded, or failed in a way that says nothing about the upstream's health:
/// an error the policy does not retry), `on_failure` (a retryable failure: the upstream is
/// unwell), `on_pushback` (a retryable answer by which the upstream asked the client to slow
/// down: an HTTP 429, an answer carrying `Retry-After`; see `retry_policy::pushback_if`), or
/// `on_abandoned` (the caller cancelled it).
class CORETRY_API attempt_gate {
public:
  /// What `retry_after` returns when it cannot say (the default): a waiting operation stops
  /// with `refusal()` as a failing one does.
  static constexpr std::chrono::nanoseconds never = std::chrono::nanoseconds::max();

  virtual ~attempt_gate() = default;
  /// Whether the next attempt may be sent at `now`.
  virtual bool try_acquire(std::chrono::nanoseconds now) noexcept = 0;
  /// The granted attempt succeeded, or failed with an error the policy does not retry.
  virtual void on_success(std::chrono::nanoseconds now) noexcept = 0;
  /// The granted attempt failed with an error the policy retries.
  virtual void on_failure(std::chrono::nanoseconds now) noexcept = 0;
  /// The caller cancelled the granted attempt.
  virtual void on_abandoned(std::chrono::nanoseconds now) noexcept = 0;
  /// The granted attempt was answered with a push-back: the upstream is alive and answering, but
  /// asked the client to slow down (an HTTP 429, an answer with `Retry-After`). The loop retries
  /// it after the hint as after any retryable failure. The default counts it as a failure
  /// (`on_failure`); `circuit_breaker` counts it as neither a failure nor a success, as
  /// resilience4j's `ignoreExceptions` do, so that a rate-limiting upstream does not trip it.
  virtual void on_pushback(std::chrono::nanoseconds now) noexcept { on_failure(now); }
  /// Asked after `try_acquire` refused at `now`, by an operation willing to wait
  /// (`on_open::wait`): how long until an attempt may be let through, as a positive duration.
  /// The operation sleeps that long (holding no reservation) and then calls `try_acquire`
  /// again. `never` (the default), zero or a negative value: it does not wait and stops with
  /// `refusal()`.
  virtual std::chrono::nanoseconds retry_after(std::chrono::nanoseconds /*now*/) noexcept {
    return never;
  }
  /// The error an operation stops with when this gate refuses it and it does not wait:
  /// `errc::circuit_open` by default (`adaptive_throttle` says `errc::throttled_locally`).
  virtual errc refusal() const noexcept { return errc::circuit_open; }
};

/// Paces attempts, first attempts included. Before each attempt the loop calls `acquire`, which
/// reserves a send token and returns how long to wait before sending (zero: now); the loop
/// waits on its timer, holding no thread and no socket, and gives up with
/// `errc::deadline_exceeded` rather than wait past the deadline. After the attempt it calls
/// `on_throttle` when the attempt was throttled or timed out (see
/// `retry_policy::throttle_if`, and an attempt cut by the deadline or the attempt timeout),
/// else `on_success`; nothing for a cancelled attempt. A token the loop reserved and did not
/// use (it gave up, was cancelled, or the breaker refused the attempt) is handed back with
/// `release`, exactly once.
///
/// `acquire` may refuse to reserve anything by returning `send_rate::refused`: the operation
/// then stops with `errc::rate_limited`, sending nothing.
class CORETRY_API send_rate {
public:
  /// What `acquire` returns when it reserves nothing (the wait would be too long).
  static constexpr std::chrono::nanoseconds refused = std::chrono::nanoseconds::max();

  virtual ~send_rate() = default;
  /// Reserves a send token; returns how long to wait before sending (zero: now).
  virtual std::chrono::nanoseconds acquire(std::chrono::nanoseconds now) noexcept = 0;
  /// Hands back one token `acquire` reserved and nobody sent. The default does nothing.
  virtual void release(std::chrono::nanoseconds /*now*/) noexcept {}
  /// The attempt was throttled or timed out (`retry_policy::throttle_if`).
  virtual void on_throttle(std::chrono::nanoseconds now) noexcept = 0;
  /// The attempt ended otherwise, cancellation excepted.
  virtual void on_success(std::chrono::nanoseconds now) noexcept = 0;
};

namespace detail {
/// The breaker of `presets::overload_safe_per_endpoint()` until an `endpoint_registry` puts the
/// endpoint's own in its place (`endpoint_registry::apply`); `retry_policy::validate` refuses a
/// policy that still holds it, so that the preset never runs without its breaker and budget.
CORETRY_API std::shared_ptr<attempt_gate> registry_placeholder();
/// Whether `g` is `registry_placeholder()`'s gate.
CORETRY_API bool is_registry_placeholder(const attempt_gate* g) noexcept;
} // namespace detail

} // namespace coretry
