// SPDX-License-Identifier: BSL-1.0
#pragma once
// What an attempt is, how a loop awaits its outcome, and the one rule that turns what it threw
// into an outcome: the one adapter between the loops (retry_loop.hpp, retry_op.hpp,
// hedge_op.hpp, the fallback's fallback_op.hpp) and the shapes of attempt Asio code is written
// in. Private: include <coretry/retry.hpp> or <coretry/hedge.hpp>.
//
// The shape is chosen at compile time, in this order:
// 1. `op(attempt_context&, token)` or `op(token)`: an initiating function (or a `deferred`
//    operation, which is one) taking a completion token. The loop passes
//    `as_tuple(use_awaitable)`, so the operation is bound to the loop coroutine's cancellation
//    slot exactly as Asio's own operations are, and fails by value, never by exception.
// 2. `op(attempt_context&)` or `op()` returning `asio::awaitable<T>` (fails by throwing
//    `std::system_error`) or `asio::awaitable<std::tuple<error_code[, T]>>` (fails by value).
// 3. `op(attempt_context&)` or `op()` returning a `deferred` operation (anything callable with a
//    completion token): initiated as in 1.
// A token-based attempt's completion signature gives its result type: `void(error_code, T...)`,
// `void(exception_ptr, T...)` or `void(T...)`; no argument after the error is `void`, one is
// `T`, several are `std::tuple<T...>`. `error_code` is `std::error_code` or the flavour's.

#include <coretry/attempt.hpp>
#include <coretry/detail/asio.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>

#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

