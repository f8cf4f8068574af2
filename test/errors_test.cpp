// SPDX-License-Identifier: BSL-1.0
// The rows of docs/errors.md that no other test checks exactly: each invalid input's message,
// and each coretry::errc's message, as the table quotes them.

#include <coretry/backoff.hpp>
#include <coretry/error.hpp>
#include <coretry/policy.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

using namespace std::chrono_literals;
using coretry::backoff;
using coretry::jitter;

namespace {
template <class F> std::string rejection(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}
} // namespace

TEST_CASE("errors table: negative and zero delays name the factory, field and value") {
  CHECK(rejection([] { (void)backoff::fixed(-1ns); }) ==
        "coretry::backoff::fixed: delay = -1ns (must not be negative)");
  CHECK_NOTHROW((void)backoff::fixed(0ns)); // zero: retry at once
  CHECK(rejection([] { (void)backoff::linear(-1ms, 1ms, 1s); }) ==
        "coretry::backoff::linear: initial = -1000000ns (must not be negative)");
  CHECK(rejection([] { (void)backoff::linear(1ms, -1ms, 1s); }) ==
        "coretry::backoff::linear: step = -1000000ns (must not be negative)");
  CHECK(rejection([] { (void)backoff::exponential(0ns); }) ==
        "coretry::backoff::exponential: initial = 0ns (must be positive)");
  CHECK(rejection([] { (void)backoff::exponential(-5ms); }) ==
        "coretry::backoff::exponential: initial = -5000000ns (must be positive)");
}

TEST_CASE("errors table: a multiplier below 1, above 1000 or not a number is rejected") {
  CHECK(rejection([] { (void)backoff::exponential(1ms, 0.5); }) ==
        "coretry::backoff::exponential: multiplier = 0.500000 (must be in [1, 1000])");
  CHECK(rejection([] { (void)backoff::exponential(1ms, 1000.5); }) ==
        "coretry::backoff::exponential: multiplier = 1000.500000 (must be in [1, 1000])");
  CHECK(rejection([] { (void)backoff::exponential(1ms, std::nan("")); }) ==
        "coretry::backoff::exponential: multiplier = nan (must be in [1, 1000])");
  CHECK(rejection([] {
          (void)backoff::exponential(1ms, std::numeric_limits<double>::infinity());
        }) == "coretry::backoff::exponential: multiplier = inf (must be in [1, 1000])");
}

TEST_CASE("errors table: a cap below the initial delay is rejected") {
  CHECK(rejection([] { (void)backoff::exponential(1s, 2.0, 1ms); }) ==
        "coretry::backoff::exponential: max = 1000000ns (must be at least initial)");
  CHECK(rejection([] { (void)backoff::linear(1s, 1ms, 1ms); }) ==
        "coretry::backoff::linear: max = 1000000ns (must be at least initial)");
}

TEST_CASE("errors table: jitter out of range is rejected, by hand-built jitter too") {
  CHECK(rejection([] { (void)jitter::normal(10.5); }) ==
        "coretry::jitter::normal: relative_stddev = 10.500000 (must be in [0, 10])");
  CHECK(rejection([] { (void)jitter::normal(-0.1); }) ==
        "coretry::jitter::normal: relative_stddev = -0.100000 (must be in [0, 10])");
  CHECK(rejection([] { (void)jitter::normal(std::nan("")); }) ==
        "coretry::jitter::normal: relative_stddev = nan (must be in [0, 10])");
  CHECK(rejection([] { (void)jitter::additive(-1ns); }) ==
        "coretry::jitter::additive: max_extra = -1ns (must not be negative)");
  CHECK(rejection([] {
          (void)backoff::fixed(1ms).with_jitter(jitter{coretry::jitter_kind::normal, 11.0});
        }) == "coretry::jitter::normal: relative_stddev = 11.000000 (must be in [0, 10])");
  CHECK(rejection([] {
          (void)backoff::fixed(1ms).with_jitter(jitter{static_cast<coretry::jitter_kind>(9)});
        }) == "coretry::backoff::with_jitter: kind = 9 (unknown jitter kind)");
  CHECK(rejection([] { (void)backoff::fixed(0ms).with_jitter(jitter::decorrelated()); }) ==
        "coretry::backoff::with_jitter: initial = 0ns (decorrelated jitter needs a positive "
        "initial delay)");
}

