// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `coretry::curl::hedge`: an HTTP request hedged under a `coretry::retry_policy` and
/// `coretry::hedge_options`, with the HTTP classification of `coretry::curl::retry`.

#include <coretry/config.hpp>
#include <coretry/curl/classify.hpp>
#include <coretry/curl/client.hpp>
#include <coretry/curl/request.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/detail/asio.hpp>
#include <coretry/hedge.hpp>
#include <coretry/policy.hpp>

#include <concepts>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace coretry::curl {

/// Whether `hedge` may send `req`: its method is idempotent (`is_idempotent`) or it carries an
/// `Idempotency-Key` header. `request::retry_non_idempotent` is not enough: it allows sending a
/// request again after the previous copy failed, whereas hedging sends copies while the
/// previous ones may still be running, and cancels the losers when they may already have been
/// served.
inline bool may_hedge(const request& req) noexcept {
  return is_idempotent(req.method) || req.header("Idempotency-Key").has_value();
}
/// As above under `rules` (the request's `retry_rules`, else the client's): its method is one of
/// `rules.allowed_methods`, which a caller declares safe to send more than once, or it carries an
/// `Idempotency-Key` header.
inline bool may_hedge(const request& req, const coretry::http::retry_rules& rules) noexcept {
  return coretry::http::is_allowed_method(req.method, rules) ||
         req.header("Idempotency-Key").has_value();
}

namespace detail {

/// Throws the `std::invalid_argument` of a request `hedge` refuses (`may_hedge`), naming its
/// method and its URL through `coretry::redact_url` (lib/curl/retry.cpp).
[[noreturn]] CORETRY_CURL_API void refuse_hedge(const request& req);

/// `prepare_http_shared` for hedging: refuses, at the call, a request that must not be sent
/// twice.
inline auto prepare_hedge_shared(client& c, request req, coretry::retry_policy policy) {
  auto prepared = prepare_http_shared(c, std::move(req), std::move(policy));
  const auto& st = std::get<2>(prepared); // the rules in force: the request's, else the client's
  if (!may_hedge(st->req, st->rules))
    refuse_hedge(st->req);
  return prepared;
}

inline auto prepare_hedge(client& c, request req, coretry::retry_policy policy) {
  return attempt_and_policy(prepare_hedge_shared(c, std::move(req), std::move(policy)));
}

// The two `hedge` overloads below, compiled once in libcoretry_curl (lib/curl/retry.cpp), as
// `retry_compiled`.
CORETRY_CURL_API asio::awaitable<response> hedge_compiled(client& c, request req,
                                                          coretry::retry_policy policy,
                                                          coretry::hedge_options options);
CORETRY_CURL_API asio::awaitable<response> hedge_compiled(client& c, request req,
                                                          coretry::retry_policy policy,
                                                          coretry::hedge_options options,
                                                          coretry::hedge_stats& stats);

} // namespace detail

/// Performs `req` on `c` hedged (see coretry/hedge.hpp): another copy starts when none has
/// succeeded within `options.delay`, the first acceptable response wins and the other transfers
/// are cancelled (removed from libcurl, their connections closed if unfinished).
///
/// Classification as `coretry::curl::retry`: a transport error `is_retryable` and a status
/// `is_retryable_status` (408, 429, 500, 502, 503, 504), or what the policy's `classify` says
/// when set (or its deprecated 0.2 predicates, as in 0.2), are
/// non-fatal and start the next copy at once; any other response, 4xx included, or any
/// other transport error ends the operation. `Retry-After` is not waited for (no copy waits for
/// another); with `policy.rate_limit` a 429 or 503 slows the sending rate. When every allowed
/// copy got a retryable status, the last such response is returned. The request's (or the
/// client's) `retry_rules` apply as for `retry`; a method outside `allowed_methods` is sent as
/// one copy.
///
/// The client's `resilience` registry, when set, supplies the breaker, budget and rate for the
/// URL's origin, as for `retry`. A breaker's refusal ends the operation with
/// `circuit_open_error`, whose `last_response()` holds the last retryable response, if any
/// (`async_hedge`: `circuit_open` with that response).
///
/// \returns the response. \throws std::invalid_argument at the call when `req` is not
/// one of the rules' `allowed_methods` and has no `Idempotency-Key` (see `may_hedge`), or when `req`, `policy` or
/// `options` is invalid; `circuit_open_error`; std::system_error with the final transport error (or the policy's
/// reason, see `final_error`), or `asio::error::operation_aborted` when cancelled.
///
/// @par Per-Operation Cancellation
/// As `coretry::hedge_async`: terminal cancellation of the awaiting coroutine and the policy's
/// group token cancel every copy in flight (each transfer is removed from libcurl), and it
/// throws `std::system_error(asio::error::operation_aborted)` once they have all returned.
/// Lifetime and thread safety as `retry`: `c` need not outlive the
/// operation (copies still running end with `operation_aborted`).
template <class Policy CORETRY_DEFAULT_POLICY>
requires coretry::detail::policy_value<Policy> asio::awaitable<response>
hedge(client& c, CORETRY_CURL_REQUEST req, Policy&& policy,
      coretry::hedge_options options = coretry::hedge_options()) {
  return detail::hedge_compiled(c, std::move(req),
                                coretry::detail::policy_copy(std::forward<Policy>(policy)),
                                std::move(options));
}

