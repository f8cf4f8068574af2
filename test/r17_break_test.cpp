// SPDX-License-Identifier: BSL-1.0
// r17's probes of issue 28's merge (h50, h51, h52): attempt attributes' lifetimes, and a policy
// read by coretry::config beside a 0.2 predicate.
#include <coretry/attempt.hpp>
#include <coretry/policy.hpp>
#include <coretry/retry.hpp>
#if CORETRY_R17_CONFIG
#include <coretry/config/json.hpp>
#endif

#include <doctest/doctest.h>

#include <cstdint>
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
  // A loader that set `classify` instead made `validate` refuse the same 0.2 code (classify
  // beside a 0.2 predicate); the loader sets `retry_if` still (lib/config/json.cpp).
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
#endif
