// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `coretry::curl::retry`: an HTTP request under a `coretry::retry_policy`, with HTTP-aware
/// classification and `Retry-After`.

#include <coretry/attempt.hpp>
#include <coretry/config.hpp>
#include <coretry/curl/braced_request.hpp>
#include <coretry/curl/classify.hpp>
#include <coretry/curl/client.hpp>
#include <coretry/curl/retry_after.hpp>
#include <coretry/detail/asio.hpp>
#include <coretry/detail/loaded_rule.hpp>
#include <coretry/http.hpp>
#include <coretry/policy.hpp>
#include <coretry/retry.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace coretry::curl {

/// What the awaitable `retry` and `hedge` throw when the circuit breaker refused an attempt:
/// `code()` is `coretry::errc::circuit_open` (so `catch (const std::system_error&)` sees it as
/// before), and `last_response()` is the last response an earlier attempt got (a retryable
/// status), or empty when no attempt ran or the last one failed in transport. The completion
/// forms (`async_retry`, `async_hedge`) deliver the same: `circuit_open` with that response as
/// the second argument (a default `response` when there is none).
class CORETRY_CURL_API circuit_open_error : public std::system_error {
public:
  /// Code `coretry::errc::circuit_open`; `last` is the last response, if any.
  explicit circuit_open_error(std::optional<response> last)
      : std::system_error(coretry::errc::circuit_open), last_(std::move(last)) {}
  /// The last response before the refusal, if an attempt got one.
  const std::optional<response>& last_response() const noexcept { return last_; }

private:
  std::optional<response> last_;
};

namespace detail {

// Shared by the attempt function and the on_retry hook of one retry operation; keeps the
// client's waiting-retries counter right however the operation ends. It refers to the client's
// state weakly: a frame that outlives the client (asleep when the client was destroyed, then
// destroyed with its io_context or resumed later) never touches freed memory, and an attempt
// whose client is gone fails with operation_aborted, which the loop never retries.
struct http_retry_state {
  // The rules are the request's, or the client's: copied once, out of the request that every
  // attempt copies.
  http_retry_state(client& c, request r)
      : impl(client_access::state(c)), executor(c.get_executor()), req(std::move(r)) {
    if (req.retry_rules) {
      rules = std::move(*req.retry_rules);
      req.retry_rules.reset();
    } else {
      rules = c.options().retry_rules;
    }
  }
  ~http_retry_state() { wake(); }
  http_retry_state(const http_retry_state&) = delete;
  http_retry_state& operator=(const http_retry_state&) = delete;

  void sleep() noexcept {
    if (!sleeping) {
      sleeping = true;
      if (auto i = impl.lock())
        client_access::add_waiting(i, 1);
    }
  }
  void wake() noexcept {
    if (sleeping) {
      sleeping = false;
      if (auto i = impl.lock())
        client_access::add_waiting(i, -1);
    }
  }

