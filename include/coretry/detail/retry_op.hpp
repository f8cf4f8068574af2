// SPDX-License-Identifier: BSL-1.0
#pragma once
// The composed retry operation: the initiation (`initiate_retry`) behind `async_retry` with any
// token, behind `retry_async` (`retry_entry`) whenever the operation is controlled, and behind
// the fallback (fallback_op.hpp). Private: include <coretry/retry.hpp>.
//
// Paths, chosen once per operation by `needs_control` (retry_loop.hpp): an operation is
// controlled when something may cancel it from outside (the caller's slot, a group token) or
// its attempts are timed (`deadline`, `attempt_timeout`).
// - `retry_async`, not controlled: the loop is a coroutine awaited in the caller's
//   (`retry_loop`, retry_loop.hpp), cancelled through the awaiting coroutine's state.
// - Everything else: one state, allocated once with the handler's allocator, running the loop's
//   steps (`loop_core`, retry_loop.hpp) from completion handlers. A controlled operation's
//   state is of another type, which also holds a control block (`engine_control`: the
//   attempt's cancellation signal, its link into a group source, its entry in the context's
//   deadline queue: deadline_queue.hpp) in the same allocation; it runs on a strand of its
//   executor unless that executor's context runs one thread only (`runs_on_one_thread`).
//
// The state, in layers, so that most of it is compiled once per timer, result, policy,
// executor and allocator type rather than once per call site:
// - `op_steps` / `op_frame`: what the intermediate handlers (the posted start, a sleep's wait,
//   the dispatched cancel and time-out, a token attempt's handler, a spawned attempt's
//   completion) see, through one virtual call each;
// - `retry_engine`: the loop, the control block, the sleep timer, cancellation and the attempt
//   deadline; it names neither the operation nor the caller's handler;
// - `retry_op`: adds the operation (`send`: a token attempt is initiated with a handler of the
//   state's, an awaitable one is `co_spawn`ed for that attempt only), the handler, outstanding
//   work on the handler's executor, and the delivery (`deliver`).
//
// The start is dispatched (`retry_engine::start`): when the calling thread runs the operation's
// executor already, the first step, and the first attempt, run inside the initiating function;
// otherwise it is posted. Either way the handler is never called from inside the initiating
// function: an outcome decided there is submitted as an immediate completion.
//
// Exactly once: the state completes once (`finish`, dispatching the handler through its
// associated executor), or is destroyed uncalled with the last pending handler that holds it
// (the context's teardown). It unlinks itself from a group source and from the deadline queue
// when it dies, however it dies. A cancellation is looked for before each attempt is sent.
// What an attempt throws is its outcome by attempt_shape.hpp's one rule.

#include <coretry/cancellation.hpp>
#include <coretry/detail/asio.hpp>
#include <coretry/detail/deadline_queue.hpp>
#include <coretry/detail/fallback_allocator.hpp>
#include <coretry/detail/retry_loop.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>

#include <atomic>
#include <cassert>
#include <concepts>
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

/// A completion token for the token front ends whose attempts are `Op`s: Asio's own constraint
/// on its initiating functions. An argument that is no token (a `retry_stats`, say) then picks
/// the other overload, and a handler of the wrong signature is refused at the call.
template <class CompletionToken, class Op>
concept token_for = asio::completion_token_for<CompletionToken, error_signature_t<op_result_t<Op>>>;

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
  take_fatal_exception(r, std::move(e));
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

/// The `io_context` behind `ex` when the executor's type says so (an `io_context`'s executor,
/// or one held in an `any_io_executor`), else null.
template <class E> asio::io_context* io_context_behind(const E& ex) noexcept {
  if constexpr (std::is_same_v<E, asio::any_io_executor>) {
    using io = asio::io_context::executor_type;
    using io_tracked = std::decay_t<decltype(asio::prefer(
        std::declval<const io&>(), asio::execution::outstanding_work.tracked))>;
    if (const auto* t = target_as<io>(ex))
      return &t->context();
    if (const auto* t = target_as<io_tracked>(ex))
      return &t->context();
    return nullptr;
  } else if constexpr (requires {
                         { ex.context() } -> std::same_as<asio::io_context&>;
                       }) {
    return &ex.context();
  } else {
    (void)ex;
    return nullptr;
  }
}

/// Whether `ex` runs its handlers on one thread only: an `io_context` (or a one-thread
/// `thread_pool`) made with the concurrency hint 1, which promises just that. An operation on it
/// needs no strand: a cancellation from another thread reaches it through a post, and everything
/// else (its sleep, its attempts, its attempt timer, a group's batched notice) runs on that
/// thread already.
///
/// Asked once per controlled operation, so it must be cheap. Before Asio 1.33 an `io_context`'s
/// scheduler is its `impl_`, which `use_service<io_context_impl>(io_context&)` returns without
/// the service registry's mutex and search (two locks per operation through `has_service` and
/// `use_service` on the `execution_context`); other contexts (a `thread_pool`) still go through
/// the registry. From 1.33 the hint is read from the context's configuration, one registry lookup.
template <class E> bool runs_on_one_thread(const E& ex) noexcept {
#if defined(ASIO_HAS_IOCP) || defined(BOOST_ASIO_HAS_IOCP)
  (void)ex;
  return false;
#else
  if constexpr (is_strand<E>::value) {
    return false; // serializing already (with_serializing_executor keeps it)
  } else if constexpr (asio::can_query<const E&, asio::execution::context_t>::value) {
#if CORETRY_ASIO_HAS_CONFIG
    // Asio 1.33 and later keep the hint in the context's configuration.
    asio::execution_context& ctx = asio::query(ex, asio::execution::context);
    return asio::config(ctx).get("scheduler", "concurrency_hint", 0) == 1;
#else
    if (asio::io_context* io = io_context_behind(ex))
      return asio::use_service<asio::detail::io_context_impl>(*io).concurrency_hint() == 1;
    asio::execution_context& ctx = asio::query(ex, asio::execution::context);
    return asio::has_service<asio::detail::scheduler>(ctx) &&
           asio::use_service<asio::detail::scheduler>(ctx).concurrency_hint() == 1;
#endif
  } else {
    (void)ex;
    return false;
  }
#endif
}

