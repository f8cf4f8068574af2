#pragma once
// Private: one perform, as the transfer queue and the easy-handle setup see it. Not installed.

#include <coretry/curl/client.hpp>

#include <curl/curl.h>

#include <cstdint>
#include <memory>

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
};

/// Sets `t.easy` up for `t.req` (callbacks writing into `t.resp`, headers into
/// `t.header_list`). The socket callbacks are the driver's business, not set here.
CURLcode configure_easy(transfer& t);

/// Frees `t.header_list`.
void free_headers(transfer& t) noexcept;

} // namespace coretry::curl::detail
