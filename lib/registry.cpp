// SPDX-License-Identifier: BSL-1.0
#include <coretry/observer.hpp>
#include <coretry/policy.hpp>
#include <coretry/registry.hpp>

#include <algorithm>
#include <cctype>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "reject.hpp"
#include <arpa/inet.h>
#include <netinet/in.h>

namespace coretry {
namespace {

using std::chrono::nanoseconds;

[[noreturn]] void bad_url(std::string_view url, const char* rule) {
  throw std::invalid_argument("coretry::endpoint::from_url: url = \"" + redact_url(url) + "\" (" +
                              rule + ")");
}

// RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
bool is_scheme(std::string_view s) noexcept {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s.front())))
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  });
}

// `host[:port]` as a URL's authority may be: a bracketed IPv6 literal or a run of host
// characters, then digits after a colon. What is not (`user:pa` of `user:pa/ss@host`) may be a
// userinfo cut by a character its writer forgot to percent-encode.
bool is_host_port(std::string_view a) noexcept {
  std::string_view port;
  if (!a.empty() && a.front() == '[') {
    const auto close = a.find(']');
    if (close == std::string_view::npos)
      return false;
    port = a.substr(close + 1);
    if (!port.empty() && port.front() != ':')
      return false;
  } else if (const auto colon = a.find(':'); colon != std::string_view::npos) {
    port = a.substr(colon);
  }
  if (!port.empty())
    port.remove_prefix(1);
  return std::all_of(port.begin(), port.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::uint16_t> default_port(std::string_view scheme) noexcept {
  if (scheme == "http" || scheme == "ws")
    return 80;
  if (scheme == "https" || scheme == "wss")
    return 443;
  if (scheme == "ftp")
    return 21;
  return std::nullopt;
}

// One spelling per host, so that one origin gets one entry: lowercase; an IPv6 literal in its
// RFC 5952 form (`[0:0:0:0:0:0:0:1]` is `[::1]`); no trailing dot on a name (`example.com.` is
// `example.com`). A host that is no valid authority is refused.
std::string canonical_host(std::string_view url, std::string_view host) {
  if (host.front() == '[') {
    const std::string inner = lower(host.substr(1, host.size() - 2));
    if (inner.find('%') != std::string::npos) // a zone: kept as written
      return "[" + inner + "]";
    in6_addr a{};
    char text[INET6_ADDRSTRLEN];
    if (::inet_pton(AF_INET6, inner.c_str(), &a) != 1 ||
        ::inet_ntop(AF_INET6, &a, text, sizeof text) == nullptr)
      bad_url(url, "the bracketed host is not an IPv6 address");
    return "[" + std::string(text) + "]";
  }
  if (host.find(':') != std::string_view::npos)
    bad_url(url, "an IPv6 address must be in brackets");
  // An IPv4 address in any spelling libcurl accepts (and connects to as the same address):
  // `127.1`, `0x7f000001`, `2130706433`, `0177.0.0.1`, `127.000.000.001`. inet_aton reads the
  // same forms (the classic BSD ones libcurl's URL parser follows).
  if (host.find_first_not_of("0123456789abcdefABCDEFxX.") == std::string_view::npos) {
    const std::string text(host);
    in_addr a{};
    char dotted[INET_ADDRSTRLEN];
    if (::inet_aton(text.c_str(), &a) != 0 &&
        ::inet_ntop(AF_INET, &a, dotted, sizeof dotted) != nullptr)
      return dotted;
  }
  for (const char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("-._~!$&'()*+,;=%").find(c) != std::string_view::npos;
    if (!ok)
      bad_url(url, "a character that is not allowed in a host");
  }
  if (host.size() > 1 && host.back() == '.')
    host.remove_suffix(1);
  return lower(host);
}

nanoseconds steady_now() noexcept {
  return std::chrono::steady_clock::now().time_since_epoch();
}

} // namespace

std::string redact_url(std::string_view url) {
  std::string out;
  std::string_view rest = url;
  if (const auto sep = rest.find("://");
      sep != std::string_view::npos && is_scheme(rest.substr(0, sep))) {
    out.append(rest.substr(0, sep + 3));
    rest.remove_prefix(sep + 3);
  }
  const auto end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  const std::string_view tail = end == std::string_view::npos ? "" : rest.substr(end);
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    out += "***@";
    authority.remove_prefix(at + 1);
  } else if (tail.find('@') != std::string_view::npos && !is_host_port(authority)) {
    authority = "***";
  }
  out.append(authority);
  if (!tail.empty())
    out.append(1, tail.front()).append("...");
  return out;
}

