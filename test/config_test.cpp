// SPDX-License-Identifier: BSL-1.0
// coretry::config: gRPC service configs (the examples of gRFC A6 and of grpc-go's retry example,
// written out here by hand), coretry's own form, and every refusal's message.
#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/config/json.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace {

using namespace std::chrono_literals;
using coretry::config::method_kind;
using coretry::config::read_policy;
using coretry::config::read_service_config;

// gRPC's status codes as an error category of the test's own, as a gRPC adapter would have.
class grpc_category_impl final : public std::error_category {
public:
  const char* name() const noexcept override { return "grpc"; }
  std::string message(int code) const override {
    return std::string(coretry::config::grpc_status_name(code));
  }
};
const std::error_category& grpc_category() {
  static const grpc_category_impl c;
  return c;
}
std::error_code grpc(int code) {
  return {code, grpc_category()};
}
const std::error_code unavailable = grpc(14);
const std::error_code internal = grpc(13);
const std::error_code aborted = grpc(10);
const std::error_code not_found = grpc(5);

// Every canonical name but OK, mapped to its code; OK maps to success.
const coretry::config::status_table& table() {
  static const coretry::config::status_table t = [] {
    coretry::config::status_table out;
    for (int i = 0; i <= 16; ++i)
      out.emplace(std::string(coretry::config::grpc_status_name(i)),
                  i == 0 ? std::error_code() : grpc(i));
    return out;
  }();
  return t;
}

// The message of the std::invalid_argument that reading `text` throws ("" if none).
std::string grpc_error(std::string_view text) {
  try {
    (void)read_service_config(text, table());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
std::string own_error(std::string_view text) {
  try {
    (void)read_policy(text, table());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// A service config with one method config around `retry_policy_fields`.
std::string with_retry_policy(const std::string& fields) {
  return R"({"methodConfig": [{"name": [{"service": "s"}], "retryPolicy": {)" + fields + "}}]}";
}
const std::string a6_retry_fields = R"("maxAttempts": 4, "initialBackoff": ".1s",
    "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])";

} // namespace

// ---- gRFC A6's examples -------------------------------------------------------------------

TEST_CASE("A6 retry policy: four attempts, .1s to 1s doubling, full jitter, UNAVAILABLE only") {
  const auto sc = read_service_config(with_retry_policy(a6_retry_fields), table());
  REQUIRE(sc.methods.size() == 1);
  const auto& m = sc.methods[0];
  CHECK(m.kind == method_kind::retry);
  CHECK(m.names == std::vector<coretry::config::method_name>{{"s", ""}});
  CHECK(m.policy.max_attempts == 4);
  CHECK(m.policy.backoff.initial() == 100ms);
  CHECK(m.policy.backoff.max_delay() == 1s);
  CHECK(m.policy.backoff.multiplier() == 2.0);
  CHECK(m.policy.backoff.jitter_spec().kind == coretry::jitter_kind::full);
  // A6: retry n waits random(0, min(initial * multiplier^(n-1), max)).
  CHECK(m.policy.backoff.base_delay(0) == 100ms);
  CHECK(m.policy.backoff.base_delay(2) == 400ms);
  CHECK(m.policy.backoff.base_delay(5) == 1s);
  REQUIRE(m.policy.retry_if);
  CHECK(m.policy.retry_if(unavailable));
  CHECK_FALSE(m.policy.retry_if(internal));
  CHECK_FALSE(m.policy.retry_if(std::make_error_code(std::errc::connection_refused)));
  CHECK(m.policy.deadline == coretry::unlimited);
  CHECK(m.policy.budget == nullptr);
  CHECK_NOTHROW(m.policy.validate());
}

TEST_CASE("A6 hedging policy: four attempts .5s apart, three non-fatal codes") {
  const auto sc = read_service_config(R"({"methodConfig": [{"name": [{"service": "s"}],
      "hedgingPolicy": {"maxAttempts": 4, "hedgingDelay": ".5s",
                        "nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL", "ABORTED"]}}]})",
                                      table());
  const auto& m = sc.methods.at(0);
  CHECK(m.kind == method_kind::hedge);
  CHECK(m.policy.max_attempts == 4);
  CHECK(m.hedge.delay == 500ms);
  CHECK(m.hedge.max_copies == 4);
  CHECK(m.policy.retry_if(unavailable));
  CHECK(m.policy.retry_if(internal));
  CHECK(m.policy.retry_if(aborted));
  CHECK_FALSE(m.policy.retry_if(not_found));
  CHECK_NOTHROW(m.hedge.validate());
}