/// The executor under `e`: a strand's inner executor, or `e` itself.
template <class E> auto inner_executor(const E& e) {
  if constexpr (is_strand<E>::value)
    return e.get_inner_executor();
  else
    return e;
}

struct no_executor {};

/// Outstanding work on `e`, held until the operation completes: `prefer(e, tracked)` for a
/// standard executor, an `executor_work_guard` for an older-style one (`io_context::strand`),
/// which has no `outstanding_work` property.
template <class E> auto track_work(const E& e) {
  if constexpr (asio::execution::is_executor<E>::value)
    return asio::prefer(e, asio::execution::outstanding_work.tracked);
  else
    return asio::executor_work_guard<E>(e);
}
template <class E> using work_t = decltype(track_work(std::declval<const E&>()));

// --- The state as its intermediate handlers see it ---------------------------------------------
//
// The operation's own handlers (its start when posted, its sleeps, the dispatched cancel and
// time-out, a token attempt's handler, a spawned attempt's completion) hold the state through
// `op_steps` or `op_frame`, bases that name neither the operation nor the caller's handler. Asio
// instantiates its handler machinery (a post, a strand's queue, a timer's wait, co_spawn) once
// per handler type: so once per executor, allocator and result type here, and not once more for
// every call site. Each step costs one virtual call.

/// The steps an intermediate handler takes on the state (`retry_op` implements them).
class op_steps {
public:
  using ptr = std::shared_ptr<op_steps>;
  /// The posted start ran, or a sleep ended.
  virtual void resumed(ptr self) = 0;
  /// On the operation's executor: cancels whatever runs.
  virtual void cancel() = 0;
  /// From the caller's slot, on any thread: marks the operation cancelled, then dispatches
  /// `cancel` to the operation's executor.
  virtual void slot_cancelled(ptr self) = 0;
  /// On the operation's executor: the deadline of timed attempt `generation` came due.
  virtual void time_out(std::uint64_t generation) = 0;
  /// A spawned (awaitable) attempt ended; `e` when co_spawn could not run it at all.
  virtual void spawned_attempt_done(ptr self, std::exception_ptr e) = 0;
  /// A token attempt's handler ran and stored its outcome.
  virtual void token_attempt_done(ptr self) = 0;

protected:
  op_steps() = default;
  op_steps(const op_steps&) = delete;
  op_steps& operator=(const op_steps&) = delete;
  ~op_steps() = default;
};

/// The operation whose first step runs inside its initiating function on this thread, if any
/// (`retry_engine::start`). Should it complete that soon, its handler is submitted as Asio
/// submits an immediate completion, never called from inside the initiating function.
inline thread_local const op_steps* initiating_op = nullptr;

/// Marks `op` as running inside its initiating function on this thread, until destroyed.
class initiation_mark {
public:
  explicit initiation_mark(const op_steps* op) noexcept : previous_(initiating_op) {
    initiating_op = op;
  }
  initiation_mark(const initiation_mark&) = delete;
  initiation_mark& operator=(const initiation_mark&) = delete;
  ~initiation_mark() { initiating_op = previous_; }

private:
  const op_steps* previous_;
};

/// Whether this thread runs `ex` now: inside a strand's handler, or on a thread running the
/// `io_context` or `thread_pool` behind it. False when that cannot be told.
template <class E> bool running_here(const E& ex) noexcept {
  if constexpr (requires { ex.running_in_this_thread(); }) {
    return ex.running_in_this_thread();
  } else if constexpr (std::is_same_v<E, asio::any_io_executor>) {
    using io = asio::io_context::executor_type;
    using pool = asio::thread_pool::executor_type;
    if (const auto* t = target_as<io>(ex))
      return t->running_in_this_thread();
    if (const auto* t = target_as<pool>(ex))
      return t->running_in_this_thread();
    if (const auto* t = target_as<asio::strand<io>>(ex))
      return t->running_in_this_thread();
    if (const auto* t = target_as<asio::strand<asio::any_io_executor>>(ex))
      return t->running_in_this_thread();
    return false;
  } else {
    return false;
  }
}

/// What a token attempt's handler needs besides the steps: the operation's executor, the
/// attempt's cancellation slot, the result it stores into, and the claim that ends the attempt
/// once.
template <class Exec, class T> class op_frame : public op_steps {
public:
  const Exec& executor() const noexcept { return exec_; }
  asio::cancellation_slot attempt_slot() const noexcept {
    return signal_ ? signal_->slot() : asio::cancellation_slot();
  }
  /// Ends token attempt `seq` for whichever side comes first: its handler (which may run on
  /// another thread of a context the operation runs on without a strand) or the catch block of
  /// an initiating function that threw. One atomic step decides, as guard_box does.
  bool end_token_attempt(std::uint64_t seq) noexcept {
    std::uint64_t expected = seq - 1;
    return claimed_seq_.compare_exchange_strong(expected, seq, std::memory_order_acq_rel);
  }
  virtual loop_result<T>& result() noexcept = 0;

protected:
  explicit op_frame(const Exec& ex) : exec_(ex) {}
  ~op_frame() = default;

  Exec exec_;
  asio::cancellation_signal* signal_ = nullptr; ///< controlled: bound to each attempt
  std::atomic<std::uint64_t> claimed_seq_{0};   ///< the last token attempt ended
};

