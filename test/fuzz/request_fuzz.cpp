// SPDX-License-Identifier: BSL-1.0
// Fuzz target: request validation (method, URL, headers, timeouts, body) and the idempotency
// rules that decide whether a request may be sent twice.
//
// Properties: validate() throws nothing but std::invalid_argument, whose message names the
// request, a field and a value on one printable line of bounded length; a request it accepts
// has a token method, a URL without NUL, header names that are tokens and values without
// CR, LF or NUL (so each header is exactly one line on the wire), no negative limits.

#include <coretry/curl/classify.hpp>
#include <coretry/curl/request.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fuzzer/FuzzedDataProvider.h>

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

bool token(std::string_view s) {
  if (s.empty())
    return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos))
      return false;
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  coretry::curl::request req;
  req.connect_timeout = std::chrono::milliseconds(in.ConsumeIntegral<std::int64_t>());
  req.timeout = std::chrono::milliseconds(in.ConsumeIntegral<std::int64_t>());
  req.max_redirects = in.ConsumeIntegral<long>();
  req.follow_redirects = in.ConsumeBool();
  req.retry_non_idempotent = in.ConsumeBool();
  const unsigned header_count = in.ConsumeIntegralInRange<unsigned>(0, 8);
  req.method = in.ConsumeRandomLengthString(32);
  req.url = in.ConsumeRandomLengthString(256);
  for (unsigned i = 0; i < header_count; ++i) {
    std::string name = in.ConsumeRandomLengthString(64);
    std::string value = in.ConsumeRandomLengthString(128);
    req.headers.emplace_back(std::move(name), std::move(value));
  }
  req.body = in.ConsumeRemainingBytesAsString();

  bool valid = true;
  try {
    req.validate();
  } catch (const std::invalid_argument& e) {
    valid = false;
    const std::string_view what = e.what();
    check(what.starts_with("coretry::curl::request: "), "message does not name the request");
    check(what.find(" = ") != std::string_view::npos, "message names no value");
    check(what.size() < 400, "message too long");
    for (char c : what)
      check(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f,
            "message with a control or non-ASCII character");
  }
  // Anything else thrown escapes to libFuzzer, which reports it as a crash.

  if (valid) {
    check(token(req.method), "accepted a method that is not a token");
    check(req.url.find('\0') == std::string::npos, "accepted a URL with NUL");
    for (const auto& [name, value] : req.headers) {
      check(token(name), "accepted a header name that is not a token");
      check(value.find_first_of(std::string_view("\r\n\0", 3)) == std::string::npos,
            "accepted a header value with CR, LF or NUL");
    }
    check(req.connect_timeout.count() >= 0 && req.timeout.count() >= 0 && req.max_redirects >= 0,
          "accepted a negative limit");
    check(!(req.method == "HEAD" && !req.body.empty()), "accepted a HEAD with a body");
  }

  // The idempotency rules are total: any request, valid or not, gets an answer.
  const bool again = coretry::curl::may_retry(req);
  if (coretry::curl::is_idempotent(req.method) || req.retry_non_idempotent)
    check(again, "an idempotent or opted-in request may not be retried");
  if (req.header("Idempotency-Key"))
    check(again, "a request with an Idempotency-Key may not be retried");
  return 0;
}
