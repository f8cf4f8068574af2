// SPDX-License-Identifier: BSL-1.0
// r17's probes of issue 28's merge (h50, h51, h52): attempt attributes' lifetimes, and a policy
// read by coretry::config beside a 0.2 predicate.
#include <coretry/attempt.hpp>
#include <coretry/policy.hpp>
#include <coretry/retry.hpp>
#if CORETRY_R17_CONFIG
#include <coretry/config/json.hpp>
#include <coretry/testing/manual_clock.hpp>
#endif

#include <doctest/doctest.h>
#if CORETRY_R17_CONFIG
#include <support/asio.hpp>
#include <support/counters.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>
#endif

#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace {

template <class Value>
concept settable = requires(coretry::attempt_context& ctx, Value&& v) {
  ctx.set_attribute(std::string_view("k"), static_cast<Value&&>(v));
};

template <class Value>
concept settable_in = requires(coretry::attempt_attributes& a, Value&& v) {
  a.set(std::string_view("k"), static_cast<Value&&>(v));
};

} // namespace

TEST_CASE("r17: set_attribute refuses a temporary std::string, whose characters would be gone "
          "before the observer reads the view") {
  // `ctx.set_attribute("user", std::to_string(id))` compiled, and the event's text was a view
  // of a destroyed string. As `attempt_result::with_value` refuses a temporary, so does this.
  static_assert(!settable<std::string>);
  static_assert(!settable_in<std::string>);
  static_assert(!settable<const std::string>);
  // What stays: an lvalue string, a literal, a view, an integer.
  static_assert(settable<std::string&>);
  static_assert(settable<const std::string&>);
  static_assert(settable<const char(&)[3]>);
  static_assert(settable<std::string_view>);
  static_assert(settable<int>);
  static_assert(settable<std::int64_t>);
  static_assert(settable_in<std::string&>);
  coretry::attempt_context ctx(1);
  const std::string method = "GET";
  ctx.set_attribute("http.request.method", method);
  ctx.set_attribute("n", 7);
  ctx.set_attribute("lit", "x");
  REQUIRE(ctx.attributes().find("http.request.method") != nullptr);
  CHECK(ctx.attributes().find("http.request.method")->text().data() == method.data());
  CHECK(ctx.attributes().find("n")->integer() == 7);
  CHECK(ctx.attributes().find("lit")->text() == "x");
}

#if CORETRY_R17_CONFIG
namespace {
coretry::retry_policy loaded() {
  const coretry::config::status_table statuses{
      {"UNAVAILABLE", make_error_code(std::errc::connection_refused)}};
  return coretry::config::read_policy(R"({"max_attempts": 3, "retry_on": ["UNAVAILABLE"]})",
                                      statuses)
      .policy;
}
} // namespace

TEST_CASE("r17: a 0.2 program that adds throttle_if or retry_if_exception to a policy read by "
          "coretry::config still runs, as in 0.2") {
  // 0.2's loader set `retry_if`, and a program could add the other predicates to what it read.
  // The loader now sets `classify` (and the same list in `retry_if`, for 0.2 code that reads
  // it); `validate` accepts a 0.2 predicate beside the loader's classifier, which then stands
  // aside (detail/loaded_rule.hpp). The cases below run the same code.
  coretry::retry_policy p = loaded();
  CORETRY_ALLOW_DEPRECATED_BEGIN
  p.throttle_if = [](const std::error_code&) { return true; };
  CORETRY_ALLOW_DEPRECATED_END
  CHECK_NOTHROW(p.validate());
  coretry::retry_policy q = loaded();
  CORETRY_ALLOW_DEPRECATED_BEGIN
  q.retry_if_exception = [](const std::exception_ptr&) { return true; };
  CORETRY_ALLOW_DEPRECATED_END
  CHECK_NOTHROW(q.validate());
}

namespace {
using namespace std::chrono_literals;
using coretry::test::fail;
using coretry::test::outcome;
using coretry::test::refused; // UNAVAILABLE in loaded()'s table
using coretry::test::run_retry;
using coretry::test::scripted_op;
using coretry::test::succeed;
using coretry::testing::manual_clock;
const std::error_code denied = make_error_code(std::errc::permission_denied);
} // namespace