/// The handler of a sleep, and of the posted start: the state and the handler's allocator
/// (nothing, for `std::allocator`). Runs on the operation's executor, the timer's.
template <class Alloc> struct resume_step {
  using allocator_type = Alloc;
  op_steps::ptr s;
  [[no_unique_address]] Alloc alloc;
  allocator_type get_allocator() const noexcept { return alloc; }
  template <class... E> void operator()(E&&...) {
    op_steps& st = *s;
    st.resumed(std::move(s));
  }
};

/// Cancels the state (dispatched to its executor).
struct cancel_step {
  op_steps::ptr s;
  void operator()() const { s->cancel(); }
};

/// Cancels the state if it still lives: a notice never keeps the state alive.
struct weak_cancel_step {
  std::weak_ptr<op_steps> w;
  void operator()() const {
    if (auto s = w.lock())
      s->cancel();
  }
};

/// The caller's slot's handler. Weak: a slot that outlives the operation's execution context
/// must not keep it, nor reach it.
struct slot_cancel_step {
  std::weak_ptr<op_steps> w;
  void operator()(asio::cancellation_type) const {
    if (auto s = w.lock()) {
      op_steps& st = *s;
      st.slot_cancelled(std::move(s));
    }
  }
};

/// A timed attempt's deadline came due (dispatched to the operation's executor).
struct time_out_step {
  op_steps::ptr s;
  std::uint64_t generation = 0;
  void operator()() const { s->time_out(generation); }
};

/// The completion handler of a token-based attempt: bound to the operation's executor, to the
/// attempt's cancellation slot and to the handler's allocator, as Asio's own composed
/// operations bind theirs. `Taker` stores the completion's arguments (`completion_taker`).
template <class Exec, class T, class Alloc, class Taker> struct attempt_step {
  using allocator_type = Alloc;
  std::shared_ptr<op_frame<Exec, T>> s;
  std::uint64_t seq = 0; ///< the attempt it belongs to
  [[no_unique_address]] Alloc alloc;
  allocator_type get_allocator() const noexcept { return alloc; }
  using executor_type = Exec;
  executor_type get_executor() const noexcept { return s->executor(); }
  using cancellation_slot_type = asio::cancellation_slot;
  cancellation_slot_type get_cancellation_slot() const noexcept { return s->attempt_slot(); }
  template <class... A> void operator()(A&&... a) {
    op_frame<Exec, T>& st = *s;
    if (!st.end_token_attempt(seq))
      return; // its initiating function threw after taking it: the attempt already ended
    // Converted to the signature's types, as the coroutine path's `as_tuple` converts them.
    Taker::take(st.result(), typename Taker::arguments(std::forward<A>(a)...));
    st.token_attempt_done(std::move(s));
  }
};

// The slot is a member, not `bind_cancellation_slot`, and there is no associated executor: so
// co_spawn, which runs the attempt on the operation's executor already, emits into the attempt
// at once. For a handler with an executor of its own, Asio 1.22 (Boost 1.81) instead dispatches
// the emit and lets that deferred call reach into the slot's handler, which `attempt_done` has
// freed by then (TSan: heap-use-after-free). Emits reach it on the operation's executor only
// (cancel, time_out).
template <class Alloc> struct spawned_attempt_step {
  using allocator_type = Alloc;
  op_steps::ptr s;
  asio::cancellation_slot slot{};
  [[no_unique_address]] Alloc alloc;
  using cancellation_slot_type = asio::cancellation_slot;
  cancellation_slot_type get_cancellation_slot() const noexcept { return slot; }
  allocator_type get_allocator() const noexcept { return alloc; }
  void operator()(std::exception_ptr e) {
    op_steps& st = *s;
    st.spawned_attempt_done(std::move(s), std::move(e));
  }
};

/// `f`, carrying the handler's allocator as its own `allocator_type`. It does what
/// `asio::bind_allocator` does for the handlers the operation dispatches, without specialising
/// `associated_executor`: `asio::dispatch` then needs no `work_dispatcher` (a tracked executor
/// and one more hop) between the executor and `f`.
template <class Alloc, class F> struct with_allocator {
  using allocator_type = Alloc;
  F f;
  [[no_unique_address]] Alloc alloc;
  allocator_type get_allocator() const noexcept { return alloc; }
  void operator()() { f(); }
};
template <class Alloc, class F>
with_allocator<Alloc, std::decay_t<F>> allocated(const Alloc& a, F&& f) {
  return {std::forward<F>(f), a};
}

/// Whether `Handler` names an executor of its own (`bind_executor`, a strand's handler, ...),
/// which `asio::dispatch` then reaches through a `work_dispatcher`.
template <class Handler, class Executor> inline constexpr bool has_own_executor = !requires {
  typename asio::associated_executor<Handler, Executor>::asio_associated_executor_is_unspecialised;
};

/// Delivers the outcome to the caller's handler, on the handler's executor.
template <class Handler, class T, class Deliver> struct deliver_step {
  Handler h;
  loop_result<T> r;
  void operator()() {
    // The caller's slot is cleared on the handler's executor, where the caller emits into it:
    // clearing it on the operation's would race with an emit on the caller's thread.
    auto user_slot = asio::get_associated_cancellation_slot(h);
    if (user_slot.is_connected())
      user_slot.clear();
    Deliver::template deliver<T>(h, r);
  }
};

/// The token shape's `completion_taker`, or nothing for an awaitable attempt (which has no
/// attempt handler).
template <class Shape, class = void> struct taker_of { using type = void; };
template <class Shape> struct taker_of<Shape, std::void_t<typename Shape::taker>> {
  using type = typename Shape::taker;
};

// --- The composed operation ------------------------------------------------------------------

/// The context's queue of attempt deadlines for `Timer` (deadline_queue.hpp).
template <class Timer>
using deadline_queue_for =
    deadline_queue<typename Timer::template rebind_executor<asio::any_io_executor>::other>;

