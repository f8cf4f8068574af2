// SPDX-License-Identifier: BSL-1.0
// Compile-cost probe (.ci/compile-cost): one unit calling coretry::curl::async_retry with a
// callback.
#include <coretry/curl/curl.hpp>

#include <cstdio>

void fetch(coretry::curl::client& c, coretry::curl::request req) {
  coretry::curl::async_retry(c, std::move(req), {.max_attempts = 3},
                             [](std::error_code ec, coretry::curl::response r) {
                               std::printf("%s %ld\n", ec.message().c_str(), r.status);
                             });
}
