// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private to coretry::prometheus: `http_client_request_duration_seconds`, the one metric that
// knows HTTP. The core knows no HTTP: an attempt tells its observers attributes
// (`attempt_context::set_attribute`), and the HTTP adapters (coretry::curl, coretry::beast, an
// attempt of one's own) use the names of `coretry::http::attribute`. This part of the exporter
// reads those two attributes, and nothing else of the exporter does.

#include <coretry/observer.hpp>

#include <cstddef>
#include <string_view>
#include <vector>

#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace coretry::detail::prom {

/// `http_client_request_duration_seconds` (OpenTelemetry `http.client.request.duration`): one
/// observation per attempt that carries the attribute `http::attribute::request_method`.
class http_metric {
public:
  /// Registers the histogram in `registry`, with `buckets` (kept by reference: the exporter's
  /// options outlive this).
  http_metric(prometheus::Registry& registry, const std::vector<double>& buckets);

  /// Records `e` when it is an HTTP attempt; `op` is where its operation reports: its label, or
  /// `_OTHER`. Thread-safe as prometheus-cpp's families are.
  void record(const attempt_finished_event& e, std::string_view op);

  /// Removes the series of the endpoint `label` names; returns how many went. Under the
  /// exporter's exclusive hold, as every removal.
  std::size_t forget(std::string_view label);

private:
  prometheus::Family<prometheus::Histogram>& family_;
  const std::vector<double>& buckets_;
};

} // namespace coretry::detail::prom
