// SPDX-License-Identifier: BSL-1.0
// The coretry::curl names of the Retry-After parser, forwarding to coretry::http (lib/http.cpp).
#include <coretry/curl/retry_after.hpp>

namespace coretry::curl {

std::optional<std::chrono::sys_seconds> parse_http_date(std::string_view value,
                                                        std::chrono::sys_seconds now) noexcept {
  return coretry::http::parse_http_date(value, now);
}

std::optional<std::chrono::seconds> parse_retry_after(std::string_view value,
                                                      std::chrono::system_clock::time_point now) {
  return coretry::http::parse_retry_after(value, now);
}

} // namespace coretry::curl
