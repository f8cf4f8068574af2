// SPDX-License-Identifier: BSL-1.0
// A consumer of coretry::prometheus (find_package COMPONENTS prometheus, pkg-config
// coretry-prometheus, or add_subdirectory: test/package/consumer): an observed breaker opens, an
// operation's events arrive, and the registry serialises them as a scrape would; a
// prometheus::Exposer (prometheus-cpp's pull library, which the documented link line brings)
// serves the registry on a free loopback port. No Asio here: it builds in a second or two.
#include <coretry/prometheus.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

int main() {
  using namespace std::chrono_literals;
  auto registry = std::make_shared<prometheus::Registry>();
  auto metrics = std::make_shared<coretry::prometheus_observer>(registry);
  auto breaker =
      coretry::make_observed_breaker({.consecutive_failures = 1}, metrics, "http://127.0.0.1:80");
  if (!breaker->try_acquire(0ns))
    return 1;
  breaker->on_failure(0ns);
  metrics->on_operation_finished({.label = "http://127.0.0.1:80", .attempts = 1});

  const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  for (
      const char* want :
      {R"(coretry_breaker_state{operation="http://127.0.0.1:80",state="open"} 1)",
       R"(coretry_operations_total{kind="retry",operation="http://127.0.0.1:80",reason="success"} 1)"})
    if (text.find(want) == std::string::npos) {
      std::fprintf(stderr, "no sample %s in:\n%s", want, text.c_str());
      return 1;
    }
  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(registry);
  if (exposer.GetListeningPorts().empty())
    return 1;
  std::puts("coretry::prometheus consumer: ok");
  return 0;
}
