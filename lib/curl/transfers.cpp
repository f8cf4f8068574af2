// SPDX-License-Identifier: BSL-1.0
// The queue and pool of transfers under the connection limit: submit, start, cancel, finish.
// Who may start when: admission.cpp; where a redirect goes next: redirect.cpp.

#include <coretry/curl/classify.hpp>
#include <coretry/curl/error.hpp>
#include <coretry/detail/asio.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "client_impl.hpp"

namespace coretry::curl::detail {

namespace {

client_options effective(client_options o) {
  if (o.max_idle_connections == 0)
    o.max_idle_connections = o.max_total_connections > 0 ? o.max_total_connections : 64;
  return o;
}

multi_limits limits_of(const client_options& o) {
  return {o.max_total_connections, o.max_host_connections, o.max_idle_connections,
          o.max_streams_per_connection};
}

void global_init() {
  // Once per process, before any handle, and thread-safe through the static's initialization.
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK)
    throw std::system_error(std::error_code(rc, curl_category()), "curl_global_init");
}

} // namespace

client_impl::client_impl(asio::any_io_executor ex, const client_options& o)
    : executor_(std::move(ex)), options_(effective(o)),
      driver_(executor_, mutex_, *this, stats_.open, stats_.connects, limits_of(options_)) {
  defaults_.http_version = options_.http_version;
  defaults_.tls = &options_.tls;
  defaults_.max_body = options_.max_response_body;
  defaults_.max_headers = options_.max_response_headers;
  defaults_.options = &options_;
  plain_headers_.reset(plain_header_lines(&options_)); // null (out of memory): per transfer
  defaults_.plain_headers = plain_headers_.get();
  init_admission();
}

std::shared_ptr<client_impl> client_impl::create(asio::any_io_executor ex,
                                                 const client_options& o) {
  global_init();
  std::shared_ptr<client_impl> impl(new client_impl(std::move(ex), o));
  impl->driver_.set_life(impl);
  return impl;
}

client_impl::~client_impl() {
  shutdown();
}

void client_impl::shutdown() {
  // The destructor's thread may differ from the threads running the executor: wait for the
  // handler in progress, if any; every later one sees the driver shut and returns.
  std::lock_guard lock(mutex_);
  if (shut_.load(std::memory_order_relaxed))
    return;
  shut_.store(true, std::memory_order_release);
  // Abort what is in flight; removing an unfinished transfer closes its connection through the
  // driver's close callback, which still finds the socket table.
  std::vector<std::shared_ptr<transfer>> aborted;
  for (auto& [easy, t] : active_) {
    driver_.remove(easy);
    aborted.push_back(t);
  }
  active_.clear();
  used_ = 0;
  stats_.active.value.store(0, std::memory_order_relaxed);
  for (auto& t : queue_)
    aborted.push_back(t);
  queue_.clear();
  stats_.queued.value.store(0, std::memory_order_relaxed);
  for (auto& t : aborted) {
    t->state = transfer_state::done;
    if (t->easy) {
      pool_.push_back(t->easy);
      t->easy = nullptr;
    }
    free_headers(*t);
    if (auto c = std::move(t->completion))
      c->complete(coretry::detail::aborted_error(), {});
  }
  driver_.shutdown();
  for (CURL* e : pool_)
    curl_easy_cleanup(e);
  pool_.clear();
  stats_.pooled.value.store(0, std::memory_order_relaxed);
}

void client_impl::start_or_queue(std::shared_ptr<transfer> t, bool next_hop) {
  if (!open()) {
    finish(std::move(t), coretry::detail::aborted_error());
    return;
  }
  t->origin = origin_of(t->req.url);
  // In order: nobody overtakes the queue, except the next hop of a redirect, which continues a
  // request admitted already (it just gave back its share): it waits at the front, not behind
  // every request that arrived since its first hop.
  if ((!next_hop && !queue_.empty()) || !admit(*t)) {
    t->state = transfer_state::queued;
    if (next_hop)
      queue_.push_front(std::move(t));
    else
      queue_.push_back(std::move(t));
    stats_.queued.add(1);
    return;
  }
  start(std::move(t));
}

