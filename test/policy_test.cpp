// SPDX-License-Identifier: BSL-1.0
#include <coretry/error.hpp>
#include <coretry/policy.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <stdexcept>
#include <string>

using namespace std::chrono_literals;

TEST_CASE(
    "the default policy is valid and recommends capped exponential backoff with full jitter") {
  coretry::retry_policy p;
  CHECK_NOTHROW(p.validate());
  CHECK(p.max_attempts == 3);
  CHECK(p.backoff.to_string() == "exponential(100ms, x2, max 32s) + full jitter");
}

TEST_CASE("an invalid policy names the field and its value") {
  auto message = [](coretry::retry_policy p) -> std::string {
    try {
      p.validate();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "valid";
  };
  CHECK(message({.max_attempts = 0}) ==
        "coretry::retry_policy: max_attempts = 0 (must be at least 1)");
  CHECK(message({.deadline = -5ns}) == "coretry::retry_policy: deadline = -5ns (must be positive)");
  CHECK(message({.attempt_timeout = 0ns}) ==
        "coretry::retry_policy: attempt_timeout = 0ns (must be positive)");
}

TEST_CASE("the default predicate retries everything but cancellation") {
  CHECK(coretry::default_retry_if(make_error_code(std::errc::connection_refused)));
  CHECK(coretry::default_retry_if(coretry::errc::attempt_timeout));
  CHECK_FALSE(coretry::default_retry_if(coretry::test::operation_aborted));
  CHECK_FALSE(coretry::default_retry_if(coretry::errc::cancelled));
}

TEST_CASE("coretry errors have their own category and messages") {
  const std::error_code ec = coretry::errc::budget_exhausted;
  CHECK(std::string(ec.category().name()) == "coretry");
  CHECK(ec.message() == "retry budget exhausted");
  CHECK(std::error_code(coretry::errc::deadline_exceeded).message() == "retry deadline exceeded");
  CHECK(ec != make_error_code(std::errc::no_buffer_space));
}