TEST_CASE("A6 hedging policy with hedgingDelay 0s sends all four at once; absent is 0s too") {
  for (const char* delay : {R"("hedgingDelay": "0s",)", ""}) {
    const auto sc = read_service_config(
        std::string(R"({"methodConfig": [{"name": [{}],
        "hedgingPolicy": {"maxAttempts": 4, )") +
            delay + R"( "nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL", "ABORTED"]}}]})",
        table());
    CHECK(sc.methods.at(0).hedge.delay == 0ns);
    CHECK(sc.methods.at(0).hedge.max_copies == 4);
  }
}

TEST_CASE("A6 hedging policy without nonFatalStatusCodes: every failure is fatal") {
  const auto sc = read_service_config(
      R"({"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2}}]})", table());
  REQUIRE(sc.methods.at(0).policy.retry_if);
  CHECK_FALSE(sc.methods.at(0).policy.retry_if(unavailable));
}

TEST_CASE("A6 retry throttling: a full bucket of 10 tokens, 0.1 back per success, shared") {
  const auto sc = read_service_config(R"({
      "methodConfig": [{"name": [{"service": "a"}], "retryPolicy": {)" +
                                          a6_retry_fields + R"(}},
                       {"name": [{"service": "b"}], "hedgingPolicy": {"maxAttempts": 3}},
                       {"name": [{"service": "c"}]}],
      "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}})",
                                      table());
  REQUIRE(sc.throttling != nullptr);
  CHECK(sc.throttling->tokens() == doctest::Approx(10));
  CHECK(sc.methods.at(0).policy.budget == sc.throttling);
  CHECK(sc.methods.at(1).policy.budget == sc.throttling);
  CHECK(sc.methods.at(2).policy.budget == nullptr); // no retries: nothing to throttle
  CHECK(sc.methods.at(2).kind == method_kind::single);
  CHECK(sc.methods.at(2).policy.max_attempts == 1);
  // Failures take one token each; retries stop at half the bucket.
  for (int i = 0; i < 5; ++i)
    sc.throttling->on_failure(0ns);
  CHECK_FALSE(sc.throttling->try_retry(0ns));
  sc.throttling->on_success(0ns);
  CHECK(sc.throttling->tokens() == doctest::Approx(5.1));
  CHECK(sc.throttling->try_retry(0ns));
}

TEST_CASE("A6's integration example: the fields this reader does not use are ignored") {
  const auto sc = read_service_config(R"({
      "loadBalancingPolicy": "round_robin",
      "methodConfig": [{
        "name": [{"service": "helloworld.Greeter", "method": "SayHello"}],
        "retryPolicy": {)" + a6_retry_fields +
                                          R"(},
        "waitForReady": true,
        "timeout": "10s",
        "maxRequestMessageBytes": 1024,
        "maxResponseMessageBytes": 2048
      }],
      "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}})",
                                      table());
  const auto& m = sc.methods.at(0);
  CHECK(m.policy.deadline == 10s);
  CHECK(m.policy.max_attempts == 4);
  CHECK(sc.find("helloworld.Greeter", "SayHello") == &m);
  CHECK(sc.find("helloworld.Greeter", "SayGoodbye") == nullptr);
}

TEST_CASE("grpc-go's retry example: capitalised field names, multiplier 1, .01s") {
  // examples/features/retry/client/main.go of grpc-go, written out by hand.
  const auto sc = read_service_config(R"({
      "methodConfig": [{
        "name": [{"service": "grpc.examples.echo.Echo"}],
        "waitForReady": true,
        "retryPolicy": {
          "MaxAttempts": 4,
          "InitialBackoff": ".01s",
          "MaxBackoff": ".01s",
          "BackoffMultiplier": 1.0,
          "RetryableStatusCodes": [ "UNAVAILABLE" ]
        }
      }]})",
                                      table());
  const auto policy = sc.policy_for("grpc.examples.echo.Echo", "UnaryEcho");
  CHECK(policy.max_attempts == 4);
  CHECK(policy.backoff.base_delay(0) == 10ms);
  CHECK(policy.backoff.base_delay(3) == 10ms);
  CHECK(policy.retry_if(unavailable));
  CHECK_FALSE(policy.retry_if(internal));
}

TEST_CASE("protobuf's field names read as A6's; null is absent") {
  const auto sc = read_service_config(R"({"method_config": [{"name": [{"service": "s"}],
      "hedging_policy": null,
      "retry_policy": {"max_attempts": 3, "initial_backoff": "1s", "max_backoff": "2s",
                       "backoff_multiplier": 1.5, "retryable_status_codes": [14]}}]})",
                                      table());
  CHECK(sc.methods.at(0).kind == method_kind::retry);
  CHECK(sc.methods.at(0).policy.retry_if(unavailable)); // 14 is UNAVAILABLE
}

