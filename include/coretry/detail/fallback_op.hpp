// SPDX-License-Identifier: BSL-1.0
#pragma once
// The fallback (retry.hpp, `coretry::fallback`): a retry operation, then, when it gave up, the
// fallback. Private: include <coretry/retry.hpp>.
//
// Only operations given a fallback come here: a coroutine awaits the composed operation
// (retry_op.hpp, through `as_tuple(use_awaitable)`, so that it reports by value), asks
// `fallback_applies`, and runs the fallback in the same coroutine. An operation without a
// fallback never meets any of this.

#include <coretry/attempt.hpp>
#include <coretry/detail/asio.hpp>
#include <coretry/detail/attempt_shape.hpp>
#include <coretry/detail/retry_loop.hpp>
#include <coretry/detail/retry_op.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>

#if CORETRY_ASIO_BOOST
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_state.hpp>
#else
#include <asio/bind_executor.hpp>
#include <asio/cancellation_state.hpp>
#endif

#include <exception>
#include <memory>
#include <optional>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

namespace coretry::detail {

/// Whether an operation that completed with `error` gives way to its fallback: a failure, but
/// not a cancellation (the caller's slot, `asio::error::operation_aborted`; the group token,
/// `errc::cancelled`) and not a bug (`errc::unexpected_exception`).
inline bool fallback_applies(const std::error_code& error, const retry_stats& s) noexcept {
  return error && !is_aborted(error) && error != errc::unexpected_exception &&
         s.reason != errc::cancelled;
}

/// The fallback, seen as an attempt (attempt_shape.hpp): `f(info)` returning an awaitable or a
/// deferred operation, or `f(info, token)` initiating an operation with a completion token.
template <class F> struct fallback_call {
  F* f;
  const fallback_info* info;
  template <class Token>
  auto operator()(Token&& token) -> decltype((*f)(*info, std::forward<Token>(token))) {
    return (*f)(*info, std::forward<Token>(token));
  }
  template <class G = F>
  auto operator()() -> decltype(std::declval<G&>()(std::declval<const fallback_info&>())) {
    return (*f)(*info);
  }
};

/// Runs the fallback `f` for `info`, writing its outcome into `out` (what an attempt's outcome
/// would be: a value, an error, or what it threw).
template <class T, class F>
asio::awaitable<void> run_fallback(F& f, const fallback_info& info, loop_result<T>& out) {
  using view = fallback_call<F>;
  constexpr bool called = std::is_invocable_v<F&, const fallback_info&> ||
                          std::is_invocable_v<F&, const fallback_info&, attempt_token_t>;
  out.error = {};
  out.exception = nullptr;
  out.value.reset();
  try {
    if constexpr (!called) {
      static_assert(!std::is_void_v<T>, "coretry::fallback: an operation returning void takes a "
                                        "function as its fallback, not a value");
      out.value.emplace(std::move(f)); // a value: the fallback runs once at most
    } else if constexpr (form_of<view>() == attempt_form::invalid) {
      if constexpr (std::is_void_v<T>) {
        f(info);
        out.value.emplace();
      } else {
        out.value.emplace(f(info));
      }
    } else {
      using shape = attempt_shape<view>;
      view v{&f, &info};
      attempt_context ctx(0);
      if constexpr (shape::awaits_void) {
        co_await shape::start(v, ctx);
        out.value.emplace();
      } else {
        shape::take(out, co_await shape::await_outcome(v, ctx));
      }
    }
  } catch (...) {
    take_current_exception(out);
  }
}

/// The retry operation and, when it gave up, its fallback: the outcome as the loop reports it
/// (an exception to rethrow in `exception`, `errc::unexpected_exception` in `error` with it).
/// `any_type`: any cancellation type reaches the retry (async_retry's rule), not only terminal.
template <class Timer, class T, class Op, class Held, class F>
asio::awaitable<loop_result<T>> retry_then_fallback(Op op, Held policy, F f, retry_stats* user,
                                                    op_origin origin, bool any_type) {
  if (any_type)
    co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
  retry_stats own;
  retry_stats& s = user ? *user : own;
  auto r = co_await asio::async_initiate<const attempt_token_t&, error_signature_t<T>>(
      initiate_retry<Timer, T, deliver_error_code>{}, attempt_token(), handler_executor{},
      std::move(op), std::move(policy), &s, std::move(origin));
  loop_result<T> out;
  out.error = std::get<0>(r);
  if constexpr (std::is_void_v<T>) {
    if (!out.error)
      out.value.emplace();
  } else if constexpr (std::is_same_v<delivered_t<T>, T>) {
    out.value.emplace(std::move(std::get<1>(r)));
  } else if (std::get<1>(r)) {
    out.value.emplace(std::move(*std::get<1>(r)));
  }
  if (!fallback_applies(out.error, s)) {
    if (out.error == errc::unexpected_exception || out.error == errc::retryable_exception)
      out.exception = s.exception; // what retry_async would rethrow
    co_return out;
  }
  const fallback_info info{out.error, s};
  co_await run_fallback<T>(f, info, out);
  if (fatal_exception(out)) // the fallback threw something other than std::system_error
    s.exception = out.exception;
  co_return out;
}

/// retry_async's body with a fallback.
template <class Timer, class T, class Op, class Held, class F>
asio::awaitable<T> fallback_entry(Op op, Held policy, F f, retry_stats* stats, op_origin origin) {
  loop_result<T> out = co_await retry_then_fallback<Timer, T>(
      std::move(op), std::move(policy), std::move(f), stats, std::move(origin), false);
  if (out.exception)
    std::rethrow_exception(out.exception);
  if (out.error)
    throw std::system_error(out.error);
  if constexpr (!std::is_void_v<T>)
    co_return std::move(*out.value);
}

/// What the caller's slot reaches in `initiate_fallback`'s spawn: its emits go on through
/// `signal` once the spawned coroutine has begun, and are held until then. Asio 1.24 to 1.27
/// (Boost 1.81): co_spawn first dispatches itself onto its executor (a post, when initiated from
/// elsewhere); an emit before that resumes makes it throw operation_aborted out of `run()`
/// (retry_op.hpp, `cut_attempt`). All on the operation's executor.
struct fallback_cut {
  asio::cancellation_signal signal; ///< bound to the co_spawn
  bool held = false;                ///< emitted before the coroutine began
  bool begun = false;
  bool ended = false; ///< the retry and the fallback are over: later emits are dropped
};

/// The caller's slot handler in `initiate_fallback`: each emit hops onto the operation's
/// executor, as co_spawn's own slot handler does.
template <class Executor> struct fallback_slot_handler {
  std::shared_ptr<fallback_cut> cut;
  Executor ex;
  void operator()(asio::cancellation_type type) const {
    asio::dispatch(ex, [c = cut, type] {
      if (c->ended)
        return;
      if (c->begun)
        c->signal.emit(type);
      else
        c->held = true;
    });
  }
};

/// `retry_then_fallback`, as `initiate_fallback` spawns it: cut before it began, it ends at once
/// as a cancellation.
template <class Timer, class T, class Op, class Held, class F>
asio::awaitable<loop_result<T>> spawned_fallback(std::shared_ptr<fallback_cut> cut, Op op,
                                                 Held policy, F f, retry_stats* stats,
                                                 op_origin origin) {
  cut->begun = true;
  loop_result<T> out;
  if (cut->held) {
    out.error = coretry::detail::aborted_error();
    if (stats)
      stats->reason = out.error;
  } else {
    out = co_await retry_then_fallback<Timer, T>(std::move(op), std::move(policy), std::move(f),
                                                 stats, std::move(origin), true);
  }
  cut->ended = true;
  // Asio 1.26 (Boost 1.81): when the coroutine ends without having switched context, co_spawn
  // posts once and lets that post throw, out of io_context::run, if it was cut.
  co_await asio::this_coro::throw_if_cancelled(false);
  co_return out;
}

/// async_retry's initiation with a fallback: `retry_then_fallback` co_spawned on the operation's
/// executor; the handler is called through its associated executor, and its cancellation slot
/// reaches the retry and the fallback (through `fallback_cut`).
template <class Timer, class T> struct initiate_fallback {
  template <class Handler, class Executor, class Op, class Held, class F>
  void operator()(Handler&& handler, const Executor& ex, Op op, Held policy, F f,
                  retry_stats* stats, op_origin origin) const {
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto hex = asio::get_associated_executor(handler, ex);
    auto cut = std::make_shared<fallback_cut>();
    if (slot.is_connected())
      slot.template emplace<fallback_slot_handler<Executor>>(
          fallback_slot_handler<Executor>{cut, ex});
    asio::cancellation_slot spawn_slot = cut->signal.slot();
    asio::co_spawn(
        ex,
        spawned_fallback<Timer, T>(cut, std::move(op), std::move(policy), std::move(f), stats,
                                   std::move(origin)),
        asio::bind_cancellation_slot(
            spawn_slot,
            asio::bind_executor(hex, [h = std::forward<Handler>(handler), stats,
                                      cut](std::exception_ptr e, loop_result<T> r) mutable {
              if (e) { // the coroutine could not run at all
                r.value.reset();
                // Anything thrown into it is a bug (attempt_shape.hpp, the rule's steps 1 and
                // 3); operation_aborted, which an older co_spawn threw into a coroutine cut
                // before it began, is a cancellation.
                take_fatal_exception(r, e, kept_codes::aborted_only);
                if (stats) {
                  stats->reason = r.error;
                  if (r.error == errc::unexpected_exception)
                    stats->exception = e;
                }
              }
              // Cleared here, on the handler's executor, where the caller emits into it.
              auto user_slot = asio::get_associated_cancellation_slot(h);
              if (user_slot.is_connected())
                user_slot.clear();
              deliver_error_code::deliver<T>(h, r);
            })));
  }
};

} // namespace coretry::detail
