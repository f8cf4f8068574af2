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
#include <coretry/limits.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <system_error>

namespace coretry {

/// What one attempt says about the upstream's health, as a gate hears it
/// (`attempt_gate::classify`). Each gate has its own classification, apart from what the policy
/// retries (`retry_policy::retry_if`): narrowing what is retried does not change what a breaker
/// counts.
enum class health : std::uint8_t {
  healthy,   ///< the upstream answered: a success, or an answer that blames the request
  unhealthy, ///< the upstream failed, could not be reached, or did not answer in time
  pushback,  ///< the upstream answered, asking the client to slow down (an HTTP 429)
  ignored,   ///< nothing is known: the caller cancelled the attempt, or its outcome is lost
};

/// "healthy", "unhealthy", "pushback" or "ignored".
CORETRY_API const char* to_string(health h) noexcept;

/// The default health classification of an attempt that ended with `ec` (every gate's, unless
/// its options name another):
/// - no error: `healthy`;
/// - `condition::cancelled` (the caller cancelled it): `ignored`;
/// - `condition::pushback` (`coretry::curl`: HTTP 429): `pushback`;
/// - `condition::answered` (the upstream answered without failing, even if the policy rejected
///   the answer; `coretry::http::status_category()`: HTTP 1xx to 3xx): `healthy`;
/// - `condition::client_error` (the request was at fault, not the upstream; `coretry::curl`:
///   HTTP 4xx other than 408 and 429, a malformed URL): `healthy`;
/// - anything else: `unhealthy`: transport failures, timeouts (`errc::attempt_timeout`,
///   `std::errc::timed_out`, an attempt cut by the deadline), a rejected result
///   (`errc::result_rejected`; `coretry::curl` reports the status instead, so an HTTP 5xx is
///   unhealthy and a 404 is not) and any error of the operation's own, as Polly's and
///   resilience4j's breakers count every exception by default.
///
/// The loop hands a gate `attempt_context::health_code()` instead of the attempt's error when the
/// attempt set one, and turns an `unhealthy` verdict into `pushback` when the attempt carried a
/// `Retry-After` hint or `retry_policy::pushback_if` says so.
CORETRY_API health default_health(const std::error_code& ec) noexcept;

/// May refuse an attempt before it is sent. The loop calls `try_acquire` before each attempt;
/// when it returns false the attempt is not sent and the operation stops with `refusal()`
/// (`errc::circuit_open` unless the gate says otherwise), or, under
/// `retry_policy::when_open = on_open::wait`, asks `retry_after` when to try again and waits
/// that long on its timer. After an attempt it was granted, the loop asks the gate's own
/// classification of the outcome (`classify`, whatever the policy retries) and calls
/// `on_outcome` with it once; its default calls exactly one of `on_success` (`health::healthy`:
/// it succeeded, or failed in a way that says nothing about the upstream's health),
/// `on_failure` (`unhealthy`), `on_pushback` (an answer by which the upstream asked the client
/// to slow down: an HTTP 429, an answer carrying `Retry-After`; see `retry_policy::pushback_if`),
/// or `on_abandoned` (`ignored`: the caller cancelled it).
class CORETRY_API attempt_gate {
public:
  /// 0.2's name for `coretry::unlimited` as `retry_after`'s answer "cannot say when".
  [[deprecated("use coretry::unlimited")]] static constexpr std::chrono::nanoseconds never =
      unlimited;

  virtual ~attempt_gate() = default;
  /// Whether the next attempt may be sent at `now`.
  virtual bool try_acquire(std::chrono::nanoseconds now) noexcept = 0;
  /// The granted attempt succeeded, or failed in a way that says nothing of the upstream's
  /// health (`health::healthy`).
  virtual void on_success(std::chrono::nanoseconds now) noexcept = 0;
  /// The granted attempt failed in a way that says the upstream is unwell (`health::unhealthy`).
  virtual void on_failure(std::chrono::nanoseconds now) noexcept = 0;
  /// The caller cancelled the granted attempt.
  virtual void on_abandoned(std::chrono::nanoseconds now) noexcept = 0;
  /// The granted attempt was answered with a push-back: the upstream is alive and answering, but
  /// asked the client to slow down (an HTTP 429, an answer with `Retry-After`). The loop retries
  /// it after the hint as after any retryable failure. The default counts it as a failure
  /// (`on_failure`); `circuit_breaker` counts it as neither a failure nor a success, as
  /// resilience4j's `ignoreExceptions` do, so that a rate-limiting upstream does not trip it.
  virtual void on_pushback(std::chrono::nanoseconds now) noexcept { on_failure(now); }
  /// This gate's health classification of an attempt that ended with `ec` (the attempt's
  /// `attempt_context::health_code()` when it set one; `errc::attempt_timeout` or
  /// `errc::deadline_exceeded` when a timer cut it). The default is `default_health(ec)`. The
  /// loop asks it once per granted attempt that was not abandoned, outside the gate's locks; it
  /// may throw (the attempt then counts as abandoned and the operation ends with what was
  /// thrown, as for `retry_if`).
  virtual health classify(const std::error_code& ec) const { return default_health(ec); }
  /// The outcome of a granted attempt: `h` as `classify` (or the loop, for an abandoned attempt)
  /// said, at `now`, `duration` after the attempt was granted. Called exactly once per granted
  /// attempt. The default calls `on_success`, `on_failure`, `on_pushback` or `on_abandoned`;
  /// a gate that judges durations (`circuit_breaker`'s slow calls) overrides it.
  virtual void on_outcome(health h, std::chrono::nanoseconds now,
                          std::chrono::nanoseconds duration) noexcept {
    (void)duration;
    switch (h) {
    case health::healthy:
      on_success(now);
      break;
    case health::unhealthy:
      on_failure(now);
      break;
    case health::pushback:
      on_pushback(now);
      break;
    case health::ignored:
      on_abandoned(now);
      break;
    }
  }
  /// Asked after `try_acquire` refused at `now`, by an operation willing to wait
  /// (`on_open::wait`): how long until an attempt may be let through, as a positive duration.
  /// The operation sleeps that long (holding no reservation) and then calls `try_acquire`
  /// again. `coretry::unlimited` (the default: the gate cannot say when), zero or a negative
  /// value: it does not wait and stops with `refusal()`.
  virtual std::chrono::nanoseconds retry_after(std::chrono::nanoseconds /*now*/) noexcept {
    return unlimited;
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
/// `acquire` may refuse to reserve anything by returning `coretry::unlimited`: the operation
/// then stops with `errc::rate_limited`, sending nothing.
class CORETRY_API send_rate {
public:
  /// 0.2's name for `coretry::unlimited` as `acquire`'s answer "refused: nothing reserved".
  [[deprecated("use coretry::unlimited")]] static constexpr std::chrono::nanoseconds refused =
      unlimited;

  virtual ~send_rate() = default;
  /// Reserves a send token; returns how long to wait before sending (zero: now), or
  /// `coretry::unlimited` when it refuses and reserves nothing (the wait would be too long).
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
