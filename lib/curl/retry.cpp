// SPDX-License-Identifier: BSL-1.0
// `coretry::curl::retry` and `hedge`, compiled once here instead of in every unit that calls it (see
// include/coretry/curl/retry.hpp: detail::retry_compiled).
#include <coretry/curl/hedge.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/registry.hpp>

namespace coretry::curl::detail {

void apply_registry(const client& c, const request& req, coretry::retry_policy& p) {
  if (const auto& registry = c.options().resilience)
    registry->apply(p, coretry::endpoint::from_url(req.url));
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