void client_impl::start(std::shared_ptr<transfer> t) {
  CURL* easy = nullptr;
  if (!pool_.empty()) {
    easy = pool_.back();
    pool_.pop_back();
    stats_.pooled.add(-1);
    curl_easy_reset(easy);
  } else {
    easy = curl_easy_init();
  }
  if (!easy) {
    finish(std::move(t), make_error_code(errc::failed_init));
    return;
  }
  t->easy = easy;
  CURLcode rc = configure_easy(*t, defaults_);
  if (rc == CURLE_OK)
    rc = driver_.install_socket_callbacks(easy);
  if (rc != CURLE_OK) {
    release_easy(*t);
    finish(std::move(t), std::error_code(rc, curl_category()));
    return;
  }
  if (driver_.add(easy) != CURLM_OK) {
    release_easy(*t);
    finish(std::move(t), make_error_code(errc::failed_init));
    return;
  }
  t->state = transfer_state::active;
  t->started = std::chrono::steady_clock::now();
  used_ += t->cost;
  active_.emplace(easy, std::move(t));
  stats_.active.add(1);
}

void client_impl::cancel(const std::shared_ptr<transfer>& t) {
  switch (t->state) {
  case transfer_state::created:
  case transfer_state::done:
    // Not submitted yet: submit will see the flag. Done: too late, nothing to do.
    t->cancel_requested = true;
    return;
  case transfer_state::queued: {
    auto it = std::find(queue_.begin(), queue_.end(), t);
    if (it != queue_.end()) {
      queue_.erase(it);
      stats_.queued.add(-1);
    }
    finish(t, coretry::detail::aborted_error());
    return;
  }
  case transfer_state::active:
    // Outside any libcurl callback: the removal is allowed here and returns at once, also
    // while the name is being resolved (quick exit, see easy_setup.cpp). An unfinished
    // connection is closed by libcurl; no done message follows.
    driver_.remove(t->easy);
    active_.erase(t->easy);
    used_ -= t->cost;
    stats_.active.add(-1);
    release_easy(*t);
    finish(t, coretry::detail::aborted_error());
    start_queued();
    return;
  }
}

void client_impl::finish(std::shared_ptr<transfer> t, std::error_code ec) {
  t->state = transfer_state::done;
  free_headers(*t);
  if (auto c = std::move(t->completion)) {
    if (!ec) {
      c->complete(ec, std::move(t->resp));
    } else {
      response failed;
      failed.error_detail = t->abort_error ? t->abort_detail : t->error_buffer;
      c->complete(ec, std::move(failed));
    }
  }
}

void client_impl::release_easy(transfer& t) {
  if (!t.easy)
    return;
  // The handle must not keep pointing into the transfer, which may die before the handle is
  // reset for its next use (curl_easy_reset) or cleaned up.
  curl_easy_setopt(t.easy, CURLOPT_ERRORBUFFER, static_cast<char*>(nullptr));
  if (pool_.size() < options_.pool_size) {
    pool_.push_back(t.easy);
    stats_.pooled.add(1);
  } else {
    curl_easy_cleanup(t.easy);
  }
  t.easy = nullptr;
}

void client_impl::start_queued() {
  while (open() && !queue_.empty() && admit(*queue_.front())) {
    auto t = std::move(queue_.front());
    queue_.pop_front();
    stats_.queued.add(-1);
    start(std::move(t));
  }
}

