// SPDX-License-Identifier: BSL-1.0
#include <coretry/detail/asio.hpp>
#include <coretry/detail/loaded_rule.hpp>
#include <coretry/detail/refuse.hpp>
#include <coretry/policy.hpp>

#include <stdexcept>
#include <string>
#include <utility>

namespace coretry {

bool default_retry_if(const std::error_code& ec) noexcept {
  return !coretry::detail::is_aborted(ec) && ec != errc::cancelled;
}

bool default_throttle_if(const std::error_code& ec) noexcept {
  return ec == errc::attempt_timeout || ec == std::errc::timed_out;
}

attempt_decision default_classify(const attempt_result& r) noexcept {
  attempt_decision d;
  if (r.error()) {
    d.retry = default_retry_if(r.error());
    d.throttle = default_throttle_if(r.error());
  }
  return d;
}

void retry_policy::validate() const {
  constexpr const char* where = "coretry::retry_policy";
  const auto ns = [](nanoseconds d) { return std::to_string(d.count()) + "ns"; };
  if (max_attempts == 0)
    detail::refuse(where, "max_attempts", "0", "must be at least 1");
  if (deadline <= nanoseconds::zero())
    detail::refuse(where, "deadline", ns(deadline), "must be positive");
  if (attempt_timeout <= nanoseconds::zero())
    detail::refuse(where, "attempt_timeout", ns(attempt_timeout), "must be positive");
  if (max_retry_after <= nanoseconds::zero())
    detail::refuse(where, "max_retry_after", ns(max_retry_after), "must be positive");
  if (detail::is_registry_placeholder(breaker.get()))
    detail::refuse(where, "breaker", "the placeholder of presets::overload_safe_per_endpoint()",
                   "the policy needs an endpoint_registry with a breaker to supply each "
                   "endpoint's own: curl::client_options::resilience, or "
                   "endpoint_registry::apply; for one upstream use presets::overload_safe()");
  CORETRY_ALLOW_DEPRECATED_BEGIN // classify set beside a 0.2 predicate
  // The config loader's rule is written both ways (detail/loaded_rule.hpp): its `retry_if` is
  // no predicate of the caller's, and beside one of the caller's its `classify` stands aside.
  if (classify && !detail::has_loaded_classify(*this)) {
    const bool own_retry_if = retry_if && retry_if.target<detail::loaded_retry_if>() == nullptr;
    const char* mixed = own_retry_if         ? "retry_if"
                        : pushback_if        ? "pushback_if"
                        : throttle_if        ? "throttle_if"
                        : result_filter      ? "result_filter (retry_if_result)"
                        : retry_if_exception ? "retry_if_exception"
                                             : nullptr;
    if (mixed)
      detail::refuse(
          where, "classify", "set",
          (std::string("and ") + mixed + " is set too: classify replaces it, decide there")
              .c_str());
  }
  CORETRY_ALLOW_DEPRECATED_END
  if (when_open != on_open::fail && when_open != on_open::wait)
    detail::refuse(where, "when_open", std::to_string(static_cast<int>(when_open)),
                   "must be on_open::fail or on_open::wait");
}

shared_policy::shared_policy(retry_policy p) {
  p.validate();
  p_ = std::make_shared<const retry_policy>(std::move(p));
}

namespace detail {
void check_policy(const shared_policy& p) {
  if (!p)
    throw std::invalid_argument("coretry::shared_policy: empty (moved from)");
}

retry_policy policy_copy(const shared_policy& p) {
  check_policy(p);
  return *p;
}
} // namespace detail

} // namespace coretry
