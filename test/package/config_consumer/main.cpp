// SPDX-License-Identifier: BSL-1.0
// A consumer of coretry::config (find_package COMPONENTS config, or pkg-config
// coretry-config-json): a gRPC service config read into a policy, and a refusal naming its path.
#include <coretry/config/json.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <system_error>

int main() {
  const coretry::config::status_table statuses{
      {"UNAVAILABLE", make_error_code(std::errc::connection_refused)}};
  const auto config = coretry::config::read_service_config(
      R"({"methodConfig": [{"name": [{"service": "s"}], "retryPolicy": {"maxAttempts": 9,
          "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
          "retryableStatusCodes": ["UNAVAILABLE"]}}],
          "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}})",
      statuses);
  const coretry::retry_policy policy = config.policy_for("s", "m");
  if (policy.max_attempts != 5 ||
      !policy.retry_if(make_error_code(std::errc::connection_refused)) ||
      policy.budget != config.throttling) {
    std::fputs("unexpected policy\n", stderr);
    return 1;
  }
  try {
    (void)coretry::config::read_policy(R"({"max_atempts": 3})");
    return 1;
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()) != "max_atempts: unknown field") {
      std::fprintf(stderr, "unexpected message: %s\n", e.what());
      return 1;
    }
  }
  std::puts("coretry::config consumer: ok");
  return 0;
}
