#pragma once
// Private: turning the header lines libcurl hands to CURLOPT_HEADERFUNCTION into
// `response::headers`. Apart from the easy handle so that it can be tested and fuzzed on its
// own. Not installed.

#include <coretry/curl/request.hpp>

#include <string_view>

namespace coretry::curl::detail {

/// Adds one raw header line (terminator included, as libcurl passes it) to `headers`:
///
/// - a status line ("HTTP/...") starts a new response (a redirect hop, an interim 1xx): the
///   fields gathered so far are dropped;
/// - "name: value" adds a field whose name is a non-empty token (RFC 9110 tchar) and whose value
///   has its surrounding spaces and tabs removed and every CR, LF or NUL inside replaced by a
///   space (RFC 9110, section 5.5), so no value carries a line break;
/// - a line starting with a space or tab continues the previous field (obsolete line folding,
///   RFC 9112, section 5.2): its text is appended after one space;
/// - anything else (the blank line ending the block, a name with spaces or other non-token
///   characters, a line without a colon) is ignored.
void add_header_line(header_list& headers, std::string_view line);

} // namespace coretry::curl::detail