endpoint endpoint::from_url(std::string_view url) {
  endpoint e;
  std::string_view rest = url;
  if (const auto sep = rest.find("://"); sep != std::string_view::npos) {
    e.scheme = lower(rest.substr(0, sep));
    rest.remove_prefix(sep + 3);
  } else {
    e.scheme = "http";
  }
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (const auto at = rest.rfind('@'); at != std::string_view::npos)
    rest.remove_prefix(at + 1);
  std::string_view host = rest;
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos)
      bad_url(url, "an IPv6 host without its closing bracket");
    host = rest.substr(0, close + 1);
    rest.remove_prefix(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        bad_url(url, "text after the IPv6 host");
      port = rest.substr(1);
    }
  } else if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty() || host == "[]")
    bad_url(url, "no host");
  e.host = canonical_host(url, host);
  if (!port.empty()) {
    unsigned value = 0;
    for (const char c : port) {
      if (c < '0' || c > '9' || value > 65535)
        bad_url(url, "the port must be a number in [1, 65535]");
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value < 1 || value > 65535)
      bad_url(url, "the port must be a number in [1, 65535]");
    e.port = static_cast<std::uint16_t>(value);
  } else if (const auto d = default_port(e.scheme)) {
    e.port = *d;
  } else {
    bad_url(url, "no port, and the scheme has no default one");
  }
  return e;
}

std::string endpoint::to_string() const {
  // One allocation: this is the registry's key, built at every lookup.
  char digits[8];
  int n = 0;
  for (unsigned p = port; n == 0 || p != 0; p /= 10)
    digits[n++] = static_cast<char>('0' + p % 10);
  std::string out;
  out.reserve(scheme.size() + host.size() + 4 + static_cast<std::size_t>(n));
  out.append(scheme).append("://").append(host).push_back(':');
  while (n > 0)
    out.push_back(digits[--n]);
  return out;
}

endpoint_registry::endpoint_registry(endpoint_registry_options options)
    : options_(std::move(options)), last_sweep_(std::numeric_limits<std::int64_t>::min()) {
  constexpr const char* where = "coretry::endpoint_registry_options";
  if (options_.max_entries < 1)
    detail::refuse(where, "max_entries", "0", "must be at least 1");
  if (options_.idle_timeout <= nanoseconds::zero())
    detail::refuse(where, "idle_timeout (ns)", std::to_string(options_.idle_timeout.count()),
                   "must be positive");
  // The breaker's and budget's own constructors name the bad field and its value.
  if (options_.breaker)
    circuit_breaker check(*options_.breaker);
  if (options_.budget)
    ratio_budget check(*options_.budget);
}

endpoint_registry::~endpoint_registry() = default;

std::shared_ptr<resilience_entry> endpoint_registry::make_entry(const endpoint& e) const {
  auto entry = std::make_shared<resilience_entry>();
  entry->endpoint = e;
  if (options_.breaker) {
    circuit_breaker_options o = *options_.breaker;
    if (options_.on_breaker_transition)
      o.on_transition = [hook = options_.on_breaker_transition, own = std::move(o.on_transition),
                         e](breaker_state from, breaker_state to, nanoseconds now) {
        if (own) // the breaker options' own hook is kept, and called first
          own(from, to, now);
        hook(e, from, to, now);
      };
    entry->breaker = options_.observer
                         ? make_observed_breaker(std::move(o), options_.observer, e.to_string())
                         : std::make_shared<circuit_breaker>(std::move(o));
  }
  if (options_.budget)
    entry->budget = std::make_shared<ratio_budget>(*options_.budget);
  if (options_.rate_limit)
    entry->rate_limit = options_.rate_limit(e);
  return entry;
}

std::shared_ptr<const resilience_entry> endpoint_registry::get(const endpoint& e) {
  return get(e, steady_now());
}

