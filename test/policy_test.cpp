#include <coretry/budget.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>

#include <doctest/doctest.h>

#include <asio/error.hpp>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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
  CHECK_FALSE(coretry::default_retry_if(asio::error::operation_aborted));
  CHECK_FALSE(coretry::default_retry_if(coretry::errc::cancelled));
}

TEST_CASE("coretry errors have their own category and messages") {
  const std::error_code ec = coretry::errc::budget_exhausted;
  CHECK(std::string(ec.category().name()) == "coretry");
  CHECK(ec.message() == "retry budget exhausted");
  CHECK(std::error_code(coretry::errc::deadline_exceeded).message() == "retry deadline exceeded");
  CHECK(ec != make_error_code(std::errc::no_buffer_space));
}

TEST_CASE(
    "the token bucket refuses retries once half the bucket is spent, and refills on success") {
  coretry::token_bucket_budget b(10, 0.5);
  CHECK(b.try_retry({}));
  for (int i = 0; i < 4; ++i)
    b.on_failure({});
  CHECK(b.tokens() == doctest::Approx(6));
  CHECK(b.try_retry({}));
  b.on_failure({}); // 5 left: not more than half
  CHECK_FALSE(b.try_retry({}));
  b.on_success({}); // 5.5
  CHECK(b.try_retry({}));
  for (int i = 0; i < 100; ++i)
    b.on_success({});
  CHECK(b.tokens() == doctest::Approx(10)); // capped
  for (int i = 0; i < 100; ++i)
    b.on_failure({});
  CHECK(b.tokens() == doctest::Approx(0)); // floored
  CHECK_THROWS_AS(coretry::token_bucket_budget(0, 0.1), std::invalid_argument);
  CHECK_THROWS_AS(coretry::token_bucket_budget(10, 0), std::invalid_argument);
}

TEST_CASE("the ratio budget allows free retries while bootstrapping, then a fixed share") {
  coretry::ratio_budget b(0.1, 100);
  for (int i = 0; i < 10; ++i)
    b.on_request({});
  for (int i = 0; i < 20; ++i)
    CHECK(b.try_retry({})); // bootstrap: fewer than 100 requests seen
  b.reset();
  for (int i = 0; i < 200; ++i)
    b.on_request({});
  int granted = 0;
  for (int i = 0; i < 100; ++i)
    granted += b.try_retry({}) ? 1 : 0;
  CHECK(granted == 20); // 10 % of 200
  CHECK_THROWS_AS(coretry::ratio_budget(-1), std::invalid_argument);
}

TEST_CASE("budgets stay exact when many threads share them") {
  coretry::ratio_budget b(0.5, 0);
  for (int i = 0; i < 1000; ++i)
    b.on_request({});
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i)
        if (b.try_retry({}))
          granted.fetch_add(1);
    });
  for (auto& t : threads)
    t.join();
  CHECK(granted.load() == 500);
  CHECK(b.retries() == 500);
}
