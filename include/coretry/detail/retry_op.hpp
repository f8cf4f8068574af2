// SPDX-License-Identifier: BSL-1.0
#pragma once
// How a retry operation starts and completes: the initiation behind async_retry (and behind
// retry_async when something may cancel it), the state shared with the handlers that cancel it,
// and the completion that reports once. Private: include <coretry/retry.hpp>.
//
// Three paths, chosen once per operation by `needs_control`:
// - retry_async with nothing to cancel it and no timed attempts: the loop is awaited in the
//   caller's coroutine, which cancels it the usual way (an enclosing `||`, a bound slot);
// - async_retry likewise: the loop is co_spawned on the executor, no state, no strand;
// - otherwise (a caller's slot, a group token, an attempt timeout or a deadline): the loop is
//   co_spawned on a strand, with an `op_state` shared by the loop and every handler that may
//   cancel it. Everything that touches the loop's cancellation runs on that strand.
//
// Exactly once: co_spawn calls the completion once, or destroys it uncalled with its execution
// context. The state unlinks itself from a group source when it dies, however it dies; a
// cancellation reaches the loop only once the loop runs (`arm`) and until it ends (`disarm`).

#include <coretry/cancellation.hpp>
#include <coretry/detail/asio.hpp>
#include <coretry/detail/deadline_queue.hpp>
#include <coretry/detail/retry_loop.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <system_error>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace coretry::detail {

// --- Completion signatures -------------------------------------------------------------------

/// What async_retry delivers with each outcome: `T`, or `std::optional<T>` when `T` cannot be
/// default constructed (there is no value to go with an error then).
template <class T>
using delivered_t = std::conditional_t<std::is_void_v<T> || std::is_default_constructible_v<T>, T,
                                       std::optional<T>>;

template <class T> struct signatures {
  using exception = void(std::exception_ptr, delivered_t<T>);
  using error = void(asio_error_code, delivered_t<T>);
};
template <> struct signatures<void> {
  using exception = void(std::exception_ptr);
  using error = void(asio_error_code);
};
template <class T> using exception_signature_t = typename signatures<T>::exception;
template <class T> using error_signature_t = typename signatures<T>::error;

template <class T> delivered_t<T> take_value(loop_result<T>& r) {
  if constexpr (std::is_same_v<delivered_t<T>, T>)
    return r.value ? std::move(*r.value) : T{};
  else
    return std::move(r.value);
}

/// co_spawn hands over an exception only when the loop could not run at all; the loop itself
/// reports through its result. Fold the two into one result.
template <class T> void absorb(loop_result<T>& r, std::exception_ptr e) {
  if (!e)
    return;
  try {
    std::rethrow_exception(e);
  } catch (const std::system_error& error) {
    r.error = error.code();
#if CORETRY_ASIO_DISTINCT_SYSTEM_ERROR
  } catch (const asio_system_error& error) {
    r.error = error.code();
#endif
  } catch (...) {
    r.error = errc::unexpected_exception;
    r.exception = std::current_exception();
  }
}

/// Delivers to a handler taking `(exception_ptr[, T])`: retry_async's, through use_awaitable.
/// What an operation or hook threw is rethrown as itself.
struct deliver_exception {
  template <class T, class Handler> static void deliver(Handler& h, loop_result<T>& r) {
    std::exception_ptr e = r.exception;
    if (!e && r.error)
      e = std::make_exception_ptr(std::system_error(r.error));
    if constexpr (std::is_void_v<T>)
      std::move(h)(std::move(e));
    else
      std::move(h)(std::move(e), take_value(r));
  }
};

/// Delivers to a handler taking `(error_code[, T])`: async_retry's.
struct deliver_error_code {
  template <class T, class Handler> static void deliver(Handler& h, loop_result<T>& r) {
    if constexpr (std::is_void_v<T>)
      std::move(h)(to_asio_error(r.error));
    else
      std::move(h)(to_asio_error(r.error), take_value(r));
  }
};

// --- The controlled path's state -------------------------------------------------------------

/// `ex.target<T>()`, checked: Asio 1.22's `any_executor::target` casts to whatever type it is
/// asked for without comparing it with the target's.
template <class T> const T* target_as(const asio::any_io_executor& ex) noexcept {
  return ex.target_type() == typeid(T) ? ex.template target<T>() : nullptr;
}

template <class E> struct is_strand : std::false_type {};
template <class E> struct is_strand<asio::strand<E>> : std::true_type {};

