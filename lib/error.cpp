// SPDX-License-Identifier: BSL-1.0
#include <coretry/error.hpp>

namespace coretry {
namespace {

class retry_category_impl final : public std::error_category {
public:
  const char* name() const noexcept override { return "coretry"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
    case errc::attempts_exhausted:
      return "retry attempts exhausted";
    case errc::deadline_exceeded:
      return "retry deadline exceeded";
    case errc::attempt_timeout:
      return "attempt timed out";
    case errc::budget_exhausted:
      return "retry budget exhausted";
    case errc::result_rejected:
      return "attempt result rejected by the retry predicate";
    case errc::cancelled:
      return "retry cancelled";
    case errc::circuit_open:
      return "circuit breaker open: attempt not sent";
    case errc::unexpected_exception:
      return "an operation or a policy hook threw an unexpected exception";
    case errc::retry_after_too_long:
      return "the server asked to retry later than the policy's max_retry_after";
    case errc::retry_after_past_deadline:
      return "the server asked to retry after the retry deadline";
    case errc::rate_limited:
      return "the sending rate refused a send token: the wait would be too long";
    case errc::throttled_locally:
      return "the client's adaptive throttle rejected the attempt locally";
    }
    return "unknown coretry error " + std::to_string(value);
  }
};

} // namespace

const std::error_category& retry_category() noexcept {
  static const retry_category_impl category;
  return category;
}

} // namespace coretry
