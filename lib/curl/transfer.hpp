// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: one perform, as the transfer queue and the easy-handle setup see it. Not installed.

#include <coretry/curl/client.hpp>

#include <curl/curl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "header_lines.hpp"

namespace coretry::curl::detail {

enum class transfer_state : std::uint8_t { created, queued, active, done };

/// One perform: owned by the client while queued or active, and by whoever holds the
/// completion (nobody, once completed).
struct transfer {
  std::weak_ptr<client_impl> owner;
  request req;
  response resp;
  std::unique_ptr<perform_completion> completion;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  transfer_state state = transfer_state::created;
  bool cancel_requested = false;
  /// Whether it was handed over with CURLOPT_PIPEWAIT (it may share an HTTP/2 connection).
  bool pipewait = false;
  /// Redirects followed so far (see redirect_request).
  long hops = 0;
  /// When the current hop was handed to libcurl, and the time the earlier hops spent there:
  /// `request::timeout` covers them all (configure_easy gives each hop what is left).
  std::chrono::steady_clock::time_point started{};
  std::chrono::steady_clock::duration spent{};
  /// Its share of the client's admission limit while active (see client_impl::admit).
  std::size_t cost = 0;
  /// "scheme://host:port" of `req.url`, lowercased: what the client learns HTTP/2 support by.
  std::string origin;
  char error_buffer[CURL_ERROR_SIZE] = {};
  /// The header lines of the response being received (status lines, trailers; see
  /// header_lines.hpp), and the header bytes received over the whole transfer.
  header_reader headers{};
  std::size_t header_bytes = 0;
  /// The client's response size limits (0 = no limit for the body).
  std::size_t max_body = 0;
  std::size_t max_headers = 0;
  /// Set by a callback that aborted the transfer (an exception caught, a size limit passed):
  /// the error it completes with instead of libcurl's (CURLE_WRITE_ERROR, ...), and the account
  /// of it for `response::error_detail`. Written without allocating.
  std::error_code abort_error{};
  char abort_detail[CURL_ERROR_SIZE] = {};
};

/// Where a test makes a callback throw (`fault_point`), to prove that no exception crosses
/// libcurl. One relaxed load per callback when unset.
enum class fault_point : unsigned { none = 0, body = 1, header = 2, socket = 4, timer = 8 };
/// The points armed (a mask of `fault_point`s): each armed callback throws `std::bad_alloc` once
/// and disarms itself.
extern std::atomic<unsigned> armed_faults;
/// Throws `std::bad_alloc` when `p` is armed (disarming it).
void maybe_inject(fault_point p);

/// Records the abort of `t` by a callback: `ec`, and the detail "coretry: <what>" (truncated to
/// CURL_ERROR_SIZE, no allocation).
void set_abort(transfer& t, std::error_code ec, const char* what) noexcept;

/// What every transfer of a client shares: the client's options, resolved.
struct easy_defaults {
  http_version_option http_version = http_version_option::http2_tls;
  std::size_t max_body = 0;                ///< client_options::max_response_body (0 = unlimited)
  std::size_t max_headers = 0;             ///< client_options::max_response_headers
  const client_options* options = nullptr; ///< the client's (stall, Expect, proxy, encodings)
  const tls_options* tls = nullptr;        ///< the client's; `request::tls` replaces it
  /// The header lines of every request without headers of its own (libcurl's unwanted default
  /// headers removed, see configure_easy), built once by the client and owned by it; null: built
  /// per transfer.
  const curl_slist* plain_headers = nullptr;
};

/// The header lines `configure_easy` gives a request without headers of its own, under the
/// client options `o`; null when out of memory. The caller frees them (curl_slist_free_all).
curl_slist* plain_header_lines(const client_options* o);

/// Sets `t.easy` up for `t.req` (callbacks writing into `t.resp`, headers into
/// `t.header_list`, CURLOPT_PIPEWAIT when `t.pipewait`). The socket callbacks are the driver's
/// business, not set here.
CURLcode configure_easy(transfer& t, const easy_defaults& defaults);

/// Turns `r` into the request of the next hop of a redirect: `status` (3xx) answered it at
/// `from` (its URL), sending it to `location` (absolute). The one rule for every redirect (the
/// client follows them all itself, see client_impl::redirect):
///
/// - method and body (RFC 9110, section 15.4, as browsers and curl's tool): a 303 makes any
///   request but a HEAD a GET without body; a 301 or 302 makes a POST a GET without body; any
///   other keeps its method and body. A request that loses its body loses the fields that
///   describe it (`is_body_field`): a Content-Length left on a GET made the server wait for a
///   body that never came;
/// - fields: to another origin (scheme, host or port differ), the fields that hold credentials
///   or name the origin (`is_origin_field`) are dropped.
void redirect_request(request& r, long status, std::string_view from, std::string location);

/// Authorization, Cookie, Proxy-Authorization, Host: fields no redirect carries to another
/// origin.
bool is_origin_field(std::string_view name) noexcept;
/// Content-*, Transfer-Encoding, Expect, Digest, Trailer: fields of a request body.
bool is_body_field(std::string_view name) noexcept;
/// "scheme://authority" of an absolute URL, lowercased; the URL itself without "://".
std::string origin_of(std::string_view url);

/// What a finished transfer completes with: the error a callback recorded, libcurl's result
/// otherwise, with libcurl's header size failures mapped to `errc::filesize_exceeded` (see
/// transfers.cpp).
std::error_code outcome(transfer& t, CURLcode result);

/// Frees `t.header_list`.
void free_headers(transfer& t) noexcept;

} // namespace coretry::curl::detail
