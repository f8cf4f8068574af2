// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `retry_observer`: one interface for everything a retry or a hedge does, for metrics, logs
/// and traces. Set one on a policy (`retry_policy::observer`); coretry::prometheus implements it.
///
/// **Events of one operation, in order** (`retry_async`, `async_retry`, `coretry::curl::retry`):
///
///     operation_started
///     ( refused                                      the breaker or the rate refused: last
///     | attempt_started attempt_finished
///       [ retry_scheduled | refused ] )*             a retry, or the budget refused it
///     operation_finished                             always, exactly once, last
///
/// `retry_scheduled` comes after the failed attempt's `attempt_finished` (and after `on_retry`)
/// and before the sleep; the next `attempt_started` after the sleep. An operation that ends
/// without a retry (success, a non-retryable error, attempts or deadline exhausted, cancelled)
/// goes from `attempt_finished` straight to `operation_finished`.
///
/// Hedged operations (`hedge_async`, `async_hedge`, `coretry::curl::hedge`): `operation_started`
/// first and `operation_finished` last; in between, attempts overlap: `hedge_started` (every
/// attempt after the first, just before its `attempt_started`), `hedge_abandoned` (an attempt
/// still running is cancelled because the operation ended otherwise: another won, one failed
/// for good, the caller cancelled, or the deadline passed; its `attempt_finished` follows when it
/// has returned), and `refused`. Every `attempt_started` has exactly one `attempt_finished`, and
/// all of them come before `operation_finished`.
///
/// An operation destroyed uncompleted with its execution context (its handler destroyed
/// uncalled) sends no `operation_finished`, as it calls no handler.
///
/// Breaker transitions come from the breaker, not from an operation: `make_observed_breaker`
/// builds a breaker that tells an observer (and hands itself with each event, so the observer can
/// read its current state); `observe_breaker` turns an observer into an existing options'
/// `on_transition`.
///
/// **Threads.** An observer is one object for every operation of every policy it is set on, so
/// its members are called concurrently, from the threads running those operations (the events
/// of one operation never overlap: they come from its executor, or its strand). Make it
/// thread-safe, quick, and non-blocking: it runs inside the operation.
///
/// **Exceptions.** An observer watches; it does not change what it watches. What one throws is
/// caught where it was called and dropped: the operation goes on, and completes, exactly as it
/// would without an observer (only the event is lost). Breaker transitions come from inside the
/// breaker's `noexcept` members, and `operation_finished` after the outcome is decided, so no
/// other rule could hold for every event.
///
/// **Cost.** Unset (the default), each event costs a null check; set, the loop also reads its
/// clock once per attempt and at the end (see bench/retry_bench.cpp for the figures).

#include <coretry/attempt.hpp>
#include <coretry/breaker.hpp>
#include <coretry/export.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

