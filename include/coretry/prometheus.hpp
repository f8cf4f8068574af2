// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `coretry::prometheus_observer`: a `retry_observer` that keeps Prometheus metrics, in a
/// `prometheus::Registry` of prometheus-cpp. Target `coretry::prometheus` (built when
/// prometheus-cpp is found; see CORETRY_BUILD_PROMETHEUS). Serve the registry with
/// prometheus-cpp's `prometheus::Exposer` (samples/metrics_service.cpp).
///
/// Names follow the OpenTelemetry semantic conventions where they have one, written the way
/// Prometheus writes them (dots to underscores, the unit as a suffix):
///
/// | metric | type | labels | what |
/// |---|---|---|---|
/// | `http_client_request_duration_seconds` | histogram | `http_request_method`, `http_response_status_code`, `error_type`, `server_address`, `server_port`, `url_scheme` | each HTTP attempt (OTel `http.client.request.duration`: every resend is a request) |
/// | `coretry_resend_count` | histogram | `operation` | resends per operation: attempts - 1 (OTel's attribute `http.request.resend_count`) |
/// | `coretry_operations_total` | counter | `operation`, `kind`, `reason` | operations finished, by why they stopped |
/// | `coretry_operation_duration_seconds` | histogram | `operation`, `kind` | from the call to the completion |
/// | `coretry_operations_in_flight` | gauge | `operation` | started and not finished |
/// | `coretry_attempts_total` | counter | `operation`, `outcome` | attempts finished: `success`, `failure`, `not_retried`, `abandoned` |
/// | `coretry_attempt_duration_seconds` | histogram | `operation`, `outcome` | each attempt, HTTP or not |
/// | `coretry_retries_total` | counter | `operation` | retries scheduled |
/// | `coretry_backoff_sleep_seconds` | histogram | `operation` | the delay chosen before each retry |
/// | `coretry_server_hints_total` | counter | `operation` | retries whose delay a server hint (`Retry-After`) set |
/// | `coretry_refusals_total` | counter | `operation`, `by` | `breaker`, `rate` or `budget` refused |
/// | `coretry_hedges_total` | counter | `operation`, `event` | hedges `started` and `abandoned` |
/// | `coretry_breaker_transitions_total` | counter | `operation`, `from`, `to` | breaker changes of state (`observe_breaker`) |
/// | `coretry_breaker_state` | gauge | `operation`, `state` | 1 for the state a breaker is in, 0 for the others |
///
/// **HTTP.** The core knows no HTTP: an attempt carries attributes (`attempt_context::
/// set_attribute`). An attempt is counted in `http_client_request_duration_seconds` when it has
/// the text attribute `coretry::http::attribute::request_method`; its integer attribute
/// `response_status_code` (absent: no response) gives `http_response_status_code` and the
/// status part of `error_type`. `coretry::curl` and `coretry::beast` set both, and so may an
/// attempt of your own. That histogram is the one part of the exporter that reads attributes;
/// every other metric is about retries, whatever the attempt does.
///
/// `operation` is `retry_policy::label` (`coretry::curl` sets it to `scheme://host:port`, the
/// origin libcurl connects to, or `_INVALID` for a URL without one); for the HTTP metric it
/// is split into `url_scheme`, `server_address` and `server_port`. `http_response_status_code`
/// is a status IANA's registry assigns, or `_OTHER` (a server may send any three digits). `reason`
/// is `success`, the name of a coretry `errc` (`attempts_exhausted`, `circuit_open`, ...),
/// `aborted` (the caller's cancellation), or `not_retried` (an error the policy does not
/// retry). `error_type` is empty on success, the status code for an HTTP status of 400 or more
/// (`_OTHER` for one the registry does not assign),
/// `result_rejected` for another rejected result, else `category:value` of the error (a
/// predictable identifier, not the message).
///
/// **Bounded.** At most `prometheus_options::max_operations` labels have series; the events of
/// any other label are counted under `_OTHER`. `forget(label)` removes a label's series, for
/// an endpoint the registry evicted (`endpoint_registry_options::on_evict`). Where an operation
/// reports (its label or `_OTHER`) is chosen once, at its start, and every event of it, its end
/// included, goes there: `coretry_operations_in_flight` is set from the observer's count of the
/// operations running under each series, so it never reads below zero.
///
/// **Breaker state.** A breaker made by `make_observed_breaker` hands itself to the observer,
/// which sets `coretry_breaker_state` from `circuit_breaker::state()` under a lock, so that two
/// transitions racing on two threads leave the gauge at the breaker's state. Through
/// `observe_breaker` (no breaker at hand) the gauge shows the last event to arrive, which two
/// racing transitions may deliver oldest last.
///
/// Thread-safe (prometheus-cpp's metrics are); each event costs a few map lookups under
/// prometheus-cpp's family lock, a short lock on the observer's label table, and a shared lock
/// held against `forget`.

