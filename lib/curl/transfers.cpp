// The queue and pool of transfers under the connection limit: submit, start, cancel, finish.

#include <coretry/curl/error.hpp>

#include <asio/error.hpp>

#include <algorithm>
#include <system_error>

#include "client_impl.hpp"

namespace coretry::curl::detail {

namespace {

client_options effective(client_options o) {
  if (o.max_concurrent_requests == 0 && o.max_total_connections > 0)
    o.max_concurrent_requests = static_cast<std::size_t>(o.max_total_connections);
  if (o.max_idle_connections == 0)
    o.max_idle_connections = o.max_total_connections > 0 ? o.max_total_connections : 64;
  return o;
}

multi_limits limits_of(const client_options& o) {
  return {o.max_total_connections, o.max_host_connections, o.max_idle_connections};
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
      driver_(executor_, mutex_, *this, stats_.open, limits_of(options_)) {}

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
      c->complete(asio::error::operation_aborted, {});
  }
  driver_.shutdown();
  for (CURL* e : pool_)
    curl_easy_cleanup(e);
  pool_.clear();
  stats_.pooled.value.store(0, std::memory_order_relaxed);
}

void client_impl::start_or_queue(std::shared_ptr<transfer> t) {
  if (!open()) {
    finish(std::move(t), asio::error::operation_aborted);
    return;
  }
  if (options_.max_concurrent_requests != 0 && active_.size() >= options_.max_concurrent_requests) {
    t->state = transfer_state::queued;
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
  CURLcode rc = configure_easy(*t);
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
    finish(t, asio::error::operation_aborted);
    return;
  }
  case transfer_state::active:
    // Outside any libcurl callback: the removal is allowed here and returns at once, also
    // while the name is being resolved (quick exit, see easy_setup.cpp). An unfinished
    // connection is closed by libcurl; no done message follows.
    driver_.remove(t->easy);
    active_.erase(t->easy);
    stats_.active.add(-1);
    release_easy(*t);
    finish(t, asio::error::operation_aborted);
    start_queued();
    return;
  }
}

void client_impl::finish(std::shared_ptr<transfer> t, std::error_code ec) {
  t->state = transfer_state::done;
  free_headers(*t);
  if (auto c = std::move(t->completion))
    c->complete(ec, ec ? response{} : std::move(t->resp));
}

void client_impl::release_easy(transfer& t) {
  if (!t.easy)
    return;
  if (pool_.size() < options_.pool_size) {
    pool_.push_back(t.easy);
    stats_.pooled.add(1);
  } else {
    curl_easy_cleanup(t.easy);
  }
  t.easy = nullptr;
}

void client_impl::start_queued() {
  while (open() && !queue_.empty() &&
         (options_.max_concurrent_requests == 0 ||
          active_.size() < options_.max_concurrent_requests)) {
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
  stats_.active.add(-1);
  long status = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  t->resp.status = status;
  driver_.remove(easy);
  release_easy(*t);
  finish(std::move(t),
         result == CURLE_OK ? std::error_code() : std::error_code(result, curl_category()));
}

void client_impl::transfers_freed() {
  start_queued();
}

} // namespace coretry::curl::detail
