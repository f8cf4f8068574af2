// SPDX-License-Identifier: BSL-1.0
// coretry::curl::client and the entry points its header uses: creating, submitting and
// cancelling transfers, the counters. The layers below: transfers.cpp (queue and pool, with
// admission.cpp and redirect.cpp), easy_setup.cpp (request to easy handle), driver.cpp and
// driver_sockets.cpp (libcurl's multi handle on Asio, and the serialization rule).

#include <coretry/curl/client.hpp>
#include <coretry/detail/asio.hpp>

#include <curl/curl.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "client_impl.hpp"
#include "invalid_argument.hpp"

namespace coretry::curl {
namespace detail {

std::shared_ptr<transfer> make_transfer(const std::shared_ptr<client_impl>& impl, request req,
                                        std::unique_ptr<perform_completion> completion) {
  auto t = std::make_shared<transfer>();
  t->owner = impl;
  t->req = std::move(req);
  t->completion = std::move(completion);
  return t;
}

void submit(const std::shared_ptr<client_impl>& impl, std::shared_ptr<transfer> t) {
  asio::post(impl->executor_, [impl, t = std::move(t)]() mutable {
    std::lock_guard lock(impl->mutex_);
    if (t->cancel_requested) {
      impl->finish(std::move(t), coretry::detail::aborted_error());
      return;
    }
    impl->start_or_queue(std::move(t));
  });
}

void cancel_hook::operator()(asio::cancellation_type) const {
  auto t = target.lock();
  if (!t)
    return;
  auto impl = t->owner.lock();
  if (!impl)
    return;
  // Posted, never run here: the emit may come from inside a libcurl callback, lock held.
  asio::post(impl->executor_, [impl, weak = std::weak_ptr<transfer>(t)] {
    std::lock_guard lock(impl->mutex_);
    if (auto live = weak.lock())
      impl->cancel(live);
  });
}

asio::awaitable<response> perform_throwing(std::shared_ptr<client_impl> impl,
                                           asio::any_io_executor fallback, request req) {
  auto [ec, r] = co_await async_perform_on(std::move(impl), fallback, std::move(req),
                                           coretry::detail::as_tuple(asio::use_awaitable));
  if (ec) {
    if (r.error_detail.empty())
      throw std::system_error(ec);
    throw std::system_error(ec, r.error_detail);
  }
  co_return std::move(r);
}

std::weak_ptr<client_impl> client_access::state(const client& c) noexcept {
  return c.impl_;
}

bool client_access::open(const client_impl& impl) noexcept {
  return impl.open();
}

void client_access::add_waiting(const std::shared_ptr<client_impl>& impl,
                                std::ptrdiff_t delta) noexcept {
  impl->stats_.waiting.add(delta);
}

} // namespace detail

client::client(executor_type executor, client_options options)
    : executor_(std::move(executor)), options_((options.validate(), options)),
      impl_(detail::client_impl::create(executor_, options_)) {}

client::~client() {
  impl_->shutdown();
}

client_stats client::stats() const noexcept {
  const auto& s = impl_->stats_;
  client_stats out;
  out.active_transfers = s.active.value.load(std::memory_order_relaxed);
  out.queued_requests = s.queued.value.load(std::memory_order_relaxed);
  out.open_connections = s.open.value.load(std::memory_order_relaxed);
  out.waiting_retries = s.waiting.value.load(std::memory_order_relaxed);
  out.pooled_handles = s.pooled.value.load(std::memory_order_relaxed);
  out.connects = s.connects.value.load(std::memory_order_relaxed);
  out.peak_active_transfers = s.active.peak.load(std::memory_order_relaxed);
  out.peak_queued_requests = s.queued.peak.load(std::memory_order_relaxed);
  out.peak_open_connections = s.open.peak.load(std::memory_order_relaxed);
  out.peak_waiting_retries = s.waiting.peak.load(std::memory_order_relaxed);
  return out;
}

void client_options::validate() const {
  if (max_total_connections < 0)
    throw_invalid("client_options", "max_total_connections", std::to_string(max_total_connections),
                  "must be 0 (unlimited) or more");
  if (max_host_connections < 0)
    throw_invalid("client_options", "max_host_connections", std::to_string(max_host_connections),
                  "must be 0 (unlimited) or more");
  if (max_idle_connections < 0)
    throw_invalid("client_options", "max_idle_connections", std::to_string(max_idle_connections),
                  "must be 0 (the default) or more");
  // libcurl keeps the stream limit in an unsigned int, and HTTP/2's SETTINGS value is 31 bits
  // in practice: a larger value would not be what libcurl does.
  if (max_streams_per_connection < 0 || max_streams_per_connection > INT32_MAX)
    throw_invalid("client_options", "max_streams_per_connection",
                  std::to_string(max_streams_per_connection),
                  "must be 0 (libcurl's default, 100) to 2147483647");
  if (http_version > http_version_option::http2_prior_knowledge)
    throw_invalid("client_options", "http_version", std::to_string(static_cast<int>(http_version)),
                  "must be an http_version_option");
  // libcurl before 8.0 breaks every request after the first on an h2c prior-knowledge
  // connection (curl issue 10191, "Error in the HTTP2 framing layer"; fixed in 8.0.0): refused
  // rather than failing, and retrying, on a broken connection.
  if (http_version == http_version_option::http2_prior_knowledge &&
      curl_version_info(CURLVERSION_NOW)->version_num < 0x080000)
    throw_invalid("client_options", "http_version", "http2_prior_knowledge",
                  ("needs libcurl 8.0 or later, this is " +
                   std::string(curl_version_info(CURLVERSION_NOW)->version) +
                   ", whose h2c prior knowledge fails every request after the first on a "
                   "connection; use http2_tls over https://, or http2 (Upgrade: h2c)")
                      .c_str());
  if (max_response_headers == 0)
    throw_invalid("client_options", "max_response_headers", "0",
                  "must be 1 or more (bytes of response header lines)");
  if (stall_timeout.count() < 0)
    throw_invalid("client_options", "stall_timeout", std::to_string(stall_timeout.count()) + "s",
                  "must be 0 (no stall check) or more");
  if (stall_min_bytes_per_second < 1)
    throw_invalid("client_options", "stall_min_bytes_per_second",
                  std::to_string(stall_min_bytes_per_second), "must be 1 or more");
  if (expect_continue_timeout.count() < 0)
    throw_invalid("client_options", "expect_continue_timeout",
                  std::to_string(expect_continue_timeout.count()) + "ms",
                  "must be 0 (never send Expect) or more");
  if (proxy.find('\0') != std::string::npos ||
      (!proxy.empty() && proxy.find("://") == std::string::npos))
    throw_invalid("client_options", "proxy", detail::url_value(proxy),
                  "must be empty or a URL with its scheme, e.g. http://host:3128, and no NUL");
  if (no_proxy.find('\0') != std::string::npos)
    throw_invalid("client_options", "no_proxy", "\"" + no_proxy + "\"", "must not contain NUL");
  detail::validate_tls(tls, "client_options", "tls.");
  coretry::http::detail::validate_rules(retry_rules, "coretry::curl::client_options",
                                        "retry_rules.");
}

} // namespace coretry::curl