void client_impl::transfer_done(CURL* easy, CURLcode result) {
  auto it = active_.find(easy);
  if (it == active_.end())
    return;
  auto t = std::move(it->second);
  active_.erase(it);
  used_ -= t->cost;
  stats_.active.add(-1);
  long status = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  t->resp.status = status;
  long version = 0;
  curl_easy_getinfo(easy, CURLINFO_HTTP_VERSION, &version);
  switch (version) {
  case CURL_HTTP_VERSION_1_0:
    t->resp.version = http_version::http1_0;
    break;
  case CURL_HTTP_VERSION_1_1:
    t->resp.version = http_version::http1_1;
    break;
  case CURL_HTTP_VERSION_2_0:
    t->resp.version = http_version::http2;
    break;
  case CURL_HTTP_VERSION_3:
    t->resp.version = http_version::http3;
    break;
  default:
    break;
  }
  t->resp.headers = std::move(t->headers.headers);
  std::error_code ec = outcome(*t, result);
  if (!ec) {
    char* effective = nullptr;
    curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &effective);
    learn(*t, effective ? std::string_view(effective) : std::string_view());
  }
  std::string location;
  if (!ec && t->req.follow_redirects) {
    char* target = nullptr;
    if (curl_easy_getinfo(easy, CURLINFO_REDIRECT_URL, &target) == CURLE_OK && target)
      location = target;
  }
  driver_.remove(easy);
  release_easy(*t);
  if (!location.empty()) {
    if (t->hops >= t->req.max_redirects) {
      ec = make_error_code(errc::too_many_redirects);
    } else {
      redirect(std::move(t), std::move(location));
      return;
    }
  }
  finish(std::move(t), ec);
}

std::error_code outcome(transfer& t, CURLcode result) {
  // A callback that aborted the transfer said why (an exception, a size limit).
  if (t.abort_error)
    return t.abort_error;
  if (result == CURLE_OK)
    return {};
  const std::string_view detail = t.error_buffer;
  // libcurl 7.88's own header limits: a header block over 300 KiB fails with
  // CURLE_RECV_ERROR "Too large response headers: ...", one line over 100 KiB with
  // CURLE_OUT_OF_MEMORY while the block is being read. Both fail the same way each time: the
  // same error as client_options::max_response_headers, which is not retried.
  if ((result == CURLE_RECV_ERROR && detail.starts_with("Too large response headers")) ||
      (result == CURLE_OUT_OF_MEMORY && t.resp.body.empty() &&
       (t.headers.in_block || t.header_bytes == 0))) {
    set_abort(t, make_error_code(errc::filesize_exceeded),
              "response header line or block larger than libcurl accepts (100 KiB a line, "
              "300 KiB a block)");
    return t.abort_error;
  }
  // A proxy that refuses the tunnel (its answer to CONNECT is not 2xx: 403, 407, ...) fails
  // the transfer as CURLE_RECV_ERROR in 7.88, "CONNECT tunnel failed, response 407": the error
  // of a connection reset, which is retried. The proxy will refuse again: CURLE_PROXY instead,
  // which is not.
  long connect_code = 0;
  if (result == CURLE_RECV_ERROR && t.easy &&
      curl_easy_getinfo(t.easy, CURLINFO_HTTP_CONNECTCODE, &connect_code) == CURLE_OK &&
      connect_code != 0 && (connect_code < 200 || connect_code > 299))
    return make_error_code(errc::proxy_refused);
  return {result, curl_category()};
}

void client_impl::transfers_freed() {
  start_queued();
}

void client_impl::callback_failed(CURL* easy, std::error_code ec, const char* what) noexcept {
  if (!easy)
    return;
  auto it = active_.find(easy);
  if (it != active_.end())
    set_abort(*it->second, ec, what);
}

void client_impl::abort_failed(bool all, std::error_code ec) {
  std::vector<std::shared_ptr<transfer>> failed;
  for (auto& [easy, t] : active_)
    if (all || t->abort_error)
      failed.push_back(t);
  for (auto& t : failed) {
    set_abort(*t, ec, "the client could not watch libcurl's timer");
    driver_.remove(t->easy);
    active_.erase(t->easy);
    used_ -= t->cost;
    stats_.active.add(-1);
    release_easy(*t);
    finish(t, t->abort_error);
  }
  if (!failed.empty())
    start_queued();
}

} // namespace coretry::curl::detail
