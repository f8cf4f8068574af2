// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: the state behind coretry::curl::client, the transfer queue and handle pool above
// the driver. Not installed. Serialized by `mutex_` alone (the rule is at the top of driver.cpp).

#include <coretry/curl/client.hpp>

#include <curl/curl.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "counter.hpp"
#include "driver.hpp"
#include "transfer.hpp"

namespace coretry::curl::detail {

struct client_counters {
  counter active, queued, open, waiting, pooled, connects;
};

class client_impl final : public std::enable_shared_from_this<client_impl>,
                          private multi_driver::owner {
public:
  /// Creates the state; `o` must be valid. Calls curl_global_init once per process first.
  static std::shared_ptr<client_impl> create(asio::any_io_executor ex, const client_options& o);
  ~client_impl();
  client_impl(const client_impl&) = delete;
  client_impl& operator=(const client_impl&) = delete;

  /// Aborts everything and releases libcurl; idempotent. Any thread: takes mutex_.
  void shutdown();
  bool open() const noexcept { return !shut_.load(std::memory_order_acquire); }

  // With mutex_ held:
  /// Starts `t` if it fits, else queues it: last, or first when it is the `next_hop` of a
  /// redirect.
  void start_or_queue(std::shared_ptr<transfer> t, bool next_hop = false);
  void cancel(const std::shared_ptr<transfer>& t);
  void finish(std::shared_ptr<transfer> t, std::error_code ec);

  asio::any_io_executor executor_;
  std::mutex mutex_;
  client_counters stats_;

private:
  client_impl(asio::any_io_executor ex, const client_options& o);
  void start(std::shared_ptr<transfer> t);
  void start_queued();
  /// Sets capacity_, streams_ and by_connections_ from options_ (admission.cpp).
  void init_admission();
  /// Sets `t.pipewait` and `t.cost` from what is known of its origin; whether it fits now.
  bool admit(transfer& t);
  void learn(const transfer& t, std::string_view effective_url);
  void release_easy(transfer& t);
  /// Starts `t` again towards `location`, its next hop (redirect.cpp).
  void redirect(std::shared_ptr<transfer> t, std::string location);
  void transfer_done(CURL* easy, CURLcode result) override;
  void transfers_freed() override;
  void callback_failed(CURL* easy, std::error_code ec, const char* what) noexcept override;
  void abort_failed(bool all, std::error_code ec) override;

  client_options options_;
  /// defaults_.plain_headers, owned: freed after the last handle is cleaned up (shutdown).
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> plain_headers_{nullptr, &curl_slist_free_all};
  easy_defaults defaults_;
  /// Admission (see client_options::max_concurrent_requests): transfers in libcurl hold `cost`
  /// units each out of `capacity_` (0 = unlimited; a product too large saturates at SIZE_MAX). By connections, an HTTP/1.1 transfer costs
  /// `streams_` units (a whole connection) and one to an origin known to speak HTTP/2 costs 1.
  std::size_t capacity_ = 0;
  std::size_t streams_ = 1;
  bool by_connections_ = false;
  std::size_t used_ = 0;
  /// Origins seen answering: true over HTTP/2, false over HTTP/1.x. Bounded (cleared when full).
  std::unordered_map<std::string, bool> multiplexes_;
  multi_driver driver_;
  std::unordered_map<CURL*, std::shared_ptr<transfer>> active_;
  std::deque<std::shared_ptr<transfer>> queue_;
  std::vector<CURL*> pool_;
  std::atomic<bool> shut_{false}; ///< written with mutex_ held; read anywhere by open()
};

} // namespace coretry::curl::detail