TEST_CASE("A6's limit: maxAttempts above 5 is 5, for retries and hedges; a client may change it") {
  CHECK(read_service_config(with_retry_policy(R"("maxAttempts": 6, "initialBackoff": "1s",
      "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])"),
                            table())
            .methods.at(0)
            .policy.max_attempts == 5);
  const std::string hedge =
      R"({"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 1000000000000}}]})";
  CHECK(read_service_config(hedge, table()).methods.at(0).policy.max_attempts == 5);
  CHECK(
      read_service_config(
          R"({"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 1e300}}]})", table())
          .methods.at(0)
          .policy.max_attempts == 5);
  CHECK(read_service_config(
            R"({"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 3.0}}]})", table())
            .methods.at(0)
            .policy.max_attempts == 3);
  CHECK(read_service_config(hedge, table()).methods.at(0).hedge.max_copies == 5);
  CHECK(read_service_config(hedge, table(), {.max_attempts_limit = 7})
            .methods.at(0)
            .policy.max_attempts == 7);
}

TEST_CASE("perAttemptRecvTimeout: an attempt timeout, and timed-out attempts are retried") {
  const auto sc = read_service_config(with_retry_policy(R"("maxAttempts": 3,
      "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2,
      "perAttemptRecvTimeout": "0.25s")"),
                                      table());
  const auto& p = sc.methods.at(0).policy;
  CHECK(p.attempt_timeout == 250ms);
  CHECK(p.retry_if(coretry::make_error_code(coretry::errc::attempt_timeout)));
  CHECK_FALSE(p.retry_if(unavailable));
}

TEST_CASE("an initial backoff above the cap waits the cap every time") {
  const auto sc = read_service_config(with_retry_policy(R"("maxAttempts": 3,
      "initialBackoff": "5s", "maxBackoff": "2s", "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"])"),
                                      table());
  CHECK(sc.methods.at(0).policy.backoff.base_delay(0) == 2s);
  CHECK(sc.methods.at(0).policy.backoff.base_delay(4) == 2s);
}

TEST_CASE("durations: protobuf's seconds with up to nine decimals") {
  auto initial = [](const std::string& d) {
    return read_service_config(with_retry_policy(R"("maxAttempts": 2, "initialBackoff": ")" + d +
                                                 R"(", "maxBackoff": "100s",
        "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])"),
                               table())
        .methods.at(0)
        .policy.backoff.initial();
  };
  CHECK(initial("0.1s") == 100ms);
  CHECK(initial(".1s") == 100ms);
  CHECK(initial("1.5s") == 1500ms);
  CHECK(initial("2s") == 2s);
  CHECK(initial("0.000000001s") == 1ns);
  CHECK(initial("1.s") == 1s);
}

TEST_CASE("name matching: the exact method, then the service, then the default entry") {
  const auto sc = read_service_config(R"({"methodConfig": [
      {"name": [{}], "timeout": "1s"},
      {"name": [{"service": "svc"}], "timeout": "2s"},
      {"name": [{"service": "svc", "method": "Get"}, {"service": "other", "method": "Put"}],
       "timeout": "3s"}]})",
                                      table());
  CHECK(sc.find("svc", "Get") == &sc.methods[2]);
  CHECK(sc.find("other", "Put") == &sc.methods[2]);
  CHECK(sc.find("svc", "List") == &sc.methods[1]);
  CHECK(sc.find("other", "Get") == &sc.methods[0]);
  CHECK(sc.find("", "") == &sc.methods[0]);
  CHECK(sc.policy_for("svc", "List").deadline == 2s);
  CHECK(sc.policy_for("svc", "List").max_attempts == 1);

  const auto none =
      read_service_config(R"({"methodConfig": [{"name": [{"service": "a"}]}]})", table());
  CHECK(none.find("b", "x") == nullptr);
  CHECK(none.policy_for("b", "x").max_attempts == 1);
  CHECK(read_service_config("{}", table()).methods.empty());
}

TEST_CASE("a status lookup function instead of a table") {
  const auto sc = read_service_config(
      with_retry_policy(R"("maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s",
          "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"])"),
      [](std::string_view name) -> std::optional<std::error_code> {
        if (name == "UNAVAILABLE")
          return std::make_error_code(std::errc::connection_refused);
        if (name == "RESOURCE_EXHAUSTED")
          return std::make_error_code(std::errc::resource_unavailable_try_again);
        return std::nullopt;
      });
  CHECK(sc.methods.at(0).policy.retry_if(std::make_error_code(std::errc::connection_refused)));
  CHECK_FALSE(sc.methods.at(0).policy.retry_if(std::make_error_code(std::errc::timed_out)));
}

// ---- gRPC refusals ------------------------------------------------------------------------

