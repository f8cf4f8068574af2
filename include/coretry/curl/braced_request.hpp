// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// The request parameter of the HTTP front ends (`retry`, `async_retry`, `hedge`,
/// `async_hedge`), and why it is not a plain `request` on g++ 12.
///
/// g++ 12 miscompiles a braced aggregate argument written inside a `co_await` expression, as in
/// `co_await retry(client, {.url = url, .timeout = 2s}, policy)`: it builds the temporary, then
/// copies it bitwise into the coroutine frame, so each `std::string` member that keeps its text
/// in place (short strings, such as the default method "GET") points at the old copy, and the
/// program aborts when it is freed ("free(): invalid pointer"). No callee can repair an argument
/// that arrives broken, so on g++ 12 the front ends take only a `request` object, and a braced
/// list selects an overload that fails to compile with a message saying what to write. g++ 13
/// and later, and clang, take the braced list.

#include <coretry/curl/request.hpp>

#include <chrono>
#include <concepts>
#include <optional>
#include <string>
#include <type_traits>

/// 1 on g++ 12 and older, where a braced request argument is refused; 0 elsewhere.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#define CORETRY_CURL_REFUSE_BRACED_REQUEST 1
#else
#define CORETRY_CURL_REFUSE_BRACED_REQUEST 0
#endif

namespace coretry::curl::detail {

#if CORETRY_CURL_REFUSE_BRACED_REQUEST

/// A `request` object, named or not: what the front ends take on g++ 12 (a braced list cannot
/// deduce it).
template <class R>
concept request_object = std::same_as<R, request>;

/// `request`'s members, in its order, with its defaults: what a braced `{.url = ...}` argument
/// initialises on g++ 12, only to be refused. Keep in step with `request` (a member missing here
/// makes the braced form fail with a plainer message, never run).
struct braced_request {
  std::string method = "GET";
  std::string url;
  header_list headers{};
  std::string body{};
  std::chrono::milliseconds connect_timeout{0};
  std::chrono::milliseconds timeout{0};
  bool follow_redirects = false;
  long max_redirects = 10;
  bool retry_non_idempotent = false;
  bool fresh_connection = false;
  std::optional<tls_options> tls{};
  std::optional<coretry::http::retry_rules> retry_rules{};
};

template <class> inline constexpr bool braced_request_refused = false;

#define CORETRY_CURL_REQUEST ::coretry::curl::detail::request_object auto
#define CORETRY_CURL_REFUSE_BRACED(G)                                                              \
  static_assert(::coretry::curl::detail::braced_request_refused<G>,                                \
                "g++ 12 miscompiles a braced request inside co_await (its strings are copied "     \
                "bitwise into the coroutine frame, then freed at a wrong address). Name the "      \
                "request first: coretry::curl::request req{.url = url, .timeout = 2s}; "           \
                "co_await coretry::curl::retry(client, std::move(req), policy);")

#else

#define CORETRY_CURL_REQUEST ::coretry::curl::request

#endif

} // namespace coretry::curl::detail
