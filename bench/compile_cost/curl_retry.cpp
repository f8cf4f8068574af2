// SPDX-License-Identifier: BSL-1.0
// Compile-cost probe (.ci/compile-cost): one unit calling coretry::curl::retry.
#include <coretry/curl/curl.hpp>

asio::awaitable<long> fetch(coretry::curl::client& c, coretry::curl::request req) {
  const coretry::retry_policy policy{.max_attempts = 3}; // named: g++ 12 (docs/core.md)
  auto r = co_await coretry::curl::retry(c, std::move(req), policy);
  co_return r.status;
}
