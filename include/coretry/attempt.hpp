// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `attempt_context`: what an attempt may learn from, and tell, the retry loop; and
/// `attempt_attributes`, what it tells the observers about itself.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace coretry {

/// One attribute of an attempt: a key and either an integer or a text value. Holds views, not
/// copies: 32 bytes, trivially copyable.
///
/// The key has static storage (a string literal, or a `constexpr std::string_view` such as
/// `coretry::http::attribute::request_method`): an observer may keep it as long as it likes.
/// Keys name what they hold the way OpenTelemetry's attributes do ("http.request.method").
/// A text value is a view of characters the attempt owns: see `attempt_attributes` for how long
/// they must stay valid.
class attempt_attribute {
public:
  /// An integer 0 with no key (what an `attempt_attributes` holds in its unused places).
  constexpr attempt_attribute() noexcept = default;
  /// An integer attribute.
  constexpr attempt_attribute(std::string_view key, std::int64_t value) noexcept
      : key_(key), value_(value) {}
  /// A text attribute (an empty text stays a text).
  constexpr attempt_attribute(std::string_view key, std::string_view value) noexcept
      : key_(key), text_(value.data() != nullptr ? value.data() : ""),
        value_(static_cast<std::int64_t>(value.size())) {}

  /// Its key.
  constexpr std::string_view key() const noexcept { return key_; }
  /// Whether its value is a text (else an integer).
  constexpr bool is_text() const noexcept { return text_ != nullptr; }
  /// Its integer value; 0 for a text.
  constexpr std::int64_t integer() const noexcept { return is_text() ? 0 : value_; }
  /// Its text value; empty for an integer.
  constexpr std::string_view text() const noexcept {
    return is_text() ? std::string_view(text_, static_cast<std::size_t>(value_))
                     : std::string_view();
  }

private:
  std::string_view key_{};
  const char* text_ = nullptr; // a text's characters; null for an integer
  std::int64_t value_ = 0;     // an integer's value, or a text's size
};

/// What an attempt tells its observers about itself (`attempt_context::set_attribute`), handed
/// to them with its end (`attempt_finished_event::attributes`): at most `capacity` attributes,
/// stored inline (no allocation, ever), in the order their keys were first set.
///
/// For observers: the loop and the hedge only carry them (and fill 0.2's event fields from two).
/// `coretry::curl` and `coretry::beast` set `coretry::http::attribute::request_method` and, when
/// a response came, `response_status_code`; `prometheus_observer` builds its HTTP metric on them.
///
/// **Rules.** Setting a key that is already there replaces its value, type included: the last
/// write wins. Setting a new key when `capacity` attributes are there, or an empty key, changes
/// nothing and is counted in `dropped()` (so an observer can tell). Keys are compared by their
/// characters.
///
/// **Lifetimes.** A key must have static storage. A text value must stay valid until the
/// attempt's `on_attempt_finished` has returned: the library copies the views (never the
/// characters) into the event, delivers it once the attempt has returned, and reads them no
/// later. A string literal, or a string owned by what outlives the attempt (the request the
/// operation holds, as `coretry::curl` does), qualifies; a local of the attempt's coroutine
/// does not. An observer that keeps a text past its call copies the characters.
///
/// Not thread-safe: one attempt's attributes are set by that attempt, and hedged copies each
/// have their own.
class attempt_attributes {
public:
  /// The most attributes one attempt holds: room for the two the HTTP adapters set, and two of
  /// the caller's.
  static constexpr std::size_t capacity = 4;
  /// Iterates over the attributes, in the order their keys were first set.
  using const_iterator = const attempt_attribute*;

  /// Sets `key` to the integer `value` (see the class comment for the rules).
  void set(std::string_view key, std::int64_t value) noexcept {
    put(attempt_attribute(key, value));
  }
  /// Sets `key` to the text `value`, a view that must stay valid as the class comment says.
  void set(std::string_view key, std::string_view value) noexcept {
    put(attempt_attribute(key, value));
  }
  /// Refused: a temporary string would be gone before an observer reads the view
  /// (`set(key, std::to_string(n))`). Keep the text where it outlives the attempt's event.
  template <class S>
  requires(!std::is_lvalue_reference_v<S> &&
           std::same_as<std::remove_cv_t<S>, std::string>) void set(std::string_view key,
                                                                    S&& value) = delete;

  /// The attribute with `key`, or null.
  const attempt_attribute* find(std::string_view key) const noexcept {
    for (const attempt_attribute& a : *this)
      if (a.key() == key)
        return &a;
    return nullptr;
  }