namespace coretry {

using std::chrono::nanoseconds;

/// How an attempt ended, as the loop classified it (once, for every listener).
enum class attempt_outcome : std::uint8_t {
  success,     ///< an accepted result
  failure,     ///< a retryable failure, or cut by the deadline or the attempt timeout
  not_retried, ///< an error the policy does not retry
  abandoned,   ///< cancelled (by the caller, or a hedge that ended otherwise), or something threw
};

/// "success", "failure", "not_retried" or "abandoned".
CORETRY_API const char* to_string(attempt_outcome o) noexcept;

/// Which front end runs the operation.
enum class operation_kind : std::uint8_t {
  retry, ///< `retry_async`, `async_retry`, `coretry::curl::retry`
  hedge, ///< `hedge_async`, `async_hedge`, `coretry::curl::hedge`
};

/// An operation starts (its loop, or its hedge state, begins to run).
struct operation_started_event {
  std::string_view label;                      ///< `retry_policy::label`
  operation_kind kind = operation_kind::retry; ///< a retry or a hedge
};

/// An attempt is about to be sent (the breaker and the sending rate let it through).
struct attempt_started_event {
  std::string_view label; ///< `retry_policy::label`
  unsigned attempt = 0;   ///< from 1
};

/// An attempt returned.
///
/// 0.2's `http_status` and `http_method` keep their places, deprecated, so that a 0.2
/// positional initializer keeps its meaning; the library fills them from `attributes`
/// (`detail::attempt_finished`) and reads neither. Copies and moves do not warn; under g++ a
/// braced initializer that leaves them out does (a g++ quirk with deprecated members of class
/// type): build an event field by field, as a test does, or name them.
CORETRY_ALLOW_DEPRECATED_BEGIN // the implicit members copy the 0.2 fields without a warning
struct attempt_finished_event {
  std::string_view label;  ///< `retry_policy::label`
  unsigned attempt = 0;    ///< from 1
  nanoseconds duration{0}; ///< from its `attempt_started`, on the loop's clock
  /// Its error: empty on success; `errc::result_rejected` for a rejected result (an HTTP 503,
  /// say); `errc::attempt_timeout` or `errc::deadline_exceeded` when the loop cut it.
  std::error_code error{};
  attempt_outcome outcome = attempt_outcome::success; ///< the loop's verdict on it
  /// 0.2: the integer attribute "http.response.status_code", or 0.
  [[deprecated("use attributes.find(http::attribute::response_status_code)")]] int http_status = 0;
  /// 0.2: the text attribute "http.request.method", or empty.
  [[deprecated(
      "use attributes.find(http::attribute::request_method)")]] std::string_view http_method{};
  /// What the attempt told its `attempt_context` (`attempt_context::set_attribute`), copied:
  /// keys of static storage, text values valid during this call (`attempt_attributes`,
  /// "Lifetimes"). `coretry::curl` and `coretry::beast` set the HTTP method and status under
  /// the names of `coretry::http::attribute`. Empty for an attempt refused before it was sent.
  attempt_attributes attributes{};
};
CORETRY_ALLOW_DEPRECATED_END

namespace detail {
/// The event of an attempt that returned with `attributes`: the library's one writer of the
/// 0.2 fields, which it fills from them.
inline attempt_finished_event attempt_finished(std::string_view label, unsigned attempt,
                                               nanoseconds duration, std::error_code error,
                                               attempt_outcome outcome,
                                               const attempt_attributes& attributes) noexcept {
  const attempt_attribute* status = attributes.find("http.response.status_code");
  const attempt_attribute* method = attributes.find("http.request.method");
  CORETRY_ALLOW_DEPRECATED_BEGIN
  return attempt_finished_event{label,
                                attempt,
                                duration,
                                error,
                                outcome,
                                status ? static_cast<int>(status->integer()) : 0,
                                method ? method->text() : std::string_view(),
                                attributes};
  CORETRY_ALLOW_DEPRECATED_END
}
} // namespace detail

/// A failed attempt will be retried after `delay` (the sleep starts now).
struct retry_scheduled_event {
  std::string_view label;     ///< `retry_policy::label`
  unsigned attempt = 0;       ///< the attempt that failed
  std::error_code error{};    ///< its error
  nanoseconds delay{0};       ///< the sleep chosen: `max(backoff delay, server_hint)`
  nanoseconds server_hint{0}; ///< what the attempt asked for (`Retry-After`), or 0
};

/// An overload control refused: the breaker (or another gate, such as `adaptive_throttle`) or
/// the sending rate refused an attempt (nothing was sent), or the budget refused a retry (or a
/// hedge). The operation stops (a hedge stops starting attempts; those running go on). A
/// refusal the operation waits out (`on_open::wait`) is not reported: it shows as a retry
/// scheduled only when an attempt follows.
struct refusal_event {
  std::string_view label; ///< `retry_policy::label`
  /// `errc::circuit_open`, `errc::throttled_locally`, `errc::rate_limited` or
  /// `errc::budget_exhausted`.
  std::error_code reason{};
  unsigned attempt = 0; ///< the attempt that was refused, from 1
};

/// A hedged operation starts another attempt beside the running ones.
struct hedge_started_event {
  std::string_view label;    ///< `retry_policy::label`
  unsigned attempt = 0;      ///< the attempt starting now, from 2
  unsigned in_flight = 0;    ///< attempts running, this one included
  std::error_code trigger{}; ///< as `hedge_event::trigger`: empty when the hedge delay passed
};

/// A hedged operation cancels an attempt still running, because it ended otherwise.
struct hedge_abandoned_event {
  std::string_view label; ///< `retry_policy::label`
  unsigned attempt = 0;   ///< the attempt cancelled, from 1
};

/// An operation completes (just before its handler is called, or its coroutine resumes).
struct operation_finished_event {
  std::string_view label;                      ///< `retry_policy::label`
  operation_kind kind = operation_kind::retry; ///< a retry or a hedge
  unsigned attempts = 0;                       ///< attempts started
  nanoseconds elapsed{0};                      ///< from the call to now
  nanoseconds slept{0};                        ///< sum of the delays slept (retries only)
  /// Why it stopped, as `retry_stats::reason`: empty on success.
  std::error_code reason{};
  /// What the caller gets: empty when a value is delivered (a rejected result returned when the
  /// attempts ran out included).
  std::error_code error{};
};

/// A breaker changed state (`observe_breaker`).
struct breaker_transition_event {
  std::string_view label;                     ///< the label given to `observe_breaker`
  breaker_state from = breaker_state::closed; ///< the state it left
  breaker_state to = breaker_state::closed;   ///< the state it entered
  nanoseconds now{0};                         ///< on the clock of the loop that caused it
  /// The breaker that changed, valid during the call, when known (`make_observed_breaker`);
  /// null from `observe_breaker`. Transitions made on two threads at once may reach an observer
  /// in either order, so `to` may be older than the state the breaker is in by then: an observer
  /// that shows the current state reads `breaker->state()` (under its own lock, so the last
  /// reader sees the last transition).
  const circuit_breaker* breaker = nullptr;
};

/// The events a `retry_observer` listens to, as flags (`retry_observer::interests`).
enum class observer_interest : std::uint16_t {
  none = 0,
  operation_started = 1U << 0,  ///< `on_operation_started`
  attempt_started = 1U << 1,    ///< `on_attempt_started`
  attempt_finished = 1U << 2,   ///< `on_attempt_finished`
  retry_scheduled = 1U << 3,    ///< `on_retry_scheduled`
  refused = 1U << 4,            ///< `on_refused`
  hedge_started = 1U << 5,      ///< `on_hedge_started`
  hedge_abandoned = 1U << 6,    ///< `on_hedge_abandoned`
  operation_finished = 1U << 7, ///< `on_operation_finished`
  breaker_transition = 1U << 8, ///< `on_breaker_transition`
  all = (1U << 9) - 1,          ///< every event (the default)
};
/// The events of `a` and those of `b`.
constexpr observer_interest operator|(observer_interest a, observer_interest b) noexcept {
  return static_cast<observer_interest>(static_cast<std::uint16_t>(a) |
                                        static_cast<std::uint16_t>(b));
}
/// The events in both `a` and `b`.
constexpr observer_interest operator&(observer_interest a, observer_interest b) noexcept {
  return static_cast<observer_interest>(static_cast<std::uint16_t>(a) &
                                        static_cast<std::uint16_t>(b));
}
/// Every event but those of `e`.
constexpr observer_interest operator~(observer_interest e) noexcept {
  return static_cast<observer_interest>(static_cast<std::uint16_t>(observer_interest::all) &
                                        ~static_cast<std::uint16_t>(e));
}
/// Whether `set` holds every event of `e`, and `e` names at least one.
constexpr bool listens(observer_interest set, observer_interest e) noexcept {
  return e != observer_interest::none && (set & e) == e;
}

/// Receives the events of the operations whose policy it is set on. Every member does nothing
/// by default: override those you need, and say which in `interests` so that operations build
/// no other event. See the file comment for the order of events, threads, and exceptions.
class CORETRY_API retry_observer {
public:
  virtual ~retry_observer();
  /// The events this observer listens to: `observer_interest::all` by default. An operation asks
  /// when it is made, not per event (and `observe_breaker` at each transition), and neither
  /// builds nor delivers an event outside them; an observer that listens to none costs an
  /// operation a few calls of this and no clock read. Must not throw (it is `noexcept`); say the
  /// same set for as long as operations use the observer.
  virtual observer_interest interests() const noexcept { return observer_interest::all; }
  /// An operation started.
  virtual void on_operation_started(const operation_started_event&) {}
  /// An attempt is about to be sent.
  virtual void on_attempt_started(const attempt_started_event&) {}
  /// An attempt returned.
  virtual void on_attempt_finished(const attempt_finished_event&) {}
  /// A failed attempt will be retried after a sleep.
  virtual void on_retry_scheduled(const retry_scheduled_event&) {}
  /// An overload control refused; the operation stops.
  virtual void on_refused(const refusal_event&) {}
  /// A hedged operation starts another attempt.
  virtual void on_hedge_started(const hedge_started_event&) {}
  /// A hedged operation cancels an attempt still running.
  virtual void on_hedge_abandoned(const hedge_abandoned_event&) {}
  /// An operation completes.
  virtual void on_operation_finished(const operation_finished_event&) {}
  /// A breaker changed state (`observe_breaker`).
  virtual void on_breaker_transition(const breaker_transition_event&) {}
};

/// A `circuit_breaker_options::on_transition` that tells `observer` every transition, labelled
/// `label` (a breaker serves one upstream: name it after it). It keeps `observer` alive.
///
/// ```
/// auto breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
///     .on_transition = coretry::observe_breaker(observer, "https://api.example.com:443")});
/// ```
CORETRY_API std::function<void(breaker_state, breaker_state, nanoseconds)>
observe_breaker(std::shared_ptr<retry_observer> observer, std::string label);

/// A circuit breaker built from `options` whose transitions `observer` hears, labelled `label`,
/// as from `observe_breaker`, each event carrying the breaker itself
/// (`breaker_transition_event::breaker`), so that the observer can show the state the breaker is
/// in rather than the last event to arrive. `options.on_transition`, when set, is called first.
/// Throws `std::invalid_argument` as the breaker's constructor does.
///
/// ```
/// auto breaker = coretry::make_observed_breaker({.consecutive_failures = 5}, observer,
///                                               "https://api.example.com:443");
/// ```
CORETRY_API std::shared_ptr<circuit_breaker>
make_observed_breaker(circuit_breaker_options options, std::shared_ptr<retry_observer> observer,
                      std::string label);

namespace detail {
// The loops call these behind a null check: out of line (one copy in the library, nothing in the
// coroutine frames), and each catches and drops what the observer throws.
CORETRY_API void emit(retry_observer& o, const operation_started_event& e) noexcept;
CORETRY_API void emit(retry_observer& o, const attempt_started_event& e) noexcept;
CORETRY_API void emit(retry_observer& o, const attempt_finished_event& e) noexcept;
CORETRY_API void emit(retry_observer& o, const retry_scheduled_event& e) noexcept;
CORETRY_API void emit(retry_observer& o, const refusal_event& e) noexcept;
CORETRY_API void emit(retry_observer& o, const hedge_started_event& e) noexcept;
CORETRY_API void emit(retry_observer& o, const hedge_abandoned_event& e) noexcept;
CORETRY_API void emit(retry_observer& o, const operation_finished_event& e) noexcept;
} // namespace detail

} // namespace coretry
