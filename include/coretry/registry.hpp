// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `endpoint_registry`: one circuit breaker, retry budget and sending rate per upstream
/// (scheme, host, port), created on first use, shared by every operation towards it, and
/// evicted once idle.

#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/export.hpp>
#include <coretry/overload.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace coretry {

struct retry_policy;
class retry_observer;

/// An upstream, as an HTTP origin: scheme and host lowercased, the port always given.
struct CORETRY_API endpoint {
  std::string scheme;     ///< "http", "https", ...
  std::string host;       ///< a name, an IPv4 address, or an IPv6 address in brackets
  std::uint16_t port = 0; ///< always set: the URL's, or the scheme's default

  /// The origin of `url` ("scheme://[user@]host[:port][/...]"): scheme and host lowercased, a
  /// name's trailing dot dropped, an IPv6 address in its RFC 5952 form (so that one origin has
  /// one spelling); without a port, the scheme's default (http and ws 80, https and wss 443,
  /// ftp 21); without "scheme://", http (as libcurl guesses); an IPv4 address in any spelling
  /// libcurl and `inet_aton` accept (`127.1`, `0x7f000001`, `2130706433`, `127.000.000.001`) in
  /// dotted-quad form. Throws `std::invalid_argument` naming the URL (`redact_url`) when it has no
  /// host, a host that is no valid authority (an IPv6 address
  /// outside brackets, a character not allowed in a host), a port that is not a number in
  /// [1, 65535], or no port and a scheme without a default.
  static endpoint from_url(std::string_view url);
  /// "scheme://host:port".
  std::string to_string() const;
  /// Same scheme, host and port.
  friend bool operator==(const endpoint&, const endpoint&) = default;
};

/// `url` as coretry's error messages show it, with nothing that may hold a credential: the
/// scheme and host kept; a userinfo (`user:password@`) replaced by `***@`; the path, query and
/// fragment replaced by `/...`, `?...` or `#...`. Text it cannot read as `scheme://authority`
/// keeps only what certainly is no credential (an authority that may be a split userinfo, as in
/// `http://user:pa/ss@host`, becomes `***`). Every message of coretry and coretry::curl that
/// names a URL (a request's, a proxy's) names it through this.
CORETRY_API std::string redact_url(std::string_view url);

/// What a registry makes for an endpoint it has not seen. Each member is optional.
struct endpoint_registry_options {
  /// Each endpoint's `circuit_breaker` is built with these (each its own `on_transition`, see
  /// `on_breaker_transition`); unset: no breaker.
  std::optional<circuit_breaker_options> breaker = circuit_breaker_options{};
  /// Each endpoint's `ratio_budget` is built with these; unset: no budget.
  std::optional<ratio_budget_options> budget = ratio_budget_options{};
  /// Makes each endpoint's sending rate (an `adaptive_rate_limiter`, say); empty or returning
  /// null: none. Called without any lock held; must not throw for an endpoint it accepts (what
  /// it throws reaches the caller of `get`, and nothing is stored).
  std::function<std::shared_ptr<send_rate>(const endpoint&)> rate_limit{};
  /// Called with the endpoint on every transition of its breaker, after `breaker->on_transition`
  /// (which does not know the endpoint) when that is set too. Same rules: must not throw,
  /// should be quick.
  std::function<void(const endpoint&, breaker_state from, breaker_state to,
                     std::chrono::nanoseconds now)>
      on_breaker_transition{};
  /// Told every transition of every endpoint's breaker, labelled `endpoint::to_string()` (the
  /// label `coretry::curl` gives its operations), each event carrying the breaker
  /// (`make_observed_breaker`), after `breaker->on_transition` and `on_breaker_transition`.
  std::shared_ptr<retry_observer> observer{};
  /// Called with the endpoint of each entry evicted, after the registry's lock is released, on
  /// the thread that evicted it (in `get` or `evict_idle`): to drop what else is kept per
  /// endpoint, such as its metric series (`prometheus_observer::forget(e.to_string())`). Must not
  /// throw; should be quick.
  std::function<void(const endpoint&)> on_evict{};
  /// Entries kept at most; at least 1. When a new endpoint arrives and the registry is full,
  /// idle entries go first, then the least recently used entry that no operation holds. An
  /// entry whose breaker is not closed (open, half-open, isolated) is never evicted: that would
  /// undo what the upstream or an operator did. When no entry can go, the registry grows past
  /// the bound (evicting a held entry would give its endpoint two breakers);
  /// `over_capacity()` counts those times.
  std::size_t max_entries = 1024;
  /// An entry unused this long, held by no operation and with its breaker closed is evicted (at the next `get` that
  /// sweeps, at most once per `idle_timeout / 4`, or by `evict_idle`). Positive.
  std::chrono::nanoseconds idle_timeout = std::chrono::minutes(10);
};