#include <coretry/observer.hpp>

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace prometheus {
class Registry;
} // namespace prometheus

namespace coretry {

/// Bucket boundaries of the histograms, in seconds (or counts, for resends), and the bound on
/// `operation` labels.
struct prometheus_options {
  /// `http_client_request_duration_seconds`, `coretry_attempt_duration_seconds` and
  /// `coretry_operation_duration_seconds`: OpenTelemetry's advice for
  /// `http.client.request.duration`.
  std::vector<double> duration_buckets{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                       0.5,   0.75, 1,     2.5,  5,     7.5, 10};
  /// `coretry_backoff_sleep_seconds`.
  std::vector<double> sleep_buckets{0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60};
  /// `coretry_resend_count`.
  std::vector<double> resend_buckets{0, 1, 2, 3, 5, 10};
  /// How many `operation` labels have series of their own at most; at least 1. The events of
  /// any further label are counted under `operation="_OTHER"` (and, in the HTTP metric,
  /// `server_address="_OTHER"` with empty port and scheme) until `forget` makes room. The
  /// default is a little below `endpoint_registry_options::max_entries`.
  std::size_t max_operations = 1000;
};

/// Keeps the metrics above in `registry`; set it on policies (`retry_policy::observer`) and on
/// breakers (`observe_breaker`). Throws `std::invalid_argument` when `registry` is null or a
/// bucket list is empty or not increasing.
class CORETRY_API prometheus_observer final : public retry_observer {
public:
  /// Registers the metrics in `registry` (see the class comment for what it throws).
  explicit prometheus_observer(std::shared_ptr<prometheus::Registry> registry,
                               prometheus_options options = {});
  ~prometheus_observer() override;
  prometheus_observer(const prometheus_observer&) = delete;
  prometheus_observer& operator=(const prometheus_observer&) = delete;

  /// The registry the metrics live in.
  const std::shared_ptr<prometheus::Registry>& registry() const noexcept;

  /// Removes every series of the operation `label` (in the HTTP metric, those of the endpoint
  /// `label` names) and frees its place under `max_operations`; returns how many series went.
  /// For an upstream that is gone: `endpoint_registry_options::on_evict` calls it with
  /// `endpoint::to_string()`, the label `coretry::curl` gives. Meant for labels nothing uses,
  /// as the registry does; a label that operations still run under loses its series but keeps
  /// its place until they end: they report into fresh series, and its
  /// `coretry_operations_in_flight` comes back at once with the count still running.
  std::size_t forget(std::string_view label);
  /// The `operation` labels that have series of their own now (`_OTHER` not counted).
  std::size_t operations() const;

  /// \name Events: each updates the metrics in the table above.
  /// @{
  /// Every event but `attempt_started`, which it does not count.
  observer_interest interests() const noexcept override {
    return observer_interest::all & ~observer_interest::attempt_started;
  }
  void on_operation_started(const operation_started_event& e) override;
  void on_attempt_finished(const attempt_finished_event& e) override;
  void on_retry_scheduled(const retry_scheduled_event& e) override;
  void on_refused(const refusal_event& e) override;
  void on_hedge_started(const hedge_started_event& e) override;
  void on_hedge_abandoned(const hedge_abandoned_event& e) override;
  void on_operation_finished(const operation_finished_event& e) override;
  void on_breaker_transition(const breaker_transition_event& e) override;
  /// @}

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace coretry