/// What only a controlled operation needs: the attempt's cancellation signal, the link into a
/// group source and the entry in `Queue`, the deadline queue. A base of the controlled state
/// (`retry_engine<..., true>`), so made in the state's one allocation, and its links lead back
/// to the state by a cast.
template <class Queue> struct engine_control : cancellation_registration, Queue::entry {
  asio::cancellation_signal signal;
  Queue* deadlines = nullptr;   ///< found at the first timed attempt
  std::uint64_t generation = 0; ///< of the timed attempt in flight
  bool grouped = false;         ///< linked to the group source (`attach` succeeded), until unlinked
  /// A spawned attempt whose coroutine has not begun: a cut is not emitted (`cut_attempt`).
  bool spawn_pending = false;
};

/// The state of an operation nothing can cancel holds no control block.
struct no_control {};

/// The loop's half of the composed operation: one heap state, driven by completion handlers that
/// each hold it by a `shared_ptr`. The loop's steps are `loop_core`'s (retry_loop.hpp): decide
/// (`top`), then attempt or sleep; after an attempt, decide again (`ended`). While it sleeps,
/// nothing but this state and its timer's one pending wait exists.
///
/// It names neither the operation nor the caller's handler, so its code is compiled once per
/// timer, result, policy, executor and allocator type, for every call site: `retry_op` adds
/// what does name them, sending an attempt (`send`) and delivering the outcome (`deliver`).
/// `Ctx` is what the attempts are given (`context_for`: the operation's one trait it names).
///
/// `Exec` is the executor everything runs on: the caller's, or a strand of it when the operation
/// must be serialized against a cancellation from another thread (`initiate_retry`). A
/// controlled operation (a caller's slot, a group token, timed attempts) also holds the
/// attempt's cancellation signal and the attempt timer, and is linked to its group. Every member
/// is touched only on `Exec`, but for the registration links (cancellation.hpp's lock).
///
/// Exactly once: the state completes once (`finish`), or is destroyed uncalled with whatever
/// pending handler holds it last (the execution context's teardown). It unlinks itself from a
/// group source when it dies, however it dies.
///
/// `Controlled`: whether the operation is controlled, known at the initiation, which makes the
/// state of one type or the other. A controlled state holds the control block (`engine_control`)
/// as a base, in its one allocation; a state nothing can cancel holds none of it (the attempt's
/// cancellation signal, the group link and the deadline-queue entry, 128 bytes), which keeps a
/// typical state within the sizes malloc serves from its per-thread cache.
template <class Timer, class T, class Policy, class Exec, class Alloc, class Ctx, bool Controlled>
class retry_engine
    : public op_frame<Exec, T>,
      public std::conditional_t<Controlled, engine_control<deadline_queue_for<Timer>>, no_control>,
      public std::enable_shared_from_this<
          retry_engine<Timer, T, Policy, Exec, Alloc, Ctx, Controlled>> {
protected:
  using clock = typename Timer::clock_type;
  using timer_type = typename Timer::template rebind_executor<Exec>::other;
  using queue_type = deadline_queue_for<Timer>;
  using self_ptr = std::shared_ptr<retry_engine>;
  using control = engine_control<queue_type>;
  /// The control block (a controlled state's only).
  control& ctl() noexcept { return *this; }
  static retry_engine& owner_of(cancellation_registration& r) noexcept {
    return static_cast<retry_engine&>(static_cast<control&>(r));
  }
  static retry_engine& owner_of(typename queue_type::entry& e) noexcept {
    return static_cast<retry_engine&>(static_cast<control&>(e));
  }
  /// The handler's associated allocator, which every intermediate handler carries (a copy each,
  /// never a reference into the state: Asio may ask a handler for it after the state is gone).
  /// The operation's own hops carry it as `fallback_t`, with the default heap behind it
  /// (fallback_allocator.hpp), a token attempt's handler included.
  using allocator_type = Alloc;
  using frame = op_frame<Exec, T>;
  using frame::exec_;
  using frame::signal_;
  /// The state again, from the pointer a step handed back.
  static self_ptr back(op_steps::ptr p) noexcept {
    auto* raw = static_cast<retry_engine*>(p.get());
    return self_ptr(std::move(p), raw);
  }

  /// `P`: the policy as the initiation was given it, moved (or copied) once, into `policy_`.
  template <class P>
  retry_engine(const Exec& exec, const Alloc& alloc, P&& policy, retry_stats* stats,
               op_origin origin)
      : frame(exec), alloc_(alloc), policy_(std::forward<P>(policy)),
        core_(policy_of(policy_), stats, std::move(origin)) {
    if constexpr (Controlled) {
      const retry_policy& p = policy_of(policy_);
      control& c = ctl();
      signal_ = &c.signal;
      timed_ = p.deadline != unlimited || p.attempt_timeout != unlimited;
      c.claim = &retry_engine::claim_deadline;
      c.fire = &retry_engine::fire_deadline;
      c.notify = &retry_engine::notify_from_group;
      c.batched = &batch_ops;
      c.context = static_cast<const asio::execution_context*>(
          &asio::query(inner_executor(exec_), asio::execution::context));
    }
  }
  ~retry_engine() {
    if constexpr (Controlled) {
      queue_type::forget(ctl());
      unlink_group();
    }
  }

  /// Sends the attempt the loop decided on (`in_attempt_` is set); ends it with `attempt_done`.
  virtual void send(self_ptr self) = 0;
  /// Releases the state and calls the caller's handler with `core_.result()`.
  virtual void deliver(self_ptr self) = 0;

  /// The initiation's last steps: the caller's slot (any type) cancels, from any thread; then
  /// the first step, dispatched to the operation's executor: when this thread runs that executor
  /// already (the caller's coroutine or handler on its `io_context`, its strand, its
  /// `thread_pool`), it runs inside the initiating function and sends the first attempt without
  /// a post, as Asio's composed operations do; otherwise it is posted there. Either way every
  /// step, and every hook of the policy, runs on the operation's executor, and the handler is
  /// never called from inside the initiating function (`complete_now`).
  template <class Slot> static void start(self_ptr s, Slot user_slot) {
    // A connected slot makes the operation controlled.
    if constexpr (Controlled) {
      if (user_slot.is_connected()) {
        // Weak: a slot that outlives the operation's execution context must not keep it, nor
        // reach it.
        user_slot.assign(slot_cancel_step{std::weak_ptr<op_steps>(s)});
      }
    } else {
      (void)user_slot;
    }
    if (running_here(s->exec_)) {
      const initiation_mark mark(s.get());
      s->running_ = true;
      retry_engine& st = *s;
      st.begin(std::move(s));
      return;
    }
    const Exec ex = s->exec_;
    asio::post(ex, s->resumption(std::move(s)));
  }

  /// Whether the outcome is decided inside the initiating function (its handler must not run
  /// there).
  bool complete_now() const noexcept { return initiating_op == this; }

  void resumed(op_steps::ptr p) override {
    self_ptr s = back(std::move(p));
    if (!running_) {
      running_ = true;
      begin(std::move(s));
      return;
    }
    sleeping_ = false;
    step(std::move(s), core_.top(cancelled()));
  }

  void slot_cancelled(op_steps::ptr p) override {
    // Seen at once by `begin` and `attempt`, even while the dispatch below waits behind them in
    // the executor's queue (an emit from another thread, before the start ran).
    cancel_seen_.store(true, std::memory_order_release);
    const Exec ex = exec_;
    const auto a = with_fallback(alloc_); // a cancellation is never lost for want of memory
    asio::dispatch(ex, allocated(a, cancel_step{std::move(p)}));
  }

  loop_result<T>& result() noexcept override { return core_.result(); }

  void token_attempt_done(op_steps::ptr p) override { attempt_done(back(std::move(p))); }

  void spawned_attempt_done(op_steps::ptr p, std::exception_ptr e) override {
    if (e) // co_spawn could not run the attempt at all
      absorb(core_.result(), std::move(e));
    attempt_done(back(std::move(p)));
  }

  /// The handler of the posted start and of a sleep: it must not fail, `self` goes with it.
  resume_step<fallback_t<allocator_type>> resumption(self_ptr self) const noexcept {
    return {std::move(self), with_fallback(alloc_)};
  }

  bool cancelled() const noexcept {
    return cancelled_ || cancel_seen_.load(std::memory_order_acquire) ||
           policy_of(policy_).cancellation.cancelled();
  }
  /// Whether attempt `seq` is still the one running, not yet ended.
  bool attempt_live(std::uint64_t seq) const noexcept { return in_attempt_ && attempt_seq_ == seq; }

  /// Posted by the initiation: link to the group (a cancellation emits from here on), then loop.
  void begin(self_ptr self) {
    if constexpr (Controlled) {
      const retry_policy& p = policy_of(policy_);
      armed_ = true;
      if (!cancelled_ && p.cancellation.can_be_cancelled()) {
        ctl().grouped = p.cancellation.attach(ctl());
        cancelled_ = !ctl().grouped;
      }
    }
    core_.started();
    step(std::move(self), core_.top(cancelled()));
  }

  /// Does what the loop decided. Returns at once after handing `self` on: the state may be gone.
  void step(self_ptr self, next_step decision) {
    switch (decision) {
    case next_step::attempt:
      return attempt(std::move(self));
    case next_step::sleep:
      return sleep(std::move(self));
    case next_step::done:
      return finish(std::move(self));
    }
  }

  void sleep(self_ptr self) {
    const nanoseconds d = core_.delay();
    if (d == nanoseconds::zero()) {
      // An expired timer would cost a timerfd round trip; a post yields just as well.
      const Exec ex = exec_;
      asio::post(ex, resumption(std::move(self)));
      return;
    }
    if (cancelled_)
      return step(std::move(self), core_.top(true));
    try {
      if (!timer_)
        timer_.emplace(exec_);
      timer_->expires_after(std::chrono::ceil<typename clock::duration>(d));
      // Not bound to any slot: a cancellation cancels the timer itself (`cancel`). Marked
      // before the wait: on a context run by several threads, an uncontrolled operation's wait
      // may complete (and clear the mark) on another thread before `async_wait` returns here.
      sleeping_ = true;
      timer_->async_wait(resumption(self));
      return;
    } catch (...) {
      sleeping_ = false;
      core_.thrown(std::current_exception());
    }
    finish(std::move(self)); // outside the handler block (see guarded_initiation)
  }

  void attempt(self_ptr self) {
    // A cancellation that arrived after `top` looked (from the observer's or the gate's hook,
    // on this executor) stops the attempt before it is sent.
    if (cancelled())
      return step(std::move(self), core_.abandon_attempt());
    core_.sent();
    if constexpr (Controlled) {
      if (timed_)
        start_attempt(core_.attempt_limit());
    }
    in_attempt_ = true;
    send(std::move(self));
  }

  void attempt_done(self_ptr self) {
    in_attempt_ = false;
    bool timed_out = false;
    if constexpr (Controlled) {
      signal_->slot().clear(); // no handler of the finished attempt stays behind
      timed_out = timed_ && end_attempt();
    }
    step(std::move(self), core_.ended(timed_out, cancelled()));
  }

  /// The outcome is decided: unlink, tell the stats and the observer, then deliver (never inside
  /// the initiation: see `complete_now`).
  void finish(self_ptr self) {
    armed_ = false;
    if constexpr (Controlled) {
      unlink_group();
      if (ctl().deadlines)
        ctl().deadlines->remove(ctl());
    }
    core_.finish();
    deliver(std::move(self));
  }

  /// Unlinks from the group source, once: `finish` does it, and the destructor only for a state
  /// that dies uncompleted (its context torn down). After the first unlink the link is in no
  /// list, so no notice can be in progress on it and the source's lock need not be taken again.
  void unlink_group() noexcept {
    if (ctl().grouped) {
      ctl().grouped = false;
      policy_of(policy_).cancellation.detach(ctl());
    }
  }

  // --- The attempt's deadline: `start_attempt(limit)` links the state into its context's
  // deadline queue, `end_attempt()` unlinks it and says whether the deadline cut the attempt.
  // An attempt that ends in time costs an unlink and no handler; only a deadline that came due
  // hops onto `Exec`.

  void start_attempt(nanoseconds limit) {
    control& c = ctl();
    if (!c.deadlines)
      c.deadlines = &queue_type::of(inner_executor(exec_));
    timed_out_ = false;
    c.deadlines->push(c, due_after<queue_type>(limit), ++c.generation);
  }
  bool end_attempt() {
    ctl().deadlines->remove(ctl());
    return timed_out_ && !cancelled_;
  }
  static std::shared_ptr<void> claim_deadline(typename queue_type::entry& e) noexcept {
    return std::static_pointer_cast<void>(owner_of(e).weak_from_this().lock());
  }
  // Called by the queue, where nothing may be thrown: the hop never fails for want of memory
  // (fallback_allocator.hpp).
  static void fire_deadline(typename queue_type::entry& e, std::uint64_t g) noexcept {
    retry_engine& self = owner_of(e);
    const Exec ex = self.exec_;
    asio::dispatch(
        ex, allocated(with_fallback(self.alloc_), time_out_step{self.shared_from_this(), g}));
  }
  void time_out(std::uint64_t g) override {
    assert(on_exec());
    if constexpr (Controlled) {
      if (armed_ && in_attempt_ && ctl().generation == g && !cancelled_) {
        timed_out_ = true;
        cut_attempt();
      }
    } else {
      (void)g; // an operation nothing can cancel has no timed attempt
    }
  }

  // --- Cancellation, on `Exec`.

  /// Whether this thread runs `Exec` now (for a strand; a one-thread context's executor is
  /// taken on trust).
  bool on_exec() const noexcept {
    if constexpr (is_strand<Exec>::value)
      return exec_.running_in_this_thread();
    else
      return true;
  }

  void cancel() override {
    assert(on_exec());
    if (cancelled_)
      return;
    cancelled_ = true;
    if (!armed_)
      return; // not started yet (`begin` sees it), or over
    if (sleeping_)
      timer_->cancel();
    else if (in_attempt_)
      cut_attempt();
    // else: between steps (a posted resume); the top of the loop sees it
  }

  /// Cuts the attempt in flight through its signal, or, for a spawned attempt whose coroutine has
  /// not begun, leaves the cut to `spawned_begins`. Asio 1.24 to 1.27 (Boost 1.81) co_spawn
  /// first dispatches itself onto the executor, which for some executors (a strand of an
  /// `any_io_executor`) is a post; a cancellation emitted before it resumes makes its entry
  /// point throw `operation_aborted` out of `run()` (std::terminate on a thread).
  void cut_attempt() {
    if constexpr (Controlled)
      if (!ctl().spawn_pending)
        signal_->emit(asio::cancellation_type::terminal);
  }
  /// Before a controlled operation co_spawns its attempt.
  void spawning() noexcept {
    if constexpr (Controlled)
      ctl().spawn_pending = true;
  }
  /// First thing in a spawned attempt's coroutine, on `Exec`: true when the attempt was cut
  /// (cancelled or timed out) before it began, and so must end at once without running.
  bool spawned_begins() noexcept {
    if constexpr (Controlled) {
      ctl().spawn_pending = false;
      return cancelled_ || timed_out_;
    } else {
      return false;
    }
  }

  // Always a post: the source may be cancelled from a hook running on this very executor. Weak:
  // a notice never keeps the state (and its strand) alive past its execution context; the
  // state's destructor waits in `detach` until this has returned.
  static void notify_from_group(cancellation_registration& r) noexcept {
    retry_engine& self = owner_of(r);
    const Exec ex = self.exec_;
    asio::post(ex, allocated(with_fallback(self.alloc_), weak_cancel_step{self.weak_from_this()}));
  }

  // Batched group notices (cancellation.hpp): one handler per execution context enters each
  // operation from that context's own thread: inline on a one-thread context, else through the
  // operation's strand (inline when the strand is idle).
  static void post_batch(cancellation_registration& r, cancellation_batch batch) noexcept {
    asio::post(inner_executor(owner_of(r).exec_), std::move(batch));
  }
  // The link is the control block's, which lives as long as the state: a handle to it shares
  // the state's ownership (empty when the state is already dying; its destructor unlinks it).
  static std::shared_ptr<cancellation_registration> handle(cancellation_registration& r) noexcept {
    if (self_ptr s = owner_of(r).weak_from_this().lock())
      return std::shared_ptr<cancellation_registration>(std::move(s), &r);
    return {};
  }
  static void notify_here(cancellation_registration& r) noexcept {
    retry_engine& self = owner_of(r);
    if constexpr (!is_strand<Exec>::value) {
      self.cancel(); // on the one thread of the operation's context, the state pinned
    } else {
      const Exec ex = self.exec_;
      asio::dispatch(
          ex, allocated(with_fallback(self.alloc_), weak_cancel_step{self.weak_from_this()}));
    }
  }
  static constexpr batch_notice_ops batch_ops{&post_batch, &handle, &notify_here};

  [[no_unique_address]] allocator_type alloc_; ///< the handler's: for every intermediate handler
  Policy policy_;
  loop_core<clock, T, Ctx> core_;   ///< refers to `policy_`
  std::optional<timer_type> timer_; ///< the sleep timer, made at the first sleep
  std::uint64_t attempt_seq_ = 0;   ///< of the token attempt in flight
  bool running_ = false;
  bool timed_ = false;
  bool armed_ = false; ///< started: cancellable
  bool cancelled_ = false;
  /// Set by the caller's slot, from any thread, before it dispatches `cancel`.
  std::atomic<bool> cancel_seen_{false};
  bool sleeping_ = false;
  bool in_attempt_ = false;
  bool timed_out_ = false;
};

