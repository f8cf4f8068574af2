// SPDX-License-Identifier: BSL-1.0
#include <coretry/detail/refuse.hpp>
#include <coretry/error.hpp>
#include <coretry/prometheus.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iterator>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common.hpp"
#include "http_metric.hpp"
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace coretry {

namespace detail::prom {
const char* errc_name(errc e) noexcept {
  switch (e) {
  case errc::attempts_exhausted:
    return "attempts_exhausted";
  case errc::deadline_exceeded:
    return "deadline_exceeded";
  case errc::attempt_timeout:
    return "attempt_timeout";
  case errc::budget_exhausted:
    return "budget_exhausted";
  case errc::result_rejected:
    return "result_rejected";
  case errc::cancelled:
    return "cancelled";
  case errc::circuit_open:
    return "circuit_open";
  case errc::unexpected_exception:
    return "unexpected_exception";
  case errc::retry_after_too_long:
    return "retry_after_too_long";
  case errc::retry_after_past_deadline:
    return "retry_after_past_deadline";
  case errc::rate_limited:
    return "rate_limited";
  case errc::throttled_locally:
    return "throttled_locally";
  case errc::retryable_exception:
    return "retryable_exception";
  }
  return "unknown";
}

endpoint split(std::string_view label) {
  endpoint ep;
  if (const auto sep = label.find("://"); sep != std::string_view::npos) {
    ep.scheme = label.substr(0, sep);
    label.remove_prefix(sep + 3);
  }
  label = label.substr(0, label.find('/'));
  const auto colon = label.rfind(':');
  if (colon != std::string_view::npos && label.find(']', colon) == std::string_view::npos) {
    ep.port = label.substr(colon + 1);
    label = label.substr(0, colon);
  }
  if (label.size() >= 2 && label.front() == '[' && label.back() == ']')
    label = label.substr(1, label.size() - 2); // an IPv6 literal
  ep.address = label;
  return ep;
}

} // namespace detail::prom

namespace {

using detail::prom::errc_name;
using detail::prom::labels;
using detail::prom::other;
using detail::prom::remove_series;

double seconds(nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}

const char* kind_name(operation_kind k) {
  return k == operation_kind::hedge ? "hedge" : "retry";
}

/// `coretry_operations_total{reason}`: a small, fixed set of values.
std::string reason_name(const std::error_code& ec) {
  if (!ec)
    return "success";
  if (ec.category() == retry_category())
    return errc_name(static_cast<errc>(ec.value()));
  if (ec == std::errc::operation_canceled)
    return "aborted";
  return "not_retried";
}

struct name_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

void check_buckets(const std::vector<double>& b, const char* field) {
  if (b.empty() || !std::is_sorted(b.begin(), b.end()) ||
      std::adjacent_find(b.begin(), b.end()) != b.end()) {
    std::string value = "[";
    for (std::size_t i = 0; i < b.size(); ++i)
      value += (i == 0 ? "" : ", ") + std::to_string(b[i]);
    detail::refuse("coretry::prometheus_options", field, value + "]",
                   "must be a non-empty, increasing list of bounds");
  }
}

} // namespace

struct prometheus_observer::impl {
  impl(std::shared_ptr<prometheus::Registry> r, prometheus_options o)
      : registry(std::move(r)), options(std::move(o)), http(*registry, options.duration_buckets),
        resends(prometheus::BuildHistogram()
                    .Name("coretry_resend_count")
                    .Help("Resends per operation (attempts - 1), as OpenTelemetry's "
                          "http.request.resend_count")
                    .Register(*registry)),
        operations(prometheus::BuildCounter()
                       .Name("coretry_operations_total")
                       .Help("Retry and hedge operations finished, by why they stopped")
                       .Register(*registry)),
        operation_duration(prometheus::BuildHistogram()
                               .Name("coretry_operation_duration_seconds")
                               .Help("Duration of retry and hedge operations, from the call")
                               .Register(*registry)),
        in_flight(prometheus::BuildGauge()
                      .Name("coretry_operations_in_flight")
                      .Help("Operations started and not finished")
                      .Register(*registry)),
        attempts(prometheus::BuildCounter()
                     .Name("coretry_attempts_total")
                     .Help("Attempts finished, by outcome")
                     .Register(*registry)),
        attempt_duration(prometheus::BuildHistogram()
                             .Name("coretry_attempt_duration_seconds")
                             .Help("Duration of each attempt, by outcome")
                             .Register(*registry)),
        retries(prometheus::BuildCounter()
                    .Name("coretry_retries_total")
                    .Help("Retries scheduled")
                    .Register(*registry)),
        sleeps(prometheus::BuildHistogram()
                   .Name("coretry_backoff_sleep_seconds")
                   .Help("Delay chosen before each retry")
                   .Register(*registry)),
        hints(prometheus::BuildCounter()
                  .Name("coretry_server_hints_total")
                  .Help("Retries whose delay a server hint (Retry-After) set")
                  .Register(*registry)),
        refusals(prometheus::BuildCounter()
                     .Name("coretry_refusals_total")
                     .Help("Attempts or retries refused by the breaker, the rate or the budget")
                     .Register(*registry)),
        hedges(prometheus::BuildCounter()
                   .Name("coretry_hedges_total")
                   .Help("Hedged attempts started and abandoned")
                   .Register(*registry)),
        transitions(prometheus::BuildCounter()
                        .Name("coretry_breaker_transitions_total")
                        .Help("Circuit breaker changes of state")
                        .Register(*registry)),
        breaker_state(prometheus::BuildGauge()
                          .Name("coretry_breaker_state")
                          .Help("1 for the state a circuit breaker is in, 0 for the others")
                          .Register(*registry)) {}

  std::shared_ptr<prometheus::Registry> registry;
  prometheus_options options;
  /// The HTTP metric: the exporter's one part that reads attributes (http_metric.hpp).
  detail::prom::http_metric http;
  prometheus::Family<prometheus::Histogram>& resends;
  prometheus::Family<prometheus::Counter>& operations;
  prometheus::Family<prometheus::Histogram>& operation_duration;
  prometheus::Family<prometheus::Gauge>& in_flight;
  prometheus::Family<prometheus::Counter>& attempts;
  prometheus::Family<prometheus::Histogram>& attempt_duration;
  prometheus::Family<prometheus::Counter>& retries;
  prometheus::Family<prometheus::Histogram>& sleeps;
  prometheus::Family<prometheus::Counter>& hints;
  prometheus::Family<prometheus::Counter>& refusals;
  prometheus::Family<prometheus::Counter>& hedges;
  prometheus::Family<prometheus::Counter>& transitions;
  prometheus::Family<prometheus::Gauge>& breaker_state;
  std::mutex state_mutex; ///< orders the updates of `breaker_state`

  /// Held shared by every event while it updates series, exclusively by `forget` while it
  /// removes them (a series is updated through a reference that Remove would leave dangling).
  std::shared_mutex series_mutex;

  /// The `operation` each running operation reports under, chosen once, at its
  /// `operation_started`, and kept for every label that has operations running: its own, or
  /// `_OTHER`. Chosen again at each event, one operation could start under `_OTHER` and end
  /// under its own label once `forget` made room (-1 and +1 in `coretry_operations_in_flight`
  /// with nothing running).
  struct route {
    std::size_t running = 0; ///< operations of this label started and not finished
    bool own = false;        ///< under its own label, else under `_OTHER`
  };

  /// Guards `names`, `routes`, `other_running`, and orders the updates of `in_flight`, which is
  /// set from these counts (never incremented blindly: a series `forget` removed comes back
  /// with the count of what still runs).
  std::mutex label_mutex;
  /// The `operation` labels that have series of their own: at most `options.max_operations`.
  std::unordered_set<std::string, name_hash, std::equal_to<>> names;
  /// Every label with operations running, and where they report.
  std::unordered_map<std::string, route, name_hash, std::equal_to<>> routes;
  /// Operations running under `_OTHER`.
  std::size_t other_running = 0;

  using hold = std::shared_lock<std::shared_mutex>;

  /// Under `label_mutex`: whether `label` has series of its own, admitting it when there is room.
  /// A label spelled `_OTHER` is that series (one count of what runs under it).
  bool admit_locked(std::string_view label) {
    if (label == other)
      return false;
    if (names.find(label) != names.end())
      return true;
    if (names.size() >= options.max_operations)
      return false;
    names.emplace(label);
    return true;
  }

  /// Under `label_mutex`: where the events of `label` go now: its running operations' route,
  /// else its own label while it has series or there is room, else `_OTHER`.
  std::string target_locked(std::string_view label) {
    const auto it = routes.find(label);
    const bool own = it != routes.end() ? it->second.own : admit_locked(label);
    return std::string(own ? label : other);
  }

  /// A shared hold on the series, and the `operation` label an event with `label` goes to.
  std::pair<hold, std::string> enter(std::string_view label) {
    hold h(series_mutex);
    const std::lock_guard lock(label_mutex);
    return {std::move(h), target_locked(label)};
  }

  /// Under `label_mutex`: `coretry_operations_in_flight{operation=op}` = `n`.
  void set_in_flight_locked(std::string_view op, std::size_t n) {
    in_flight.Add({{"operation", std::string(op)}}).Set(static_cast<double>(n));
  }

  /// An operation of `label` starts: its route chosen (or the one its label's running
  /// operations have), its count in flight up by one.
  std::pair<hold, std::string> start(std::string_view label) {
    hold h(series_mutex);
    const std::lock_guard lock(label_mutex);
    auto it = routes.find(label);
    if (it == routes.end())
      it = routes.emplace(std::string(label), route{0, admit_locked(label)}).first;
    ++it->second.running;
    const bool own = it->second.own;
    const std::string op(own ? label : other);
    set_in_flight_locked(op, own ? it->second.running : ++other_running);
    return {std::move(h), op};
  }

  /// An operation of `label` ends: under the route its start chose, its count in flight down by
  /// one. One whose start was not heard (its observer threw) changes no count.
  std::pair<hold, std::string> finish(std::string_view label) {
    hold h(series_mutex);
    const std::lock_guard lock(label_mutex);
    const auto it = routes.find(label);
    if (it == routes.end())
      return {std::move(h), target_locked(label)};
    const bool own = it->second.own;
    const std::string op(own ? label : other);
    const std::size_t left = --it->second.running;
    set_in_flight_locked(op, own ? left : --other_running);
    if (left == 0)
      routes.erase(it);
    return {std::move(h), op};
  }
};

namespace {
std::shared_ptr<prometheus::Registry> checked(std::shared_ptr<prometheus::Registry> r,
                                              const prometheus_options& o) {
  if (!r)
    throw std::invalid_argument("coretry::prometheus_observer: registry is null");
  check_buckets(o.duration_buckets, "duration_buckets");
  check_buckets(o.sleep_buckets, "sleep_buckets");
  check_buckets(o.resend_buckets, "resend_buckets");
  if (o.max_operations == 0)
    detail::refuse("coretry::prometheus_options", "max_operations", "0", "must be at least 1");
  return r;
}
} // namespace

prometheus_observer::prometheus_observer(std::shared_ptr<prometheus::Registry> registry,
                                         prometheus_options options)
    : impl_(std::make_unique<impl>(checked(std::move(registry), options), std::move(options))) {}

prometheus_observer::~prometheus_observer() = default;

const std::shared_ptr<prometheus::Registry>& prometheus_observer::registry() const noexcept {
  return impl_->registry;
}

void prometheus_observer::on_operation_started(const operation_started_event& e) {
  (void)impl_->start(e.label);
}

void prometheus_observer::on_attempt_finished(const attempt_finished_event& e) {
  const auto [hold, op] = impl_->enter(e.label);
  const char* outcome = to_string(e.outcome);
  impl_->attempts.Add({{"operation", op}, {"outcome", outcome}}).Increment();
  impl_->attempt_duration
      .Add({{"operation", op}, {"outcome", outcome}}, impl_->options.duration_buckets)
      .Observe(seconds(e.duration));
  impl_->http.record(e, op);
}

void prometheus_observer::on_retry_scheduled(const retry_scheduled_event& e) {
  const auto [hold, op] = impl_->enter(e.label);
  impl_->retries.Add({{"operation", op}}).Increment();
  impl_->sleeps.Add({{"operation", op}}, impl_->options.sleep_buckets).Observe(seconds(e.delay));
  if (e.server_hint > nanoseconds::zero() && e.delay == e.server_hint)
    impl_->hints.Add({{"operation", op}}).Increment();
}

void prometheus_observer::on_refused(const refusal_event& e) {
  const char* by = e.reason == errc::circuit_open        ? "breaker"
                   : e.reason == errc::throttled_locally ? "throttle"
                   : e.reason == errc::rate_limited      ? "rate"
                                                         : "budget";
  const auto [hold, op] = impl_->enter(e.label);
  impl_->refusals.Add({{"operation", op}, {"by", by}}).Increment();
}

void prometheus_observer::on_hedge_started(const hedge_started_event& e) {
  const auto [hold, op] = impl_->enter(e.label);
  impl_->hedges.Add({{"operation", op}, {"event", "started"}}).Increment();
}

void prometheus_observer::on_hedge_abandoned(const hedge_abandoned_event& e) {
  const auto [hold, op] = impl_->enter(e.label);
  impl_->hedges.Add({{"operation", op}, {"event", "abandoned"}}).Increment();
}

void prometheus_observer::on_operation_finished(const operation_finished_event& e) {
  const auto [hold, op] = impl_->finish(e.label);
  impl_->operations
      .Add({{"operation", op}, {"kind", kind_name(e.kind)}, {"reason", reason_name(e.reason)}})
      .Increment();
  impl_->operation_duration
      .Add({{"operation", op}, {"kind", kind_name(e.kind)}}, impl_->options.duration_buckets)
      .Observe(seconds(e.elapsed));
  impl_->resends.Add({{"operation", op}}, impl_->options.resend_buckets)
      .Observe(e.attempts > 0 ? static_cast<double>(e.attempts - 1) : 0.0);
}

void prometheus_observer::on_breaker_transition(const breaker_transition_event& e) {
  const auto [hold, op] = impl_->enter(e.label);
  impl_->transitions.Add({{"operation", op}, {"from", to_string(e.from)}, {"to", to_string(e.to)}})
      .Increment();
  // Two transitions made at once may arrive here in either order. With the breaker at hand, the
  // gauge shows the state it is in, read under the lock: the last to take it reads a state no
  // older than any transition whose event has arrived, so once the events are in, the gauge is
  // the breaker's state, whatever their order.
  std::lock_guard lock(impl_->state_mutex);
  const breaker_state current = e.breaker ? e.breaker->state() : e.to;
  for (const breaker_state s : {breaker_state::closed, breaker_state::open,
                                breaker_state::half_open, breaker_state::isolated})
    impl_->breaker_state.Add({{"operation", op}, {"state", to_string(s)}})
        .Set(s == current ? 1.0 : 0.0);
}

} // namespace coretry

