// SPDX-License-Identifier: BSL-1.0
// The origin of a request's URL, read by libcurl's own URL parser: the key of the client's
// registry and the label of its operations, one function for both so that they never disagree
// (`prometheus_observer::forget(endpoint.to_string())` removes the series of the endpoint the
// registry evicted).
#include <coretry/curl/retry.hpp>

#include <curl/curl.h>

#include <charconv>
#include <memory>
#include <string>

#include "origin.hpp"
#include <arpa/inet.h>
#include <netinet/in.h>

namespace coretry::curl {

namespace detail {

namespace {

using curlu = std::unique_ptr<CURLU, void (*)(CURLU*)>;

// One part of `u`, empty when libcurl has none (or cannot give it with `flags`).
std::string part(const curlu& u, CURLUPart what, unsigned flags, bool* ok = nullptr) {
  char* p = nullptr;
  std::string s;
  const CURLUcode rc = curl_url_get(u.get(), what, &p, flags);
  if (rc == CURLUE_OK && p)
    s = p;
  curl_free(p);
  if (ok)
    *ok = rc == CURLUE_OK;
  return s;
}

// "scheme://" at the start (RFC 3986 scheme syntax): the client sends nothing else (it refuses a
// URL libcurl would guess a scheme for, easy_setup.cpp), so nothing else has an origin.
bool absolute(std::string_view url) noexcept {
  const auto end = url.find("://");
  if (end == std::string_view::npos || end == 0)
    return false;
  const auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(url[0]))
    return false;
  for (const char c : url.substr(1, end - 1))
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.')
      return false;
  return true;
}

void lower_ascii(std::string& s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
}

} // namespace

parsed_origin parse_origin(std::string_view url) {
  const std::string text(url);
  if (text.find('\0') != std::string::npos)
    return {std::nullopt, "a NUL character"};
  if (!absolute(text))
    return {std::nullopt, "no scheme:// (the client sends only absolute URLs)"};
  const curlu u(curl_url(), &curl_url_cleanup);
  if (!u)
    return {std::nullopt, "out of memory"};
  // The flags libcurl itself parses CURLOPT_URL with (url.c, parseurlandfillconn, with no
  // CURLOPT_DEFAULT_PROTOCOL, CURLOPT_PATH_AS_IS or CURLOPT_DISALLOW_USERNAME_IN_URL set, as
  // the client sets none): the same host normalisation (IPv4 numbers in any base and any count
  // of parts, IPv6 in its short form when shorter), the same refusals.
  if (const CURLUcode rc = curl_url_set(u.get(), CURLUPART_URL, text.c_str(),
                                        CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME);
      rc != CURLUE_OK)
    return {std::nullopt, curl_url_strerror(rc)};
  coretry::endpoint e;
  e.scheme = part(u, CURLUPART_SCHEME, 0);
  lower_ascii(e.scheme);
  bool ok = false;
  // An international name as libcurl sends it: converted to punycode where libcurl converts it
  // (it built with IDN, and the locale reads UTF-8); where it cannot, libcurl sends it as
  // written (no IDN) or not at all (it fails the transfer), and the name as written is the key.
#ifdef CURLU_PUNYCODE
  e.host = part(u, CURLUPART_HOST, CURLU_PUNYCODE, &ok);
#endif
  if (!ok)
    e.host = part(u, CURLUPART_HOST, 0, &ok);
  if (!ok || e.host.empty() || e.host == "[]")
    return {std::nullopt, "no host"};
  lower_ascii(e.host); // names are case-insensitive; libcurl matches connections so
  if (e.host.front() == '[') {
    // libcurl shortens an IPv6 address only when its own form is shorter, so `[::FFFF:7f00:1]`
    // stays as written: one address, one spelling (RFC 5952, as inet_ntop writes it).
    in6_addr a{};
    char shortest[INET6_ADDRSTRLEN];
    const std::string inner = e.host.substr(1, e.host.size() - 2);
    if (::inet_pton(AF_INET6, inner.c_str(), &a) == 1 &&
        ::inet_ntop(AF_INET6, &a, shortest, sizeof shortest) != nullptr)
      e.host = "[" + std::string(shortest) + "]";
    if (const std::string zone = part(u, CURLUPART_ZONEID, 0); !zone.empty())
      e.host.insert(e.host.size() - 1, "%25" + zone);
  } else if (e.host.size() > 1 && e.host.back() == '.') {
    e.host.pop_back(); // `example.com.` is `example.com`
  }
  const std::string port = part(u, CURLUPART_PORT, CURLU_DEFAULT_PORT, &ok);
  if (!ok || port.empty())
    return {std::nullopt, "no port, and the scheme has no default one"};
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc{} || end != port.data() + port.size() || value < 1 || value > 65535)
    return {std::nullopt, "the port must be a number in [1, 65535]"};
  e.port = static_cast<std::uint16_t>(value);
  return {std::move(e), nullptr};
}

std::string endpoint_label(const std::string& url) {
  if (auto o = parse_origin(url).origin)
    return o->to_string();
  return std::string(invalid_label);
}

} // namespace detail

std::optional<coretry::endpoint> origin_of(std::string_view url) {
  return detail::parse_origin(url).origin;
}

} // namespace coretry::curl
