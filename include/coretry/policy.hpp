// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `retry_policy`: everything a retry loop needs to know, as one aggregate.

#include <coretry/backoff.hpp>
#include <coretry/budget.hpp>
#include <coretry/cancellation.hpp>
#include <coretry/classify.hpp>
#include <coretry/error.hpp>
#include <coretry/export.hpp>
#include <coretry/limits.hpp>
#include <coretry/observer.hpp>
#include <coretry/overload.hpp>
#include <coretry/random.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <type_traits>
#include <typeinfo>

namespace coretry {

/// Passed to `retry_policy::on_retry` after a failed attempt, before the loop sleeps.
struct retry_event {
  unsigned attempt = 0;       ///< The attempt that just failed, from 1.
  std::error_code error{};    ///< Its error (`errc::result_rejected` when the result was rejected).
  nanoseconds delay{0};       ///< The sleep chosen before the next attempt.
  nanoseconds server_hint{0}; ///< What the attempt asked for through `attempt_context`, or 0.
};

/// What one retry operation did; filled in as it goes and final when it completes.
struct retry_stats {
  unsigned attempts = 0;        ///< Attempts started (an attempt the policy refused is not one).
  nanoseconds slept{0};         ///< Sum of the delays slept (as chosen, not as measured).
  nanoseconds elapsed{0};       ///< From the start of the operation to its completion.
  std::error_code last_error{}; ///< The last attempt's error; empty if it succeeded.
  /// Why the loop stopped: empty on success; an `errc` when the policy gave up; the attempt's
  /// error when it was not retryable; `errc::cancelled` (group token) or
  /// `asio::error::operation_aborted` (the caller's slot) when cancelled;
  /// `errc::unexpected_exception` when something threw (see `exception`).
  std::error_code reason{};
  /// What was thrown when `reason` is `errc::unexpected_exception`; or, when `last_error` is
  /// `errc::retryable_exception`, what that last attempt threw (`retry_policy::retry_if_exception`).
  std::exception_ptr exception{};
};

/// What a failed operation reports when the policy gave up on a retryable error.
enum class final_error : std::uint8_t {
  /// The last attempt's own error (the default: the caller sees `connection_refused`, not a
  /// wrapper; `retry_stats::reason` tells why the loop stopped). When no attempt ran, the
  /// policy's reason. A breaker's refusal (`circuit_open`) and the deadline
  /// (`deadline_exceeded`) always report themselves.
  last_error,
  /// The policy's reason (`errc::attempts_exhausted`, `budget_exhausted`, `circuit_open`).
  policy_reason,
};

/// What an operation does when `retry_policy::breaker` refuses an attempt.
enum class on_open : std::uint8_t {
  /// Stop at once with the gate's `refusal()` (`errc::circuit_open`), sending nothing.
  fail,
  /// Wait on the loop's timer until the gate says an attempt may pass
  /// (`attempt_gate::retry_after`), then ask again: no socket, no thread and no reservation
  /// (send token, retry budget) is held meanwhile, the wait is cancelled like a backoff sleep,
  /// and it spends no attempt and no budget. When the gate cannot say when
  /// (`coretry::unlimited`), or the wait would end at or after the deadline, the operation
  /// stops at once with `refusal()` (`errc::circuit_open`). A retry the `budget` refuses waits
  /// likewise, for `retry_budget::retry_after` (jittered), and asks the budget again; a budget
  /// that cannot say when, or a wait reaching the deadline, stops it with
  /// `errc::budget_exhausted`.
  wait,
};

/// The default retry predicate: everything is retryable except cancellation.
CORETRY_API bool default_retry_if(const std::error_code& ec) noexcept;

/// The default throttle predicate: an attempt that timed out (`errc::attempt_timeout`,
/// `std::errc::timed_out`) slows the sending rate down.
CORETRY_API bool default_throttle_if(const std::error_code& ec) noexcept;

/// The seed of an operation's jitter. Unset (the default), each operation draws a fresh seed.
/// Set, the k-th operation started with this policy or any copy of it draws the stream
/// `mix(seed, k)`: a run is reproducible, yet operations sharing a policy still draw different
/// delays (one sequence for all of them would be no jitter at all).
class jitter_seed {
public:
  jitter_seed() noexcept = default;
  /// A fixed seed: the same delays on every run.
  jitter_seed(std::uint64_t seed) // NOLINT(google-explicit-constructor): `.seed = 42`
      : seed_(seed), next_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