  std::weak_ptr<client_impl> impl;
  asio::any_io_executor executor;
  request req;
  coretry::http::retry_rules rules;     ///< this operation's, never changed
  coretry::http::failure_counts counts; ///< this operation's failures of each kind
  long last_status = 0;                 ///< the last attempt's status, 0 after a transport error
  std::error_code last_error;           ///< the last attempt's transport error
  std::string last_detail;              ///< and libcurl's account of it (`response::error_detail`)
  /// With a breaker: the last rejected response, for `circuit_open_error`.
  std::optional<response> last_rejected;
  bool sleeping = false;
};

// Each attempt returns its transport error as a value (the `as_tuple` form the loop accepts), so
// a failing request costs no exception on any path.
inline auto make_http_attempt(std::shared_ptr<http_retry_state> st) {
  return
      [st = std::move(st)](
          coretry::attempt_context& ctx) -> asio::awaitable<std::tuple<std::error_code, response>> {
        st->wake();
        st->last_status = 0;
        st->last_rejected.reset(); // an older rejected response is not this attempt's
        auto impl = st->impl.lock();
        if (!impl || !client_access::open(*impl)) // the client is gone
          co_return std::tuple{coretry::detail::aborted_error(), response{}};
        // After an error that may have left its connection unusable (an HTTP/2 stream or
        // framing error, a garbled reply), this attempt does not go out on a cached connection.
        request req = st->req;
        if (breaks_connection(st->last_error))
          req.fresh_connection = true;
        auto [ec, r] = co_await async_perform_on(std::move(impl), st->executor, std::move(req),
                                                 coretry::detail::as_tuple(asio::use_awaitable));
        st->last_error = ec;
        // Attributes for the observers (the HTTP metric): views of the state, which outlives
        // the attempt's end.
        ctx.set_attribute(coretry::http::attribute::request_method, st->req.method);
        if (!ec)
          ctx.set_attribute(coretry::http::attribute::response_status_code,
                            static_cast<std::int64_t>(r.status));
        if (ec) {
          st->last_detail = std::move(r.error_detail);
          // Counted here, once per attempt; the policy's retry_if reads the counts.
          if (auto kind = failure_kind_of(ec, st->last_detail))
            st->counts.record(*kind, st->rules);
          co_return std::tuple{std::error_code(ec), response{}};
        }
        st->last_status = r.status;
        // The status, for the breaker's health classification: a rejected response reaches the
        // loop as `result_rejected`, which says neither 503 nor 404 nor "202 pending".
        if (r.status >= 100)
          ctx.health_code(make_http_status_error(r.status));
        if (coretry::http::honours_retry_after(r.status, st->rules))
          if (auto value = r.header("Retry-After"))
            if (auto hint = parse_retry_after(*value))
              ctx.retry_after(*hint);
        co_return std::tuple{std::error_code{}, std::move(r)};
      };
}

// The default rules' status classification (`coretry::http::is_retryable_status`).
struct retryable_response {
  bool operator()(const response& r) const noexcept { return is_retryable_status(r.status); }
};

// `origin_of(url)->to_string()` (coretry/curl/origin.hpp): `scheme://host:port` as libcurl
// connects to it, the registry's key; "_INVALID" when `url` has no origin. Never any other text
// of `url`, which may hold credentials.
CORETRY_CURL_API std::string endpoint_label(const std::string& url);

// Whether the caller decides through one of the five deprecated 0.2 predicates.
inline bool uses_deprecated_predicates(const coretry::retry_policy& p) noexcept {
  CORETRY_ALLOW_DEPRECATED_BEGIN
  return p.retry_if || p.pushback_if || p.throttle_if || p.result_filter || p.retry_if_exception;
  CORETRY_ALLOW_DEPRECATED_END
}

inline coretry::retry_policy make_http_policy(coretry::retry_policy p,
                                              const std::shared_ptr<http_retry_state>& st) {
  if (!may_retry(st->req, st->rules))
    p.max_attempts = 1;
  if (p.observer && p.label.empty())
    p.label = endpoint_label(st->req.url);
  p.on_retry = [user = std::move(p.on_retry), st](const coretry::retry_event& e) {
    if (user) {
      if (e.error == coretry::errc::result_rejected && st->last_status != 0) {
        coretry::retry_event with_status = e;
        with_status.error = make_http_status_error(st->last_status);
        user(with_status);
      } else {
        user(e);
      }
    }
    st->sleep();
  };
  // Without the caller's own judge, `curl::classify` decides, under the rules' limits below.
  // Only a caller's 0.2 predicate (deprecated) keeps the 0.2 path further down, where the
  // rules are wired into its predicates. A policy read by coretry::config carries its rule in
  // both spellings: the one that does not decide goes first.
  coretry::detail::settle_loaded_rule(p);
  if (!p.classify && !uses_deprecated_predicates(p))
    p.classify = [st](const coretry::attempt_result& r) {
      return coretry::curl::classify(r, st->rules);
    };
  if (p.classify) {
    // The caller's classifier decides (`curl::classify` is the default one, to extend), and
    // `curl::classify` fills the fields it leaves open (a loaded policy's leaves responses to
    // the status rules). The rules' limits per kind of failure hold all the same, counted once
    // per attempt it retries, as below; with a breaker, the response it rejects is kept for
    // `circuit_open_error`.
    p.classify = [user = std::move(p.classify), st,
                  keep = p.breaker != nullptr](const coretry::attempt_result& r) {
      coretry::attempt_decision d = user(r);
      if (!d.gives(coretry::decision_fields::all))
        d = coretry::complete(d, coretry::curl::classify(r, st->rules));
      if (!d.retry)
        return d;
      if (r.error()) {
        const auto kind = failure_kind_of(
            r.error(), r.error() == st->last_error ? std::string_view(st->last_detail) : "");
        if (kind && st->counts.exhausted(*kind, st->rules))
          d.retry = false;
      } else if (const response* res = r.value<response>()) {
        if (coretry::http::is_retryable_status(res->status, st->rules) &&
            !st->counts.record(coretry::http::failure_kind::status, st->rules))
          d.retry = false;
        else if (keep)
          st->last_rejected = *res;
      }
      return d;
    };
    return p;
  }
  // The 0.2 path, for a caller's deprecated predicates: as in 0.2, for one minor release.
  CORETRY_ALLOW_DEPRECATED_BEGIN
  // A kind of transport failure past its limit (`retry_rules::connect_retries`, `read_retries`)
  // is final, whatever decides the rest. The kind of the last attempt's error is read with its
  // libcurl account (a timeout while connecting or after sending).
  p.retry_if = [user = std::move(p.retry_if), st](const std::error_code& ec) {
    const auto kind =
        failure_kind_of(ec, ec == st->last_error ? std::string_view(st->last_detail) : "");
    if (kind && st->counts.exhausted(*kind, st->rules))
      return false;
    return user ? user(ec) : is_retryable(ec, st->rules);
  };
  // A sending rate slows down on 429 and 503 and on timeouts, transport ones included.
  p.throttle_if = [user = std::move(p.throttle_if), st](const std::error_code& ec) {
    if (ec == coretry::errc::result_rejected)
      return coretry::http::slows_sending_rate(st->last_status);
    if (user)
      return user(ec);
    return coretry::default_throttle_if(ec) || ec == errc::operation_timedout;
  };
  // A 429 is the server pushing back, not failing: retried, but no failure for a breaker (a
  // 429 or 503 with Retry-After is one already, by its hint).
  p.pushback_if = [user = std::move(p.pushback_if), st](const std::error_code& ec) {
    if (ec == coretry::errc::result_rejected && coretry::http::is_pushback_status(st->last_status))
      return true;
    return user && user(ec);
  };
  // The caller's result filter, when set, replaces the status classification (as `retry_if`
  // replaces `is_retryable`); one on another type than `response` is refused at the call by the
  // loop (std::invalid_argument).
  if (!p.result_filter)
    p = std::move(p).retry_if_result([st](const response& r) {
      return coretry::http::is_retryable_status(r.status, st->rules);
    });
  // A retryable status past `retry_rules::status_retries` is a final answer, as one outside the
  // list is. The filter runs once per response: each rejected status counts once.
  if (*p.result_filter->type == typeid(response)) {
    p.result_filter =
        std::make_shared<const coretry::detail::result_predicate>(coretry::detail::result_predicate{
            p.result_filter->type, [filter = p.result_filter, st](const void* v) {
              if (!filter->call(v))
                return false;
              // Only a status the rules retry counts against status_retries, as urllib3 counts
              // its status_forcelist: a response the caller's own filter rejects (a 200 saying
              // "pending") is not limited by it.
              const auto& r = *static_cast<const response*>(v);
              if (!coretry::http::is_retryable_status(r.status, st->rules))
                return true;
              return st->counts.record(coretry::http::failure_kind::status, st->rules);
            }});
  }
  // With a breaker, a refusal reports circuit_open with the last response: the rejected one is
  // kept (a copy, taken only for a rejected response) for the awaitable forms' exception.
  if (p.breaker && *p.result_filter->type == typeid(response)) {
    p.result_filter =
        std::make_shared<const coretry::detail::result_predicate>(coretry::detail::result_predicate{
            p.result_filter->type, [filter = p.result_filter, st](const void* v) {
              const bool rejected = filter->call(v);
              if (rejected)
                st->last_rejected = *static_cast<const response*>(v);
              return rejected;
            }});
  }
  CORETRY_ALLOW_DEPRECATED_END
  return p;
}

// The client's registry, when it has one, supplies the policy's breaker, budget and rate for
// the request's origin (see `client_options::resilience`). Out of line (lib/curl/retry.cpp), so
// that no curl header needs coretry/registry.hpp.
CORETRY_CURL_API void apply_registry(const client& c, const request& req, coretry::retry_policy& p);

// What every front end below starts from: the request checked at the call (so a bad one throws
// there, whatever the token), the attempt function, and the HTTP-aware policy sharing its state.
// With the shared state too (lib/curl/retry.cpp reads it after the operation).
inline auto prepare_http_shared(client& c, request req, coretry::retry_policy policy) {
  req.validate();
  apply_registry(c, req, policy);
  auto st = std::make_shared<http_retry_state>(c, std::move(req));
  auto p = make_http_policy(std::move(policy), st);
  return std::tuple{make_http_attempt(st), std::move(p), st};
}

// The attempt and the policy of a `prepare_*_shared` result, for the completion-token forms.
template <class Prepared> auto attempt_and_policy(Prepared prepared) {
  auto& [attempt, p, st] = prepared;
  return std::pair{std::move(attempt), std::move(p)};
}

inline auto prepare_http(client& c, request req, coretry::retry_policy policy) {
  return attempt_and_policy(prepare_http_shared(c, std::move(req), std::move(policy)));
}

// The two `retry` overloads below, compiled once in libcoretry_curl (lib/curl/retry.cpp) rather
// than in every unit that calls them: their types are all concrete, and instantiating the retry
// loop for them costs each caller about 20 s and 200 MB of compiler at -O2.
CORETRY_CURL_API asio::awaitable<response> retry_compiled(client& c, request req,
                                                          coretry::retry_policy policy);
CORETRY_CURL_API asio::awaitable<response>
retry_compiled(client& c, request req, coretry::retry_policy policy, coretry::retry_stats& stats);

// A callback given to `async_retry`, type-erased, so that the retry loop for it is compiled
// once, in libcoretry_curl (async_retry_compiled), and not in every unit that calls it (there it
// cost each unit about 16 s and 200 MB more than `co_await retry`, bench/compile_cost). It keeps
// what the loop reads of a handler: its associated executor and cancellation slot. Only
// handlers with nothing else associated take this path (no allocator of their own; see
// `erasable_http_handler`); the others, and every other token, instantiate the loop as before.
class http_handler {
public:
  using executor_type = asio::any_io_executor;
  using cancellation_slot_type = asio::cancellation_slot;

