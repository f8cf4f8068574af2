// SPDX-License-Identifier: BSL-1.0
// `coretry::curl::retry`, `hedge` and callback `async_retry`, compiled once here instead of in every unit that calls it (see
// include/coretry/curl/retry.hpp: detail::retry_compiled).
#include <coretry/curl/hedge.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/registry.hpp>

#include <stdexcept>
#include <string>

#include "invalid_argument.hpp"
#include "origin.hpp"

namespace coretry::curl::detail {

namespace {

// Awaits `op` (a `retry` or `hedge` front end's operation). A breaker's refusal comes out as
// `circuit_open_error` with the last rejected response. With `detail` (retry: one attempt at a
// time, so the last transport error is the one that ended it), that error is thrown again with
// libcurl's account of the failure in what() ("SSL certificate problem: ...").
asio::awaitable<response> with_http_errors(asio::awaitable<response> op,
                                           std::shared_ptr<http_retry_state> st, bool detail) {
  try {
    co_return co_await std::move(op);
  } catch (const std::system_error& e) {
    if (e.code() == coretry::errc::circuit_open)
      throw circuit_open_error(std::move(st->last_rejected));
    if (!detail || st->last_detail.empty() || e.code() != st->last_error)
      throw;
    throw std::system_error(e.code(), st->last_detail);
  }
}

} // namespace

// The registry's key is the origin libcurl connects to (`origin_of`), the operation's label too:
// every spelling of one origin meets one breaker, and `forget(endpoint.to_string())` finds the
// label's series.
void apply_registry(const client& c, const request& req, coretry::retry_policy& p) {
  if (const auto& registry = c.options().resilience) {
    auto parsed = parse_origin(req.url);
    if (!parsed.origin)
      throw_invalid(
          "request", "url", url_value(req.url),
          (std::string("no origin for the client's resilience registry: ") + parsed.why).c_str());
    registry->apply(p, *parsed.origin);
  }
}

void refuse_hedge(const request& req) {
  throw std::invalid_argument(
      "coretry::curl::hedge: a " + req.method + " request to " + url_value(req.url) +
      " may not be sent more than once (its method is not among the retry rules' "
      "allowed_methods, by default the idempotent ones) and hedging sends it several times at "
      "once; add an Idempotency-Key header that the server honours, or send it with "
      "coretry::curl::retry");
}

asio::awaitable<response> retry_compiled(client& c, request req, coretry::retry_policy policy) {
  auto [attempt, p, st] = prepare_http_shared(c, std::move(req), std::move(policy));
  return with_http_errors(coretry::retry_async(std::move(attempt), std::move(p)), std::move(st),
                          true);
}

asio::awaitable<response> retry_compiled(client& c, request req, coretry::retry_policy policy,
                                         coretry::retry_stats& stats) {
  auto [attempt, p, st] = prepare_http_shared(c, std::move(req), std::move(policy));
  return with_http_errors(coretry::retry_async(std::move(attempt), std::move(p), stats),
                          std::move(st), true);
}

void async_retry_compiled(client& c, request req, coretry::retry_policy policy,
                          coretry::retry_stats* stats, http_handler handler) {
  auto [attempt, p] = prepare_http(c, std::move(req), std::move(policy));
  if (stats)
    coretry::async_retry(c.get_executor(), std::move(attempt), std::move(p), *stats,
                         std::move(handler));
  else
    coretry::async_retry(c.get_executor(), std::move(attempt), std::move(p), std::move(handler));
}

asio::awaitable<response> hedge_compiled(client& c, request req, coretry::retry_policy policy,
                                         coretry::hedge_options options) {
  auto [attempt, p, st] = prepare_hedge_shared(c, std::move(req), std::move(policy));
  return with_http_errors(
      coretry::hedge_async(std::move(attempt), std::move(p), std::move(options)), std::move(st),
      false);
}

asio::awaitable<response> hedge_compiled(client& c, request req, coretry::retry_policy policy,
                                         coretry::hedge_options options,
                                         coretry::hedge_stats& stats) {
  auto [attempt, p, st] = prepare_hedge_shared(c, std::move(req), std::move(policy));
  return with_http_errors(
      coretry::hedge_async(std::move(attempt), std::move(p), std::move(options), stats),
      std::move(st), false);
}

} // namespace coretry::curl::detail