  /// Whether a seed was given.
  bool has_value() const noexcept { return next_ != nullptr; }
  /// The seed; only meaningful when `has_value()`.
  std::uint64_t value() const noexcept { return seed_; }

  /// The generator for the next operation started with this seed.
  fast_rng next_stream() const noexcept {
    if (!next_)
      return fast_rng::from_entropy();
    const std::uint64_t k = next_->fetch_add(1, std::memory_order_relaxed);
    // Two rounds of SplitMix64 over (seed, k): neighbouring seeds and neighbouring k decorrelate.
    fast_rng mix(seed_ ^ (k * 0xd1b54a32d192ed03ull));
    return fast_rng(mix() ^ k);
  }

private:
  std::uint64_t seed_ = 0;
  std::shared_ptr<std::atomic<std::uint64_t>> next_;
};

namespace detail {
/// A predicate on results of one type, behind a pointer so that every `retry_policy` has one
/// type whatever the operations it serves return.
struct result_predicate {
  const std::type_info* type;
  std::function<bool(const void*)> call;
};

template <class F> struct single_argument {
  static_assert(sizeof(F) == 0, "coretry: retry_if_result cannot deduce the result type of a "
                                "generic predicate; name it: retry_if_result<T>(pred)");
};
template <class C, class R, class A> struct single_argument<R (C::*)(A) const> {
  using type = std::remove_cvref_t<A>;
};
template <class C, class R, class A> struct single_argument<R (C::*)(A) const noexcept> {
  using type = std::remove_cvref_t<A>;
};
template <class F, class = void> struct predicate_argument : single_argument<F> {};
template <class F>
struct predicate_argument<F, std::void_t<decltype(&F::operator())>>
    : single_argument<decltype(&F::operator())> {};
template <class R, class A> struct predicate_argument<R (*)(A), void> {
  using type = std::remove_cvref_t<A>;
};
/// `T` when named, else what the predicate takes.
template <class T, class Predicate> struct filtered_type { using type = T; };
template <class Predicate> struct filtered_type<void, Predicate> {
  using type = typename predicate_argument<Predicate>::type;
};
} // namespace detail

/// A retry policy. An aggregate meant for designated initializers; every field has a default.
///
/// ```
/// coretry::retry_policy policy{
///     .max_attempts = 5,
///     .deadline = 10s,
///     .attempt_timeout = 2s,
///     .backoff = coretry::backoff::exponential(100ms, 2.0, 5s).with_jitter(coretry::jitter::full()),
/// };
/// ```
///
/// Defaults: 3 attempts, no deadline, no per-attempt timeout, exponential backoff from 100 ms
/// doubling up to 32 s with full jitter (as "Why Exponential Backoff Needs Jitter" and
/// "Preventing Retry Storms: Exponential Backoff and Jitter Design" recommend), every error but cancellation retried, server hints
/// honoured up to 60 s, no hook, no budget, no group token, a fresh random seed per operation, the
/// last attempt's error reported. `validate()` runs when an operation starts, before anything
/// else, and throws `std::invalid_argument` naming the bad field and its value.
///
/// These defaults are not `presets::overload_safe()`'s (no attempt limit, a 10 s deadline, a 2 s
/// attempt timeout, a 1 s backoff cap, a breaker and a budget), and on purpose: they are the least
/// surprising for a single call written by hand, where the preset is for a fleet of clients
/// sharing an upstream.
///
/// Hooks and predicates run on the operation's executor and should not throw: one that does
/// stops the operation at once with `errc::unexpected_exception` (see `retry_async`).
///
/// `classify` is the one way to decide what an outcome means. The five 0.2 predicates
/// (`retry_if`, `pushback_if`, `throttle_if`, `retry_if_exception` and `retry_if_result`) are
/// deprecated: they still decide as in 0.2 when `classify` is empty, for one minor release.
CORETRY_ALLOW_DEPRECATED_BEGIN // the implicit members copy the 0.2 predicates without a warning
struct CORETRY_API retry_policy {
  /// Attempts in total, the first included (1 = never retry). Must be at least 1.
  /// `coretry::unlimited_attempts`: no limit (the deadline, the breaker and the budget decide).
  /// The default, 3, bounds a hand-written call that has no deadline; the fleet preset has none.
  unsigned max_attempts = 3;
  /// Overall time limit from the start, covering attempts and sleeps: an attempt still running at
  /// the deadline is cancelled, and the loop never sleeps when no attempt could start before it.
  /// An operation stopped by its deadline always fails with `errc::deadline_exceeded` (a server
  /// hint reaching past it is `errc::retry_after_past_deadline`, see `max_retry_after`).
  /// `coretry::unlimited` (the default): no deadline, since no value suits every call.
  nanoseconds deadline = unlimited;
  /// Limit for each attempt; an attempt over it is cancelled and fails with
  /// `errc::attempt_timeout`, which is retryable. `coretry::unlimited` (the default): none, since
  /// only the caller knows how slow its upstream may be.
  nanoseconds attempt_timeout = unlimited;
  /// The delays between attempts. The fleet preset caps them at its breaker's 1 s break, so
  /// that no sleep outlasts a break; a single call without a breaker has no such reason.
  coretry::backoff backoff =
      coretry::backoff::exponential(std::chrono::milliseconds(100), 2.0, std::chrono::seconds(32))
          .with_jitter(coretry::jitter::full());
  /// The longest server hint (`attempt_context::retry_after`, an HTTP `Retry-After`) the loop
  /// will wait for (default 60 s). A hint above it ends the operation at once with
  /// `errc::retry_after_too_long`, and a hint that would end at or after `deadline` with
  /// `errc::retry_after_past_deadline` (both in `retry_stats::reason`; what the caller gets
  /// follows `report`): retrying sooner than the server asked helps nobody. It is independent
  /// of the backoff's cap: the loop sleeps `max(backoff delay, hint)`. Must be positive.
  nanoseconds max_retry_after = std::chrono::seconds(60);
  /// Deprecated: use `classify` (`attempt_decision::retry` for `attempt_result::error()`).
  /// Which attempt errors to retry; empty means `default_retry_if`. Cancellation is never retried,
  /// whatever this says.
  [[deprecated(
      "use classify (attempt_decision::retry)")]] std::function<bool(const std::error_code&)>
      retry_if{};
  /// Which retryable attempt errors are the upstream pushing back (asking the client to slow
  /// down, as an HTTP 429 does) rather than failing: they are retried as any failure, after the
  /// server's hint when it gave one, but the breaker hears `attempt_gate::on_pushback`, which
  /// `circuit_breaker` counts as neither a failure nor a success. An attempt that carries a
  /// `Retry-After` hint (`attempt_context::retry_after`) is a push-back whatever this says;
  /// empty: no other error is. (`coretry::curl::retry` adds HTTP 429.)
  /// Deprecated: use `classify` (`attempt_decision::pushback`).
  [[deprecated(
      "use classify (attempt_decision::pushback)")]] std::function<bool(const std::error_code&)>
      pushback_if{};
  /// Called after each failed attempt that will be retried, with the delay chosen. Runs on the
  /// operation's executor.
  std::function<void(const retry_event&)> on_retry{};
  /// A budget shared with other operations; none by default.
  std::shared_ptr<retry_budget> budget{};
  /// A circuit breaker shared by every operation towards one upstream; none by default. While it
  /// refuses, attempts are not sent and the operation stops with `errc::circuit_open` (the
  /// gate's `refusal()`, whether or not an attempt ran before; see `final_error`), or waits
  /// (`when_open`). `endpoint_registry` keeps one per upstream.
  std::shared_ptr<attempt_gate> breaker{};
  /// What to do when `breaker` refuses an attempt: fail at once (the default) or wait until it
  /// lets one through, within the deadline. See `on_open`.
  coretry::on_open when_open = on_open::fail;
  /// A sending rate shared by the operations towards one upstream (first attempts included);
  /// none by default.
  std::shared_ptr<send_rate> rate_limit{};
  /// Which attempt errors tell `rate_limit` to slow down; empty means `default_throttle_if`.
  /// (`coretry::curl::retry` adds HTTP 429 and 503.)
  /// Deprecated: use `classify` (`attempt_decision::throttle`).
  [[deprecated(
      "use classify (attempt_decision::throttle)")]] std::function<bool(const std::error_code&)>
      throttle_if{};
  /// A group token; see `cancellation_source`.
  cancellation_token cancellation{};
  /// Seed for the jitter; see `jitter_seed`.
  jitter_seed seed{};
  /// What a failed operation reports.
  final_error report = final_error::last_error;
  /// Set by `retry_if_result`. Deprecated: use `classify` (`attempt_result::value<T>()`).
  [[deprecated(
      "use classify (attempt_result::value<T>())")]] std::shared_ptr<const detail::result_predicate>
      result_filter{};
  /// Receives every event of the operations run with this policy (observer.hpp); none by
  /// default, which costs a null check per event. One object for all of them, called
  /// concurrently from the threads that run them.
  std::shared_ptr<retry_observer> observer{};
  /// Names the operations in the observer's events: the endpoint or the call (an HTTP
  /// `scheme://host:port`, "billing.charge", ...). Empty by default; `coretry::curl` sets it to
  /// the request's `scheme://host:port` when an observer is set and the label is empty. Keep the
  /// set of labels small: a metrics exporter makes one series per label.
  std::string label{};
  /// Which exceptions an attempt throws are failures worth retrying, as `retry_if` says for
  /// error codes: `.retry_if_exception = coretry::retry_on<my_transient_error>()`. Asked with
  /// what an attempt threw, other than a `std::system_error` (always the attempt's error code);
  /// true makes the attempt a failure with `errc::retryable_exception`, retried like any other
  /// whatever `retry_if` says (backoff, budget, breaker, observer, `on_retry`), with the
  /// exception in `retry_stats::exception`. When the loop then gives up and reports that code,
  /// `retry_async` and `hedge_async` rethrow the last exception itself and the token front ends
  /// deliver the code. Empty (the default), or false: the exception is a bug, and the loop stops
  /// at once with `errc::unexpected_exception`, as does a predicate that throws. Not asked about
  /// an attempt a cancellation abandoned (what it threw is dropped), as `classify` is not. Runs
  /// on the operation's executor. Deprecated: use `classify` (`attempt_result::exception()`).
  [[deprecated(
      "use classify (attempt_result::exception())")]] std::function<bool(const std::exception_ptr&)>
      retry_if_exception{};
  /// One function from an attempt's outcome to what the loop does with it (classify.hpp): retry
  /// or not, whether the upstream pushed back, whether the sending rate slows down, and a
  /// server hint read from the outcome. It sees the attempt's error, exception or value
  /// (`attempt_result::value<T>()`) with what the attempt told its `attempt_context`. Set, it
  /// is the only judge: `retry_if`, `pushback_if`, `throttle_if`, `retry_if_result` and
  /// `retry_if_exception` must be empty (`validate()` refuses the mix; a policy read by
  /// `coretry::config` is the exception: see its `read_policy`). Not asked for an
  /// attempt a timer cut (a retried failure that slows the sending rate) or one a cancellation
  /// abandoned; a cancellation is never retried, whatever it says. What the gate hears is the
  /// gate's own classification (`attempt_gate::classify`), whatever this decides. Empty (the
  /// default): the 0.2 predicates decide, as `default_classify` when they are empty too. The
  /// fields a decision leaves open (`attempt_decision::given`) are `default_classify`'s. Runs on
  /// the operation's executor; with a `shared_policy`, concurrently for several operations. One
  /// that throws stops the operation with `errc::unexpected_exception`.
  std::function<attempt_decision(const attempt_result&)> classify{};