  /// The first attribute.
  const_iterator begin() const noexcept { return items_; }
  /// Past the last attribute.
  const_iterator end() const noexcept { return items_ + size_; }
  /// How many attributes there are.
  std::size_t size() const noexcept { return size_; }
  /// Whether there are none.
  bool empty() const noexcept { return size_ == 0; }
  /// How many sets changed nothing: a new key while full, or an empty key.
  std::size_t dropped() const noexcept { return dropped_; }

private:
  void put(const attempt_attribute& a) noexcept {
    if (a.key().empty()) {
      ++dropped_;
      return;
    }
    for (std::size_t i = 0; i < size_; ++i)
      if (items_[i].key() == a.key()) {
        items_[i] = a;
        return;
      }
    if (size_ == capacity) {
      ++dropped_;
      return;
    }
    items_[size_++] = a;
  }

  attempt_attribute items_[capacity]{};
  std::uint32_t size_ = 0;
  std::uint32_t dropped_ = 0;
};

/// Passed to operations that take it (`op(attempt_context&)`), once per attempt.
class attempt_context {
public:
  /// The context of attempt `number` (from 1); the loop makes one per attempt.
  explicit attempt_context(unsigned number) noexcept : number_(number) {}

  /// This attempt's number, from 1.
  unsigned number() const noexcept { return number_; }

  /// Asks for at least `hint` before the next attempt, as a server does with `Retry-After`.
  /// The loop waits `max(backoff delay, hint)`, above the backoff's cap too; a hint above
  /// `retry_policy::max_retry_after` stops it with `errc::retry_after_too_long`, one that ends at
  /// or after the deadline with `errc::retry_after_past_deadline`. The largest hint wins;
  /// negative hints are ignored.
  void retry_after(std::chrono::nanoseconds hint) noexcept {
    if (hint > hint_)
      hint_ = hint;
  }

  /// The hint given so far (zero if none).
  std::chrono::nanoseconds retry_after() const noexcept { return hint_; }

  /// Tells observers (`attempt_finished_event::attributes`) the integer attribute `key` of this
  /// attempt. `key` has static storage; the last write of a key wins; past
  /// `attempt_attributes::capacity` keys, a new one is dropped (and counted). The loop reads
  /// none of them.
  void set_attribute(std::string_view key, std::int64_t value) noexcept {
    attributes_.set(key, value);
  }
  /// Tells observers the text attribute `key` of this attempt, as above. `value` is a view that
  /// must stay valid until the attempt's `on_attempt_finished` has returned (a literal, or a
  /// string the operation owns beyond the attempt: `attempt_attributes`, "Lifetimes").
  void set_attribute(std::string_view key, std::string_view value) noexcept {
    attributes_.set(key, value);
  }
  /// Refused: a temporary string would be gone before an observer reads the view
  /// (`set_attribute(key, std::to_string(n))`). Keep the text where it outlives the event.
  template <class S>
  requires(!std::is_lvalue_reference_v<S> &&
           std::same_as<std::remove_cv_t<S>, std::string>) void set_attribute(std::string_view key,
                                                                              S&& value) = delete;
  /// The attributes set so far.
  const attempt_attributes& attributes() const noexcept { return attributes_; }

  /// 0.2: sets the attributes "http.request.method" to `method` and "http.response.status_code"
  /// to `status` (0: no response), which `coretry::http::attribute` names.
  [[deprecated("use set_attribute(http::attribute::request_method, method) and "
               "set_attribute(http::attribute::response_status_code, status)")]] void
  http(std::string_view method, int status) noexcept {
    attributes_.set("http.request.method", method);
    attributes_.set("http.response.status_code", std::int64_t{status});
  }
  /// 0.2: the text attribute "http.request.method", or empty.
  [[deprecated("use attributes().find(http::attribute::request_method)")]] std::string_view
  http_method() const noexcept {
    const attempt_attribute* a = attributes_.find("http.request.method");
    return a ? a->text() : std::string_view();
  }
  /// 0.2: the integer attribute "http.response.status_code", or 0.
  [[deprecated("use attributes().find(http::attribute::response_status_code)")]] int
  http_status() const noexcept {
    const attempt_attribute* a = attributes_.find("http.response.status_code");
    return a ? static_cast<int>(a->integer()) : 0;
  }

  /// Tells the breaker (`retry_policy::breaker`, through its health classification
  /// `attempt_gate::classify`) what this attempt's outcome says about the upstream, in place of
  /// the error the attempt returns: an attempt whose result is rejected reaches the loop as
  /// `errc::result_rejected`, which a gate cannot tell apart. `coretry::curl` and
  /// `coretry::beast` set the status of every response (`coretry::http::make_status_error`),
  /// whose category places it in `condition::answered` (1xx to 3xx, healthy even when
  /// rejected), `condition::client_error` or `condition::pushback`, or in neither (HTTP 5xx:
  /// unhealthy).
  /// Ignored for an attempt cut by the deadline or its timeout, or cancelled.
  void health_code(const std::error_code& ec) noexcept { health_code_ = ec; }
  /// The code given to `health_code`, or an empty one.
  const std::error_code& health_code() const noexcept { return health_code_; }

private:
  unsigned number_;
  std::chrono::nanoseconds hint_{0};
  std::error_code health_code_{};
  attempt_attributes attributes_{};
};

} // namespace coretry
