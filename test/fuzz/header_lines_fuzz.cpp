// SPDX-License-Identifier: BSL-1.0
// Fuzz target: response header handling, i.e. what the curl adapter makes of the header lines
// libcurl passes to CURLOPT_HEADERFUNCTION (lib/curl/header_lines.hpp), then what
// coretry::curl::retry reads from them (Retry-After on 429/503).
//
// The input is split after each LF, as libcurl splits a header block. Properties: every field
// name is a non-empty token; no value holds CR, LF or NUL or starts or ends with a space or tab;
// the fields never hold more bytes than the input; a status line between header blocks drops
// what came before it, unless the last response's block ended (after a final response every
// line is a trailer: the fields no longer change).

#include <coretry/curl/classify.hpp>
#include <coretry/curl/request.hpp>
#include <coretry/curl/retry_after.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "header_lines.hpp"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

bool tchar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  coretry::curl::response r;
  coretry::curl::detail::header_reader reader;
  reader.follows = size % 2 == 0; // transfers whose 3xx libcurl follows, and others
  std::size_t pos = 0;
  while (pos < input.size()) {
    const std::size_t lf = input.find('\n', pos);
    const std::size_t end = lf == std::string_view::npos ? input.size() : lf + 1;
    const std::string_view line = input.substr(pos, end - pos);
    const bool between_blocks = !reader.in_block && !reader.finished;
    const bool finished = reader.finished;
    const std::size_t before = reader.headers.size();
    reader.line(line);
    if (between_blocks && line.starts_with("HTTP/"))
      check(reader.headers.empty(), "a status line kept earlier fields");
    if (finished)
      check(reader.finished && reader.headers.size() == before, "a trailer changed the fields");
    pos = end;
  }
  r.headers = std::move(reader.headers);

  std::size_t bytes = 0;
  for (const auto& [name, value] : r.headers) {
    check(!name.empty(), "empty field name");
    for (char c : name)
      check(tchar(c), "field name with a non-token character");
    for (char c : value)
      check(c != '\r' && c != '\n' && c != '\0', "field value with CR, LF or NUL");
    if (!value.empty()) {
      check(value.front() != ' ' && value.front() != '\t', "field value with leading blank");
      check(value.back() != ' ' && value.back() != '\t', "field value with trailing blank");
    }
    bytes += name.size() + value.size();
  }
  check(bytes <= input.size(), "fields larger than the input");

  // What the retry loop does with them: a hint from Retry-After, never out of range.
  if (auto value = r.header("Retry-After")) {
    check(coretry::curl::honours_retry_after(429), "429 must honour Retry-After");
    if (auto hint = coretry::curl::parse_retry_after(*value)) {
      check(*hint >= std::chrono::seconds(0), "negative hint");
      check(*hint <= coretry::curl::max_retry_after, "hint above max_retry_after");
      // The loop compares it in nanoseconds: it must convert without overflow.
      check(std::chrono::nanoseconds(*hint).count() >= 0, "hint overflows nanoseconds");
    }
  }
  return 0;
}
