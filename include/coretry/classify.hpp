// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `retry_policy::classify`: one function from an attempt's outcome to what the loop does with
/// it. It takes the place of the five predicates of 0.2 (`retry_if`, `pushback_if`,
/// `throttle_if`, `retry_if_result`, `retry_if_exception`) as the way to decide; those are
/// deprecated, and decide as in 0.2 only while `classify` is empty. A value it rejects fails
/// with `errc::result_rejected`, an exception it retries with `errc::retryable_exception`.

#include <coretry/export.hpp>

#include <chrono>
#include <exception>
#include <system_error>
#include <typeinfo>
#include <utility>

namespace coretry {

/// One attempt's outcome, as `retry_policy::classify` sees it: exactly one of an error, an
/// exception and a value (or, for an operation returning `void`, none of them: it succeeded),
/// with what the attempt told the loop through its `attempt_context`. It refers to the
/// attempt's value without owning it: valid for the call of the classifier only.
class attempt_result {
public:
  /// An outcome with an error (empty: a success) or an exception; the loop makes these, and a
  /// test of a classifier may make its own.
  explicit attempt_result(unsigned attempt, std::error_code error = {},
                          std::exception_ptr exception = nullptr) noexcept
      : attempt_(attempt), error_(error), exception_(std::move(exception)) {}

  /// The same outcome carrying the value `v` (not copied: `v` must outlive this object).
  template <class T> attempt_result& with_value(const T& v) noexcept {
    value_ = &v;
    type_ = &typeid(T);
    return *this;
  }
  /// Refused: a temporary would be gone before the classifier reads it
  /// (`r.with_value(make_response())` in a classifier's test). Name the value first.
  template <class T> attempt_result& with_value(const T&&) = delete;
  /// The same outcome carrying the server's hint (`attempt_context::retry_after`).
  attempt_result& with_retry_after(std::chrono::nanoseconds hint) noexcept {
    hint_ = hint;
    return *this;
  }
  /// The same outcome carrying the attempt's health code (`attempt_context::health_code`).
  attempt_result& with_health_code(const std::error_code& ec) noexcept {
    health_code_ = ec;
    return *this;
  }

