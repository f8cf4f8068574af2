// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Group cancellation: one source stops any number of in-flight retry operations, from any thread.

#include <coretry/export.hpp>

#include <memory>

namespace coretry {

namespace detail {
class cancellation_state;
struct cancellation_registration;

/// A notice for every operation of one execution context, posted once to that context by
/// `cancel()` (see `cancellation_registration::batched`). Holds the source weakly.
struct CORETRY_API cancellation_batch {
  std::weak_ptr<cancellation_state> state;
  unsigned index = 0;
  void operator()() const noexcept;
};

/// How an operation takes part in batched notices. All three are called by the source.
struct batch_notice_ops {
  /// Posts `batch` to the operation's execution context (never runs it inline); called outside
  /// the source's lock, with the operation kept alive by `notifying`.
  void (*post)(cancellation_registration&, cancellation_batch) noexcept;
  /// The operation, pinned until its batch has notified it (empty when it is dying already);
  /// called under the source's lock while it is linked. The batch drops it with no lock held.
  std::shared_ptr<cancellation_registration> (*handle)(cancellation_registration&) noexcept;
  /// Cancels the operation; called by the batch on the operation's execution context, with the
  /// operation pinned by the caller and no lock held (it may run the operation inline).
  void (*notify_here)(cancellation_registration&) noexcept;
};

/// A link in a source's list of operations to notify, owned by the operation.
///
/// One by one (`batched` null): `cancel()` takes the list under the source's lock and marks each
/// link `notifying` there; after the lock is released it calls `notify` once for each, on the
/// cancelling thread (it must hand the work to the operation's executor without keeping the
/// operation alive, and must not run it inline), then clears `notifying` under the lock.
///
/// Batched (`batched` set, `context` naming the operation's execution context): `cancel()` moves
/// the links into one list per context (a few contexts at most; further ones are notified one by
/// one) and posts one `cancellation_batch` per context, through one of its operations. The batch
/// runs on that context, takes its links a chunk at a time under the lock (each unlinked, its
/// operation pinned unless it is dying already), and notifies each one there: no allocation,
/// post or lock per operation on the cancelling thread. A batch that never runs (its context is
/// destroyed) leaves its links to be unlinked by their owners as they die.
///
/// Either way `cancellation_token::detach` waits for a notice in progress and unlinks from
/// whichever list holds the link: an owner that unlinks itself before it dies (it must) is
/// never notified after its death, and nothing of it (its strand, its executor) outlives it
/// because of a cancel().
struct cancellation_registration {
  cancellation_registration* prev = nullptr;
  cancellation_registration* next = nullptr;
  void (*notify)(cancellation_registration&) noexcept = nullptr;
  const batch_notice_ops* batched = nullptr;
  const void* context = nullptr; ///< with `batched`: the operation's execution context
  bool linked = false;
  bool notifying = false;
  unsigned char list = 0; ///< while linked: 0, the live list; k > 0, batch k - 1
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
class CORETRY_API cancellation_source {
public:
  cancellation_source();

  /// A token observing this source.
  cancellation_token token() const noexcept;

  /// Requests cancellation of every operation registered now or later. Returns true for the call
  /// that made the request, false if the source was already cancelled. Never blocks on an
  /// operation and calls none of them under its lock: each is notified by a handler posted to its
  /// own executor. A source may outlive the operations and the execution contexts that used it.
  bool cancel() noexcept;

  /// Whether `cancel()` was called.
  bool cancelled() const noexcept;

private:
  std::shared_ptr<detail::cancellation_state> state_;
};

/// The observing side, stored in `retry_policy::cancellation`. A default-constructed token is
/// never cancelled and costs nothing.
class CORETRY_API cancellation_token {
public:
  cancellation_token() noexcept = default;

  /// Whether a source stands behind this token.
  bool can_be_cancelled() const noexcept { return state_ != nullptr; }
  /// Whether the source behind this token was cancelled (false without one).
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