/// Everything one endpoint's operations share.
struct resilience_entry {
  coretry::endpoint endpoint;               ///< the endpoint it serves
  std::shared_ptr<circuit_breaker> breaker; ///< null when the registry makes none
  std::shared_ptr<ratio_budget> budget;     ///< null when the registry makes none
  std::shared_ptr<send_rate> rate_limit;    ///< null when the registry makes none
};

/// Breakers, budgets and sending rates keyed by endpoint: a client of ten hosts gets ten
/// breakers, so one failing host opens its own and no other.
///
/// `get(endpoint)` returns the endpoint's entry, made on first use from the options. Entries are
/// handed out as `std::shared_ptr`: an entry some operation holds is never evicted, so an
/// endpoint has one breaker for as long as anything uses it. `apply` puts an entry's members
/// into a `retry_policy` as pointers that share the entry's ownership.
///
/// Thread safety: every member may be called from any thread. A lookup of a known endpoint takes
/// a shared lock (readers do not exclude one another) and updates the entry's last use with one
/// relaxed atomic store; a new entry is built with no lock held, then inserted under the
/// exclusive lock (a racing thread that inserted first wins, and the loser's entry is dropped).
/// Eviction scans the entries under the exclusive lock: O(entries), at most once per
/// `idle_timeout / 4`, and when a new endpoint finds the registry full.
///
/// Throws `std::invalid_argument` naming the field and value when an option is out of range (the
/// breaker and budget options are checked by building one of each).
class CORETRY_API endpoint_registry {
public:
  /// Checks `options` (`std::invalid_argument` naming the field and value) and keeps them.
  explicit endpoint_registry(endpoint_registry_options options = {});
  ~endpoint_registry();
  endpoint_registry(const endpoint_registry&) = delete;
  endpoint_registry& operator=(const endpoint_registry&) = delete;

  /// The entry of `e`, made now when there is none; `now` is the time since the epoch of
  /// `std::chrono::steady_clock` (or of the caller's clock, used consistently).
  std::shared_ptr<const resilience_entry> get(const endpoint& e, std::chrono::nanoseconds now);
  /// As above at `steady_clock::now()`.
  std::shared_ptr<const resilience_entry> get(const endpoint& e);
  /// The entry of `e` if there is one; makes nothing, and does not count as a use.
  std::shared_ptr<const resilience_entry> find(const endpoint& e) const;

  /// Sets the breaker, budget and sending rate of `p` from the entry of `e` (`get(e, now)`),
  /// leaving alone each field `p` already sets: a policy's own breaker wins. The pointers share
  /// the entry's ownership, so the entry is held while `p` (or an operation's copy) lives.
  void apply(retry_policy& p, const endpoint& e, std::chrono::nanoseconds now);
  /// As above at `steady_clock::now()`.
  void apply(retry_policy& p, const endpoint& e);

  /// Evicts every entry unused since `now - idle_timeout` that no operation holds; returns how
  /// many.
  std::size_t evict_idle(std::chrono::nanoseconds now);

  /// Entries held now.
  std::size_t size() const;
  /// Entries made since construction.
  std::uint64_t created() const noexcept { return created_.load(std::memory_order_relaxed); }
  /// Entries evicted since construction.
  std::uint64_t evicted() const noexcept { return evicted_.load(std::memory_order_relaxed); }
  /// Times a new entry was stored beyond `max_entries` because every entry was held.
  std::uint64_t over_capacity() const noexcept {
    return over_capacity_.load(std::memory_order_relaxed);
  }
  /// The options it was built with.
  const endpoint_registry_options& options() const noexcept { return options_; }

private:
  struct node {
    std::shared_ptr<resilience_entry> entry;
    std::unique_ptr<std::atomic<std::int64_t>> last_used;
  };
  std::shared_ptr<resilience_entry> make_entry(const endpoint& e) const;
  std::size_t evict_locked(std::chrono::nanoseconds now, bool make_room,
                           std::vector<endpoint>& gone);
  void notify_evicted(std::vector<endpoint>& gone) const noexcept;

  endpoint_registry_options options_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, node> entries_;
  std::atomic<std::int64_t> last_sweep_;
  std::atomic<std::uint64_t> created_{0};
  std::atomic<std::uint64_t> evicted_{0};
  std::atomic<std::uint64_t> over_capacity_{0};
};

} // namespace coretry