TEST_CASE("A6's rules, each refused with its path and value") {
  auto retry = [](const std::string& fields) { return grpc_error(with_retry_policy(fields)); };
  CHECK(retry(R"("maxAttempts": 1, "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])") ==
        "methodConfig[0].retryPolicy.maxAttempts: 1 is below 2");
  CHECK(retry(R"("maxAttempts": -3, "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])") ==
        "methodConfig[0].retryPolicy.maxAttempts: -3 is below 2");
  CHECK(retry(R"("maxAttempts": 2.5, "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])") ==
        "methodConfig[0].retryPolicy.maxAttempts: 2.5 is not a whole number");
  CHECK(retry(R"("maxAttempts": "4", "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])") ==
        R"(methodConfig[0].retryPolicy.maxAttempts: "4" is not a number)");
  CHECK(retry(R"("initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])") ==
        "methodConfig[0].retryPolicy.maxAttempts: missing (required)");
  CHECK(retry(R"("maxAttempts": 2, "initialBackoff": "0s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])") ==
        R"(methodConfig[0].retryPolicy.initialBackoff: "0s" is not positive)");
  CHECK(retry(R"("maxAttempts": 2, "initialBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])") ==
        "methodConfig[0].retryPolicy.maxBackoff: missing (required)");
  CHECK(retry(R"("maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 0, "retryableStatusCodes": ["UNAVAILABLE"])") ==
        "methodConfig[0].retryPolicy.backoffMultiplier: 0 is not positive");
  CHECK(retry(R"("maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 0.5, "retryableStatusCodes": ["UNAVAILABLE"])") ==
        "methodConfig[0].retryPolicy.backoffMultiplier: 0.5 is below 1 (coretry's exponential "
        "backoff does not shrink)");
  CHECK(retry(R"("maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": [])") ==
        "methodConfig[0].retryPolicy.retryableStatusCodes: an empty array (at least one code is "
        "required)");
  CHECK(retry(R"("maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 2)") ==
        "methodConfig[0].retryPolicy.retryableStatusCodes: missing (required)");
  CHECK(
      retry(R"("maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "BUSY"])") ==
      R"(methodConfig[0].retryPolicy.retryableStatusCodes[1]: "BUSY" is not in the status table)");
  CHECK(retry(R"("maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": [17])") ==
        "methodConfig[0].retryPolicy.retryableStatusCodes[0]: 17 is not a gRPC status code (0 to "
        "16)");
  CHECK(
      retry(R"("maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["OK"])") ==
      R"(methodConfig[0].retryPolicy.retryableStatusCodes[0]: "OK" maps to success in the status table)");
  CHECK(retry(R"("maxAttempts": 2, "MaxAttempts": 3)") ==
        "methodConfig[0].retryPolicy.maxAttempts: repeats methodConfig[0].retryPolicy.MaxAttempts");

  CHECK(grpc_error(R"({"methodConfig": [{"name": [{}],
      "retryPolicy": {)" +
                   a6_retry_fields + R"(},
      "hedgingPolicy": {"maxAttempts": 2}}]})") ==
        "methodConfig[0]: has both retryPolicy and hedgingPolicy (at most one is allowed)");
  CHECK(grpc_error(R"({"methodConfig": [{"hedgingPolicy": {"maxAttempts": 1}}]})") ==
        "methodConfig[0].hedgingPolicy.maxAttempts: 1 is below 2");
  CHECK(grpc_error(R"({"methodConfig": [{"hedgingPolicy": {"maxAttempts": 2,
      "hedgingDelay": "-1s"}}]})") ==
        R"(methodConfig[0].hedgingPolicy.hedgingDelay: "-1s" is negative)");
}

TEST_CASE("durations refused: not a string, no unit, another unit, a sign, too many decimals") {
  auto initial = [](const std::string& d) {
    return grpc_error(with_retry_policy(R"("maxAttempts": 2, "initialBackoff": )" + d +
                                        R"(, "maxBackoff": "1s", "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"])"));
  };
  const std::string at = "methodConfig[0].retryPolicy.initialBackoff: ";
  CHECK(initial(R"("abc")") == at + R"("abc" is not a duration (such as "0.1s"))");
  CHECK(initial(R"("1")") == at + R"("1" is not a duration (such as "0.1s"))");
  CHECK(initial(R"("100ms")") == at + R"("100ms" is not a duration (such as "0.1s"))");
  CHECK(initial(R"("s")") == at + R"("s" is not a duration (such as "0.1s"))");
  CHECK(initial(R"("-0.1s")") == at + R"("-0.1s" is negative)");
  CHECK(initial(R"("+1s")") == at + R"("+1s" is not a duration (such as "0.1s"))");
  CHECK(initial(R"("1.0000000001s")") == at + R"("1.0000000001s" has more than 9 decimals)");
  CHECK(initial(R"("99999999999s")") == at + R"("99999999999s" is too long (at most 9223372036s))");
  CHECK(initial("0.1") == at + "0.1 is not a string");
}

