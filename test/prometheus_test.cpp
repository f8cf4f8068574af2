// SPDX-License-Identifier: BSL-1.0
// coretry::prometheus: operations with known outcomes run on the manual clock, then the metrics
// are scraped from a prometheus-cpp Exposer over loopback, as a Prometheus server would, and
// every number is checked against what the test did.

#include <coretry/breaker.hpp>
#include <coretry/hedge.hpp>
#include <coretry/http.hpp>
#include <coretry/prometheus.hpp>
#include <coretry/registry.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/fake_gate.hpp>
#include <support/test_ops.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

/// GET /metrics from 127.0.0.1:port; returns the body.
std::string scrape(int port) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  asio::write(s, asio::buffer(req));
  std::string reply;
  char buf[4096];
  coretry::test::error_code ec;
  for (;;) {
    const std::size_t n = s.read_some(asio::buffer(buf), ec);
    reply.append(buf, n);
    if (ec)
      break;
  }
  REQUIRE(reply.rfind("HTTP/1.1 200", 0) == 0);
  return reply.substr(reply.find("\r\n\r\n") + 4);
}

/// Each sample line, `name{labels}` -> value.
std::map<std::string, double> samples(const std::string& body) {
  std::map<std::string, double> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    const auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

retry_policy fixed(unsigned attempts, std::shared_ptr<coretry::retry_observer> o,
                   std::string label) {
  return {.max_attempts = attempts,
          .backoff = coretry::backoff::fixed(100ms),
          .observer = std::move(o),
          .label = std::move(label)};
}

void run_retry(asio::io_context& io, scripted_op& op, const retry_policy& p) {
  int done = 0;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, [&](std::error_code, int) { ++done; });
  drive(io, [&] { return done > 0; });
  drive(io, [] { return false; });
  REQUIRE(done == 1);
}

} // namespace

