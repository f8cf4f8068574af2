// SPDX-License-Identifier: BSL-1.0
// `coretry::curl::retry` and `hedge`, compiled once here instead of in every unit that calls it (see
// include/coretry/curl/retry.hpp: detail::retry_compiled).
#include <coretry/curl/hedge.hpp>
#include <coretry/curl/retry.hpp>

namespace coretry::curl::detail {

asio::awaitable<response> retry_compiled(client& c, request req, coretry::retry_policy policy) {
  auto [attempt, p, st] = prepare_http_shared(c, std::move(req), std::move(policy));
  return with_detail(coretry::retry_async(std::move(attempt), std::move(p)), std::move(st));
}

asio::awaitable<response> retry_compiled(client& c, request req, coretry::retry_policy policy,
                                         coretry::retry_stats& stats) {
  auto [attempt, p, st] = prepare_http_shared(c, std::move(req), std::move(policy));
  return with_detail(coretry::retry_async(std::move(attempt), std::move(p), stats), std::move(st));
}

asio::awaitable<response> hedge_compiled(client& c, request req, coretry::retry_policy policy,
                                         coretry::hedge_options options) {
  auto [attempt, p, st] = prepare_hedge_shared(c, std::move(req), std::move(policy));
  return with_refusal(coretry::hedge_async(std::move(attempt), std::move(p), std::move(options)),
                      std::move(st));
}

asio::awaitable<response> hedge_compiled(client& c, request req, coretry::retry_policy policy,
                                         coretry::hedge_options options,
                                         coretry::hedge_stats& stats) {
  auto [attempt, p, st] = prepare_hedge_shared(c, std::move(req), std::move(policy));
  return with_refusal(
      coretry::hedge_async(std::move(attempt), std::move(p), std::move(options), stats),
      std::move(st));
}

} // namespace coretry::curl::detail