  /// Throws `std::invalid_argument` when a field is out of range (`max_attempts` of 0, a
  /// non-positive `deadline`, `attempt_timeout` or `max_retry_after`), or `classify` is set
  /// with one of the predicates it replaces (other than in a policy read by `coretry::config`,
  /// whose classifier gives way to 0.2 predicates added to it).
  void validate() const;

  /// Treats results for which `pred(result)` is true as retryable failures
  /// (`errc::result_rejected`), e.g. an HTTP 503. When the loop then gives up, the last result is
  /// returned rather than an error, so the caller can still read it; `retry_stats::reason` tells
  /// why it stopped. `T` is deduced from a predicate with one parameter; name it for a generic
  /// one. An operation whose result is not `T` is refused at the call with
  /// `std::invalid_argument`. Returns a policy (this one plus the predicate), so a table of
  /// policies holds one type. Deprecated: use `classify`, which reads the value with
  /// `attempt_result::value<T>()` and rejects it with `attempt_decision::retry`.
  template <class T = void, class Predicate>
  [[deprecated("use classify (attempt_result::value<T>())")]] retry_policy
  retry_if_result(Predicate pred) const& {
    retry_policy copy = *this;
    copy.result_filter = make_result_filter<T>(std::move(pred));
    return copy;
  }
  /// As above, reusing this policy (an rvalue) instead of copying it. Deprecated: use `classify`.
  template <class T = void, class Predicate>
  [[deprecated("use classify (attempt_result::value<T>())")]] retry_policy
  retry_if_result(Predicate pred) && {
    result_filter = make_result_filter<T>(std::move(pred));
    return std::move(*this);
  }

private:
  template <class T, class Predicate>
  static std::shared_ptr<const detail::result_predicate> make_result_filter(Predicate pred) {
    using arg = typename detail::filtered_type<T, Predicate>::type;
    return std::make_shared<const detail::result_predicate>(
        detail::result_predicate{&typeid(arg), [p = std::move(pred)](const void* v) -> bool {
                                   return static_cast<bool>(p(*static_cast<const arg*>(v)));
                                 }});
  }
};
CORETRY_ALLOW_DEPRECATED_END

namespace detail {
template <class E, class... Rest> bool thrown_one_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    if constexpr (sizeof...(Rest) == 0)
      return false;
    else
      return thrown_one_of<Rest...>(e);
  }
}
} // namespace detail

