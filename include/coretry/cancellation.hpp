#pragma once
/// \file
/// Group cancellation: one source stops any number of in-flight retry operations, from any thread.

#include <memory>

namespace coretry {

namespace detail {
class cancellation_state;

/// A link in a source's list of operations to notify, owned by the operation. `cancel()` takes
/// the list under the source's lock and marks each link `notifying` there; after the lock is
/// released it calls `notify` once for each, on the cancelling thread (it must hand the work to
/// the operation's executor without keeping the operation alive, and must not run it inline),
/// then clears `notifying` under the lock. `cancellation_token::detach` waits for a notice in
/// progress: an owner that unlinks itself before it dies (it must) is never notified after its
/// death, and nothing of it (its strand, its executor) outlives it because of a cancel().
struct cancellation_registration {
  cancellation_registration* prev = nullptr;
  cancellation_registration* next = nullptr;
  void (*notify)(cancellation_registration&) noexcept = nullptr;
  bool linked = false;
  bool notifying = false;
};
} // namespace detail

class cancellation_token;

/// The cancelling side. Copies share one state; `cancel()` is thread-safe and idempotent.
///
/// Typical use: one source per service, its token in every `retry_policy`, and `cancel()` on
/// shutdown. Every operation running with the token completes promptly with
/// `asio::error::operation_aborted`, whether it is in an attempt or sleeping between attempts;
/// an operation started with an already cancelled token completes that way without running an
/// attempt. To drive it from a `std::stop_token`, register
/// `std::stop_callback cb(stop, [source] { source.cancel(); })`.
class cancellation_source {
public:
  cancellation_source();

  /// A token observing this source.
  cancellation_token token() const noexcept;

  /// Requests cancellation of every operation registered now or later. Returns true for the call
  /// that made the request, false if the source was already cancelled. Never blocks on an
  /// operation and calls none of them under its lock: each is notified by a handler posted to its
  /// own executor. A source may outlive the operations and the execution contexts that used it.
  bool cancel() noexcept;

  bool cancelled() const noexcept;

private:
  std::shared_ptr<detail::cancellation_state> state_;
};

/// The observing side, stored in `retry_policy::cancellation`. A default-constructed token is
/// never cancelled and costs nothing.
class cancellation_token {
public:
  cancellation_token() noexcept = default;

  /// Whether a source stands behind this token.
  bool can_be_cancelled() const noexcept { return state_ != nullptr; }
  bool cancelled() const noexcept;

  /// Links `r` into the source. Returns false (and links nothing) when already cancelled.
  bool attach(detail::cancellation_registration& r) const noexcept;
  /// Unlinks `r` if `attach` linked it and `cancel()` has not already taken it out.
  void detach(detail::cancellation_registration& r) const noexcept;

private:
  friend class cancellation_source;
  explicit cancellation_token(std::shared_ptr<detail::cancellation_state> s) noexcept
      : state_(std::move(s)) {}
  std::shared_ptr<detail::cancellation_state> state_;
};

} // namespace coretry