/// One retry operation: the loop (`retry_engine`) with the operation `Op`, the caller's
/// `Handler` and the executor `Executor` the caller named. It sends each attempt and delivers the
/// outcome; the rest is the engine's.
template <class Timer, class T, class Op, class Policy, class Exec, class Executor, class Handler,
          class Deliver, bool Controlled>
class retry_op final
    : public retry_engine<Timer, T, Policy, Exec, asio::associated_allocator_t<Handler>,
                          context_for<Op>, Controlled> {
  using engine = retry_engine<Timer, T, Policy, Exec, asio::associated_allocator_t<Handler>,
                              context_for<Op>, Controlled>;
  using engine::alloc_;
  using engine::attempt_done;
  using engine::attempt_live;
  using engine::attempt_seq_;
  using engine::cancelled_;
  using engine::core_;
  using engine::exec_;
  using engine::signal_;
  using typename engine::allocator_type;
  using typename engine::self_ptr;
  using shape = attempt_shape<Op>;
  using handler_executor_type = asio::associated_executor_t<Handler, Executor>;
  using handler_work_type = work_t<handler_executor_type>;
  static constexpr bool same_executor = std::is_same_v<Exec, Executor>;
  /// A token attempt's handler carries the allocator as `fallback_t` too: the attempt's operation
  /// asks it for memory where a refusal could not be the attempt's outcome (a completion posted
  /// from inside `run()`: the handler, and with it the operation, would be lost).
  using attempt_handler =
      attempt_step<Exec, T, fallback_t<allocator_type>, typename taker_of<shape>::type>;

public:
  template <class P>
  retry_op(const Exec& exec, const Executor& io_ex, Handler h, Op op, P&& policy,
           retry_stats* stats, op_origin origin)
      : engine(exec, asio::get_associated_allocator(h), std::forward<P>(policy), stats,
               std::move(origin)),
        io_ex_(keep_io_executor(io_ex)), handler_(std::move(h)), op_(std::move(op)) {
    // Until it completes, the operation keeps its handler's executor busy, as Asio's composed
    // operations do: a handler bound to another context's executor keeps that context's run()
    // from returning before the completion arrives.
    auto hex = asio::get_associated_executor(*handler_, io_ex);
    bool same = false;
    if constexpr (std::is_same_v<handler_executor_type, Executor>)
      same = hex == io_ex;
    if (!same)
      handler_work_.emplace(track_work(hex));
  }

  template <class Slot> static void launch(std::shared_ptr<retry_op> s, Slot user_slot) {
    engine::start(std::move(s), user_slot);
  }

private:
  void send(self_ptr self) override {
    if constexpr (shape::template takes_handler<attempt_handler>) {
      // An initiating function that throws ends its attempt with what it threw, unless the
      // attempt has ended already (its handler ran inside it). A handler it had taken before
      // throwing is ignored if it runs later: the attempt completes once either way.
      const std::uint64_t seq = ++attempt_seq_;
      const bool cancelled_before = cancelled_;
      try {
        // An attempt whose handler runs inside its initiating function may decide the outcome
        // there: the caller's handler then goes through its immediate executor (`deliver`), not
        // inline, so that what it throws leaves through `run()` rather than this `catch`.
        const initiation_mark mark(this);
        shape::initiate(op_, core_.context(), attempt_handler{self, seq, with_fallback(alloc_)});
        // Cancelled inside the initiating function (it emitted the caller's slot, say) before
        // the operation had connected its slot: emitted again, now that it has.
        if (!cancelled_before && cancelled_ && attempt_live(seq))
          signal_->emit(asio::cancellation_type::terminal);
        return;
      } catch (...) {
        if (!this->end_token_attempt(seq))
          return;
        take_current_exception(core_.result());
      }
      attempt_done(std::move(self)); // outside the handler block (see guarded_initiation)
    } else {
      // An awaitable attempt: its coroutine lives while it runs, and no longer.
      const Exec ex = exec_;
      auto* raw = static_cast<retry_op*>(self.get());
      // co_spawn itself (1.22 to 1.38) does not use its handler's allocator; the handler carries
      // it all the same, for whatever does.
      asio::cancellation_slot attempt_slot = signal_ ? signal_->slot() : asio::cancellation_slot();
      this->spawning();
      asio::co_spawn(ex, run_attempt(raw),
                     spawned_attempt_step<allocator_type>{std::move(self), attempt_slot, alloc_});
    }
  }

  static asio::awaitable<void> run_attempt(retry_op* s) {
    loop_result<T>& r = s->core_.result();
    if (s->spawned_begins()) {
      r.error = coretry::detail::aborted_error(); // cut before it began (see `cut_attempt`)
      co_return;
    }
    try {
      if constexpr (shape::awaits_void) {
        co_await shape::start(s->op_, s->core_.context());
        r.value.emplace();
      } else {
        shape::take(r, co_await shape::await_outcome(s->op_, s->core_.context()));
      }
    }
    CORETRY_DETAIL_CATCH_OUTCOME(r)
    // Asio 1.26 (Boost 1.81): when the coroutine ends without having switched context, co_spawn
    // posts once and lets that post throw, out of io_context::run, if the attempt was cut.
    co_await asio::this_coro::throw_if_cancelled(false);
  }

  void deliver(self_ptr self) override {
    Handler h = std::move(*handler_);
    handler_.reset();
    auto ex = asio::get_associated_executor(h, io_executor());
    const allocator_type alloc = alloc_; // a copy: the state may die below
    loop_result<T> r = std::move(core_.result());
    [[maybe_unused]] auto work = std::move(handler_work_); // released after the dispatch
    const bool now = this->complete_now();
    self.reset(); // the state dies here, on the operation's side, unless a handler still holds it
    // Never fails for want of memory: the handler goes with it (fallback_allocator.hpp).
    auto delivery = [&] {
      return allocated(with_fallback(alloc),
                       deliver_step<Handler, T, Deliver>{std::move(h), std::move(r)});
    };
    if (now) {
      // Decided inside the initiating function (a gate or a rate refused the first attempt, or
      // the attempt's handler ran inside its own initiation): submitted as Asio submits an
      // immediate completion, through the handler's associated immediate executor (1.28 and
      // later; by default a post to the handler's executor), else posted.
#if CORETRY_ASIO_HAS_IMMEDIATE_EXECUTOR
      auto iex = asio::get_associated_immediate_executor(h, ex);
      if constexpr (has_own_executor<Handler, Executor>) {
        // As Asio's dispatch of the handler itself to its immediate executor: from there, on to
        // the handler's own executor (a strand it is bound to), unless it runs there already.
        asio::dispatch(iex, asio::bind_executor(ex, delivery()));
      } else {
        asio::dispatch(iex, delivery());
      }
#else
      asio::post(ex, delivery());
#endif
      return;
    }
    asio::dispatch(ex, delivery());
  }

  static auto keep_io_executor(const Executor& ex) {
    if constexpr (same_executor)
      return no_executor{};
    else
      return ex;
  }
  Executor io_executor() const {
    if constexpr (same_executor)
      return exec_;
    else
      return io_ex_;
  }

  [[no_unique_address]] std::conditional_t<same_executor, no_executor, Executor> io_ex_;
  std::optional<Handler> handler_;
  std::optional<handler_work_type> handler_work_; ///< when the handler's executor is another
  Op op_;
};