/// A `retry_policy::retry_if_exception` predicate that holds for an exception of one of the
/// types `E...` or of a type derived from one (what `catch (const E&)` catches), as tenacity's
/// `retry_if_exception_type` does:
/// `retry_policy p{.retry_if_exception = coretry::retry_on<my_transient_error>()};`. With
/// `classify`, which replaces that field, ask it of `attempt_result::exception()`:
/// `d.retry = r.exception() && coretry::retry_on<my_transient_error>()(r.exception());`
template <class... E> std::function<bool(const std::exception_ptr&)> retry_on() {
  static_assert(sizeof...(E) > 0, "coretry::retry_on: name at least one exception type");
  return [](const std::exception_ptr& e) -> bool { return e && detail::thrown_one_of<E...>(e); };
}

/// What a fallback is told: why the operation gave up.
struct fallback_info {
  /// What the operation would have reported without the fallback (see `final_error`):
  /// the last attempt's error, a policy's `errc`, or `errc::retryable_exception` after an
  /// exception the policy retried (the exception is in `stats.exception`).
  std::error_code error;
  /// How the operation went: `reason` (why it stopped), `attempts`, `last_error`, `exception`.
  /// The caller's own `retry_stats` when it passed one.
  const retry_stats& stats;
};

/// A fallback for `retry_async` and `async_retry`: made by `coretry::fallback` (retry.hpp).
template <class F> struct fallback_t {
  F f; ///< the value, or the function giving it
};

