// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: `origin_of` with the reason it failed, for the message of a refused request. Not
// installed.

#include <coretry/curl/origin.hpp>

#include <optional>
#include <string_view>

namespace coretry::curl::detail {

/// `origin_of(url)`, and when it is empty, why (a static string: no part of the URL).
struct parsed_origin {
  std::optional<coretry::endpoint> origin;
  const char* why = nullptr;
};
parsed_origin parse_origin(std::string_view url);

/// The label of an operation whose URL has no origin (`origin_of` is empty): one fixed value,
/// never text of the URL, which may hold credentials.
inline constexpr std::string_view invalid_label = "_INVALID";

} // namespace coretry::curl::detail