TEST_CASE("errors table: zero attempts, a deadline already past and zero limits are rejected") {
  auto validate = [](coretry::retry_policy p) { return rejection([&] { p.validate(); }); };
  CHECK(validate({.max_attempts = 0}) ==
        "coretry::retry_policy: max_attempts = 0 (must be at least 1)");
  // The deadline counts from the start of the operation: zero or less has passed already.
  CHECK(validate({.deadline = 0ns}) == "coretry::retry_policy: deadline = 0ns (must be positive)");
  CHECK(validate({.deadline = -1s}) ==
        "coretry::retry_policy: deadline = -1000000000ns (must be positive)");
  CHECK(validate({.attempt_timeout = -1ns}) ==
        "coretry::retry_policy: attempt_timeout = -1ns (must be positive)");
  CHECK(validate({.max_retry_after = 0ns}) ==
        "coretry::retry_policy: max_retry_after = 0ns (must be positive)");
  CHECK(validate({.max_attempts = 1, .deadline = 1ns}) == "no exception");
}

TEST_CASE("errors table: every coretry::errc has the message the table quotes") {
  using coretry::errc;
  auto msg = [](errc e) { return std::error_code(e).message(); };
  CHECK(msg(errc::attempts_exhausted) == "retry attempts exhausted");
  CHECK(msg(errc::deadline_exceeded) == "retry deadline exceeded");
  CHECK(msg(errc::attempt_timeout) == "attempt timed out");
  CHECK(msg(errc::budget_exhausted) == "retry budget exhausted");
  CHECK(msg(errc::result_rejected) == "attempt result rejected by the retry predicate");
  CHECK(msg(errc::cancelled) == "retry cancelled");
  CHECK(msg(errc::circuit_open) == "circuit breaker open: attempt not sent");
  CHECK(msg(errc::unexpected_exception) ==
        "an operation or a policy hook threw an unexpected exception");
  CHECK(msg(errc::retry_after_too_long) ==
        "the server asked to retry later than the policy's max_retry_after");
  CHECK(msg(errc::retry_after_past_deadline) ==
        "the server asked to retry after the retry deadline");
  CHECK(msg(errc::rate_limited) ==
        "the sending rate refused a send token: the wait would be too long");
  CHECK(msg(errc::throttled_locally) ==
        "the client's adaptive throttle rejected the attempt locally");
  CHECK(msg(errc::retryable_exception) == "an attempt threw an exception the retry policy retries");
  CHECK(std::error_code(errc::circuit_open).category().name() == std::string("coretry"));
  // Cancellation is Asio's own code, not one of these.
  CHECK(coretry::test::operation_aborted ==
        coretry::detail::asio_error_code(asio::error::operation_aborted));
#if !CORETRY_ASIO_BOOST
  CHECK(coretry::test::operation_aborted.message() == "Operation aborted.");
#endif
}

TEST_CASE("conditions group codes: gave up, refused locally, timed out, cancelled") {
  using coretry::condition;
  using coretry::errc;
  const std::error_code deadline = errc::deadline_exceeded;
  CHECK(deadline == condition::gave_up);
  CHECK(deadline == condition::timed_out);
  CHECK(deadline != condition::refused_locally);
  CHECK(std::error_code(errc::attempts_exhausted) == condition::gave_up);
  CHECK(std::error_code(errc::budget_exhausted) == condition::gave_up);
  CHECK(std::error_code(errc::budget_exhausted) == condition::refused_locally);
  CHECK(std::error_code(errc::circuit_open) == condition::refused_locally);
  CHECK(std::error_code(errc::circuit_open) != condition::gave_up);
  CHECK(std::error_code(errc::throttled_locally) == condition::refused_locally);
  CHECK(std::error_code(errc::rate_limited) == condition::refused_locally);
  CHECK(std::error_code(errc::attempt_timeout) == condition::timed_out);
  CHECK(std::error_code(errc::attempt_timeout) != condition::gave_up);
  CHECK(std::make_error_code(std::errc::timed_out) == condition::timed_out);
  CHECK(std::error_code(errc::cancelled) == condition::cancelled);
  CHECK(std::make_error_code(std::errc::operation_canceled) == condition::cancelled);
  CHECK(coretry::detail::aborted_error() == condition::cancelled); // Asio's, in either flavour
  CHECK(std::error_code(coretry::detail::asio_error_code(asio::error::timed_out)) ==
        condition::timed_out);
  CHECK(std::make_error_code(std::errc::connection_refused) != condition::cancelled);
  CHECK(std::make_error_code(std::errc::connection_refused) != condition::refused_locally);
  CHECK(std::error_code(errc::unexpected_exception) != condition::gave_up);
  CHECK(std::string(coretry::condition_category().name()) == "coretry.condition");
  CHECK(std::error_condition(condition::refused_locally).message() ==
        "refused locally: the attempt was not sent");
}
