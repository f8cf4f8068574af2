// The queue and pool of transfers under the connection limit: submit, start, cancel, finish.

#include <coretry/curl/error.hpp>
#include <coretry/detail/asio.hpp>

#include <algorithm>
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

constexpr long default_streams = 100; // libcurl's CURLMOPT_MAX_CONCURRENT_STREAMS default
constexpr std::size_t max_known_origins = 4096;

// "scheme://authority" of an absolute URL, lowercased (userinfo and all kept: it only keys a
// cache); the URL itself when it has no "://".
std::string origin_of(std::string_view url) {
  auto begin = url.find("://");
  std::size_t end =
      begin == std::string_view::npos ? url.size() : url.find_first_of("/?#", begin + 3);
  std::string o(url.substr(0, std::min(end, url.size())));
  for (char& c : o)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return o;
}

// Whether a transfer to `origin` may be carried over HTTP/2 under option `v`.
bool may_use_http2(http_version_option v, std::string_view origin) {
  switch (v) {
  case http_version_option::http1_1:
    return false;
  case http_version_option::http2_tls:
    return origin.starts_with("https://");
  default:
    return true;
  }
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
  if (options_.max_concurrent_requests > 0) {
    capacity_ = options_.max_concurrent_requests;
  } else if (options_.max_total_connections > 0) {
    by_connections_ = true;
    streams_ = static_cast<std::size_t>(options_.max_streams_per_connection > 0
                                            ? options_.max_streams_per_connection
                                            : default_streams);
    const auto connections = static_cast<std::size_t>(options_.max_total_connections);
    // Beyond what a size_t holds the limit is no limit.
    capacity_ = connections <= SIZE_MAX / streams_ ? connections * streams_ : 0;
  }
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

void client_impl::start_or_queue(std::shared_ptr<transfer> t) {
  if (!open()) {
    finish(std::move(t), coretry::detail::aborted_error());
    return;
  }
  t->origin = origin_of(t->req.url);
  if (!queue_.empty() || !admit(*t)) { // in order: nobody overtakes the queue
    t->state = transfer_state::queued;
    queue_.push_back(std::move(t));
    stats_.queued.add(1);
    return;
  }
  start(std::move(t));
}

bool client_impl::admit(transfer& t) {
  const auto known = multiplexes_.find(t.origin);
  const bool http2 = may_use_http2(options_.http_version, t.origin);
  // An origin unknown yet may speak HTTP/2: wait for its first connection (PIPEWAIT) rather
  // than open one per transfer. One known to answer over HTTP/1.1 gets no wait: PIPEWAIT would
  // only serialize its connection set-ups.
  t.pipewait = http2 && (known == multiplexes_.end() || known->second);
  const bool shares = http2 && known != multiplexes_.end() && known->second;
  t.cost = !by_connections_ ? 1 : shares ? 1 : streams_;
  return capacity_ == 0 || used_ + t.cost <= capacity_;
}

void client_impl::learn(const transfer& t) {
  if (t.resp.version == http_version::unknown || !may_use_http2(options_.http_version, t.origin))
    return;
  if (multiplexes_.size() >= max_known_origins && !multiplexes_.contains(t.origin))
    multiplexes_.clear();
  multiplexes_[t.origin] = t.resp.version == http_version::http2;
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
      failed.error_detail = t->error_buffer;
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
  if (result == CURLE_OK)
    learn(*t);
  driver_.remove(easy);
  release_easy(*t);
  finish(std::move(t),
         result == CURLE_OK ? std::error_code() : std::error_code(result, curl_category()));
}

void client_impl::transfers_freed() {
  start_queued();
}

} // namespace coretry::curl::detail