namespace coretry {

std::size_t prometheus_observer::forget(std::string_view label) {
  const std::unique_lock lock(impl_->series_mutex);
  const std::lock_guard labels_lock(impl_->label_mutex);
  // A label that operations still run under keeps its place (they report to it until they end).
  const auto running = impl_->routes.find(label);
  const bool in_use = running != impl_->routes.end() && running->second.own;
  if (const auto it = impl_->names.find(label); it != impl_->names.end() && !in_use)
    impl_->names.erase(it);
  const auto of_op = [label](const labels& l) {
    const auto it = l.find("operation");
    return it != l.end() && it->second == label;
  };
  impl& m = *impl_;
  const auto& d = m.options.duration_buckets;
  const std::size_t removed =
      m.http.forget(label) + remove_series(m.resends, of_op, m.options.resend_buckets) +
      remove_series(m.operations, of_op) + remove_series(m.operation_duration, of_op, d) +
      remove_series(m.in_flight, of_op) + remove_series(m.attempts, of_op) +
      remove_series(m.attempt_duration, of_op, d) + remove_series(m.retries, of_op) +
      remove_series(m.sleeps, of_op, m.options.sleep_buckets) + remove_series(m.hints, of_op) +
      remove_series(m.refusals, of_op) + remove_series(m.hedges, of_op) +
      remove_series(m.transitions, of_op) + remove_series(m.breaker_state, of_op);
  // What still runs under `label` is still in flight: its gauge comes back with the count.
  if (in_use)
    m.set_in_flight_locked(label, running->second.running);
  else if (label == other && m.other_running > 0)
    m.set_in_flight_locked(other, m.other_running);
  return removed;
}

std::size_t prometheus_observer::operations() const {
  const std::lock_guard lock(impl_->label_mutex);
  return impl_->names.size();
}

} // namespace coretry
