// SPDX-License-Identifier: BSL-1.0
#include "http_metric.hpp"

#include <coretry/http.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>

#include "common.hpp"

namespace coretry::detail::prom {
namespace {

/// The OpenTelemetry `http.request.method`: a known method as it is, any other `_OTHER` (one
/// series per method a server may see, not one per string a caller may send).
std::string method_name(std::string_view m) {
  for (const std::string_view known :
       {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"})
    if (m == known)
      return std::string(m);
  return "_OTHER";
}

/// The `http_response_status_code` of a status: a code IANA's HTTP Status Code Registry assigns
/// (RFC 9110 and its extensions; 418 too) as its number, any other `_OTHER`. libcurl hands on
/// whatever three digits a server sends (100 to 999): unbounded, the server would decide how
/// many series the histogram has (13,600 for 800 statuses).
std::string status_name(std::int64_t status) {
  static constexpr std::int64_t known[] = {
      100, 101, 102, 103, 200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 301,
      302, 303, 304, 305, 307, 308, 400, 401, 402, 403, 404, 405, 406, 407, 408, 409,
      410, 411, 412, 413, 414, 415, 416, 417, 418, 421, 422, 423, 424, 425, 426, 428,
      429, 431, 451, 500, 501, 502, 503, 504, 505, 506, 507, 508, 510, 511};
  if (std::binary_search(std::begin(known), std::end(known), status))
    return std::to_string(status);
  return std::string(other);
}

/// The OpenTelemetry `error.type` of an HTTP attempt whose status is `status` (0: none).
std::string error_type(const attempt_finished_event& e, std::int64_t status) {
  if (status >= 400)
    return status_name(status);
  if (!e.error)
    return {};
  if (e.error.category() == retry_category())
    return errc_name(static_cast<errc>(e.error.value()));
  // A stable identifier, not the message (which is free text and may be localised): one series
  // per category and value.
  return std::string(e.error.category().name()) + ":" + std::to_string(e.error.value());
}

} // namespace

http_metric::http_metric(prometheus::Registry& registry, const std::vector<double>& buckets)
    : family_(prometheus::BuildHistogram()
                  .Name("http_client_request_duration_seconds")
                  .Help("Duration of HTTP client requests (each attempt), "
                        "OpenTelemetry http.client.request.duration")
                  .Register(registry)),
      buckets_(buckets) {}

void http_metric::record(const attempt_finished_event& e, std::string_view op) {
  const attempt_attribute* method = e.attributes.find(http::attribute::request_method);
  if (method == nullptr || method->text().empty())
    return; // not an HTTP attempt
  const attempt_attribute* status_attribute =
      e.attributes.find(http::attribute::response_status_code);
  const std::int64_t status = status_attribute ? status_attribute->integer() : 0;
  endpoint ep = op == other ? endpoint{{}, std::string(other), {}} : split(op);
  family_
      .Add({{"http_request_method", method_name(method->text())},
            {"http_response_status_code", status != 0 ? status_name(status) : ""},
            {"error_type", error_type(e, status)},
            {"server_address", std::move(ep.address)},
            {"server_port", std::move(ep.port)},
            {"url_scheme", std::move(ep.scheme)}},
           buckets_)
      .Observe(std::chrono::duration<double>(e.duration).count());
}

std::size_t http_metric::forget(std::string_view label) {
  const endpoint ep = label == other ? endpoint{{}, std::string(other), {}} : split(label);
  const auto of_endpoint = [&ep](const labels& l) {
    const auto at = [&l](const char* k) {
      const auto it = l.find(k);
      return it == l.end() ? std::string() : it->second;
    };
    return at("server_address") == ep.address && at("server_port") == ep.port &&
           at("url_scheme") == ep.scheme;
  };
  return remove_series(family_, of_endpoint, buckets_);
}

} // namespace coretry::detail::prom
