// SPDX-License-Identifier: BSL-1.0
// Compile-cost probe (.ci/compile-cost): one unit calling coretry::curl::retry.
#include <coretry/curl/curl.hpp>

asio::awaitable<long> fetch(coretry::curl::client& c, coretry::curl::request req) {
  auto r = co_await coretry::curl::retry(c, std::move(req), {.max_attempts = 3});
  co_return r.status;
}