  template <class H>
  http_handler(H&& h, const asio::any_io_executor& fallback)
      : ex_(asio::get_associated_executor(h, fallback)),
        slot_(asio::get_associated_cancellation_slot(h)),
        fn_(std::make_unique<impl<std::decay_t<H>>>(std::forward<H>(h))) {}

  executor_type get_executor() const noexcept { return ex_; }
  cancellation_slot_type get_cancellation_slot() const noexcept { return slot_; }

  void operator()(coretry::detail::asio_error_code ec, response r) {
    auto fn = std::move(fn_); // called once; what it captured goes with it
    fn->call(ec, std::move(r));
  }

private:
  struct base {
    virtual ~base() = default;
    virtual void call(coretry::detail::asio_error_code ec, response r) = 0;
  };
  template <class H> struct impl final : base {
    template <class A> explicit impl(A&& a) : h(std::forward<A>(a)) {}
    void call(coretry::detail::asio_error_code ec, response r) override {
      std::move(h)(ec, std::move(r));
    }
    H h;
  };

  asio::any_io_executor ex_;
  asio::cancellation_slot slot_;
  std::unique_ptr<base> fn_;
};

// A completion token that is itself the handler, a function object taking
// `(error_code, response)`, with no associated allocator or cancellation slot type of its own:
// a lambda, `bind_executor(ex, lambda)`, `bind_cancellation_slot(slot, lambda)`. Completion
// tokens (`use_awaitable`, `deferred`, `use_future`, `as_tuple(...)`, ...) are not invocable so.
template <class T, class H = std::decay_t<T>>
inline constexpr bool erasable_http_handler =
    std::is_invocable_v<H&&, coretry::detail::asio_error_code, response>&&
        std::is_move_constructible_v<H>&&
            std::is_same_v<asio::associated_allocator_t<H>, std::allocator<void>>&&
                std::is_same_v<asio::associated_cancellation_slot_t<H>, asio::cancellation_slot>;

CORETRY_CURL_API void async_retry_compiled(client& c, request req, coretry::retry_policy policy,
                                           coretry::retry_stats* stats, http_handler handler);

} // namespace detail