TEST_CASE("names, throttling and the document itself refused with their paths") {
  CHECK(grpc_error(R"({"methodConfig": [{"name": [{"method": "Get"}]}]})") ==
        R"(methodConfig[0].name[0].method: "Get" names a method without a service)");
  CHECK(
      grpc_error(R"({"methodConfig": [{"name": [{"service": "a"}]},
      {"name": [{"service": "b"}, {"service": "a"}]}]})") ==
      R"(methodConfig[1].name[1]: names service "a", method "" again (first at methodConfig[0].name[0]))");
  CHECK(
      grpc_error(R"({"methodConfig": [{"name": [{}]}, {"name": [{"service": ""}]}]})") ==
      R"(methodConfig[1].name[0]: names service "", method "" again (first at methodConfig[0].name[0]))");
  CHECK(grpc_error(R"({"methodConfig": [{"name": [{"service": 7}]}]})") ==
        "methodConfig[0].name[0].service: 7 is not a string");
  CHECK(grpc_error(R"({"methodConfig": {}})") == "methodConfig: an object is not an array");
  CHECK(grpc_error(R"({"methodConfig": [{"timeout": "0s"}]})") ==
        R"(methodConfig[0].timeout: "0s" is not positive)");
  CHECK(grpc_error(R"({"retryThrottling": {"maxTokens": 0, "tokenRatio": 0.1}})") ==
        "retryThrottling.maxTokens: 0 is not positive");
  CHECK(grpc_error(R"({"retryThrottling": {"maxTokens": 1001, "tokenRatio": 0.1}})") ==
        "retryThrottling.maxTokens: 1001 is above 1000");
  CHECK(grpc_error(R"({"retryThrottling": {"maxTokens": 0.0004, "tokenRatio": 0.1}})") ==
        "retryThrottling.maxTokens: 0.0004 is below 0.001 once rounded to three decimals");
  CHECK(grpc_error(R"({"retryThrottling": {"maxTokens": 10, "tokenRatio": 0}})") ==
        "retryThrottling.tokenRatio: 0 is not positive");
  CHECK(grpc_error(R"({"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.0004}})") ==
        "retryThrottling.tokenRatio: 0.0004 is below 0.001 once rounded to three decimals");
  CHECK(grpc_error(R"({"retryThrottling": {"maxTokens": 10}})") ==
        "retryThrottling.tokenRatio: missing (required)");
  CHECK(grpc_error("[]") == "$: an array is not an object");
  CHECK(grpc_error("{\"methodConfig\": [\n  {\"name\": [}]}") ==
        "$: malformed JSON at line 2, column 13 (byte 31): syntax error while parsing value - "
        "unexpected '}'; expected '[', '{', or a literal");
  // Found by the fuzz target: a number beyond a double is nlohmann's out_of_range, not a
  // parse_error.
  CHECK(grpc_error(R"({"retryThrottling": {"maxTokens": 1e330}})") ==
        "$: malformed JSON at line 1, column 35 (byte 34): number overflow parsing '1e330'");
  CHECK(own_error("1e330") == "$: malformed JSON at line 1, column 1 (byte 0): number overflow "
                              "parsing '1e330'");
  CHECK(grpc_error("").rfind("$: malformed JSON at line 1, column 1", 0) == 0);
}

TEST_CASE("A6's three decimals of tokenRatio, and a ratio above maxTokens fills the bucket") {
  const auto sc =
      read_service_config(R"({"retryThrottling": {"maxTokens": 4, "tokenRatio": 9}})", table());
  for (int i = 0; i < 4; ++i)
    sc.throttling->on_failure(0ns);
  sc.throttling->on_success(0ns);
  CHECK(sc.throttling->tokens() == doctest::Approx(4));
  const auto kept = read_service_config(
      R"({"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1234}})", table());
  kept.throttling->on_failure(0ns);
  kept.throttling->on_success(0ns);
  CHECK(kept.throttling->tokens() == doctest::Approx(9.123));
}

// ---- coretry's own form -------------------------------------------------------------------

