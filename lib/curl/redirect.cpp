// SPDX-License-Identifier: BSL-1.0
// Redirects: the one rule deciding what each hop sends (redirect_request), and the client
// following every redirect itself, each hop a transfer of its own (client_impl::redirect).

#include <coretry/curl/error.hpp>

#include <chrono>
#include <string>
#include <string_view>
#include <system_error>

#include "client_impl.hpp"

namespace coretry::curl::detail {

bool is_origin_field(std::string_view name) noexcept {
  return iequals(name, "Authorization") || iequals(name, "Cookie") ||
         iequals(name, "Proxy-Authorization") || iequals(name, "Host");
}

bool is_body_field(std::string_view name) noexcept {
  constexpr std::string_view content = "Content-";
  return (name.size() > content.size() && iequals(name.substr(0, content.size()), content)) ||
         iequals(name, "Transfer-Encoding") || iequals(name, "Expect") || iequals(name, "Digest") ||
         iequals(name, "Trailer");
}

void redirect_request(request& r, long status, std::string_view from, std::string location) {
  const bool to_get =
      status == 303 ? r.method != "HEAD" : (status == 301 || status == 302) && r.method == "POST";
  if (to_get) {
    r.method = "GET";
    r.body.clear();
    std::erase_if(r.headers, [](const auto& h) { return is_body_field(h.first); });
  }
  if (origin_of(location) != origin_of(from))
    std::erase_if(r.headers, [](const auto& h) { return is_origin_field(h.first); });
  r.url = std::move(location);
}

// Every redirect is followed here, none by libcurl (CURLOPT_FOLLOWLOCATION stays off). libcurl
// 7.88 honours CURLOPT_FRESH_CONNECT on the first hop only, so a POST it followed through a 307
// went out on pooled connections, and was resent on each dead one; it keeps a caller's
// Proxy-Authorization across origins and its Host on another port, and a caller's
// Content-Length on the GET a 303 makes. Here each hop is a transfer of its own, set up like
// the first (configure_easy), and one rule (redirect_request) decides what it sends.
void client_impl::redirect(std::shared_ptr<transfer> t, std::string location) {
  ++t->hops;
  // request::timeout covers the whole chain.
  t->spent += std::chrono::steady_clock::now() - t->started;
  if (t->req.timeout.count() > 0 && t->spent >= t->req.timeout) {
    set_abort(*t, make_error_code(errc::operation_timedout),
              "request::timeout expired during the redirects");
    const std::error_code ec = t->abort_error;
    finish(std::move(t), ec);
    return;
  }
  const std::string from = t->req.url;
  redirect_request(t->req, t->resp.status, from, std::move(location));
  free_headers(*t);
  t->resp = {};
  t->headers = {};
  // header_bytes goes on counting: max_response_headers covers every hop.
  t->error_buffer[0] = '\0';
  start_or_queue(std::move(t), true);
}

} // namespace coretry::curl::detail