/// Performs `req` on `c`, retrying under `policy` with the HTTP classification of
/// classify.hpp.
///
/// - The policy's `classify` is set to `curl::classify(r, rules)`: transport errors are retried
///   when `is_retryable(ec)`, responses when `is_retryable_status(status)`. A `policy.classify`
///   of the caller's replaces it (the limits below still hold), and `curl::classify` gives the
///   fields its decision leaves open (`attempt_decision::given`: a policy read by
///   `coretry::config` leaves responses to the status rules); so do the deprecated
///   `policy.retry_if` and a `retry_if_result` filter on `response`, as in 0.2 (a filter on any
///   other type is `std::invalid_argument` at the call). Any
///   other response, 4xx included, is returned at once. `Retry-After` is read on 429 and 503
///   whoever decided to retry them.
/// - A request that `may_retry` refuses (a POST without `Idempotency-Key`, ...) is sent once.
/// - What is retried follows the request's `retry_rules`, or the client's
///   (`client_options::retry_rules`), copied once for the operation: `status_forcelist` in
///   place of the statuses above, `allowed_methods` in place of the idempotent methods,
///   `retry_dns_failures` (`couldnt_resolve_host` is then retried, as a connect failure),
///   `retry_after_status_codes` in place of 429 and 503 for `Retry-After`, and a limit per kind
///   of failure (`connect_retries`, `read_retries`, `status_retries`; see `failure_kind_of`): a
///   transport error of a kind past its limit is final, whatever `policy.classify` says, and a
///   status past `status_retries` is returned as a final answer. `policy.max_attempts` stays
///   the limit on all attempts. The defaults are the classification above.
/// - On 429 and 503 a valid `Retry-After` asks the loop for at least that delay; the loop
///   waits `max(backoff delay, Retry-After)`, above the backoff's cap too. A hint above
///   `policy.max_retry_after` (60 s by default) or past `policy.deadline` ends the operation at
///   once with the last response (`retry_stats::reason` says `errc::retry_after_too_long` or
///   `errc::retry_after_past_deadline`).
/// - When the attempts run out on a retryable status, the last response is returned.
/// - With an observer (`policy.observer`), each attempt's event carries the request's method and
///   the response's status, and the operation is labelled `scheme://host:port` unless
///   `policy.label` is set: `origin_of(req.url)->to_string()` (coretry/curl/origin.hpp, the
///   origin libcurl connects to, the client's registry key), or `_INVALID` when the URL has none
///   (libcurl cannot parse it, no `scheme://`, ...). No userinfo, path or query ever reaches a label.
/// - `policy.on_retry` sees each retry: its `error` is the transport error, or for a retryable
///   status `make_http_status_error(status)` (category `http_status_category()`).
///
/// - With a breaker (the policy's, or the client's `resilience` registry's for the URL's
///   origin), a refused attempt ends the operation with `circuit_open_error` (code
///   `coretry::errc::circuit_open`) whether or not an attempt ran before; its
///   `last_response()` holds the last retryable response, if any. A 429, and any answer with a
///   valid `Retry-After` of more than zero, is a push-back (`retry_policy::pushback_if`): retried, but no failure
///   for the breaker. The breaker hears the status of every response
///   (`attempt_context::health_code`), whatever is retried: by the default classification
///   (`default_health`) an HTTP 5xx and a 408 are failures, a 429 a push-back, any other 4xx
///   and every 1xx to 3xx healthy (a "202 pending" or a 302 the rules retry, too).
///
/// \returns the response. \throws std::invalid_argument at the call when `req.validate()` or
/// `policy.validate()` does (or, with a registry, when the URL has no origin: `origin_of` is
/// empty; the message shows the URL through `coretry::redact_url`); `circuit_open_error` as above; std::system_error with the
/// last transport error (its `what()` starting with libcurl's account of it,
/// `response::error_detail`) or the policy's reason (see `final_error`), or
/// `asio::error::operation_aborted` when cancelled.
///
/// @par Per-Operation Cancellation
/// As `coretry::retry_async`: terminal cancellation of the awaiting coroutine, and the policy's
/// group token, stop it in an attempt (the transfer is removed from libcurl, its connection
/// closed if unfinished) or in a sleep, and it throws
/// `std::system_error(asio::error::operation_aborted)`. While it sleeps it holds no easy handle
/// and no connection, and counts in `client_stats::waiting_retries`.
///
/// Lifetime: the operation does not keep `c` alive and `c` need not outlive it. When `c` is
/// destroyed, an attempt in flight ends with `operation_aborted` (as every transfer does), and
/// an operation asleep between attempts never starts another one: it wakes at the end of its
/// delay (or earlier, when cancelled) and completes once with `operation_aborted`; destroyed
/// unresumed with its execution context, it touches nothing of `c`. Thread safety: as
/// `client::async_perform`.
template <class Policy CORETRY_DEFAULT_POLICY>
requires coretry::detail::policy_value<Policy> asio::awaitable<response>
retry(client& c, CORETRY_CURL_REQUEST req, Policy&& policy) {
  return detail::retry_compiled(c, std::move(req),
                                coretry::detail::policy_copy(std::forward<Policy>(policy)));
}

