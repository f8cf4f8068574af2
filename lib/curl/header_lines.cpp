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

void header_reader::line(std::string_view line) {
  if (!in_block) {
    if (line.starts_with("HTTP/")) {
      headers.clear();
      in_block = true;
    }
    return; // a trailer field, or the blank line ending the trailers
  }
  if (line == "\r\n" || line == "\n" || line.empty()) {
    in_block = false;
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
