// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: turning the header lines libcurl hands to CURLOPT_HEADERFUNCTION into
// `response::headers`. Apart from the easy handle so that it can be tested and fuzzed on its
// own. Not installed.

#include <coretry/curl/request.hpp>

#include <string_view>

namespace coretry::curl::detail {

/// Adds one raw field line of a header block (terminator included, as libcurl passes it) to
/// `headers` (status lines, block ends and trailers are `header_reader`'s business):
///
/// - "name: value" adds a field whose name is a non-empty token (RFC 9110 tchar) and whose value
///   has its surrounding spaces and tabs removed and every CR, LF or NUL inside replaced by a
///   space (RFC 9110, section 5.5), so no value carries a line break;
/// - a line starting with a space or tab continues the previous field (obsolete line folding,
///   RFC 9112, section 5.2): its text is appended after one space;
/// - anything else (the blank line ending the block, a name with spaces or other non-token
///   characters, a line without a colon) is ignored.
void add_header_line(header_list& headers, std::string_view line);

/// The header lines of one transfer, every one libcurl hands to CURLOPT_HEADERFUNCTION, into
/// the fields of its last response:
///
/// - a status line ("HTTP/...") between two header blocks starts a new response (a redirect hop,
///   an interim 1xx, a proxy's CONNECT reply): the fields gathered so far are dropped. Inside a
///   block a line starting with "HTTP/" is not a status line: it is a field line whose name is
///   not a token, and ignored like any other (it must not erase the fields before it);
/// - the blank line ends the block;
/// - lines inside a block are fields (`add_header_line`);
/// - lines after a block ended and before the next status line are trailer fields of a chunked
///   body (RFC 9112, section 7.1.2): dropped, never merged into the fields (RFC 9110, section
///   6.5.1: a trailer must not be taken for a header field; a `Retry-After` sent only as a
///   trailer is ignored).
///
/// A response ends the transfer unless it is interim (1xx) or a redirect libcurl follows
/// (`follows`, 3xx): after the block of the last response, every line is a trailer, one that
/// starts with "HTTP/" included (a trailer named "HTTP/1.1 503" must not start a response whose
/// "fields" are the trailers after it).
struct header_reader {
  header_list headers{};
  bool in_block = false;
  /// Whether libcurl follows redirects on this transfer (set before the first line). The client
  /// follows every redirect itself (client_impl::redirect), so it leaves this false; the reader
  /// handles both.
  bool follows = false;
  /// The status of the current or last block; whether the last response's block ended.
  int status = 0;
  bool finished = false;

  void line(std::string_view line);
};

} // namespace coretry::curl::detail