TEST_CASE("own form: every field") {
  const auto pc = read_policy(R"({
      "max_attempts": 6,
      "deadline": "10s",
      "attempt_timeout": "1500ms",
      "max_retry_after": "30s",
      "backoff": {"kind": "exponential", "initial": "50ms", "multiplier": 3, "max": "5s",
                  "jitter": "equal"},
      "retry_on": ["UNAVAILABLE", 8],
      "when_open": "wait",
      "report": "policy_reason",
      "seed": 42,
      "label": "billing.charge",
      "breaker": {"consecutive_failures": 3, "failure_ratio": 0.25, "minimum_throughput": 10,
                  "window": "20s", "window_buckets": 20, "break_duration": "2s",
                  "break_jitter": 0.1, "half_open_probes": 2, "ramp": "1s",
                  "retry_interval": "50ms", "max_concurrent_calls": 100, "seed": 7},
      "budget": {"kind": "ratio", "ratio": 0.2, "min_retries_per_second": 5, "window": "30s",
                 "window_buckets": 30},
      "hedge": {"delay": "80ms", "max_copies": 3}})",
                              table());
  const auto& p = pc.policy;
  CHECK(p.max_attempts == 6);
  CHECK(p.deadline == 10s);
  CHECK(p.attempt_timeout == 1500ms);
  CHECK(p.max_retry_after == 30s);
  CHECK(p.backoff.initial() == 50ms);
  CHECK(p.backoff.multiplier() == 3.0);
  CHECK(p.backoff.max_delay() == 5s);
  CHECK(p.backoff.jitter_spec().kind == coretry::jitter_kind::equal);
  CHECK(p.retry_if(unavailable));
  CHECK(p.retry_if(grpc(8)));
  CHECK_FALSE(p.retry_if(internal));
  CHECK(p.when_open == coretry::on_open::wait);
  CHECK(p.report == coretry::final_error::policy_reason);
  CHECK(p.seed.has_value());
  CHECK(p.seed.value() == 42);
  CHECK(p.label == "billing.charge");
  const auto breaker = std::dynamic_pointer_cast<coretry::circuit_breaker>(p.breaker);
  REQUIRE(breaker != nullptr);
  CHECK(breaker->options().consecutive_failures == 3);
  CHECK(breaker->options().failure_ratio == 0.25);
  CHECK(breaker->options().window == 20s);
  CHECK(breaker->options().max_concurrent_calls == 100);
  CHECK(breaker->options().seed == std::optional<std::uint64_t>(7));
  const auto budget = std::dynamic_pointer_cast<coretry::ratio_budget>(p.budget);
  REQUIRE(budget != nullptr);
  CHECK(budget->options().ratio == 0.2);
  CHECK(budget->options().window == 30s);
  CHECK(budget->options().window_buckets == 30);
  REQUIRE(pc.hedge.has_value());
  CHECK(pc.hedge->delay == 80ms);
  CHECK(pc.hedge->max_copies == 3);
}

TEST_CASE("own form: the 0.2 keys max_in_flight and buckets are still read; both names are "
          "refused") {
  const auto pc = read_policy(R"({"breaker": {"max_in_flight": 7},
      "budget": {"kind": "ratio", "buckets": 4}, "hedge": {"max_in_flight": 3}})");
  const auto breaker = std::dynamic_pointer_cast<coretry::circuit_breaker>(pc.policy.breaker);
  REQUIRE(breaker != nullptr);
  CHECK(breaker->options().max_concurrent_calls == 7);
  const auto budget = std::dynamic_pointer_cast<coretry::ratio_budget>(pc.policy.budget);
  REQUIRE(budget != nullptr);
  CHECK(budget->options().window_buckets == 4);
  REQUIRE(pc.hedge.has_value());
  CHECK(pc.hedge->max_copies == 3);
  CHECK(own_error(R"({"breaker": {"max_concurrent_calls": 2, "max_in_flight": 2}})") ==
        "breaker.max_concurrent_calls: given with breaker.max_in_flight, its deprecated name "
        "(give one)");
  CHECK(own_error(R"({"budget": {"kind": "ratio", "window_buckets": 5, "buckets": 4}})") ==
        "budget.window_buckets: given with budget.buckets, its deprecated name (give one)");
  CHECK(own_error(R"({"hedge": {"max_copies": 2, "max_in_flight": 3}})") ==
        "hedge.max_copies: given with hedge.max_in_flight, its deprecated name (give one)");
  // A value out of range is named under the key given.
  CHECK(own_error(R"({"hedge": {"max_in_flight": 0}})") == "hedge.max_in_flight: 0 is below 1");
  CHECK(own_error(R"({"budget": {"kind": "ratio", "buckets": 0}})")
            .rfind("budget.buckets: 0 is out of range (coretry::ratio_budget: window_buckets = ",
                   0) == 0);
}

TEST_CASE("own form: a ratio budget reads limit_scheduled_retries, a boolean, false by default") {
  const auto on = read_policy(R"({"budget": {"kind": "ratio", "limit_scheduled_retries": true}})");
  const auto b = std::dynamic_pointer_cast<coretry::ratio_budget>(on.policy.budget);
  REQUIRE(b != nullptr);
  CHECK(b->options().limit_scheduled_retries);
  CHECK(b->limits_scheduled_retries());
  const auto off = read_policy(R"({"budget": {"kind": "ratio"}})");
  const auto d = std::dynamic_pointer_cast<coretry::ratio_budget>(off.policy.budget);
  REQUIRE(d != nullptr);
  CHECK_FALSE(d->limits_scheduled_retries());
  CHECK(own_error(R"({"budget": {"kind": "ratio", "limit_scheduled_retries": 1}})") ==
        "budget.limit_scheduled_retries: 1 is not true or false");
}