/// `hedge` with the default `retry_policy` and `hedge_options`.
///
/// @par Per-Operation Cancellation
/// As above.
inline asio::awaitable<response> hedge(client& c, CORETRY_CURL_REQUEST req) {
  return detail::hedge_compiled(c, std::move(req), coretry::retry_policy(),
                                coretry::hedge_options());
}

/// As above, and fills `stats`, which must outlive the operation.
///
/// @par Per-Operation Cancellation
/// As above.
template <class Policy CORETRY_DEFAULT_POLICY>
requires coretry::detail::policy_value<Policy> asio::awaitable<response>
hedge(client& c, CORETRY_CURL_REQUEST req, Policy&& policy, coretry::hedge_options options,
      coretry::hedge_stats& stats) {
  return detail::hedge_compiled(c, std::move(req),
                                coretry::detail::policy_copy(std::forward<Policy>(policy)),
                                std::move(options), stats);
}

/// `hedge` for any completion token, on the client's executor.
///
/// Invalid or non-idempotent requests throw `std::invalid_argument` at the call; nothing is sent
/// then. Thread safety: any thread.
///
/// @par Completion Signature
/// `void(error_code, response)` (`error_code`: `std::error_code`, or `boost::system::error_code`
/// with Boost.Asio); the error is empty whenever a response is delivered (the first acceptable
/// one, or the last retryable one when no copy may start), except for a breaker's refusal:
/// `coretry::errc::circuit_open` with the last retryable response, if any. Otherwise the last
/// transport error or the policy's reason (`final_error`).
///
/// @par Per-Operation Cancellation
/// As `coretry::async_hedge`: terminal, partial or total cancellation through the handler's
/// slot, and the policy's group token, cancel every copy in flight (each transfer is removed
/// from libcurl); the handler gets `operation_aborted`, once, when they have all returned.
template <class CompletionToken>
auto async_hedge(client& c, CORETRY_CURL_REQUEST req, coretry::retry_policy policy,
                 coretry::hedge_options options, CompletionToken&& token) {
  auto [attempt, p] = detail::prepare_hedge(c, std::move(req), std::move(policy));
  return coretry::async_hedge(c.get_executor(), std::move(attempt), std::move(p),
                              std::move(options), std::forward<CompletionToken>(token));
}

#if CORETRY_CURL_REFUSE_BRACED_REQUEST
// g++ 12: a braced request argument lands here and fails to compile (see braced_request.hpp).
template <class G = void>
asio::awaitable<response> hedge(client&, detail::braced_request, coretry::retry_policy = {},
                                coretry::hedge_options = {}) {
  CORETRY_CURL_REFUSE_BRACED(G);
  return {};
}
template <class G = void>
asio::awaitable<response> hedge(client&, detail::braced_request, coretry::retry_policy,
                                coretry::hedge_options, coretry::hedge_stats&) {
  CORETRY_CURL_REFUSE_BRACED(G);
  return {};
}
template <class CompletionToken>
auto async_hedge(client&, detail::braced_request, coretry::retry_policy, coretry::hedge_options,
                 CompletionToken&&) {
  CORETRY_CURL_REFUSE_BRACED(CompletionToken);
}
#endif

#if CORETRY_REFUSE_BRACED_POLICY
// g++ 12: a braced policy inside co_await fails to compile here, saying what to write
// (coretry/detail/braced_policy.hpp).
template <class G = void>
asio::awaitable<response> hedge(client&, CORETRY_CURL_REQUEST, coretry::detail::braced_policy,
                                coretry::hedge_options = coretry::hedge_options()) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(G);
  return {};
}
template <class G = void>
asio::awaitable<response> hedge(client&, CORETRY_CURL_REQUEST, coretry::detail::braced_policy,
                                coretry::hedge_options, coretry::hedge_stats&) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(G);
  return {};
}
#endif

} // namespace coretry::curl