TEST_CASE("r17: a policy read by coretry::config decides with classify, its list in retry_if "
          "too for 0.2 code") {
  coretry::retry_policy p = loaded();
  REQUIRE(p.classify);
  // The loader's classifier gives `retry` for an error and nothing else.
  const coretry::attempt_decision on_refused = p.classify(coretry::attempt_result(1, refused));
  CHECK(on_refused.retry);
  CHECK(on_refused.given == coretry::decision_fields::retry);
  CHECK_FALSE(p.classify(coretry::attempt_result(1, denied)).retry);
  const int v = 0;
  CHECK(p.classify(coretry::attempt_result(1).with_value(v)).given ==
        coretry::decision_fields::none);
  CORETRY_ALLOW_DEPRECATED_BEGIN
  REQUIRE(p.retry_if);
  CHECK(p.retry_if(refused));
  CHECK_FALSE(p.retry_if(denied));
  CORETRY_ALLOW_DEPRECATED_END
  CHECK_NOTHROW(p.validate());
  // Through the loop: the list retries, and default_classify's throttle (none here) holds.
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), fail(denied), succeed(1)}};
  p.backoff = coretry::backoff::fixed(1ms);
  coretry::retry_stats stats;
  const outcome o = run_retry(io, op, p, stats);
  CHECK(o.error == denied);
  CHECK(op.calls == 2);
}

TEST_CASE("r17: the loaded policy with a 0.2 throttle_if decides as in 0.2: the list retries, "
          "throttle_if slows the rate") {
  coretry::retry_policy p = loaded();
  auto rate = std::make_shared<coretry::test::counting_rate>();
  p.rate_limit = rate;
  p.backoff = coretry::backoff::fixed(1ms);
  CORETRY_ALLOW_DEPRECATED_BEGIN
  p.throttle_if = [](const std::error_code&) { return true; };
  CORETRY_ALLOW_DEPRECATED_END
  REQUIRE_NOTHROW(p.validate());
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), fail(refused), fail(denied), succeed(1)}};
  coretry::retry_policy q = p;
  q.max_attempts = 5;
  coretry::retry_stats stats;
  const outcome o = run_retry(io, op, q, stats);
  CHECK(o.error == denied); // not listed: final
  CHECK(op.calls == 3);
  CHECK(rate->throttles == 3); // throttle_if's answer, for every error (the default: none)
}

TEST_CASE("r17: the loaded policy with a 0.2 retry_if_exception retries the exception, and the "
          "list still judges errors") {
  coretry::retry_policy p = loaded();
  p.max_attempts = 4;
  p.backoff = coretry::backoff::fixed(1ms);
  CORETRY_ALLOW_DEPRECATED_BEGIN
  p.retry_if_exception = [](const std::exception_ptr&) { return true; };
  CORETRY_ALLOW_DEPRECATED_END
  REQUIRE_NOTHROW(p.validate());
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> {
    ++calls;
    if (calls == 1)
      throw std::runtime_error("transient");
    if (calls == 2)
      throw std::system_error(refused);
    co_return 7;
  };
  coretry::retry_stats stats;
  const outcome o = run_retry(io, op, p, stats);
  CHECK(!o.error);
  CHECK(o.value == 7);
  CHECK(calls == 3);
}

TEST_CASE("r17: 0.2 code that wraps the loaded retry_if decides with its own; a classify of the "
          "caller's replaces the loader's with nothing to clear") {
  {
    coretry::retry_policy p = loaded();
    p.backoff = coretry::backoff::fixed(1ms);
    CORETRY_ALLOW_DEPRECATED_BEGIN
    p.retry_if = [old = p.retry_if](const std::error_code& ec) { return old(ec) || ec == denied; };
    CORETRY_ALLOW_DEPRECATED_END
    REQUIRE_NOTHROW(p.validate());
    manual_clock::reset();
    asio::io_context io;
    scripted_op op{{fail(refused), fail(denied), succeed(2)}};
    coretry::retry_stats stats;
    const outcome o = run_retry(io, op, p, stats);
    CHECK(!o.error);
    CHECK(o.value == 2);
  }
  {
    coretry::retry_policy p = loaded();
    p.backoff = coretry::backoff::fixed(1ms);
    p.classify = [](const coretry::attempt_result& r) {
      return coretry::attempt_decision{.retry = r.error() == denied};
    };
    REQUIRE_NOTHROW(p.validate()); // the loader's retry_if beside it is no predicate of ours
    manual_clock::reset();
    asio::io_context io;
    scripted_op op{{fail(denied), fail(refused), succeed(2)}};
    coretry::retry_stats stats;
    const outcome o = run_retry(io, op, p, stats);
    CHECK(o.error == refused); // the list would retry it; the caller's classifier does not
    CHECK(op.calls == 2);
    // A classify of the caller's beside a predicate of the caller's is refused, as before.
    CORETRY_ALLOW_DEPRECATED_BEGIN
    p.throttle_if = [](const std::error_code&) { return true; };
    CORETRY_ALLOW_DEPRECATED_END
    CHECK_THROWS_AS(p.validate(), std::invalid_argument);
  }
}
#endif