namespace coretry::detail {

// The one rule for what was thrown, on every path (the composed operation, the direct loop,
// the hedge, an `exception_ptr` completion, a spawn that could not run, the fallback), in
// three steps that every path takes through the functions below and nowhere else:
// 1. at the catch (`take_current_exception`, `take_exception`): a `std::system_error` (either
//    flavour's) is the error it carries; anything else is kept as an exception;
// 2. once an attempt has ended (`judge_attempt`, or its halves `judge_exception` and
//    `judge_result`; with the policy's `classify`, `judge_outcome` in retry_loop.hpp): a kept
//    exception the policy retries is a failed attempt with `errc::retryable_exception` (and a
//    result it rejects is `errc::result_rejected`);
// 3. when the operation ends on it (`take_fatal_exception`, or the loops' own exits): an
//    exception still kept is a bug, `errc::unexpected_exception`.
// An attempt that did not run its course because a cancellation abandoned it (the caller's, the
// group's, or the hedge's own for a copy that lost) takes step 2 as `judge_abandoned`: no
// judge is asked about what it threw, whether the policy spells its judgement as `classify` or
// as the 0.2 `retry_if_exception`, and the exception is dropped, as a timer's cut drops it. Its
// error is `operation_aborted`, and the operation ends as the cancellation (or the copy that
// won) decides: an abandoned attempt's exception changes neither the outcome nor the report.

/// Which `std::system_error`s step 1 turns into their code.
enum class kept_codes : unsigned char {
  every,       ///< an attempt's, a spawned attempt's, a fallback's: any code
  aborted_only ///< a fallback operation that could not start: only `operation_aborted` (the
               ///< caller's slot cancelled it first); any other code is a bug
};

/// Step 1, inside a `catch` block; `Out` has `error` and `exception`.
template <class Out>
void take_current_exception(Out& out, kept_codes keep = kept_codes::every) noexcept {
  try {
    throw;
  } catch (const std::system_error& e) {
    if (keep == kept_codes::every || is_aborted(e.code()))
      out.error = e.code();
    else
      out.exception = std::current_exception();
#if CORETRY_ASIO_DISTINCT_SYSTEM_ERROR
  } catch (const asio_system_error& e) {
    if (keep == kept_codes::every || is_aborted(e.code()))
      out.error = e.code();
    else
      out.exception = std::current_exception();
#endif
  } catch (...) {
    out.exception = std::current_exception();
  }
}

/// Step 1 where an attempt runs, as the catch clauses of its `try`: `try { ... }
/// CORETRY_DETAIL_CATCH_OUTCOME(out)`. A `system_error` (the standard's, or Boost's), the usual
/// failure, is taken by its code at once; `take_current_exception` would rethrow it to learn its
/// type, a second unwinding (some 12,000 instructions of the 50,000 a failed awaitable attempt
/// cost, `.ci/sleepers-instr coretry`). Anything else goes through `take_current_exception`. A
/// macro: the `try` holds a `co_await`, which cannot move into a function of its own.
#if CORETRY_ASIO_DISTINCT_SYSTEM_ERROR
#define CORETRY_DETAIL_CATCH_OUTCOME(out)                                                          \
  catch (const std::system_error& e) {                                                             \
    (out).error = e.code();                                                                        \
  }                                                                                                \
  catch (const ::coretry::detail::asio_system_error& e) {                                          \
    (out).error = e.code();                                                                        \
  }                                                                                                \
  catch (...) {                                                                                    \
    ::coretry::detail::take_current_exception(out);                                                \
  }
#else
#define CORETRY_DETAIL_CATCH_OUTCOME(out)                                                          \
  catch (const std::system_error& e) {                                                             \
    (out).error = e.code();                                                                        \
  }                                                                                                \
  catch (...) {                                                                                    \
    ::coretry::detail::take_current_exception(out);                                                \
  }
#endif

/// Step 1 for an exception handed over as a pointer (non-null).
template <class Out>
void take_exception(Out& out, std::exception_ptr e, kept_codes keep = kept_codes::every) noexcept {
  try {
    std::rethrow_exception(std::move(e));
  } catch (...) {
    take_current_exception(out, keep);
  }
}

CORETRY_ALLOW_DEPRECATED_BEGIN // the 0.2 predicates decide when `classify` is empty
/// Step 2's first half: an exception kept in `out.exception` that
/// `retry_policy::retry_if_exception` accepts makes the attempt a failure with
/// `errc::retryable_exception`, and is returned (the loop keeps it for `retry_stats::exception`
/// and `surface_exception`); one it refuses stays, a bug that ends the loop; a predicate that
/// throws puts what it threw in its place. Returns null when nothing was retried.
template <class Out> std::exception_ptr judge_exception(const retry_policy& p, Out& out) noexcept {
  if (!out.exception || !p.retry_if_exception)
    return nullptr;
  try {
    if (!p.retry_if_exception(out.exception))
      return nullptr;
  } catch (...) {
    out.exception = std::current_exception();
    return nullptr;
  }
  out.error = errc::retryable_exception;
  return std::exchange(out.exception, nullptr);
}

/// Step 2's second half, for an attempt that succeeded: the result predicate
/// (`retry_if_result`) makes a rejected result `errc::result_rejected`; a predicate that throws
/// leaves what it threw in `out.exception`.
template <class Out> void judge_result(const retry_policy& p, Out& out) noexcept {
  if (out.exception || out.error || !p.result_filter)
    return;
  try {
    if (p.result_filter->call(&*out.value))
      out.error = errc::result_rejected;
  } catch (...) {
    out.exception = std::current_exception();
  }
}

/// Step 2 for an attempt a cancellation abandoned (see the rule above): an exception kept in
/// `out.exception` is dropped and the attempt's error is `operation_aborted`, whatever the
/// policy. Asked by `judge_outcome` (retry_loop.hpp) for an attempt that did not run its
/// course, and by the hedge for a copy that lost.
template <class Out> void judge_abandoned(Out& out) noexcept {
  if (!out.exception)
    return;
  out.exception = nullptr;
  out.error = aborted_error();
}

/// Step 2, asked by every loop once an attempt has ended and a timer's cut has been written
/// into `out`: `judge_exception`, then `judge_result`. Returns `judge_exception`'s answer.
/// The loops ask it through `judge_outcome` (retry_loop.hpp), which asks the policy's
/// `classify` instead when it has one, and `judge_abandoned` first for an attempt a
/// cancellation abandoned.
template <class Out> std::exception_ptr judge_attempt(const retry_policy& p, Out& out) noexcept {
  std::exception_ptr retried = judge_exception(p, out);
  judge_result(p, out);
  return retried;
}
CORETRY_ALLOW_DEPRECATED_END

/// Step 3: an exception still kept in `out` ends what threw it as a bug,
/// `errc::unexpected_exception` (the exception stays, for `retry_stats::exception` and the
/// awaitable front ends). Returns whether there was one.
template <class Out> bool fatal_exception(Out& out) noexcept {
  if (!out.exception)
    return false;
  out.error = errc::unexpected_exception;
  return true;
}

/// Steps 1 and 3 for an exception that ends what threw it without a loop to judge it (a spawn
/// that could not run): `take_exception`, and an exception still kept is
/// `errc::unexpected_exception` (it stays in `out.exception`). Returns whether it was kept.
template <class Out>
bool take_fatal_exception(Out& out, std::exception_ptr e,
                          kept_codes keep = kept_codes::every) noexcept {
  take_exception(out, std::move(e), keep);
  return fatal_exception(out);
}

/// When an operation ends reporting `errc::retryable_exception` (its last attempt threw an
/// exception the policy retried), `kept` is that exception: it goes into `out.exception`, which
/// the awaitable front ends rethrow and the token front ends ignore (they deliver the code).
template <class Out> void surface_exception(Out& out, const std::exception_ptr& kept) noexcept {
  if (kept && !out.exception && out.error == errc::retryable_exception)
    out.exception = kept;
}

/// Calls `op` with the attempt's context when it takes one. `Ctx` is `attempt_context` for such
/// an operation, and may be the loop's `context_free` for one that takes none (`context_for`).
template <class Op, class Ctx> decltype(auto) call_op(Op& op, Ctx& ctx) {
  if constexpr (std::is_invocable_v<Op&, attempt_context&>) {
    static_assert(std::is_same_v<Ctx, attempt_context>);
    return op(ctx);
  } else {
    return op();
  }
}

/// An awaitable attempt returns `awaitable<T>` and fails by throwing `std::system_error`, or
/// returns `awaitable<std::tuple<std::error_code, T>>` (or `awaitable<std::tuple<std::error_code>>`),
/// the `as_tuple` idiom, and fails by value: no exception on any path.
template <class A> struct awaitable_traits {
  static_assert(sizeof(A) == 0, "coretry: the operation must return asio::awaitable<T>");
};
template <class T, class Executor> struct awaitable_traits<asio::awaitable<T, Executor>> {
  using value_type = T;
  static constexpr bool error_as_value = false;
};
template <class T, class Executor>
struct awaitable_traits<asio::awaitable<std::tuple<std::error_code, T>, Executor>> {
  using value_type = T;
  static constexpr bool error_as_value = true;
};
template <class Executor>
struct awaitable_traits<asio::awaitable<std::tuple<std::error_code>, Executor>> {
  using value_type = void;
  static constexpr bool error_as_value = true;
};
#if CORETRY_ASIO_BOOST
// Boost.Asio's `as_tuple` carries boost::system::error_code.
template <class T, class Executor>
struct awaitable_traits<asio::awaitable<std::tuple<asio_error_code, T>, Executor>>
    : awaitable_traits<asio::awaitable<std::tuple<std::error_code, T>, Executor>> {};
template <class Executor>
struct awaitable_traits<asio::awaitable<std::tuple<asio_error_code>, Executor>>
    : awaitable_traits<asio::awaitable<std::tuple<std::error_code>, Executor>> {};
#endif

template <class A> struct is_awaitable : std::false_type {};
template <class T, class Executor>
struct is_awaitable<asio::awaitable<T, Executor>> : std::true_type {
  using awaited_type = T;
};

/// The completion token a loop initiates a token-based attempt with.
using attempt_token_t = decltype(coretry::detail::as_tuple(asio::use_awaitable));
inline attempt_token_t attempt_token() noexcept {
  return coretry::detail::as_tuple(asio::use_awaitable);
}

enum class attempt_form { awaitable, token, token_with_context, deferred, invalid };

template <class Op> constexpr attempt_form call_form_of() noexcept {
  if constexpr (std::is_invocable_v<Op&, attempt_context&> || std::is_invocable_v<Op&>) {
    using R =
        std::decay_t<decltype(call_op(std::declval<Op&>(), std::declval<attempt_context&>()))>;
    if constexpr (is_awaitable<R>::value)
      return attempt_form::awaitable;
    else if constexpr (std::is_invocable_v<R, attempt_token_t>)
      return attempt_form::deferred;
    else
      return attempt_form::invalid;
  } else {
    return attempt_form::invalid;
  }
}

template <class Op> constexpr attempt_form form_of() noexcept {
  // Token forms first: asking whether a generic `[](auto&& token)` takes an attempt_context
  // would instantiate its body with one, a hard error.
  if constexpr (std::is_invocable_v<Op&, attempt_context&, attempt_token_t>) {
    return attempt_form::token_with_context;
  } else if constexpr (std::is_invocable_v<Op&, attempt_token_t>) {
    // Also `[](auto&& x) -> awaitable<T>`, which takes anything: an awaitable attempt names its
    // parameter `attempt_context&` (or `auto&`).
    return attempt_form::token;
  } else {
    return call_form_of<Op>();
  }
}

template <class E>
inline constexpr bool is_error_code_v =
    std::is_same_v<E, std::error_code> || std::is_same_v<E, asio_error_code>;

/// The value of `std::tuple<V...>`: nothing is `void`, one is itself, several a tuple.
template <class... V> struct values_of { using type = std::tuple<V...>; };
template <> struct values_of<> { using type = void; };
template <class V> struct values_of<V> { using type = V; };

/// What a token-based attempt completes with (`as_tuple` gives every argument in a tuple).
template <class A> struct completion_traits {
  static_assert(sizeof(A) == 0,
                "coretry: a token-based attempt must complete with one signature, "
                "void(error_code, T...), void(std::exception_ptr, T...) or void(T...)");
};
template <class... A> struct completion_traits<std::tuple<A...>> {
  using arguments = std::tuple<A...>; ///< the signature's argument types
  static constexpr bool error_first = false;
  static constexpr bool exception_first = false;
  using value_type = typename values_of<A...>::type;
};
template <class E, class... A> struct completion_traits<std::tuple<E, A...>> {
  using arguments = std::tuple<E, A...>; ///< the signature's argument types
  static constexpr bool error_first = is_error_code_v<E>;
  static constexpr bool exception_first = std::is_same_v<E, std::exception_ptr>;
  using value_type =
      std::conditional_t<error_first || exception_first, typename values_of<A...>::type,
                         typename values_of<E, A...>::type>;
};

template <class Op, attempt_form K = form_of<Op>()> struct attempt_shape {
  template <class H> static constexpr bool takes_handler = false;
  static_assert(K != attempt_form::invalid,
                "coretry: an attempt must be callable as op() or op(attempt_context&) returning "
                "asio::awaitable<T> or a deferred operation, or as op(token) or "
                "op(attempt_context&, token) starting an asynchronous operation with that "
                "completion token and returning what the initiating function returns");
  using value_type = void;
  static constexpr bool awaits_void = true;
};

/// An awaitable attempt.
template <class Op> struct attempt_shape<Op, attempt_form::awaitable> {
  using awaitable_type =
      std::decay_t<decltype(call_op(std::declval<Op&>(), std::declval<attempt_context&>()))>;
  using traits = awaitable_traits<awaitable_type>;
  using value_type = typename traits::value_type;
  static constexpr bool awaits_void = !traits::error_as_value && std::is_void_v<value_type>;
  template <class H> static constexpr bool takes_handler = false;

  template <class Ctx> static awaitable_type start(Op& op, Ctx& ctx) { return call_op(op, ctx); }
  /// What a coroutine loop awaits: the attempt's own awaitable.
  template <class Ctx> static awaitable_type await_outcome(Op& op, Ctx& ctx) {
    return call_op(op, ctx);
  }

  /// Writes the awaited outcome `r` into `out` (`error`, `value`).
  template <class Out, class R> static void take(Out& out, R&& r) {
    if constexpr (traits::error_as_value) {
      out.error = std::get<0>(r);
      if (!out.error) {
        if constexpr (std::is_void_v<value_type>)
          out.value.emplace();
        else
          out.value.emplace(std::move(std::get<1>(r)));
      }
    } else {
      out.value.emplace(std::forward<R>(r));
    }
  }
};

/// Where a coroutine's completion handler waits while a token attempt's initiating function
/// runs: shared by the handler the attempt is given (`guarded_handler`) and the initiation
/// (`guarded_initiation`), so that whichever comes first completes the coroutine, once.
template <class H> struct guard_box {
  std::optional<H> handler;
  /// Set by whichever side takes the handler first: the attempt's handler may run on another
  /// thread (a multi-threaded context) while its initiating function is still throwing.
  std::atomic<bool> taken{false};
  explicit guard_box(H&& h) : handler(std::move(h)) {}
  /// Takes the coroutine's handler out, or nothing when the other side has taken it.
  std::optional<H> take() noexcept(std::is_nothrow_move_constructible_v<H>) {
    std::optional<H> h;
    if (!taken.exchange(true, std::memory_order_acq_rel)) {
      h.emplace(std::move(*handler));
      handler.reset();
    }
    return h;
  }
};

/// The handler a token attempt started from a coroutine is given: it completes the coroutine
/// (`H`, use_awaitable's) with the attempt's outcome `C` (its arguments, as a tuple) and
/// carries that handler's executor and cancellation slot, so the attempt is bound to the
/// coroutine's slot as it would be under `as_tuple(use_awaitable)`. Late calls, after the
/// initiating function threw, are ignored.
template <class H, class C> struct guarded_handler {
  std::shared_ptr<guard_box<H>> box;
  asio::associated_executor_t<H> executor;
  asio::associated_cancellation_slot_t<H> slot;

  using executor_type = asio::associated_executor_t<H>;
  using cancellation_slot_type = asio::associated_cancellation_slot_t<H>;
  executor_type get_executor() const noexcept { return executor; }
  cancellation_slot_type get_cancellation_slot() const noexcept { return slot; }

  template <class... A> void operator()(A&&... a) {
    const std::shared_ptr<guard_box<H>> b = std::move(box);
    if (std::optional<H> h = b ? b->take() : std::nullopt)
      std::move (*h)(std::exception_ptr(), std::optional<C>(std::in_place, std::forward<A>(a)...));
  }
};

/// Stands for use_awaitable's handler when asking whether an attempt takes a `guarded_handler`.
/// Its executor and slot are use_awaitable's (by default), so that an initiation asking for the
/// handler's executor (`post(get_associated_executor(handler, ex), ...)`) sees the same type
/// here as when it runs; without one Asio 1.38 would answer with its `inline_executor`.
template <class C> struct guard_probe {
  using executor_type = asio::any_io_executor;
  using cancellation_slot_type = asio::cancellation_slot;
  executor_type get_executor() const noexcept;
  cancellation_slot_type get_cancellation_slot() const noexcept;
  void operator()(std::exception_ptr, std::optional<C>) {}
};

/// Starts a token attempt from inside a coroutine's `co_await`, where an exception escaping the
/// initiating function would meet Asio's `noexcept` suspension (`std::terminate` on Asio 1.22)
/// or leave the coroutine: what it throws completes the coroutine with that exception, posted
/// to the coroutine's executor, unless the attempt completed first. One recycled allocation.
template <class Shape, class Op, class C, class Ctx> struct guarded_initiation {
  Op* op;
  Ctx* ctx;
  template <class H> void operator()(H h) const {
    auto box =
        std::allocate_shared<guard_box<H>>(asio::recycling_allocator<guard_box<H>>(), std::move(h));
    auto ex = asio::get_associated_executor(*box->handler);
    auto slot = asio::get_associated_cancellation_slot(*box->handler);
    std::exception_ptr thrown;
    try {
      Shape::initiate(*op, *ctx, guarded_handler<H, C>{box, ex, slot});
    } catch (...) {
      thrown = std::current_exception();
    }
    // Posted only once the handler block has ended: the exception's reference count is then
    // released here before the post, which orders it before the other thread's use of it (the
    // count lives in the uninstrumented runtime, so TSan sees only the post's ordering).
    if (thrown)
      if (std::optional<H> taken = box->take())
        asio::post(ex, [h = std::move(*taken), e = std::move(thrown)]() mutable {
          std::move(h)(std::move(e), std::optional<C>());
        });
  }
};

/// Stores the arguments a token attempt completed with (a tuple, `Traits` saying which is the
/// error and which the value) in a loop result. Keyed by the completion signature alone, not by
/// the operation, so that the composed operation's attempt handler (retry_op.hpp) is one type
/// for every operation with that signature.
template <class Traits> struct completion_taker {
  using value_type = typename Traits::value_type;
  /// The signature's argument types: what a handler's arguments are converted to first, as
  /// `as_tuple` converts them (an initiating function may pass `asio::error::operation_aborted`,
  /// which Boost.Asio's `error_code` takes and `std::error_code` does not).
  using arguments = typename Traits::arguments;
  static constexpr std::size_t skip = (Traits::error_first || Traits::exception_first) ? 1 : 0;

  template <class Out, class... A, std::size_t... I>
  static void emplace(Out& out, std::tuple<A...>& r, std::index_sequence<I...>) {
    if constexpr (std::is_void_v<value_type>)
      out.value.emplace();
    else if constexpr (sizeof...(I) == 1)
      out.value.emplace(std::move(std::get<skip + I>(r))...);
    else
      out.value.emplace(value_type(std::move(std::get<skip + I>(r))...));
  }

  template <class Out, class... A> static void take(Out& out, std::optional<std::tuple<A...>>&& r) {
    take(out, std::move(*r));
  }

  template <class Out, class... A> static void take(Out& out, std::tuple<A...>&& r) {
    if constexpr (Traits::error_first) {
      out.error = std::get<0>(r);
      if (out.error)
        return;
    } else if constexpr (Traits::exception_first) {
      if (std::exception_ptr e = std::get<0>(r)) {
        take_exception(out, std::move(e));
        return;
      }
    }
    emplace(out, r, std::make_index_sequence<sizeof...(A) - skip>{});
  }
};

/// A token-based attempt (an initiating function, or a deferred operation).
template <class Op, attempt_form K> struct token_shape {
  template <class Ctx> static auto start(Op& op, Ctx& ctx) {
    if constexpr (K == attempt_form::token_with_context)
      return op(ctx, attempt_token());
    else if constexpr (K == attempt_form::token)
      return op(attempt_token());
    else
      return call_op(op, ctx)(attempt_token());
  }
  /// Whether the attempt can be initiated with the completion handler `H` in place of the
  /// token (a generic initiating function can): the composed operation (retry_op.hpp) then
  /// starts it without a coroutine.
  template <class H> static constexpr bool takes_handler_impl() {
    if constexpr (K == attempt_form::token_with_context)
      return std::is_invocable_v<Op&, attempt_context&, H>;
    else if constexpr (K == attempt_form::token)
      return std::is_invocable_v<Op&, H>;
    else
      return std::is_invocable_v<
          decltype(call_op(std::declval<Op&>(), std::declval<attempt_context&>())), H>;
  }
  template <class H> static constexpr bool takes_handler = takes_handler_impl<H>();
  /// Initiates the attempt with the completion handler `h`.
  template <class Ctx, class H> static void initiate(Op& op, Ctx& ctx, H&& h) {
    if constexpr (K == attempt_form::token_with_context)
      (void)op(ctx, std::forward<H>(h));
    else if constexpr (K == attempt_form::token)
      (void)op(std::forward<H>(h));
    else
      (void)call_op(op, ctx)(std::forward<H>(h));
  }
  using awaitable_type = decltype(start(std::declval<Op&>(), std::declval<attempt_context&>()));
  static_assert(
      is_awaitable<awaitable_type>::value,
      "coretry: a token-based attempt must return what the initiating function returns "
      "for the token it is given (`return sock.async_read_some(buf, std::move(token));`)");
  using completion = typename is_awaitable<awaitable_type>::awaited_type;
  using completion_t = std::decay_t<completion>;
  using traits = completion_traits<completion_t>;
  using value_type = typename traits::value_type;
  static constexpr bool awaits_void = false;

  /// What a coroutine loop awaits to run the attempt: the outcome as `as_tuple` gives it, the
  /// initiating function's exception rethrown at the `co_await` (`guarded_initiation`). An
  /// attempt that takes only the loop's own token is awaited with it, unguarded.
  template <class Ctx> static auto await_outcome(Op& op, Ctx& ctx) {
    if constexpr (takes_handler<guarded_handler<guard_probe<completion_t>, completion_t>>)
      return asio::async_initiate<const asio::use_awaitable_t<>&,
                                  void(std::exception_ptr, std::optional<completion_t>)>(
          guarded_initiation<token_shape, Op, completion_t, Ctx>{&op, &ctx}, asio::use_awaitable);
    else
      return start(op, ctx);
  }

  /// Stores a completion's arguments in a loop result (`completion_taker`).
  using taker = completion_taker<traits>;
  template <class Out, class R> static void take(Out& out, R&& r) {
    taker::take(out, std::forward<R>(r));
  }
};
template <class Op>
struct attempt_shape<Op, attempt_form::token> : token_shape<Op, attempt_form::token> {};
template <class Op>
struct attempt_shape<Op, attempt_form::token_with_context>
    : token_shape<Op, attempt_form::token_with_context> {};
template <class Op>
struct attempt_shape<Op, attempt_form::deferred> : token_shape<Op, attempt_form::deferred> {};

/// What the loop keeps of an attempt's context for an operation that takes none: only the hint
/// its classifier may give (`attempt_decision::retry_after`). An `attempt_context` is 168 bytes,
/// most of them the inline attributes nobody can set here; this is 8.
class context_free {
public:
  explicit context_free(unsigned) noexcept {}
  void retry_after(std::chrono::nanoseconds hint) noexcept {
    if (hint > hint_)
      hint_ = hint;
  }
  std::chrono::nanoseconds retry_after() const noexcept { return hint_; }
  static std::error_code health_code() noexcept { return {}; }
  static const attempt_attributes& attributes() noexcept { return none_; }

private:
  static constexpr attempt_attributes none_{};
  std::chrono::nanoseconds hint_{0};
};

/// Whether `Op` is called with the attempt's context.
template <class Op> constexpr bool takes_context() noexcept {
  constexpr attempt_form k = form_of<Op>();
  if constexpr (k == attempt_form::token_with_context)
    return true;
  else if constexpr (k == attempt_form::token)
    return false;
  else
    return std::is_invocable_v<Op&, attempt_context&>;
}

/// The context a loop holds for `Op`'s attempts: `attempt_context` when `Op` takes it, else
/// `context_free`.
template <class Op>
using context_for = std::conditional_t<takes_context<Op>(), attempt_context, context_free>;

/// The result type of the operation, whatever the attempt's shape.
template <class Op> using op_result_t = typename attempt_shape<Op>::value_type;

} // namespace coretry::detail
