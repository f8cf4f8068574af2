// SPDX-License-Identifier: BSL-1.0
// coretry::config's policies in the loops they are read for, on the manual clock: A6's retry
// policy (attempts, backoff bounds, which codes are retried), its retry throttling stopping
// retries at half the bucket, and its hedging policy (non-fatal and fatal codes).
#include <coretry/config/json.hpp>

#include <doctest/doctest.h>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <chrono>
#include <string>
#include <system_error>
#include <vector>

namespace {

using namespace std::chrono_literals;
using coretry::test::fail;
using coretry::test::run_hedge;
using coretry::test::run_retry;
using coretry::test::scripted_op;
using coretry::test::succeed;
using coretry::testing::manual_clock;

const std::error_code unavailable = make_error_code(std::errc::connection_refused);
const std::error_code internal = make_error_code(std::errc::io_error);
const std::error_code not_found = make_error_code(std::errc::no_such_file_or_directory);

const coretry::config::status_table statuses{
    {"UNAVAILABLE", unavailable}, {"INTERNAL", internal}, {"NOT_FOUND", not_found}};

// A6's retry policy example and its throttling example, for service "s".
const std::string a6 = R"({
  "methodConfig": [
    {"name": [{"service": "s"}],
     "retryPolicy": {"maxAttempts": 4, "initialBackoff": ".1s", "maxBackoff": "1s",
                     "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}},
    {"name": [{"service": "h"}],
     "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": ".5s",
                       "nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL"]}}],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}})";

} // namespace

TEST_CASE("config loop: A6's retry policy makes 4 attempts, each wait within A6's bound") {
  manual_clock::reset();
  asio::io_context io;
  const auto sc = coretry::config::read_service_config(a6, statuses);
  coretry::retry_policy p = sc.policy_for("s", "Get");
  p.budget = nullptr; // throttling has its own case below
  scripted_op op{{fail(unavailable)}};
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, p, stats);
  CHECK(r.error == unavailable);
  CHECK(stats.attempts == 4);
  CHECK(stats.reason == coretry::errc::attempts_exhausted);
  REQUIRE(op.started.size() == 4);
  // random(0, min(0.1s * 2^(n-1), 1s)) before retry n.
  const std::vector<manual_clock::duration> bound{100ms, 200ms, 400ms};
  for (std::size_t n = 0; n < bound.size(); ++n)
    CHECK(op.started[n + 1] - op.started[n] <= bound[n]);
}

TEST_CASE("config loop: a code not in retryableStatusCodes is not retried") {
  manual_clock::reset();
  asio::io_context io;
  const auto sc = coretry::config::read_service_config(a6, statuses);
  scripted_op op{{fail(internal), succeed(1)}};
  coretry::retry_stats stats;
  const auto r = run_retry(io, op, sc.policy_for("s", "Get"), stats);
  CHECK(r.error == internal);
  CHECK(stats.attempts == 1);
}

TEST_CASE("config loop: retry throttling stops retries once half the bucket is spent") {
  manual_clock::reset();
  asio::io_context io;
  const auto sc = coretry::config::read_service_config(a6, statuses);
  scripted_op op{{fail(unavailable)}};
  coretry::retry_stats first;
  (void)run_retry(io, op, sc.policy_for("s", "Get"), first);
  CHECK(first.attempts == 4); // 10 -> 6 tokens
  coretry::retry_stats second;
  const auto r = run_retry(io, op, sc.policy_for("s", "Get"), second);
  CHECK(r.error == unavailable);
  CHECK(second.attempts == 1); // 6 -> 5 tokens: not more than half, no retry
  CHECK(second.reason == coretry::errc::budget_exhausted);
}

TEST_CASE("config loop: A6's hedging policy hedges after the delay and on non-fatal codes") {
  manual_clock::reset();
  asio::io_context io;
  const auto sc = coretry::config::read_service_config(a6, statuses);
  const auto* m = sc.find("h", "Query");
  REQUIRE(m != nullptr);
  REQUIRE(m->kind == coretry::config::method_kind::hedge);
  // The first attempt is slow, so the second starts after hedgingDelay; it fails with a
  // non-fatal code, so the third starts at once and wins.
  scripted_op op{{succeed(1, 2s), fail(internal), succeed(3)}};
  coretry::hedge_stats stats;
  const auto r = run_hedge(io, op, m->policy, m->hedge, stats);
  CHECK_FALSE(r.error);
  CHECK(r.value == 3);
  CHECK(op.started == std::vector<manual_clock::duration>{0s, 500ms, 500ms});

  scripted_op fatal{{fail(not_found)}};
  coretry::hedge_stats fatal_stats;
  const auto f = run_hedge(io, fatal, m->policy, m->hedge, fatal_stats);
  CHECK(f.error == not_found);
  CHECK(fatal_stats.attempts == 1);
}
