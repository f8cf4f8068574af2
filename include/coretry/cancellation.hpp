#pragma once
/// \file
/// Group cancellation: one source stops any number of in-flight retry operations, from any thread.

#include <memory>

namespace coretry {

namespace detail {
class cancellation_state;

/// A link in a source's list of operations to notify, owned by the operation. `cancel()` takes
/// the list under the source's lock, calling `pin` on each link there: `pin` must keep the
/// operation alive until `notify` has run, or return false when the operation is already being
/// destroyed (it then gets no notice). After the lock is released, `notify` runs once for each
/// pinned link, on the cancelling thread; it must hand the work to the operation's executor and
/// drop the pin. An owner unlinks its registration (`cancellation_token::detach`) before it dies.
///
/// Batching (optional): a link that sets `batch_key` (the execution context its notice runs on)
/// and `notify_batch` may be notified together with every other pinned link of the same key and
/// the same `notify_batch`: `cancel()` chains them through `next` and calls `notify_batch` once
/// with the first, which must hand one handler for the whole chain to that context (and drop
/// every pin, whether the handler runs or is destroyed uncalled). A million operations on one
/// `io_context` then cost one post, not a million.
struct cancellation_registration {
  cancellation_registration* prev = nullptr;
  cancellation_registration* next = nullptr;
  bool (*pin)(cancellation_registration&) noexcept = nullptr;
  void (*notify)(cancellation_registration&) noexcept = nullptr;
  const void* batch_key = nullptr;
  void (*notify_batch)(cancellation_registration* first) noexcept = nullptr;
  bool linked = false;
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
  /// operation and calls none of them under its lock: the operations are notified by handlers
  /// posted to their own executors, one handler per execution context for those that allow it. A source may outlive the operations and the execution contexts that used it.
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