/// Tells `initiate_retry` to run on the handler's associated executor: for `use_awaitable`, the
/// awaiting coroutine's, known only once the initiation runs inside it.
struct handler_executor {};

/// The initiation. The policy (a `retry_policy` or a `shared_policy`) is taken by reference all
/// the way down and moved (or copied) once, into the state: a `retry_policy` is a large value.
/// `Controlled`: known to be controlled (`retry_entry` takes this path for no other operation),
/// so that only the controlled state is instantiated.
template <class Timer, class T, class Deliver, bool Controlled = false> struct initiate_retry {
  template <class Handler, class Op, class Policy>
  void operator()(Handler&& handler, handler_executor, Op op, Policy&& policy, retry_stats* stats,
                  op_origin origin) const {
    const auto ex = asio::get_associated_executor(handler);
    (*this)(std::forward<Handler>(handler), ex, std::move(op), std::forward<Policy>(policy), stats,
            std::move(origin));
  }

  template <class Handler, class Executor, class Op, class Policy>
  void operator()(Handler&& handler, const Executor& ex, Op op, Policy&& policy, retry_stats* stats,
                  op_origin origin) const {
    auto user_slot = asio::get_associated_cancellation_slot(handler);
    // The state's type follows: the control block is in it only when the operation is controlled.
    if constexpr (!Controlled) {
      if (!needs_control(policy_of(policy), user_slot.is_connected())) {
        launch<false>(std::forward<Handler>(handler), ex, ex, std::move(op),
                      std::forward<Policy>(policy), stats, std::move(origin), user_slot);
        return;
      }
    } else {
      assert(needs_control(policy_of(policy), user_slot.is_connected()));
    }
    // A strand only where a cancellation from another thread, or an attempt timer, could meet
    // the operation's own handlers on another thread.
    if (runs_on_one_thread(ex)) {
      launch<true>(std::forward<Handler>(handler), ex, ex, std::move(op),
                   std::forward<Policy>(policy), stats, std::move(origin), user_slot);
      return;
    }
    with_serializing_executor(ex, [&](const auto& strand) {
      launch<true>(std::forward<Handler>(handler), strand, ex, std::move(op),
                   std::forward<Policy>(policy), stats, std::move(origin), user_slot);
    });
  }

  template <bool Control, class Handler, class Exec, class Executor, class Op, class Policy,
            class Slot>
  static void launch(Handler&& handler, const Exec& exec, const Executor& ex, Op op,
                     Policy&& policy, retry_stats* stats, op_origin origin, Slot user_slot) {
    using handler_type = std::decay_t<Handler>;
    using state_type = retry_op<Timer, T, Op, std::decay_t<Policy>, Exec, Executor, handler_type,
                                Deliver, Control>;
    // One allocation, with the handler's allocator, as Asio's composed operations make theirs;
    // a controlled operation's control block is in it.
    using alloc_type = typename std::allocator_traits<
        asio::associated_allocator_t<handler_type>>::template rebind_alloc<state_type>;
    alloc_type alloc(asio::get_associated_allocator(handler));
    auto s = std::allocate_shared<state_type>(alloc, exec, ex, std::forward<Handler>(handler),
                                              std::move(op), std::forward<Policy>(policy), stats,
                                              std::move(origin));
    state_type::launch(std::move(s), user_slot);
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
    return retry_loop<Timer, T, std::decay_t<Op>, held>(std::move(op), std::forward<Policy>(policy),
                                                        stats, std::move(origin));
  // The initiation itself, awaited: no wrapper coroutine (and no extra frame) in between.
  auto a = asio::async_initiate<const asio::use_awaitable_t<>&, exception_signature_t<T>>(
      initiate_retry<Timer, T, deliver_exception, true>{}, asio::use_awaitable, handler_executor{},
      std::move(op), held(std::forward<Policy>(policy)), stats, std::move(origin));
  if constexpr (std::is_same_v<delivered_t<T>, T>)
    return a;
  else
    return take_optional<T>(std::move(a));
}

} // namespace coretry::detail
