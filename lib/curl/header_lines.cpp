// SPDX-License-Identifier: BSL-1.0
// Response header lines as libcurl delivers them, into `response::headers`.

#include "header_lines.hpp"

#include <string>

namespace coretry::curl::detail {

namespace {

bool blank(char c) noexcept {
  return c == ' ' || c == '\t';
}

bool tchar(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

/// The value with CR, LF and NUL replaced by spaces (the line terminator included), then
/// without its surrounding blanks, appended to `out`. Replacing first: a value of NULs and
/// text must not keep the spaces they became at its edges.
void append_value(std::string& out, std::string_view v) {
  std::string clean(v);
  for (char& c : clean)
    if (c == '\r' || c == '\n' || c == '\0')
      c = ' ';
  std::string_view t = clean;
  while (!t.empty() && blank(t.front()))
    t.remove_prefix(1);
  while (!t.empty() && blank(t.back()))
    t.remove_suffix(1);
  out.append(t);
}

} // namespace

namespace {

// The status code of a status line ("HTTP/1.1 503 ...", "HTTP/2 200 "), 0 when there is none.
int status_of(std::string_view line) noexcept {
  const auto space = line.find(' ');
  if (space == std::string_view::npos || line.size() < space + 4)
    return 0;
  int code = 0;
  for (char c : line.substr(space + 1, 3)) {
    if (c < '0' || c > '9')
      return 0;
    code = code * 10 + (c - '0');
  }
  return code;
}

} // namespace

void header_reader::line(std::string_view line) {
  if (finished)
    return; // trailer fields of the last response: whatever they look like
  if (!in_block) {
    if (line.starts_with("HTTP/")) {
      headers.clear();
      in_block = true;
      status = status_of(line);
    }
    return; // a trailer field, or the blank line ending the trailers
  }
  if (line == "\r\n" || line == "\n" || line.empty()) {
    in_block = false;
    // Only an interim response (1xx) or a redirect libcurl follows is followed by another
    // response in one transfer (a proxy's CONNECT reply is not handed over: easy_setup.cpp
    // sets CURLOPT_SUPPRESS_CONNECT_HEADERS). After any other, every line is a trailer.
    const bool interim = status >= 100 && status < 200;
    const bool hop = follows && status >= 300 && status < 400;
    finished = !interim && !hop;
    return;
  }
  add_header_line(headers, line);
}

void add_header_line(header_list& headers, std::string_view line) {
  if (line.empty())
    return;
  if (blank(line.front())) {
    // obs-fold: a continuation of the previous field, if any.
    if (headers.empty())
      return;
    std::string& value = headers.back().second;
    std::string more;
    append_value(more, line);
    if (more.empty())
      return;
    if (!value.empty())
      value += ' ';
    value += more;
    return;
  }
  const auto colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0)
    return;
  const std::string_view name = line.substr(0, colon);
  for (char c : name)
    if (!tchar(c))
      return;
  std::string value;
  append_value(value, line.substr(colon + 1));
  headers.emplace_back(std::string(name), std::move(value));
}

} // namespace coretry::curl::detail