/// `retry` with the default `retry_policy`.
///
/// @par Per-Operation Cancellation
/// As above.
inline asio::awaitable<response> retry(client& c, CORETRY_CURL_REQUEST req) {
  return detail::retry_compiled(c, std::move(req), coretry::retry_policy());
}

/// As above, and fills `stats` (attempts, time slept, why it stopped). `stats` must outlive
/// the operation.
///
/// @par Per-Operation Cancellation
/// As above.
template <class Policy CORETRY_DEFAULT_POLICY>
requires coretry::detail::policy_value<Policy> asio::awaitable<response>
retry(client& c, CORETRY_CURL_REQUEST req, Policy&& policy, coretry::retry_stats& stats) {
  return detail::retry_compiled(c, std::move(req),
                                coretry::detail::policy_copy(std::forward<Policy>(policy)), stats);
}

/// `retry` for any completion token, on the client's executor.
///
/// An invalid `req` or `policy` throws `std::invalid_argument` at the call; nothing is started
/// then. Thread safety: any thread.
///
/// @par Completion Signature
/// `void(error_code, response)` (`error_code`: `std::error_code`, or `boost::system::error_code`
/// with Boost.Asio); the error is empty whenever a response is delivered (including a last
/// retryable status once attempts ran out), except for a breaker's refusal:
/// `coretry::errc::circuit_open` with the last retryable response, or a default `response` when
/// there is none (as `circuit_open_error::last_response`). Otherwise the error is the last
/// transport error or the policy's reason (`final_error`).
///
/// @par Per-Operation Cancellation
/// As `coretry::async_retry`: terminal, partial or total cancellation through the handler's
/// slot, or the policy's group token: the transfer in flight is removed from libcurl, a sleep
/// ends, no further attempt starts, and the handler gets `operation_aborted`, once.
template <class CompletionToken>
auto async_retry(client& c, CORETRY_CURL_REQUEST req, coretry::retry_policy policy,
                 CompletionToken&& token) {
  if constexpr (detail::erasable_http_handler<CompletionToken>) {
    detail::async_retry_compiled(
        c, std::move(req), std::move(policy), nullptr,
        detail::http_handler(std::forward<CompletionToken>(token), c.get_executor()));
  } else {
    auto [attempt, p] = detail::prepare_http(c, std::move(req), std::move(policy));
    return coretry::async_retry(c.get_executor(), std::move(attempt), std::move(p),
                                std::forward<CompletionToken>(token));
  }
}