/// A validated, immutable policy that many operations share. Each operation started with it
/// holds a pointer rather than its own copy of the `retry_policy`: about 380 bytes less per
/// operation, and no copy of the policy's `std::function`s and `shared_ptr`s at each call.
/// Cheap to copy; safe to use from any thread. The jitter seed behaves as for copies of one
/// `retry_policy` (see `jitter_seed`). Its hooks and predicates are one object for every
/// operation, which may call them from several threads at once: a stateful one (a `mutable`
/// lambda, say) must be safe to call concurrently, where a `retry_policy` would copy it into each
/// operation.
///
/// ```
/// static const coretry::shared_policy policy{{.max_attempts = 5, .deadline = 10s}};
/// co_await coretry::retry_async(op, policy);
/// ```
class CORETRY_API shared_policy {
public:
  /// Throws `std::invalid_argument` as `retry_policy::validate` does.
  explicit shared_policy(retry_policy p);

  /// The shared policy.
  const retry_policy& get() const noexcept { return *p_; }
  /// The shared policy.
  const retry_policy& operator*() const noexcept { return *p_; }
  /// The shared policy's members.
  const retry_policy* operator->() const noexcept { return p_.get(); }
  /// False only for a moved-from object; retry_async and async_retry refuse that one with
  /// `std::invalid_argument`.
  explicit operator bool() const noexcept { return p_ != nullptr; }

private:
  std::shared_ptr<const retry_policy> p_;
};