TEST_CASE("own form: an empty object is retry_policy's defaults") {
  const auto pc = read_policy("{}");
  const coretry::retry_policy d;
  CHECK(pc.policy.max_attempts == d.max_attempts);
  CHECK(pc.policy.backoff.to_string() == d.backoff.to_string());
  CHECK_FALSE(pc.policy.retry_if);
  CHECK_FALSE(pc.hedge.has_value());
}

TEST_CASE("own form: a breaker's slow-call and count-window fields are read and checked") {
  const auto c = read_policy(R"({"breaker": {"window_type": "count_based", "window_calls": 50,
      "slow_call_duration": "300ms", "slow_call_ratio": 0.8, "minimum_throughput": 10}})");
  const auto breaker = std::dynamic_pointer_cast<coretry::circuit_breaker>(c.policy.breaker);
  REQUIRE(breaker != nullptr);
  CHECK(breaker->options().window_type == coretry::sliding_window::count_based);
  CHECK(breaker->options().window_calls == 50);
  CHECK(breaker->options().slow_call_duration == 300ms);
  CHECK(breaker->options().slow_call_ratio == 0.8);
  CHECK(breaker->options().minimum_throughput == 10);
  CHECK(own_error(R"({"breaker": {"window_type": "sliding"}})") ==
        R"(breaker.window_type: "sliding" is not a window type (time_based, count_based))");
  CHECK(own_error(R"({"breaker": {"slow_call_ratio": 0}})") ==
        "breaker.slow_call_ratio: 0 is out of range (coretry::circuit_breaker_options: "
        "slow_call_ratio = 0.000000 (must be in (0, 1]))");
  CHECK(own_error(R"({"breaker": {"window_calls": 0}})")
            .find("breaker.window_calls: 0 is out of "
                  "range") == 0);
  CHECK(own_error(R"({"breaker": {"slow_call_duration": "0s"}})")
            .find("slow_call_duration (ns) = 0") != std::string::npos);
}

TEST_CASE("own form: presets by name, fields on top; null removes a preset's breaker") {
  const auto safe = read_policy(R"({"preset": "overload_safe", "attempt_timeout": "3s"})");
  CHECK(safe.policy.attempt_timeout == 3s);
  CHECK(safe.policy.breaker != nullptr);
  CHECK(std::dynamic_pointer_cast<coretry::ratio_budget>(safe.policy.budget) != nullptr);
  const auto bare = read_policy(R"({"preset": "overload_safe", "breaker": null, "budget": null})");
  CHECK(bare.policy.breaker == nullptr);
  CHECK(bare.policy.budget == nullptr);
  CHECK(read_policy(R"({"preset": "cloud_storage"})").policy.deadline == 10min);
  CHECK(read_policy(R"({"preset": "retry_forever"})").policy.max_attempts ==
        coretry::unlimited_attempts);
  // Its breaker is the placeholder an endpoint_registry replaces (refused if none does).
  CHECK(coretry::detail::is_registry_placeholder(
      read_policy(R"({"preset": "overload_safe_per_endpoint"})").policy.breaker.get()));
  CHECK(read_policy(R"({"max_attempts": "unlimited", "deadline": "unlimited"})").policy.deadline ==
        coretry::unlimited);
  const auto named = read_policy(R"({"breaker": "overload_safe", "budget": "overload_safe"})");
  CHECK(std::dynamic_pointer_cast<coretry::circuit_breaker>(named.policy.breaker)
            ->options()
            .consecutive_failures == 10);
  const auto tb = read_policy(R"({"budget": {"kind": "token_bucket", "max_tokens": 20,
      "token_ratio": 0.5}})");
  CHECK(std::dynamic_pointer_cast<coretry::token_bucket_budget>(tb.policy.budget)->tokens() ==
        doctest::Approx(20));
}

TEST_CASE("own form: backoffs and jitters, with units ns to h") {
  CHECK(read_policy(R"({"backoff": {"kind": "fixed", "delay": "250us", "jitter": "none"}})")
            .policy.backoff.to_string() == coretry::backoff::fixed(250us).to_string());
  CHECK(read_policy(R"({"backoff": {"kind": "linear", "initial": "1ns", "step": "1m",
      "max": "1h", "jitter": "decorrelated"}})")
            .policy.backoff.max_delay() == 1h);
  const auto normal = read_policy(R"({"backoff": {"kind": "exponential", "initial": "1s",
      "jitter": {"kind": "normal", "relative_stddev": 0.3}}})");
  CHECK(normal.policy.backoff.jitter_spec().relative_stddev == 0.3);
  CHECK(normal.policy.backoff.max_delay() == 32s);
  const auto additive = read_policy(R"({"backoff": {"kind": "exponential", "initial": "1s",
      "jitter": {"kind": "additive", "max_extra": "500ms", "truncated": true}}})");
  CHECK(additive.policy.backoff.jitter_spec().max_extra == 500ms);
  CHECK(additive.policy.backoff.jitter_spec().truncated);
  CHECK(read_policy(R"({"backoff": {"kind": "exponential", "initial": "1s"}})")
            .policy.backoff.jitter_spec()
            .kind == coretry::jitter_kind::full);
}