/// As above, and fills `stats`, which must outlive the operation.
///
/// @par Completion Signature
/// As above.
///
/// @par Per-Operation Cancellation
/// As above.
template <class CompletionToken>
auto async_retry(client& c, CORETRY_CURL_REQUEST req, coretry::retry_policy policy,
                 coretry::retry_stats& stats, CompletionToken&& token) {
  if constexpr (detail::erasable_http_handler<CompletionToken>) {
    detail::async_retry_compiled(
        c, std::move(req), std::move(policy), &stats,
        detail::http_handler(std::forward<CompletionToken>(token), c.get_executor()));
  } else {
    auto [attempt, p] = detail::prepare_http(c, std::move(req), std::move(policy));
    return coretry::async_retry(c.get_executor(), std::move(attempt), std::move(p), stats,
                                std::forward<CompletionToken>(token));
  }
}

#if CORETRY_CURL_REFUSE_BRACED_REQUEST
// g++ 12: a braced request argument lands here and fails to compile (see braced_request.hpp).
template <class G = void>
asio::awaitable<response> retry(client&, detail::braced_request, coretry::retry_policy = {}) {
  CORETRY_CURL_REFUSE_BRACED(G);
  return {};
}
template <class G = void>
asio::awaitable<response> retry(client&, detail::braced_request, coretry::retry_policy,
                                coretry::retry_stats&) {
  CORETRY_CURL_REFUSE_BRACED(G);
  return {};
}
template <class CompletionToken>
auto async_retry(client&, detail::braced_request, coretry::retry_policy, CompletionToken&&) {
  CORETRY_CURL_REFUSE_BRACED(CompletionToken);
}
template <class CompletionToken>
auto async_retry(client&, detail::braced_request, coretry::retry_policy, coretry::retry_stats&,
                 CompletionToken&&) {
  CORETRY_CURL_REFUSE_BRACED(CompletionToken);
}
#endif

#if CORETRY_REFUSE_BRACED_POLICY
// g++ 12: a braced policy inside co_await fails to compile here, saying what to write
// (coretry/detail/braced_policy.hpp).
template <class G = void>
asio::awaitable<response> retry(client&, CORETRY_CURL_REQUEST, coretry::detail::braced_policy) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(G);
  return {};
}
template <class G = void>
asio::awaitable<response> retry(client&, CORETRY_CURL_REQUEST, coretry::detail::braced_policy,
                                coretry::retry_stats&) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(G);
  return {};
}
#endif

} // namespace coretry::curl
