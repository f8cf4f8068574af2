// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private to coretry::prometheus: what the generic metrics (prometheus.cpp) and the HTTP metric
// (http_metric.cpp) share.

#include <coretry/error.hpp>

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include <prometheus/family.h>

namespace coretry::detail::prom {

using labels = std::map<std::string, std::string>;

/// What the labels past `prometheus_options::max_operations`, and the status codes not known,
/// are counted as (the spelling OpenTelemetry uses for values it folds, as in
/// `http_request_method`).
inline constexpr std::string_view other = "_OTHER";

/// The name of a coretry `errc`, as the metrics spell it.
const char* errc_name(errc e) noexcept;

/// `scheme://host:port` (`coretry::curl`'s labels) in its parts; anything else is all host.
struct endpoint {
  std::string scheme, address, port;
};
/// `label` split as `endpoint` says.
endpoint split(std::string_view label);

/// Removes from `family` every series whose labels `match`; `args` are what `Add` needs to
/// build one (`Add` of labels that exist returns the series, which `Remove` takes).
template <typename T, typename Match, typename... Args>
std::size_t remove_series(prometheus::Family<T>& family, const Match& match, const Args&... args) {
  std::size_t n = 0;
  for (const auto& collected : family.Collect())
    for (const auto& metric : collected.metric) {
      labels l;
      for (const auto& pair : metric.label)
        l.emplace(pair.name, pair.value);
      if (match(l)) {
        family.Remove(&family.Add(l, args...));
        ++n;
      }
    }
  return n;
}

} // namespace coretry::detail::prom