TEST_CASE("a Prometheus server scraping the exposer sees exactly what the operations did") {
  manual_clock::reset();
  auto registry = std::make_shared<prometheus::Registry>();
  auto obs = std::make_shared<coretry::prometheus_observer>(registry);
  // Never destroyed: stopping civetweb waits up to 2 s for its listener's poll to time out.
  static auto& exposer =
      *new prometheus::Exposer({"listening_ports", "127.0.0.1:0", "num_threads", "1"});
  exposer.RegisterCollectable(registry);
  REQUIRE(exposer.GetListeningPorts().size() == 1);
  const int port = exposer.GetListeningPorts()[0];
  asio::io_context io;

  // "a": fails twice (10 ms each), then succeeds; then one that exhausts its 3 attempts.
  scripted_op a1{{fail(refused, 10ms), fail(refused, 10ms), succeed(1, 10ms)}};
  run_retry(io, a1, fixed(5, obs, "a"));
  scripted_op a2{{fail(refused, 10ms)}};
  run_retry(io, a2, fixed(3, obs, "a"));
  // "b": refused by an open breaker, nothing sent.
  auto gate = std::make_shared<fake_gate>();
  gate->open = true;
  scripted_op b{{succeed(1)}};
  auto pb = fixed(3, obs, "b");
  pb.breaker = gate;
  run_retry(io, b, pb);
  // "h": hedged, 3 attempts, the second wins and the two others are abandoned.
  scripted_op h{{succeed(1, 500ms), succeed(2, 150ms), hang()}};
  int done = 0;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return h(); }, fixed(3, obs, "h"), {.delay = 100ms, .max_copies = 3},
      [&](std::error_code, int) { ++done; });
  drive(io, [&] { return done > 0; });
  drive(io, [] { return false; });
  REQUIRE(done == 1);
  // An HTTP-like operation: a 503 with Retry-After 1 s, then a 200.
  int calls = 0;
  done = 0;
  coretry::async_retry<manual_timer>(
      io.get_executor(),
      [&](coretry::attempt_context& ctx) -> asio::awaitable<std::tuple<std::error_code, int>> {
        if (++calls == 1) {
          ctx.set_attribute(coretry::http::attribute::request_method, "GET");
          ctx.set_attribute(coretry::http::attribute::response_status_code, 503);
          ctx.retry_after(1s);
          co_return std::tuple{make_error_code(coretry::errc::result_rejected), 0};
        }
        ctx.set_attribute(coretry::http::attribute::request_method, "GET");
        ctx.set_attribute(coretry::http::attribute::response_status_code, 200);
        co_return std::tuple{std::error_code{}, 1};
      },
      fixed(3, obs, "http://127.0.0.1:8080"), [&](std::error_code, int) { ++done; });
  drive(io, [&] { return done > 0; });
  REQUIRE(done == 1);
  // A breaker's transition.
  coretry::circuit_breaker breaker(
      {.consecutive_failures = 1, .on_transition = coretry::observe_breaker(obs, "b")});
  REQUIRE(breaker.try_acquire(0ns));
  breaker.on_failure(0ns);

  const std::string body = scrape(port);
  if (std::getenv("CORETRY_PRINT_SCRAPE"))
    std::fputs(body.c_str(), stdout);
  const auto m = samples(body);
  auto at = [&](const std::string& key) {
    const auto it = m.find(key);
    if (it == m.end())
      FAIL_CHECK("no sample " << key);
    return it == m.end() ? -1.0 : it->second;
  };
  CHECK(at(R"(coretry_operations_total{kind="retry",operation="a",reason="success"})") == 1);
  CHECK(at(R"(coretry_operations_total{kind="retry",operation="a",reason="attempts_exhausted"})") ==
        1);
  CHECK(at(R"(coretry_operations_total{kind="retry",operation="b",reason="circuit_open"})") == 1);
  CHECK(at(R"(coretry_operations_total{kind="hedge",operation="h",reason="success"})") == 1);
  CHECK(at(R"(coretry_attempts_total{operation="a",outcome="failure"})") == 5);
  CHECK(at(R"(coretry_attempts_total{operation="a",outcome="success"})") == 1);
  CHECK(at(R"(coretry_attempts_total{operation="h",outcome="success"})") == 1);
  CHECK(at(R"(coretry_attempts_total{operation="h",outcome="abandoned"})") == 2);
  CHECK(at(R"(coretry_retries_total{operation="a"})") == 4);
  CHECK(at(R"(coretry_backoff_sleep_seconds_count{operation="a"})") == 4);
  CHECK(at(R"(coretry_backoff_sleep_seconds_sum{operation="a"})") == doctest::Approx(0.4));
  CHECK(at(R"(coretry_backoff_sleep_seconds_bucket{operation="a",le="0.1"})") == 4);
  CHECK(at(R"(coretry_backoff_sleep_seconds_bucket{operation="a",le="0.01"})") == 0);
  CHECK(at(R"(coretry_refusals_total{by="breaker",operation="b"})") == 1);
  CHECK(at(R"(coretry_hedges_total{event="started",operation="h"})") == 2);
  CHECK(at(R"(coretry_hedges_total{event="abandoned",operation="h"})") == 2);
  CHECK(at(R"(coretry_operations_in_flight{operation="a"})") == 0);
  CHECK(at(R"(coretry_operation_duration_seconds_count{kind="retry",operation="a"})") == 2);
  // 230 ms each.
  CHECK(at(R"(coretry_operation_duration_seconds_sum{kind="retry",operation="a"})") ==
        doctest::Approx(0.46));
  CHECK(at(R"(coretry_resend_count_sum{operation="a"})") == 4);
  CHECK(at(R"(coretry_resend_count_bucket{operation="a",le="2"})") == 2);
  CHECK(at(R"(coretry_breaker_transitions_total{from="closed",operation="b",to="open"})") == 1);
  CHECK(at(R"(coretry_breaker_state{operation="b",state="open"})") == 1);
  CHECK(at(R"(coretry_breaker_state{operation="b",state="closed"})") == 0);
  // The OpenTelemetry HTTP metric, for the HTTP-like operation only.
  CHECK(
      at(R"(http_client_request_duration_seconds_count{error_type="503",http_request_method="GET",http_response_status_code="503",server_address="127.0.0.1",server_port="8080",url_scheme="http"})") ==
      1);
  CHECK(
      at(R"(http_client_request_duration_seconds_count{error_type="",http_request_method="GET",http_response_status_code="200",server_address="127.0.0.1",server_port="8080",url_scheme="http"})") ==
      1);
  CHECK(at(R"(coretry_server_hints_total{operation="http://127.0.0.1:8080"})") == 1);
  CHECK(at(R"(coretry_resend_count_sum{operation="http://127.0.0.1:8080"})") == 1);
  for (const auto& sample : m) {
    const bool http = sample.first.rfind("http_client_request_duration_seconds", 0) == 0;
    CHECK_MESSAGE((!http || sample.first.find("127.0.0.1") != std::string::npos), sample.first);
  }
}

TEST_CASE("prometheus_observer refuses a null registry and bad buckets") {
  CHECK_THROWS_AS(coretry::prometheus_observer(nullptr), std::invalid_argument);
  CHECK_THROWS_AS(coretry::prometheus_observer(std::make_shared<prometheus::Registry>(),
                                               {.sleep_buckets = {1.0, 0.5}}),
                  std::invalid_argument);
}

// ---- Regressions found by a hostile review --------------------------------------------------

TEST_CASE("error_type of an HTTP attempt is a low-cardinality identifier, not a message") {
  // Not the error's message: free text (locale-dependent for system errors, and a new series
  // for every distinct message). OpenTelemetry's error.type wants a predictable identifier.
  auto registry = std::make_shared<prometheus::Registry>();
  coretry::prometheus_observer obs(registry);
  coretry::attempt_finished_event e;
  e.label = "http://127.0.0.1:8080";
  e.attempt = 1;
  e.duration = 5ms;
  e.error = std::make_error_code(std::errc::connection_refused);
  e.outcome = coretry::attempt_outcome::failure;
  e.attributes.set(coretry::http::attribute::request_method, "GET");
  obs.on_attempt_finished(e);
  std::string type;
  for (const auto& family : registry->Collect())
    if (family.name == "http_client_request_duration_seconds")
      for (const auto& m : family.metric)
        for (const auto& l : m.label)
          if (l.name == "error_type")
            type = l.value;
  INFO("error_type = \"" << type << "\"");
  CHECK(!type.empty());
  CHECK(type.find(' ') == std::string::npos);
}

TEST_CASE("http_request_method is a known method or _OTHER") {
  auto registry = std::make_shared<prometheus::Registry>();
  coretry::prometheus_observer obs(registry);
  for (const char* method : {"GET", "BREW", "get"}) {
    coretry::attempt_finished_event e;
    e.label = "http://127.0.0.1:8080";
    e.attempt = 1;
    e.attributes.set(coretry::http::attribute::request_method, method);
    e.attributes.set(coretry::http::attribute::response_status_code, 200);
    obs.on_attempt_finished(e);
  }
  std::vector<std::string> methods;
  for (const auto& family : registry->Collect())
    if (family.name == "http_client_request_duration_seconds")
      for (const auto& m : family.metric)
        for (const auto& l : m.label)
          if (l.name == "http_request_method")
            methods.push_back(l.value + "=" + std::to_string(m.histogram.sample_count));
  std::sort(methods.begin(), methods.end());
  CHECK(methods == std::vector<std::string>{"GET=1", "_OTHER=2"});
}

namespace {
/// `coretry_breaker_state{operation=label}`: the state whose sample is 1 ("" if none, "many" if
/// more than one).
std::string gauge_state(prometheus::Registry& registry, const std::string& label) {
  std::string state;
  for (const auto& family : registry.Collect())
    if (family.name == "coretry_breaker_state")
      for (const auto& m : family.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& l : m.label)
          labels[l.name] = l.value;
        if (labels["operation"] == label && m.gauge.value == 1)
          state = state.empty() ? labels["state"] : "many";
      }
  return state;
}
} // namespace

TEST_CASE("coretry_breaker_state shows the breaker's state when two transitions race") {
  // Thread A opens the breaker (closed -> open), and its event is held back until thread B has
  // moved the breaker on (open -> half_open, after the break) and B's event is in: the events
  // arrive newest first. The gauge must read half_open, the breaker's state, not open.
  auto registry = std::make_shared<prometheus::Registry>();
  auto obs = std::make_shared<coretry::prometheus_observer>(registry);
  std::promise<void> b_done;
  std::shared_future<void> b_done_f = b_done.get_future().share();
  std::promise<void> a_opened;
  auto breaker = coretry::make_observed_breaker(
      {.consecutive_failures = 1,
       .break_duration = 1s,
       .seed = 1,
       .on_transition =
           [&](coretry::breaker_state, coretry::breaker_state to, std::chrono::nanoseconds) {
             if (to == coretry::breaker_state::open) { // A: called before the observer hears it
               a_opened.set_value();
               b_done_f.wait();
             }
           }},
      obs, "race");
  std::thread a([&] {
    if (breaker->try_acquire(0ns))
      breaker->on_failure(0ns);
  });
  a_opened.get_future().wait();
  CHECK(breaker->try_acquire(1h)); // B: the break is over, the first probe goes
  CHECK(breaker->state() == coretry::breaker_state::half_open);
  CHECK(gauge_state(*registry, "race") == "half_open");
  b_done.set_value();
  a.join();
  CHECK(breaker->state() == coretry::breaker_state::half_open);
  CHECK(gauge_state(*registry, "race") == "half_open");
  CHECK(breaker->times_opened() == 1);
}

namespace {
/// The `operation` labels (or, for the HTTP metric, `server_address` values) with a series in
/// `metric`, each once, sorted.
std::vector<std::string> series_of(prometheus::Registry& registry, const std::string& metric,
                                   const std::string& label = "operation") {
  std::vector<std::string> out;
  for (const auto& family : registry.Collect())
    if (family.name == metric)
      for (const auto& m : family.metric)
        for (const auto& l : m.label)
          if (l.name == label)
            out.push_back(l.value);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void one_http_operation(coretry::prometheus_observer& obs, std::string_view label, int status) {
  obs.on_operation_started({.label = label});
  coretry::attempt_finished_event a;
  a.label = label;
  a.attempt = 1;
  a.attributes.set(coretry::http::attribute::request_method, "GET");
  a.attributes.set(coretry::http::attribute::response_status_code, status);
  obs.on_attempt_finished(a);
  obs.on_operation_finished({.label = label, .attempts = 1});
}
} // namespace

TEST_CASE("operation labels past max_operations are counted as _OTHER until one is forgotten") {
  auto registry = std::make_shared<prometheus::Registry>();
  coretry::prometheus_observer obs(registry, {.max_operations = 2});
  for (const char* l : {"http://a:80", "http://b:80", "http://c:80", "http://a:80"})
    one_http_operation(obs, l, 200);
  CHECK(obs.operations() == 2);
  CHECK(series_of(*registry, "coretry_operations_total") ==
        std::vector<std::string>{"_OTHER", "http://a:80", "http://b:80"});
  CHECK(series_of(*registry, "http_client_request_duration_seconds", "server_address") ==
        std::vector<std::string>{"_OTHER", "a", "b"});

  CHECK(obs.forget("http://a:80") > 0);
  CHECK(obs.operations() == 1);
  CHECK(series_of(*registry, "coretry_operations_total") ==
        std::vector<std::string>{"_OTHER", "http://b:80"});
  CHECK(series_of(*registry, "coretry_operations_in_flight") ==
        std::vector<std::string>{"_OTHER", "http://b:80"});
  CHECK(series_of(*registry, "http_client_request_duration_seconds", "server_address") ==
        std::vector<std::string>{"_OTHER", "b"});
  one_http_operation(obs, "http://d:80", 200); // a's place
  CHECK(series_of(*registry, "coretry_operations_total") ==
        std::vector<std::string>{"_OTHER", "http://b:80", "http://d:80"});
  CHECK(obs.forget("http://nobody:80") == 0);
  CHECK_THROWS_WITH_AS(coretry::prometheus_observer(registry, {.max_operations = 0}),
                       doctest::Contains("max_operations = 0"), std::invalid_argument);
}

TEST_CASE("an endpoint the registry evicts takes its series with it (on_evict -> forget)") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto obs = std::make_shared<coretry::prometheus_observer>(registry);
  coretry::endpoint_registry endpoints(
      {.on_evict = [obs](const coretry::endpoint& e) { obs->forget(e.to_string()); },
       .max_entries = 100,
       .idle_timeout = 10s});
  // 300 hosts come and go; each host's entry is used once, then evicted when idle.
  for (int i = 0; i < 300; ++i) {
    const auto e = coretry::endpoint::from_url("http://host" + std::to_string(i) + ".example");
    const auto t = std::chrono::seconds(i);
    (void)endpoints.get(e, t);
    one_http_operation(*obs, e.to_string(), 503);
  }
  CHECK(endpoints.size() <= 100);
  CHECK(obs->operations() == endpoints.size());
  CHECK(series_of(*registry, "coretry_operations_total").size() == endpoints.size());
  CHECK(series_of(*registry, "http_client_request_duration_seconds", "server_address").size() ==
        endpoints.size());
  endpoints.evict_idle(1h);
  CHECK(obs->operations() == 0);
  CHECK(series_of(*registry, "coretry_operations_total").empty());
  CHECK(series_of(*registry, "http_client_request_duration_seconds", "server_address").empty());
}

TEST_CASE("forget while other threads report the same label frees nothing in use") {
  // Without the observer's series lock, forget's Remove frees a series another thread is
  // incrementing through the reference Add returned (ASan: heap-use-after-free).
  auto registry = std::make_shared<prometheus::Registry>();
  coretry::prometheus_observer obs(registry, {.max_operations = 1});
  std::atomic<bool> stop{false};
  std::atomic<int> reported{0};
  std::vector<std::thread> reporters;
  for (const char* label : {"http://a:80", "http://b:80"})
    reporters.emplace_back([&, label] {
      while (!stop.load()) {
        one_http_operation(obs, label, 200);
        reported.fetch_add(1);
      }
    });
  for (int i = 0; reported.load() < 2000; ++i) {
    obs.forget(i % 2 ? "http://a:80" : "http://b:80");
    obs.forget("_OTHER");
  }
  stop = true;
  for (auto& t : reporters)
    t.join();
  CHECK(obs.operations() <= 1);
}

TEST_CASE("a registry's breakers report to the observer under their endpoint's label") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto obs = std::make_shared<coretry::prometheus_observer>(registry);
  coretry::endpoint_registry endpoints(
      {.breaker = coretry::circuit_breaker_options{.consecutive_failures = 1}, .observer = obs});
  const auto e = coretry::endpoint::from_url("http://api.example");
  const auto entry = endpoints.get(e, 0s);
  REQUIRE(entry->breaker->try_acquire(0ns));
  entry->breaker->on_failure(0ns);
  CHECK(gauge_state(*registry, "http://api.example:80") == "open");
  entry->breaker->reset(1ns);
  CHECK(gauge_state(*registry, "http://api.example:80") == "closed");
}

// ---- Issue 32, findings 6 and 9 ------------------------------------------------------------

namespace {
/// Every `coretry_operations_in_flight` series, `operation` -> value.
std::map<std::string, double> in_flight(prometheus::Registry& registry) {
  std::map<std::string, double> out;
  for (const auto& family : registry.Collect())
    if (family.name == "coretry_operations_in_flight")
      for (const auto& m : family.metric)
        for (const auto& l : m.label)
          if (l.name == "operation")
            out[l.value] = m.gauge.value;
  return out;
}

coretry::attempt_finished_event http_attempt(std::string_view label, int status) {
  coretry::attempt_finished_event a;
  a.label = label;
  a.attempt = 1;
  a.attributes.set(coretry::http::attribute::request_method, "GET");
  a.attributes.set(coretry::http::attribute::response_status_code, status);
  a.outcome = status < 500 ? coretry::attempt_outcome::success : coretry::attempt_outcome::failure;
  if (status >= 500)
    a.error = coretry::errc::result_rejected;
  return a;
}
} // namespace

TEST_CASE("an operation started under _OTHER ends under _OTHER, after forget made room") {
  // Before: the label was chosen again at each event. b started under _OTHER (no room), forget
  // made room, and b ended under its own label: _OTHER stayed at 1 and b read -1, with nothing
  // running.
  auto registry = std::make_shared<prometheus::Registry>();
  coretry::prometheus_observer obs(registry, {.max_operations = 1});
  one_http_operation(obs, "http://a:80", 200);
  obs.on_operation_started({.label = "http://b:80"}); // no room: _OTHER
  CHECK(in_flight(*registry)["_OTHER"] == 1);
  CHECK(obs.forget("http://a:80") > 0); // room now
  obs.on_attempt_finished(http_attempt("http://b:80", 200));
  obs.on_operation_finished({.label = "http://b:80", .attempts = 1});
  const auto gauges = in_flight(*registry);
  for (const auto& [op, value] : gauges) {
    CAPTURE(op);
    CHECK(value == 0);
  }
  // Its attempt and its end went where its start did.
  CHECK(series_of(*registry, "coretry_attempts_total") == std::vector<std::string>{"_OTHER"});
  CHECK(series_of(*registry, "coretry_operations_total") == std::vector<std::string>{"_OTHER"});
  // The next operation of b, started with room, has its own label.
  one_http_operation(obs, "http://b:80", 200);
  CHECK(series_of(*registry, "coretry_operations_total") ==
        std::vector<std::string>{"_OTHER", "http://b:80"});
  CHECK(in_flight(*registry)["http://b:80"] == 0);
  // A label spelled _OTHER is that series: one count with the operations folded into it.
  obs.on_operation_started({.label = "_OTHER"});
  obs.on_operation_started({.label = "http://c:80"}); // no room (b has it): _OTHER
  CHECK(in_flight(*registry)["_OTHER"] == 2);
  obs.on_operation_finished({.label = "_OTHER", .attempts = 1});
  obs.on_operation_finished({.label = "http://c:80", .attempts = 1});
  CHECK(in_flight(*registry)["_OTHER"] == 0);
  CHECK(obs.operations() == 1);
}

TEST_CASE("forget of a label whose operation still runs leaves its in-flight count right") {
  // Before: forget removed the gauge, and the operation's end decremented a new one to -1.
  auto registry = std::make_shared<prometheus::Registry>();
  coretry::prometheus_observer obs(registry, {.max_operations = 1});
  obs.on_operation_started({.label = "http://a:80"});
  obs.on_operation_started({.label = "http://a:80"});
  CHECK(obs.forget("http://a:80") > 0);
  CHECK(in_flight(*registry)["http://a:80"] == 2);
  CHECK(obs.operations() == 1);                       // a keeps its place while it runs
  obs.on_operation_started({.label = "http://b:80"}); // no room: _OTHER
  obs.on_operation_finished({.label = "http://a:80", .attempts = 1});
  CHECK(in_flight(*registry)["http://a:80"] == 1);
  obs.on_operation_finished({.label = "http://a:80", .attempts = 1});
  CHECK(in_flight(*registry)["http://a:80"] == 0);
  CHECK(obs.forget("_OTHER") > 0);
  CHECK(in_flight(*registry)["_OTHER"] == 1); // b still runs
  obs.on_operation_finished({.label = "http://b:80", .attempts = 1});
  CHECK(in_flight(*registry)["_OTHER"] == 0);
  CHECK(obs.forget("http://a:80") > 0);
  CHECK(obs.operations() == 0);
}

TEST_CASE("coretry_operations_in_flight reads 0 once everything ended, whatever forget did") {
  // Two threads run operations on two labels with room for one, while a third forgets both and
  // _OTHER: a label chosen at each event moved an operation between series mid-way.
  auto registry = std::make_shared<prometheus::Registry>();
  coretry::prometheus_observer obs(registry, {.max_operations = 1});
  std::atomic<bool> stop{false};
  std::atomic<int> reported{0};
  std::vector<std::thread> reporters;
  for (const char* label : {"http://a:80", "http://b:80"})
    reporters.emplace_back([&, label] {
      while (!stop.load()) {
        obs.on_operation_started({.label = label});
        obs.on_attempt_finished(http_attempt(label, 503));
        obs.on_operation_finished({.label = label, .attempts = 1});
        reported.fetch_add(1);
      }
    });
  for (int i = 0; reported.load() < 3000; ++i) {
    obs.forget(i % 2 ? "http://a:80" : "http://b:80");
    if (i % 3 == 0)
      obs.forget("_OTHER");
  }
  stop = true;
  for (auto& t : reporters)
    t.join();
  for (const auto& [op, value] : in_flight(*registry)) {
    CAPTURE(op);
    CHECK(value == 0);
  }
}

TEST_CASE("http_response_status_code is a known status or _OTHER, whatever the server sends") {
  // libcurl hands on any status from 100 to 999. Before: one series set per status, 800
  // statuses made 13,600 series of http_client_request_duration_seconds.
  auto registry = std::make_shared<prometheus::Registry>();
  coretry::prometheus_observer obs(registry);
  for (int status = 200; status <= 999; ++status)
    obs.on_attempt_finished(http_attempt("http://a:80", status));
  const auto statuses =
      series_of(*registry, "http_client_request_duration_seconds", "http_response_status_code");
  const auto types = series_of(*registry, "http_client_request_duration_seconds", "error_type");
  CHECK(statuses.size() <= 64);
  CHECK(types.size() <= 64);
  for (const char* known : {"200", "204", "301", "404", "418", "429", "503", "_OTHER"}) {
    CAPTURE(known);
    CHECK(std::find(statuses.begin(), statuses.end(), known) != statuses.end());
  }
  for (const char* unknown : {"299", "599", "600", "999"}) {
    CAPTURE(unknown);
    CHECK(std::find(statuses.begin(), statuses.end(), unknown) == statuses.end());
    CHECK(std::find(types.begin(), types.end(), unknown) == types.end());
  }
  CHECK(std::find(types.begin(), types.end(), "_OTHER") != types.end());
  std::size_t series = 0;
  for (const auto& family : registry->Collect())
    if (family.name == "http_client_request_duration_seconds")
      series += family.metric.size();
  CHECK(series <= 64);
}