namespace detail {
template <class P>
concept policy_argument = std::is_same_v<std::remove_cvref_t<P>, retry_policy> ||
    std::is_same_v<std::remove_cvref_t<P>, shared_policy>;

/// What the front ends that copy their policy take (the hedge, the HTTP front ends): a
/// `retry_policy`, a `shared_policy`, or anything that converts to a `retry_policy` (a type
/// derived from it, or with a conversion operator), as their 0.2 by-value parameter did.
template <class P>
concept policy_value = policy_argument<P> || std::is_convertible_v<P, retry_policy>;

/// What an operation keeps of the policy it was given: a copy of a `retry_policy`, or the
/// `shared_policy` itself.
template <class P> using held_policy_t = std::remove_cvref_t<P>;

inline const retry_policy& policy_of(const retry_policy& p) noexcept {
  return p;
}
inline const retry_policy& policy_of(const shared_policy& p) noexcept {
  return *p;
}

/// A `retry_policy` of the operation's own, from any policy argument: moved from an rvalue,
/// copied from an lvalue or from a `shared_policy` (refused with `std::invalid_argument` when
/// empty). For the front ends whose state holds a `retry_policy` (the hedge).
inline retry_policy policy_copy(retry_policy&& p) {
  return std::move(p);
}
inline retry_policy policy_copy(const retry_policy& p) {
  return p;
}
CORETRY_API retry_policy policy_copy(const shared_policy& p);

/// The front ends' check at the call, before anything starts.
inline void check_policy(const retry_policy& p) {
  p.validate();
}
CORETRY_API void check_policy(const shared_policy& p);
} // namespace detail

} // namespace coretry
