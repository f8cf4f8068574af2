// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `coretry::curl::origin_of`: the origin libcurl connects to for a URL, as the key of a
/// client's `resilience` registry and the `operation` label of its requests.

#include <coretry/export.hpp>
#include <coretry/registry.hpp>

#include <optional>
#include <string_view>

namespace coretry::curl {

/// The origin (scheme, host, port) libcurl connects to for `url`, read by libcurl's own URL
/// parser with the flags libcurl applies to `CURLOPT_URL`, so that every spelling libcurl
/// sends to one place gives one `endpoint`:
/// - the scheme lowercased (a URL without `scheme://` has no origin: the client sends only
///   absolute URLs);
/// - an IPv4 address in dotted-quad form whatever its spelling (`127.1`, `2130706433`,
///   `0x7f000001`, `127.000.000.001` are all `127.0.0.1`); an IPv6 address in its RFC 5952 form,
///   in brackets, with its zone (`[fe80::1%25eth0]`);
/// - a name lowercased, without its trailing dot; an international name in its ASCII form
///   (punycode, `xn--...`) as libcurl converts it when it sends it (libcurl does that when built
///   with IDN support and the C library's locale reads the URL's UTF-8, e.g. after
///   `setlocale(LC_ALL, "")` in a UTF-8 locale; otherwise the name as written, lowercased);
/// - the port always given (the scheme's default when the URL has none: http 80, https 443).
///
/// The userinfo, path, query and fragment are never part of it. `std::nullopt` when `url` has no
/// `scheme://`, libcurl cannot parse it, or it has no host, port 0, or no port and a scheme
/// without a default: nothing the client would send.
/// `origin_of(url)->to_string()` is the label `coretry::curl::retry` and `hedge` give an
/// observer, and the string `endpoint_registry_options::on_evict` receives as
/// `endpoint::to_string()`; `registry->find(*origin_of(url))` finds the entry the client uses.
/// Thread-safe.
CORETRY_CURL_API std::optional<coretry::endpoint> origin_of(std::string_view url);

} // namespace coretry::curl
