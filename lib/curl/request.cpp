// Validation of `request` (and the adapter's one way of reporting a bad field): every bad field
// is a std::invalid_argument naming the field and its value, thrown at the call, before anything
// reaches libcurl.

#include <coretry/curl/request.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

#include "invalid_argument.hpp"

namespace coretry::curl {

namespace {

// The value as a readable, bounded C-like string literal: control characters escaped, long
// values cut, so that the message stays one line whatever the caller passed.
std::string quoted(std::string_view v) {
  constexpr std::size_t limit = 64;
  std::string out = "\"";
  for (std::size_t i = 0; i < v.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(v[i]);
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += v.size() > limit ? "\"..." : "\"";
  return out;
}

[[noreturn]] void bad(const char* where, const std::string& field, const std::string& value,
                      const char* rule) {
  throw_invalid(where, field, value, rule);
}

// RFC 9110 tchar.
bool is_token(std::string_view s) noexcept {
  if (s.empty())
    return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok)
      return false;
  }
  return true;
}

} // namespace

void request::validate() const {
  if (!is_token(method))
    bad("request", "method", quoted(method), "must be a non-empty HTTP token");
  if (url.find('\0') != std::string::npos)
    bad("request", "url", quoted(url), "must not contain a NUL character");
  for (std::size_t i = 0; i < headers.size(); ++i) {
    const auto& [name, value] = headers[i];
    const std::string field = "headers[" + std::to_string(i) + "]";
    if (!is_token(name))
      bad("request", field + ".name", quoted(name), "must be a non-empty HTTP token");
    if (value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos)
      bad("request", field + ".value", quoted(value), "must not contain CR, LF or NUL");
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
}

void throw_invalid(const char* where, const std::string& field, const std::string& value,
                   const char* rule) {
  throw std::invalid_argument(std::string("coretry::curl::") + where + ": " + field + " = " +
                              value + " (" + rule + ")");
}

} // namespace coretry::curl
