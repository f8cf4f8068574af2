// SPDX-License-Identifier: BSL-1.0
// Response header lines as libcurl hands them over, into response::headers: the rules the
// header_lines fuzz target checks, one case each.

#include <coretry/curl/request.hpp>

#include <doctest/doctest.h>

#include <initializer_list>
#include <string_view>

#include "header_lines.hpp"

using coretry::curl::header_list;
using coretry::curl::detail::header_reader;

namespace {
// As on a transfer whose redirects libcurl follows, unless `follows` is false.
header_list parse(std::initializer_list<std::string_view> lines, bool follows = true) {
  header_reader r;
  r.follows = follows;
  for (auto line : lines)
    r.line(line);
  return r.headers;
}
} // namespace

TEST_CASE("header lines give name and value, blanks and line ends trimmed") {
  const auto h = parse(
      {"HTTP/1.1 503 Service Unavailable\r\n", "Retry-After:  5 \t\r\n", "X-Empty:\r\n", "\r\n"});
  REQUIRE(h.size() == 2);
  CHECK(h[0] == std::pair<std::string, std::string>("Retry-After", "5"));
  CHECK(h[1] == std::pair<std::string, std::string>("X-Empty", ""));
}

TEST_CASE("a status line starts a new response: only the last one's fields are kept") {
  const auto h = parse({"HTTP/1.1 302 Found\r\n", "Location: /x\r\n", "\r\n", "HTTP/2 429 \r\n",
                        "retry-after: 7\r\n", "\r\n"});
  REQUIRE(h.size() == 1);
  CHECK(h[0].first == "retry-after");
}

TEST_CASE("a line starting with HTTP/ inside a block erases nothing") {
  // Issue 18, finding 9: it used to be taken for a status line and drop Retry-After.
  const auto h = parse({"HTTP/1.1 503 Service Unavailable\r\n", "Retry-After: 5\r\n",
                        "HTTP/1.1 200 OK\r\n", "X-After: 1\r\n", "\r\n"});
  REQUIRE(h.size() == 2);
  CHECK(h[0] == std::pair<std::string, std::string>("Retry-After", "5"));
  CHECK(h[1].first == "X-After");
}

TEST_CASE("trailer fields after the block are not merged into the headers") {
  // Issue 18, finding 9: libcurl hands a chunked body's trailers to the header callback.
  const auto h = parse({"HTTP/1.1 503 Service Unavailable\r\n", "Transfer-Encoding: chunked\r\n",
                        "\r\n", "Retry-After: 1\r\n", "X-Trailer: t\r\n", "\r\n"});
  REQUIRE(h.size() == 1);
  CHECK(h[0].first == "Transfer-Encoding");
  // ... and a status line after trailers still starts the next response.
  const auto next = parse({"HTTP/1.1 100 Continue\r\n", "\r\n", "HTTP/1.1 200 OK\r\n",
                           "X-Final: 1\r\n", "\r\n", "X-Trailer: t\r\n", "\r\n"});
  REQUIRE(next.size() == 1);
  CHECK(next[0].first == "X-Final");
}

TEST_CASE("after the last response, a trailer starting with HTTP/ starts nothing") {
  // A trailer field named "HTTP/1.1 503" erased the fields and made the trailers after it the
  // response's fields.
  const auto h = parse({"HTTP/1.1 200 OK\r\n", "X-Head: h\r\n", "\r\n", "HTTP/1.1 503: x\r\n",
                        "Retry-After: 30\r\n", "\r\n"});
  REQUIRE(h.size() == 1);
  CHECK(h[0].first == "X-Head");
  // A 3xx is the last response when libcurl does not follow it ...
  const auto kept = parse({"HTTP/1.1 302 Found\r\n", "Location: /x\r\n", "\r\n",
                           "HTTP/1.1 503: x\r\n", "Retry-After: 30\r\n", "\r\n"},
                          false);
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].first == "Location");
  // ... and an interim 1xx (101 before h2c, 100 Continue) never is.
  const auto upgraded = parse({"HTTP/1.1 101 Switching Protocols\r\n", "Upgrade: h2c\r\n", "\r\n",
                               "HTTP/2 200 \r\n", "x-final: 1\r\n", "\r\n"},
                              false);
  REQUIRE(upgraded.size() == 1);
  CHECK(upgraded[0].first == "x-final");
}

TEST_CASE("a folded header line continues the previous field after one space") {
  const auto h = parse({"HTTP/1.1 200 OK\r\n", "X-Long: part one\r\n", "  part two\r\n",
                        "\tpart three \r\n", "X-Next: n\r\n"});
  REQUIRE(h.size() == 2);
  CHECK(h[0].second == "part one part two part three");
  CHECK(h[1].second == "n");
  // A continuation with nothing to continue is dropped, not made a field named " x".
  CHECK(parse({"HTTP/1.1 200 OK\r\n", " x: y\r\n"}).empty());
}

TEST_CASE("header lines whose name is not a token are ignored") {
  const auto h = parse({"HTTP/1.1 200 OK\r\n", "Bad Name: x\r\n", "Retry-After : 5\r\n",
                        ": empty\r\n", "no colon\r\n", "X\x01Y: ctl\r\n", "Good: yes\r\n"});
  REQUIRE(h.size() == 1);
  CHECK(h[0].first == "Good");
}

TEST_CASE("CR, LF and NUL inside a header value become spaces") {
  using namespace std::string_view_literals;
  const auto h = parse({"HTTP/1.1 200 OK\r\n", "X-A: a\rb\0c\r\n"sv});
  REQUIRE(h.size() == 1);
  CHECK(h[0].second == "a b c");
}

TEST_CASE("a header value starting or ending with NUL or CR keeps no blank at its edges") {
  // Found by the header_lines fuzz target: NULs replaced after trimming left leading spaces.
  using namespace std::string_view_literals;
  const auto h = parse({"HTTP/1.1 200 OK\r\n", "X-A: \0\0 d\0\r\r\n"sv, "X-B:\0\0\0\r\n"sv});
  REQUIRE(h.size() == 2);
  CHECK(h[0].second == "d");
  CHECK(h[1].second.empty());
}
