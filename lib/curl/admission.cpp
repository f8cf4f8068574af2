// SPDX-License-Identifier: BSL-1.0
// The admission rules of the transfer queue: what a transfer costs out of the client's capacity
// (client_options::max_concurrent_requests, or connections and HTTP/2 streams), and what the
// client learns of each origin's HTTP version to price the next ones.

#include <coretry/curl/classify.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "client_impl.hpp"

namespace coretry::curl::detail {

namespace {

constexpr long default_streams = 100; // libcurl's CURLMOPT_MAX_CONCURRENT_STREAMS default
constexpr std::size_t max_known_origins = 4096;

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

} // namespace

std::string origin_of(std::string_view url) {
  // userinfo and all kept: a difference anywhere in the authority is another origin, for the
  // HTTP/2 cache as for the fields a redirect drops.
  auto begin = url.find("://");
  std::size_t end =
      begin == std::string_view::npos ? url.size() : url.find_first_of("/?#", begin + 3);
  std::string o(url.substr(0, std::min(end, url.size())));
  for (char& c : o)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return o;
}

void client_impl::init_admission() {
  if (options_.max_concurrent_requests > 0) {
    capacity_ = options_.max_concurrent_requests;
  } else if (options_.max_total_connections > 0) {
    by_connections_ = true;
    streams_ = static_cast<std::size_t>(options_.max_streams_per_connection > 0
                                            ? options_.max_streams_per_connection
                                            : default_streams);
    const auto connections = static_cast<std::size_t>(options_.max_total_connections);
    // Saturated: a product beyond what a size_t holds is still a limit (an HTTP/1.1 transfer
    // still costs a whole connection), never "no limit".
    capacity_ = connections <= SIZE_MAX / streams_ ? connections * streams_ : SIZE_MAX;
  }
}

bool client_impl::admit(transfer& t) {
  const auto known = multiplexes_.find(t.origin);
  const bool http2 = may_use_http2(options_.http_version, t.origin);
  // An origin unknown yet may speak HTTP/2: wait for its first connection (PIPEWAIT) rather
  // than open one per transfer. One known to answer over HTTP/1.1 gets no wait: PIPEWAIT would
  // only serialize its connection set-ups.
  t.pipewait = http2 && (known == multiplexes_.end() || known->second);
  // A transfer that must not be sent twice gets a fresh connection (CURLOPT_FRESH_CONNECT, see
  // easy_setup.cpp) even to an HTTP/2 origin: it costs a whole connection.
  const bool shares = http2 && known != multiplexes_.end() && known->second && may_retry(t.req) &&
                      !t.req.fresh_connection;
  t.cost = !by_connections_ ? 1 : shares ? 1 : streams_;
  return capacity_ == 0 || used_ + t.cost <= capacity_;
}

void client_impl::learn(const transfer& t, std::string_view effective_url) {
  // Each hop of a redirect is a transfer of its own and teaches the version of its own origin
  // (CURLINFO_EFFECTIVE_URL), not the first URL's.
  const std::string origin = effective_url.empty() ? t.origin : origin_of(effective_url);
  if (t.resp.version == http_version::unknown || !may_use_http2(options_.http_version, origin))
    return;
  if (multiplexes_.size() >= max_known_origins && !multiplexes_.contains(origin))
    multiplexes_.clear();
  multiplexes_[origin] = t.resp.version == http_version::http2;
}

} // namespace coretry::curl::detail