/// Calls `f` with the executor the operation is to be serialized on: `ex` itself when it is a
/// strand already (the caller's own strand: the loop then runs on it, not on a strand of it),
/// else a new strand of the concrete executor inside `ex` when that is an io_context's or a
/// thread_pool's (a strand of a concrete executor fits in `any_io_executor`'s small buffer, so
/// copying the loop's executor never allocates), else a new strand of `ex`.
template <class Executor, class F> void with_serializing_executor(const Executor& ex, F&& f) {
  if constexpr (is_strand<Executor>::value) {
    return f(ex);
  } else if constexpr (std::is_same_v<Executor, asio::any_io_executor>) {
    using io = asio::io_context::executor_type;
    using io_tracked = std::decay_t<decltype(asio::prefer(
        std::declval<const io&>(), asio::execution::outstanding_work.tracked))>;
    using pool = asio::thread_pool::executor_type;
    if (const auto* t = target_as<asio::strand<io>>(ex))
      return f(*t);
    if (const auto* t = target_as<asio::strand<pool>>(ex))
      return f(*t);
    if (const auto* t = target_as<asio::strand<asio::any_io_executor>>(ex))
      return f(*t);
    if (const auto* t = target_as<io_tracked>(ex))
      return f(asio::make_strand(*t));
    if (const auto* t = target_as<io>(ex))
      return f(asio::make_strand(*t));
    if (const auto* t = target_as<pool>(ex))
      return f(asio::make_strand(*t));
  }
  f(asio::make_strand(ex));
}

/// Shared by the loop, its deadline queue entry, the caller's slot handler and a group
/// source. Every member but the registration links is touched only on `strand`.
///
/// A cancellation reaches the loop in one of two ways: while it sleeps, by cancelling its sleep
/// timer (the sleep is not bound to the coroutine's cancellation slot, so a sleeping operation
/// holds no cancellation handler and a cancel-all costs no emit through co_spawn's slots); in an
/// attempt, by a terminal emit on `signal`, which co_spawn bound to the loop.
template <class Strand, class Timer>
struct op_state final
    : cancellation_registration,
      deadline_entry<typename Timer::time_point>, ///< the timed attempt's, in the deadline queue
      std::enable_shared_from_this<op_state<Strand, Timer>> {
  op_state(Strand s, cancellation_token t, bool timed_attempts)
      : strand(std::move(s)), token(std::move(t)), timed(timed_attempts) {
    notify = &op_state::notify_from_group;
    this->claim = &op_state::claim_deadline;
    this->fire = &op_state::fire_deadline;
    batched = &batch_ops;
    context = static_cast<const asio::execution_context*>(
        &asio::query(strand.get_inner_executor(), asio::execution::context));
  }
  ~op_state() {
    queue_type::forget(*this);
    token.detach(*this);
  }
  op_state(const op_state&) = delete;
  op_state& operator=(const op_state&) = delete;

  // --- Called by the loop, on the strand.

  /// The loop runs: link to the group and let cancellations emit. False when already cancelled.
  bool arm() {
    armed = true;
    if (!cancelled && token.can_be_cancelled() && !token.attach(*this))
      cancelled = true;
    return !cancelled;
  }
  /// The loop is done: nothing may emit into it any more.
  void disarm() {
    armed = false;
    token.detach(*this);
  }
  /// The loop is about to sleep on `t`: a cancellation now cancels `t`. False when cancelled.
  bool sleep_on(Timer& t) noexcept {
    sleeper = &t;
    return !cancelled;
  }
  /// The sleep ended (or its frame is going away).
  void woke() noexcept { sleeper = nullptr; }
  /// A timed attempt starts: its limit goes into the context's deadline queue.
  void start_attempt(nanoseconds limit) {
    if (!timed)
      return;
    if (!deadlines)
      deadlines = &queue_type::of(strand.get_inner_executor());
    in_attempt = true;
    timed_out = false;
    deadlines->push(*this, due_after(limit), ++generation);
  }
  /// True when the attempt's deadline, not the caller, cut the attempt.
  bool end_attempt() {
    if (!timed)
      return false;
    in_attempt = false;
    deadlines->remove(*this);
    return timed_out && !cancelled;
  }

  // --- Cancellation, from anywhere: each hops to the strand.

  void cancel_on_strand() {
    asio::dispatch(strand, [self = this->shared_from_this()] { self->cancel(); });
  }

  Strand strand;
  /// Bound to the loop's co_spawn; shared with its completion, because co_spawn (Asio 1.38) may
  /// still clear its slot after the loop's frame, which owns this state, is gone.
  std::shared_ptr<asio::cancellation_signal> signal = std::make_shared<asio::cancellation_signal>();
  bool cancelled = false; ///< the caller's slot or the group asked

private:
  void cancel() {
    if (cancelled)
      return;
    cancelled = true;
    if (!armed)
      return;
    if (sleeper)
      sleeper->cancel();
    else
      signal->emit(asio::cancellation_type::terminal);
  }
  void time_out(std::uint64_t g) {
    if (armed && in_attempt && generation == g && !cancelled) {
      timed_out = true;
      signal->emit(asio::cancellation_type::terminal);
    }
  }

  // The attempt's entry in the deadline queue (deadline_queue.hpp). Due: only that hops to the
  // strand; an attempt that ends in time costs an unlink and no handler.
  using queue_type =
      deadline_queue<typename Timer::template rebind_executor<asio::any_io_executor>::other>;
  static std::shared_ptr<void> claim_deadline(typename queue_type::entry& e) noexcept {
    return std::static_pointer_cast<void>(from_entry(e).weak_from_this().lock());
  }
  static void fire_deadline(typename queue_type::entry& e, std::uint64_t g) noexcept {
    auto& self = from_entry(e);
    asio::dispatch(self.strand, [s = self.shared_from_this(), g] { s->time_out(g); });
  }
  static op_state& from_entry(typename queue_type::entry& e) noexcept {
    return static_cast<op_state&>(e);
  }
  typename queue_type::time_point due_after(nanoseconds limit) const {
    using clock = typename queue_type::clock_type;
    const auto now = clock::now();
    const auto left = std::chrono::ceil<typename clock::duration>(limit);
    return left >= clock::time_point::max() - now ? clock::time_point::max() : now + left;
  }

  // Always a post: the source may be cancelled from a hook running on this very strand. Weak:
  // a notice never keeps the state (and its strand) alive past its execution context; the
  // state's destructor waits in `detach` until this has returned.
  static void notify_from_group(cancellation_registration& r) noexcept {
    auto& self = static_cast<op_state&>(r);
    asio::post(self.strand, [w = self.weak_from_this()] {
      if (auto s = w.lock())
        s->cancel();
    });
  }

  // Batched group notices (cancellation.hpp): one handler per execution context enters each
  // operation's strand from that context's own thread, inline when the strand is idle.
  static void post_batch(cancellation_registration& r, cancellation_batch batch) noexcept {
    asio::post(static_cast<op_state&>(r).strand.get_inner_executor(), std::move(batch));
  }
  static std::weak_ptr<cancellation_registration> handle(cancellation_registration& r) noexcept {
    return static_cast<op_state&>(r).weak_from_this();
  }
  static void notify_here(cancellation_registration& r) noexcept {
    auto& self = static_cast<op_state&>(r);
    asio::dispatch(self.strand, [w = self.weak_from_this()] {
      if (auto s = w.lock())
        s->cancel();
    });
  }
  static constexpr batch_notice_ops batch_ops{&post_batch, &handle, &notify_here};

  cancellation_token token;
  queue_type* deadlines = nullptr; ///< found at the first timed attempt
  Timer* sleeper = nullptr;        ///< the loop's sleep timer, while it sleeps
  std::uint64_t generation = 0;    ///< of the timed attempt in flight
  bool timed;
  bool armed = false;
  bool in_attempt = false;
  bool timed_out = false;
};

