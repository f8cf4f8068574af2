#pragma once
// Private: one perform, as the transfer queue and the easy-handle setup see it. Not installed.

#include <coretry/curl/client.hpp>

#include <curl/curl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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
  /// Its share of the client's admission limit while active (see client_impl::admit).
  std::size_t cost = 0;
  /// "scheme://host:port" of `req.url`, lowercased: what the client learns HTTP/2 support by.
  std::string origin;
  char error_buffer[CURL_ERROR_SIZE] = {};
};

/// What every transfer of a client shares: the client's options, resolved.
struct easy_defaults {
  http_version_option http_version = http_version_option::http2_tls;
  const tls_options* tls = nullptr; ///< the client's; `request::tls` replaces it
};

/// Sets `t.easy` up for `t.req` (callbacks writing into `t.resp`, headers into
/// `t.header_list`, CURLOPT_PIPEWAIT when `t.pipewait`). The socket callbacks are the driver's
/// business, not set here.
CURLcode configure_easy(transfer& t, const easy_defaults& defaults);

/// Frees `t.header_list`.
void free_headers(transfer& t) noexcept;

} // namespace coretry::curl::detail
