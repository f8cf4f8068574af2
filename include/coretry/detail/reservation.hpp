// SPDX-License-Identifier: BSL-1.0
#pragma once
// What an operation takes from the shared overload controls, as objects that settle exactly
// once: a breaker's grant (`gate_grant`), a send token (`send_token`) and a retry charged to a
// budget (`retry_charge`). Each is move-only; it is settled explicitly by the path that knows
// how the attempt went, and by its destructor on every other path (give-up, deadline,
// cancellation, a frame or state destroyed with its execution context, an exception), so no
// path can forget one. Private: the loop (retry_loop.hpp) and the hedge (hedge_op.hpp) hold
// them; the schedule (schedule.hpp) makes them.
//
// Also the one classification of an attempt's outcome (`attempt_class`), which every consumer
// of it (breaker, sending rate, budget, stats) is told, computed once by the schedule.

#include <coretry/budget.hpp>
#include <coretry/overload.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>

namespace coretry::detail {

using std::chrono::nanoseconds;

/// Reads the loop's clock: what a reservation settled by its destructor reports as `now`. Null
/// (the schedule's tests): the time the reservation was made.
using now_fn = nanoseconds (*)() noexcept;

/// How an attempt that was sent ended, for every listener.
enum class attempt_kind : std::uint8_t {
  success,   ///< an accepted result
  failure,   ///< a retryable failure, or cut by the deadline or the attempt timeout: unwell
  neutral,   ///< an error the policy does not retry: it says nothing about the upstream's health
  abandoned, ///< cancelled by the caller, lost with its operation, or a predicate threw
};

/// The verdict on one attempt: computed once (`schedule::classify`), then handed to the
/// breaker, the sending rate, the budget and the stats. A `retry_if` decides only between
/// `failure` and `neutral` for an error the attempt itself reported: an attempt the deadline or
/// the attempt timer cut is a failure (and a throttle, for the sending rate) whatever it says.
struct attempt_class {
  attempt_kind kind = attempt_kind::success;
  bool throttled = false; ///< the sending rate hears `on_throttle` rather than `on_success`
  /// A failure by which the upstream asked the client to slow down (`retry_policy::pushback_if`,
  /// or a `Retry-After` hint).
  bool pushback = false;
  /// What the breaker hears: its own classification (`attempt_gate::classify`), apart from
  /// `kind`, which is the policy's (`retry_if`). Unset: derived from `kind` and `pushback`
  /// (`gate_health_of`).
  std::optional<health> gate = std::nullopt;
};

/// The gate's health for a verdict without its own: what the loop said before gates classified.
constexpr health gate_health_of(attempt_kind k, bool pushback) noexcept {
  switch (k) {
  case attempt_kind::success:
  case attempt_kind::neutral:
    return health::healthy;
  case attempt_kind::failure:
    return pushback ? health::pushback : health::unhealthy;
  case attempt_kind::abandoned:
    break;
  }
  return health::ignored;
}

/// A breaker's grant: the attempt it let through, until its outcome is reported. Destroyed
/// unreported, it reports `on_abandoned`, so that a half-open probe slot is never lost.
class gate_grant {
public:
  gate_grant() noexcept = default;
  gate_grant(attempt_gate* gate, now_fn now, nanoseconds at) noexcept
      : gate_(gate), now_(now), at_(at) {}
  gate_grant(gate_grant&& o) noexcept
      : gate_(std::exchange(o.gate_, nullptr)), now_(o.now_), at_(o.at_) {}
  gate_grant& operator=(gate_grant&& o) noexcept {
    if (this != &o) {
      abandoned();
      gate_ = std::exchange(o.gate_, nullptr);
      now_ = o.now_;
      at_ = o.at_;
    }
    return *this;
  }
  ~gate_grant() { abandoned(); }

  explicit operator bool() const noexcept { return gate_ != nullptr; }

  /// Reports how the attempt went, once: `attempt_gate::on_outcome(h, now, now - granted)`.
  void report(health h, nanoseconds now) noexcept {
    if (attempt_gate* g = std::exchange(gate_, nullptr))
      g->on_outcome(h, now, now > at_ ? now - at_ : nanoseconds::zero());
  }
  /// As above, for a verdict without the gate's own health (`gate_health_of`).
  void report(attempt_kind k, nanoseconds now, bool pushback = false) noexcept {
    report(gate_health_of(k, pushback), now);
  }
  /// The gate this grant reports to (null once reported, or for an empty grant).
  attempt_gate* gate() const noexcept { return gate_; }
  /// The attempt was never sent, or its outcome is lost.
  void abandoned() noexcept {
    if (gate_)
      report(health::ignored, now_ ? now_() : at_);
  }

private:
  attempt_gate* gate_ = nullptr;
  now_fn now_ = nullptr;
  nanoseconds at_{0};
};

/// A send token reserved from a `send_rate`. `used()` when the attempt is sent; otherwise
/// handed back (`send_rate::release`) by `returned()` or the destructor, so that a waiter who
/// gives up or is cancelled does not push every later sender back.
class send_token {
public:
  send_token() noexcept = default;
  send_token(send_rate* rate, now_fn now, nanoseconds at) noexcept
      : rate_(rate), now_(now), at_(at) {}
  send_token(send_token&& o) noexcept
      : rate_(std::exchange(o.rate_, nullptr)), now_(o.now_), at_(o.at_) {}
  send_token& operator=(send_token&& o) noexcept {
    if (this != &o) {
      returned();
      rate_ = std::exchange(o.rate_, nullptr);
      now_ = o.now_;
      at_ = o.at_;
    }
    return *this;
  }
  ~send_token() { returned(); }

  explicit operator bool() const noexcept { return rate_ != nullptr; }
  void used() noexcept { rate_ = nullptr; }
  void returned() noexcept {
    if (send_rate* r = std::exchange(rate_, nullptr))
      r->release(now_ ? now_() : at_);
  }

private:
  send_rate* rate_ = nullptr;
  now_fn now_ = nullptr;
  nanoseconds at_{0};
};

/// A retry a budget granted (`retry_budget::try_retry` at `at`). `used()` when the retry is
/// sent; otherwise refunded (`retry_budget::refund(at)`) by `returned()` or the destructor: a
/// retry the breaker refuses, the deadline or a cancellation stops, spends nothing.
class retry_charge {
public:
  retry_charge() noexcept = default;
  retry_charge(retry_budget* budget, nanoseconds at) noexcept : budget_(budget), at_(at) {}
  retry_charge(retry_charge&& o) noexcept
      : budget_(std::exchange(o.budget_, nullptr)), at_(o.at_) {}
  retry_charge& operator=(retry_charge&& o) noexcept {
    if (this != &o) {
      returned();
      budget_ = std::exchange(o.budget_, nullptr);
      at_ = o.at_;
    }
    return *this;
  }
  ~retry_charge() { returned(); }

  explicit operator bool() const noexcept { return budget_ != nullptr; }
  void used() noexcept { budget_ = nullptr; }
  void returned() noexcept {
    if (retry_budget* b = std::exchange(budget_, nullptr))
      b->refund(at_);
  }

private:
  retry_budget* budget_ = nullptr;
  nanoseconds at_{0};
};

} // namespace coretry::detail