std::shared_ptr<const resilience_entry> endpoint_registry::get(const endpoint& e, nanoseconds now) {
  const std::string key = e.to_string();
  // A sweep for idle entries, by one caller at a time, at most once per idle_timeout / 4.
  const std::int64_t period = std::max<std::int64_t>(1, options_.idle_timeout.count() / 4);
  std::int64_t last = last_sweep_.load(std::memory_order_relaxed);
  if (last == std::numeric_limits<std::int64_t>::min()) {
    last_sweep_.compare_exchange_strong(last, now.count(), std::memory_order_relaxed);
  } else if (now.count() - last >= period &&
             last_sweep_.compare_exchange_strong(last, now.count(), std::memory_order_relaxed)) {
    std::vector<endpoint> gone;
    {
      std::unique_lock lock(mutex_);
      evicted_.fetch_add(evict_locked(now, false, gone), std::memory_order_relaxed);
    }
    notify_evicted(gone);
  }
  {
    std::shared_lock lock(mutex_);
    if (const auto it = entries_.find(key); it != entries_.end()) {
      it->second.last_used->store(now.count(), std::memory_order_relaxed);
      return it->second.entry;
    }
  }
  // Built with no lock held: a breaker allocates its windows, a rate factory may do anything.
  auto made = make_entry(e);
  std::vector<endpoint> gone;
  {
    std::unique_lock lock(mutex_);
    if (const auto it = entries_.find(key); it != entries_.end()) { // another thread was first
      it->second.last_used->store(now.count(), std::memory_order_relaxed);
      return it->second.entry;
    }
    if (entries_.size() >= options_.max_entries) {
      evicted_.fetch_add(evict_locked(now, true, gone), std::memory_order_relaxed);
      if (entries_.size() >= options_.max_entries)
        over_capacity_.fetch_add(1, std::memory_order_relaxed);
    }
    entries_.emplace(key, node{made, std::make_unique<std::atomic<std::int64_t>>(now.count())});
    created_.fetch_add(1, std::memory_order_relaxed);
  }
  notify_evicted(gone);
  return made;
}

std::shared_ptr<const resilience_entry> endpoint_registry::find(const endpoint& e) const {
  const std::string key = e.to_string();
  std::shared_lock lock(mutex_);
  const auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.entry;
}

// Under the exclusive lock: no other thread can copy an entry out of the map now, so an entry
// whose count is 1 (the map's own) is held by nobody and cannot become held before it is gone.
std::size_t endpoint_registry::evict_locked(nanoseconds now, bool make_room,
                                            std::vector<endpoint>& gone) {
  std::size_t n = 0;
  const std::int64_t idle_before = now.count() - options_.idle_timeout.count();
  auto oldest = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end();) {
    // Held by nobody, and its breaker (if any) closed: an open or isolated breaker is state an
    // upstream or an operator set, which eviction would silently undo.
    const auto& breaker = it->second.entry->breaker;
    if (it->second.entry.use_count() == 1 &&
        (!breaker || breaker->state() == breaker_state::closed)) {
      const std::int64_t used = it->second.last_used->load(std::memory_order_relaxed);
      if (used <= idle_before) {
        if (options_.on_evict)
          gone.push_back(it->second.entry->endpoint);
        it = entries_.erase(it);
        ++n;
        continue;
      }
      if (oldest == entries_.end() ||
          used < oldest->second.last_used->load(std::memory_order_relaxed))
        oldest = it;
    }
    ++it;
  }
  if (make_room && n == 0 && oldest != entries_.end()) {
    if (options_.on_evict)
      gone.push_back(oldest->second.entry->endpoint);
    entries_.erase(oldest);
    ++n;
  }
  return n;
}

std::size_t endpoint_registry::evict_idle(nanoseconds now) {
  std::vector<endpoint> gone;
  std::size_t n = 0;
  {
    std::unique_lock lock(mutex_);
    n = evict_locked(now, false, gone);
    evicted_.fetch_add(n, std::memory_order_relaxed);
  }
  notify_evicted(gone);
  return n;
}

// With no lock held: the hook may look the registry up, or take locks of its own.
void endpoint_registry::notify_evicted(std::vector<endpoint>& gone) const noexcept {
  for (const endpoint& e : gone)
    try {
      options_.on_evict(e);
    } catch (...) { // documented as must not throw; an eviction is not undone by one that does
    }
}

std::size_t endpoint_registry::size() const {
  std::shared_lock lock(mutex_);
  return entries_.size();
}

void endpoint_registry::apply(retry_policy& p, const endpoint& e) {
  apply(p, e, steady_now());
}

void endpoint_registry::apply(retry_policy& p, const endpoint& e, nanoseconds now) {
  const std::shared_ptr<const resilience_entry> entry = get(e, now);
  // Aliasing pointers: each shares the entry's ownership, so the entry counts as held.
  // A preset's placeholder (presets::overload_safe_per_endpoint) asks for the entry's breaker.
  if ((!p.breaker || detail::is_registry_placeholder(p.breaker.get())) && entry->breaker)
    p.breaker = std::shared_ptr<attempt_gate>(entry, entry->breaker.get());
  if (!p.budget && entry->budget)
    p.budget = std::shared_ptr<retry_budget>(entry, entry->budget.get());
  if (!p.rate_limit && entry->rate_limit)
    p.rate_limit = std::shared_ptr<send_rate>(entry, entry->rate_limit.get());
}

} // namespace coretry
