// SPDX-License-Identifier: BSL-1.0
// Validation of `request` (and the adapter's one way of reporting a bad field): every bad field
// is a std::invalid_argument naming the field and its value, thrown at the call, before anything
// reaches libcurl.

#include <coretry/curl/request.hpp>
#include <coretry/detail/refuse.hpp>
#include <coretry/http.hpp>
#include <coretry/registry.hpp>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include "invalid_argument.hpp"

namespace coretry::curl {

namespace {

// The value as a readable, bounded C-like string literal (coretry::http's, shared with Beast).
using coretry::http::detail::escaped;

[[noreturn]] void bad(const char* where, const std::string& field, const std::string& value,
                      const char* rule) {
  throw_invalid(where, field, value, rule);
}

using coretry::http::is_token;

} // namespace

namespace detail {

std::string url_value(std::string_view url) {
  return escaped(coretry::redact_url(url));
}

void validate_tls(const tls_options& tls, const char* where, const std::string& prefix) {
  namespace fs = std::filesystem;
  auto path_field = [&](const std::string& value, const char* name, bool directory) {
    if (value.empty())
      return;
    if (value.find('\0') != std::string::npos)
      bad(where, prefix + name, escaped(value), "must not contain a NUL character");
    std::error_code ec;
    const auto st = fs::status(value, ec);
    if (directory ? !fs::is_directory(st) : !fs::is_regular_file(st))
      bad(where, prefix + name, escaped(value),
          directory ? "must name an existing directory" : "must name an existing file");
  };
  path_field(tls.ca_file, "ca_file", false);
  path_field(tls.ca_path, "ca_path", true);
  path_field(tls.client_cert, "client_cert", false);
  path_field(tls.client_key, "client_key", false);
  if (!tls.ca_blob.empty() && tls.ca_blob.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
    bad(where, prefix + "ca_blob", escaped(tls.ca_blob),
        "must hold PEM certificates (\"-----BEGIN CERTIFICATE-----\")");
  if (!tls.client_key.empty() && tls.client_cert.empty())
    bad(where, prefix + "client_key", escaped(tls.client_key), "needs client_cert as well");
  if (tls.min_version > tls_version::tls1_3)
    bad(where, prefix + "min_version", std::to_string(static_cast<int>(tls.min_version)),
        "must be a tls_version");
}

} // namespace detail

void tls_options::validate() const {
  detail::validate_tls(*this, "tls_options", "");
}

const char* to_string(http_version v) noexcept {
  switch (v) {
  case http_version::http1_0:
    return "HTTP/1.0";
  case http_version::http1_1:
    return "HTTP/1.1";
  case http_version::http2:
    return "HTTP/2";
  case http_version::http3:
    return "HTTP/3";
  default:
    return "unknown";
  }
}

void request::validate() const {
  if (!is_token(method))
    bad("request", "method", escaped(method), "must be a non-empty HTTP token");
  if (url.find('\0') != std::string::npos)
    bad("request", "url", detail::url_value(url), "must not contain a NUL character");
  for (std::size_t i = 0; i < headers.size(); ++i) {
    const auto& [name, value] = headers[i];
    const std::string field = "headers[" + std::to_string(i) + "]";
    if (!is_token(name))
      bad("request", field + ".name", escaped(name), "must be a non-empty HTTP token");
    if (value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos)
      bad("request", field + ".value", escaped(value), "must not contain CR, LF or NUL");
  }
  if (connect_timeout.count() < 0)
    bad("request", "connect_timeout", std::to_string(connect_timeout.count()) + "ms",
        "must not be negative; 0 means libcurl's default");
  if (timeout.count() < 0)
    bad("request", "timeout", std::to_string(timeout.count()) + "ms",
        "must not be negative; 0 means none");
  if (max_redirects < 0)
    bad("request", "max_redirects", std::to_string(max_redirects), "must be 0 or more");
  if (method == "HEAD" && !body.empty())
    bad("request", "body", std::to_string(body.size()) + " bytes", "a HEAD request has no body");
  if (tls)
    detail::validate_tls(*tls, "request", "tls.");
  if (retry_rules)
    coretry::http::detail::validate_rules(*retry_rules, "coretry::curl::request", "retry_rules.");
}

void throw_invalid(const char* where, const std::string& field, const std::string& value,
                   const char* rule) {
  coretry::detail::refuse((std::string("coretry::curl::") + where).c_str(), field.c_str(), value,
                          rule);
}

} // namespace coretry::curl