/// The completion co_spawn calls. It never owns the operation's state: the loop's frame does, so
/// that the state (its strand, its attempt timer) dies on the operation's side, never on the
/// handler's executor (`use_future`'s runs on the system executor, possibly after the
/// operation's io_context is gone).
template <class T, class Handler, class State, class Executor, class Deliver>
class retry_completion {
public:
  retry_completion(Handler h, State* s, Executor ex)
      : handler_(std::move(h)), executor_(std::move(ex)) {
    if constexpr (!std::is_void_v<State>)
      if (s) {
        signal_ = s->signal;
        slot_ = signal_->slot();
      }
  }

  using executor_type = asio::associated_executor_t<Handler, Executor>;
  executor_type get_executor() const noexcept {
    return asio::get_associated_executor(handler_, executor_);
  }
  using allocator_type = asio::associated_allocator_t<Handler>;
  allocator_type get_allocator() const noexcept { return asio::get_associated_allocator(handler_); }
  using cancellation_slot_type = asio::cancellation_slot;
  cancellation_slot_type get_cancellation_slot() const noexcept { return slot_; }

  void operator()(std::exception_ptr e, loop_result<T> r) {
    absorb(r, std::move(e));
    if constexpr (!std::is_void_v<State>) {
      auto user_slot = asio::get_associated_cancellation_slot(handler_);
      if (user_slot.is_connected())
        user_slot.clear();
    }
    Deliver::template deliver<T>(handler_, r);
  }

private:
  Handler handler_;
  std::shared_ptr<asio::cancellation_signal> signal_; ///< outlives co_spawn's use of slot_
  asio::cancellation_slot slot_;
  Executor executor_;
};