TEST_CASE("own form refusals: unknown fields, wrong values, coretry's own ranges") {
  CHECK(own_error(R"({"max_atempts": 3})") == "max_atempts: unknown field");
  CHECK(own_error(R"({"breaker": {"failure_ratoi": 0.5}})") ==
        "breaker.failure_ratoi: unknown field");
  CHECK(own_error(R"({"x y": 1})") == R"(["x y"]: unknown field)");
  CHECK(own_error(R"({"max_attempts": 0})") == "max_attempts: 0 is below 1");
  // 2^64 parses as a double equal to the maximum as a double: refused, never converted (the
  // fuzz target's UBSan finding).
  CHECK(own_error(R"({"seed": 18446744073709551616})").rfind("seed: ", 0) == 0);
  CHECK(own_error(R"({"seed": 18446744073709551616})").find("is above") != std::string::npos);
  CHECK(read_policy(R"({"seed": 18446744073709551615})").policy.seed.has_value());
  CHECK(own_error(R"({"deadline": "0s"})") == R"(deadline: "0s" is not positive)");
  CHECK(own_error(R"({"deadline": "10 s"})") ==
        R"(deadline: "10 s" is not a duration (such as "100ms", "1.5s"))");
  CHECK(
      own_error(R"({"preset": "fast"})") ==
      R"(preset: "fast" is not a preset (default, overload_safe, overload_safe_per_endpoint, retry_forever, cloud_storage))");
  CHECK(own_error(R"({"when_open": "later"})") == R"(when_open: "later" is not fail or wait)");
  CHECK(own_error(R"({"retry_on": ["NOPE"]})") ==
        R"(retry_on[0]: "NOPE" is not in the status table)");
  CHECK(own_error(R"({"backoff": {"kind": "fixed", "initial": "1s", "delay": "1s"}})") ==
        "backoff.initial: is not a parameter of a fixed backoff");
  CHECK(own_error(R"({"backoff": {"kind": "cubic"}})") ==
        R"(backoff.kind: "cubic" is not a backoff (fixed, linear, exponential))");
  CHECK(own_error(R"({"backoff": {"kind": "exponential", "initial": "1s", "multiplier": 0.5}})") ==
        "backoff.multiplier: 0.5 is out of range (coretry::backoff::exponential: multiplier = "
        "0.500000 (must be in [1, 1000]))");
  CHECK(
      own_error(R"({"backoff": {"kind": "exponential", "initial": "1s", "jitter": "pink"}})") ==
      R"(backoff.jitter: "pink" is not a jitter (none, full, equal, decorrelated, normal, additive))");
  CHECK(own_error(R"({"breaker": {"failure_ratio": 1.5}})") ==
        "breaker.failure_ratio: 1.5 is out of range (coretry::circuit_breaker_options: "
        "failure_ratio = "
        "1.500000 (must be in [0, 1]))");
  CHECK(own_error(R"({"backoff": {"kind": "linear", "initial": "0s", "step": "1s", "max": "1s",
      "jitter": "decorrelated"}})") ==
        R"(backoff.initial: "0s" is out of range (coretry::backoff::with_jitter: initial = 0ns )"
        "(decorrelated jitter needs a positive initial delay))");
  CHECK(own_error(R"({"breaker": {"consecutive_failures": -1}})") ==
        "breaker.consecutive_failures: -1 is below 0");
  CHECK(own_error(R"({"budget": {"kind": "ratio", "ratio": 101}})") ==
        "budget.ratio: 101 is out of range (coretry::ratio_budget: ratio = 101.000000 (must be in "
        "[0, 100]))");
  CHECK(own_error(R"({"budget": {"ratio": 0.1}})") ==
        "budget.kind: missing (required: ratio or token_bucket)");
  CHECK(own_error(R"({"budget": {"kind": "token_bucket", "window": "1s"}})") ==
        "budget.window: unknown field");
  CHECK(own_error(R"({"hedge": {"max_copies": 0}})") == "hedge.max_copies: 0 is below 1");
  CHECK(own_error(R"({"seed": 1.5})") == "seed: 1.5 is not a whole number");
  CHECK(own_error("{\"label\": 1,}").rfind("$: malformed JSON at line 1, column 13 (byte 12)", 0) ==
        0);
}
