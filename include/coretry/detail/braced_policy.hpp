// SPDX-License-Identifier: BSL-1.0
#pragma once
// Why `retry_async` and `hedge_async` refuse a braced policy on g++ 12. Private: included by
// <coretry/retry.hpp>.
//
// g++ 12 miscompiles an aggregate temporary initialized inside a `co_await` expression, as in
// `co_await retry_async(op, {.max_attempts = 3})`: it builds the temporary, copies it bitwise to
// another place of the coroutine frame, hands the copy to the callee, and then destroys both.
// Every member that owns something (the policy's `std::string label`, its `shared_ptr`s and
// `std::function`s) is then freed twice or at a wrong address ("free(): invalid pointer"). No
// callee can repair an argument that arrives that way. So on g++ 12 the policy parameter of the
// awaitable front ends (`retry_async`, `hedge_async`), which are always awaited, has no default
// type: a braced list cannot deduce it and selects an overload that fails to compile with a
// message saying what to write. g++ 13 and later, and clang, take the braced list. The token
// front ends (`async_retry`, `async_hedge`) still take it on g++ 12: with a callback or
// `use_future` nothing is awaited and the braced policy is safe; awaited through
// `use_awaitable`, it meets the bug.
//
// The same bug hits a temporary written with its type, `retry_policy{.max_attempts = 3}`, which
// no overload can tell from `std::move(policy)`: on g++ 12 name the policy in an earlier
// statement (a `shared_policy` likewise: one built inside the `co_await` expression holds the
// same temporary), or pass a function's result such as `presets::overload_safe()`, which g++ 12
// compiles correctly. A braced `hedge_options` has the same problem and is not refused yet.
// docs/core.md, "g++ 12". `<coretry/beast.hpp>` refuses its braced endpoint and rules the same
// way (`converts_to`, below), and its braced policy with `braced_policy`.

#include <type_traits>

/// 1 on g++ 12 and older, where a braced policy argument is refused; 0 elsewhere.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#define CORETRY_REFUSE_BRACED_POLICY 1
#else
#define CORETRY_REFUSE_BRACED_POLICY 0
#endif

/// The default of a front end's policy type: none on g++ 12, where a braced list then cannot
/// deduce it and selects the refusing overload; `retry_policy` elsewhere.
#if CORETRY_REFUSE_BRACED_POLICY
#define CORETRY_DEFAULT_POLICY
#else
#define CORETRY_DEFAULT_POLICY = ::coretry::retry_policy
#endif

namespace coretry::detail {

#if CORETRY_REFUSE_BRACED_POLICY

/// Takes any value: a member of `braced_policy`.
struct any_field {
  any_field() = default;
  template <class V> any_field(V&&) noexcept {}
};

/// `retry_policy`'s members, by name and in its order: what a braced `{.max_attempts = ...}`
/// argument initialises on g++ 12, only to be refused. Keep in step with `retry_policy` (a
/// member missing here makes the braced form fail with a plainer message, never run).
struct braced_policy {
  any_field max_attempts{}, deadline{}, attempt_timeout{}, backoff{}, max_retry_after{}, retry_if{},
      pushback_if{}, on_retry{}, budget{}, breaker{}, when_open{}, rate_limit{}, throttle_if{},
      cancellation{}, seed{}, report{}, result_filter{}, observer{}, label{}, retry_if_exception{},
      classify{};
};

template <class> inline constexpr bool braced_policy_refused = false;

/// An object that converts to `T` (a `T`, one derived from it, or one converting to it), named
/// or not: what a front end takes on g++ 12 in place of a `T` parameter (`converts_to<T> auto`), so
/// that a braced list, which cannot deduce it, selects an overload that refuses it
/// (`<coretry/beast.hpp>`'s endpoint and rules), while every argument a `T` parameter took is
/// still taken.
template <class A, class T>
concept converts_to = std::is_convertible_v<A, T>;

#define CORETRY_REFUSE_BRACED_POLICY_ASSERT(G)                                                     \
  static_assert(::coretry::detail::braced_policy_refused<G>,                                       \
                "g++ 12 miscompiles a braced retry_policy inside co_await (the temporary is "      \
                "copied bitwise and destroyed twice: free(): invalid pointer). Name the policy "   \
                "first: coretry::retry_policy policy{.max_attempts = 3}; "                         \
                "co_await coretry::retry_async(op, policy);")

#endif

} // namespace coretry::detail
