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

/// What the three reservations below share: a control (`Control`) held until the reservation
/// is used or settled, and otherwise given back once, by `returned()`, by the destructor or by a
/// move-assignment over it: `Give(control, now, at)`, where `at` is when the reservation was made
/// and `now` reads the loop's clock (`at` when it has none).
template <class Control, void (*Give)(Control&, nanoseconds now, nanoseconds at) noexcept>
class reservation {
public:
  reservation() noexcept = default;
  reservation(Control* control, now_fn now, nanoseconds at) noexcept
      : control_(control), now_(now), at_(at) {}
  reservation(reservation&& o) noexcept
      : control_(std::exchange(o.control_, nullptr)), now_(o.now_), at_(o.at_) {}
  reservation& operator=(reservation&& o) noexcept {
    if (this != &o) {
      returned();
      control_ = std::exchange(o.control_, nullptr);
      now_ = o.now_;
      at_ = o.at_;
    }
    return *this;
  }
  ~reservation() { returned(); }

  explicit operator bool() const noexcept { return control_ != nullptr; }
  /// Gives the reservation back unused, once.
  void returned() noexcept {
    if (Control* c = std::exchange(control_, nullptr))
      Give(*c, now_ ? now_() : at_, at_);
  }

protected:
  /// Takes the control out, settled: nothing is given back.
  Control* take() noexcept { return std::exchange(control_, nullptr); }
  Control* control() const noexcept { return control_; }
  nanoseconds at() const noexcept { return at_; }

private:
  Control* control_ = nullptr;
  now_fn now_ = nullptr;
  nanoseconds at_{0};
};

/// `attempt_gate::on_outcome(h, now, now - at)`: a grant made at `at`, settled at `now`.
inline void settle_grant(attempt_gate& g, health h, nanoseconds now, nanoseconds at) noexcept {
  g.on_outcome(h, now, now > at ? now - at : nanoseconds::zero());
}
inline void abandon_grant(attempt_gate& g, nanoseconds now, nanoseconds at) noexcept {
  settle_grant(g, health::ignored, now, at);
}
inline void release_token(send_rate& r, nanoseconds now, nanoseconds /*at*/) noexcept {
  r.release(now);
}
inline void refund_charge(retry_budget& b, nanoseconds /*now*/, nanoseconds at) noexcept {
  b.refund(at);
}

/// A breaker's grant: the attempt it let through, until its outcome is reported. Destroyed
/// unreported, it reports `on_abandoned`, so that a half-open probe slot is never lost.
class gate_grant : public reservation<attempt_gate, abandon_grant> {
public:
  using reservation::reservation;

  /// Reports how the attempt went, once: `attempt_gate::on_outcome(h, now, now - granted)`.
  void report(health h, nanoseconds now) noexcept {
    if (attempt_gate* g = take())
      settle_grant(*g, h, now, at());
  }
  /// As above, for a verdict without the gate's own health (`gate_health_of`).
  void report(attempt_kind k, nanoseconds now, bool pushback = false) noexcept {
    report(gate_health_of(k, pushback), now);
  }
  /// The gate this grant reports to (null once reported, or for an empty grant).
  attempt_gate* gate() const noexcept { return control(); }
  /// The attempt was never sent, or its outcome is lost: `on_abandoned`.
  void abandoned() noexcept { returned(); }
};

/// A send token reserved from a `send_rate`. `used()` when the attempt is sent; otherwise
/// handed back (`send_rate::release`) by `returned()` or the destructor, so that a waiter who
/// gives up or is cancelled does not push every later sender back.
class send_token : public reservation<send_rate, release_token> {
public:
  using reservation::reservation;
  void used() noexcept { (void)take(); }
};

/// A retry a budget granted (`retry_budget::try_retry` at `at`). `used()` when the retry is
/// sent; otherwise refunded (`retry_budget::refund(at)`) by `returned()` or the destructor: a
/// retry the breaker refuses, the deadline or a cancellation stops, spends nothing.
class retry_charge : public reservation<retry_budget, refund_charge> {
public:
  using reservation::reservation;
  retry_charge(retry_budget* budget, nanoseconds at) noexcept : reservation(budget, nullptr, at) {}
  void used() noexcept { (void)take(); }
};

} // namespace coretry::detail