  /// The attempt's number, from 1.
  unsigned attempt() const noexcept { return attempt_; }
  /// The attempt's error: what it completed with, or the code of the `std::system_error` it
  /// threw. Empty when it returned a value or threw something else.
  const std::error_code& error() const noexcept { return error_; }
  /// What the attempt threw, other than a `std::system_error` (whose code is `error()`); null
  /// otherwise.
  const std::exception_ptr& exception() const noexcept { return exception_; }
  /// The attempt's value when it returned a `T` (the operation's result type, as the loop
  /// stores it: `std::tuple<std::error_code, T>` and `(error_code, T)` completions give `T`);
  /// null when it failed, or returned another type.
  template <class T> const T* value() const noexcept {
    return value_ != nullptr && *type_ == typeid(T) ? static_cast<const T*>(value_) : nullptr;
  }
  /// Whether the attempt returned a value (of any type).
  bool has_value() const noexcept { return value_ != nullptr; }
  /// The longest hint the attempt gave through `attempt_context::retry_after` (zero if none).
  std::chrono::nanoseconds retry_after() const noexcept { return hint_; }
  /// What the attempt told the gate through `attempt_context::health_code` (empty if nothing).
  const std::error_code& health_code() const noexcept { return health_code_; }

private:
  unsigned attempt_;
  std::error_code error_;
  std::exception_ptr exception_;
  const void* value_ = nullptr;
  const std::type_info* type_ = nullptr;
  std::chrono::nanoseconds hint_{0};
  std::error_code health_code_{};
};

/// The fields of an `attempt_decision`, as a set of bits: which of them a decision gives
/// (`attempt_decision::given`). Combine them with `|`, test them with `&` or
/// `attempt_decision::gives`.
enum class decision_fields : unsigned char {
  none = 0,        ///< no field: the decision leaves every field to whoever completes it
  retry = 1,       ///< `attempt_decision::retry`
  pushback = 2,    ///< `attempt_decision::pushback`
  throttle = 4,    ///< `attempt_decision::throttle`
  retry_after = 8, ///< `attempt_decision::retry_after`
  all = 15,        ///< the four fields (the default: the decision is complete)
};

/// The fields in `a` or in `b`.
constexpr decision_fields operator|(decision_fields a, decision_fields b) noexcept {
  return static_cast<decision_fields>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
/// The fields in both `a` and `b`.
constexpr decision_fields operator&(decision_fields a, decision_fields b) noexcept {
  return static_cast<decision_fields>(static_cast<unsigned>(a) & static_cast<unsigned>(b));
}

/// What the loop does with one attempt's outcome. The default (all false) accepts it: a value
/// or a success is returned, an error is reported as final, an exception ends the operation
/// with `errc::unexpected_exception`.
///
/// A decision may leave fields open (`given`) to whoever composes it: the loop completes what
/// `retry_policy::classify` leaves with `default_classify`, and `coretry::curl` and
/// `coretry::beast` with their own rules first (`complete`). Every decision written field by
/// field (`attempt_decision{.retry = true}`) gives all four, as before.
struct attempt_decision {
  /// A failure worth another attempt. For a value: the value is rejected (the attempt fails
  /// with `errc::result_rejected`, and is returned after all if the loop then gives up); for an
  /// exception: the attempt fails with `errc::retryable_exception` (rethrown by `retry_async`
  /// if the loop then gives up). Cancellation is never retried, whatever this says.
  bool retry = false;
  /// The upstream asked the client to slow down (an HTTP 429): a retried failure the gate hears
  /// as a push-back when its own health classification calls it unhealthy. An attempt that
  /// gave a hint is one anyway.
  bool pushback = false;
  /// Slows the policy's `send_rate` down (`send_rate::on_throttle`); without one, nothing.
  bool throttle = false;
  /// A server hint read from the outcome (a `Retry-After` header in a response the classifier
  /// rejects): as `attempt_context::retry_after`, the larger of the two counts. Zero: none.
  std::chrono::nanoseconds retry_after{0};
  /// The fields this decision gives; the others are open, and whoever composes the decision
  /// fills them (`complete`). All four by default. Writing a field does not add it here: a
  /// decision that starts as `no_opinion()` and sets `retry` must add `decision_fields::retry`
  /// too (or start as `only_retry`).
  decision_fields given = decision_fields::all;

  /// A decision that gives no field: the outcome is left whole to the default it is completed
  /// with (the loop's `default_classify`, or an adapter's rules).
  static constexpr attempt_decision no_opinion() noexcept {
    return attempt_decision{.given = decision_fields::none};
  }
  /// A decision that gives `retry` only, as a 0.2 `retry_if` answered: whether to retry, the
  /// push-back, the throttle and the hint left to the default it is completed with.
  static constexpr attempt_decision only_retry(bool retried) noexcept {
    return attempt_decision{.retry = retried, .given = decision_fields::retry};
  }
  /// Whether this decision gives every field of `fields`.
  constexpr bool gives(decision_fields fields) const noexcept { return (given & fields) == fields; }
};

/// `d` completed with `fallback`: each field `d` gives (`attempt_decision::given`) from `d`, the
/// others from `fallback`. The result gives all four fields, whatever `fallback` gives.
constexpr attempt_decision complete(const attempt_decision& d,
                                    const attempt_decision& fallback) noexcept {
  return attempt_decision{
      .retry = d.gives(decision_fields::retry) ? d.retry : fallback.retry,
      .pushback = d.gives(decision_fields::pushback) ? d.pushback : fallback.pushback,
      .throttle = d.gives(decision_fields::throttle) ? d.throttle : fallback.throttle,
      .retry_after = d.gives(decision_fields::retry_after) ? d.retry_after : fallback.retry_after,
      .given = decision_fields::all,
  };
}

/// The decision the loop makes when `retry_policy::classify` and the 0.2 predicates are all
/// empty: every error retried except a cancellation (`default_retry_if`), a time-out slows the
/// sending rate (`default_throttle_if`), values and successes accepted, exceptions not retried.
CORETRY_API attempt_decision default_classify(const attempt_result& r) noexcept;

} // namespace coretry