/// Tells `initiate_retry` to run on the handler's associated executor: for `use_awaitable`, the
/// awaiting coroutine's, known only once the initiation runs inside it.
struct handler_executor {};

template <class Timer, class T, class Deliver> struct initiate_retry {
  template <class Handler, class Op, class Policy>
  void operator()(Handler&& handler, handler_executor, Op op, Policy policy, retry_stats* stats,
                  op_origin origin) const {
    const auto ex = asio::get_associated_executor(handler);
    (*this)(std::forward<Handler>(handler), ex, std::move(op), std::move(policy), stats,
            std::move(origin));
  }

  template <class Handler, class Executor, class Op, class Policy>
  void operator()(Handler&& handler, const Executor& ex, Op op, Policy policy, retry_stats* stats,
                  op_origin origin) const {
    using handler_type = std::decay_t<Handler>;
    auto user_slot = asio::get_associated_cancellation_slot(handler);
    if (!needs_control(policy_of(policy), user_slot.is_connected())) {
      using completion = retry_completion<T, handler_type, void, Executor, Deliver>;
      asio::co_spawn(ex,
                     retry_loop<Timer, T, false>(std::move(op), std::move(policy), stats,
                                                 std::move(origin), nullptr),
                     completion(std::forward<Handler>(handler), nullptr, ex));
      return;
    }
    with_serializing_executor(ex, [&](const auto& strand) {
      start_controlled(std::forward<Handler>(handler), ex, strand, std::move(op), std::move(policy),
                       stats, std::move(origin), user_slot);
    });
  }

  template <class Handler, class Executor, class Strand, class Op, class Policy, class Slot>
  static void start_controlled(Handler&& handler, const Executor& ex, const Strand& strand, Op op,
                               Policy policy, retry_stats* stats, op_origin origin,
                               Slot user_slot) {
    using handler_type = std::decay_t<Handler>;
    using state_type = op_state<Strand, Timer>;
    const retry_policy& p = policy_of(policy);
    const bool timed = p.deadline != unlimited || p.attempt_timeout != unlimited;
    auto state = std::make_shared<state_type>(strand, p.cancellation, timed);
    if (user_slot.is_connected()) {
      // Any cancellation type stops the loop (a coroutine heeds only terminal ones). Weak: a
      // slot that outlives the operation's execution context must not keep it, nor reach it.
      user_slot.assign([w = std::weak_ptr<state_type>(state)](asio::cancellation_type) {
        if (auto s = w.lock())
          s->cancel_on_strand();
      });
    }
    // The loop's frame owns the state (see retry_completion).
    state_type* control = state.get();
    auto loop = retry_loop<Timer, T, false>(std::move(op), std::move(policy), stats,
                                            std::move(origin), std::move(state));
    asio::co_spawn(strand, std::move(loop),
                   retry_completion<T, handler_type, state_type, Executor, Deliver>(
                       std::forward<Handler>(handler), control, ex));
  }
};

template <class T> asio::awaitable<T> take_optional(asio::awaitable<std::optional<T>> a) {
  co_return std::move(*co_await std::move(a));
}

/// retry_async's body. Takes its arguments by reference: retry_async owns the operation until
/// the loop's frame (or the initiation) moves it in, and the policy is copied (or moved) once,
/// straight into the frame's parameter.
template <class Timer, class T, class Op, class Policy>
asio::awaitable<T> retry_entry(Op&& op, Policy&& policy, retry_stats* stats) {
  using held = held_policy_t<Policy>;
  op_origin origin = make_origin<typename Timer::clock_type>(policy_of(policy), stats != nullptr);
  if (!needs_control(policy_of(policy), false))
    return retry_loop<Timer, T, true, std::decay_t<Op>, held>(
        std::move(op), std::forward<Policy>(policy), stats, std::move(origin), nullptr);
  // The initiation itself, awaited: no wrapper coroutine (and no extra frame) in between.
  auto a = asio::async_initiate<const asio::use_awaitable_t<>&, exception_signature_t<T>>(
      initiate_retry<Timer, T, deliver_exception>{}, asio::use_awaitable, handler_executor{},
      std::move(op), held(std::forward<Policy>(policy)), stats, std::move(origin));
  if constexpr (std::is_same_v<delivered_t<T>, T>)
    return a;
  else
    return take_optional<T>(std::move(a));
}

} // namespace coretry::detail
