// SPDX-License-Identifier: BSL-1.0
#include <coretry/error.hpp>

#include <cstring>

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
    case errc::retryable_exception:
      return "an attempt threw an exception the retry policy retries";
    }
    return "unknown coretry error " + std::to_string(value);
  }
};

// `ec` is the system's `e`. Asio 1.22's own system category ("asio.system") does not map its
// codes to the generic conditions, as later versions and std::system_category() do.
bool is_system(const std::error_code& ec, std::errc e) noexcept {
  if (ec == e)
    return true;
  return ec.value() == static_cast<int>(e) && std::strcmp(ec.category().name(), "asio.system") == 0;
}

class condition_category_impl final : public std::error_category {
public:
  const char* name() const noexcept override { return "coretry.condition"; }
  std::string message(int value) const override {
    switch (static_cast<condition>(value)) {
    case condition::gave_up:
      return "the retry policy gave up";
    case condition::refused_locally:
      return "refused locally: the attempt was not sent";
    case condition::timed_out:
      return "timed out";
    case condition::cancelled:
      return "cancelled";
    case condition::pushback:
      return "the upstream asked the client to slow down";
    case condition::client_error:
      return "the upstream refused the request for the request's own fault";
    case condition::answered:
      return "the upstream answered without failing";
    }
    return "unknown coretry condition " + std::to_string(value);
  }
  bool equivalent(const std::error_code& ec, int value) const noexcept override {
    const bool ours = ec.category() == retry_category();
    const auto e = static_cast<errc>(ec.value());
    switch (static_cast<condition>(value)) {
    case condition::gave_up:
      return ours && (e == errc::attempts_exhausted || e == errc::budget_exhausted ||
                      e == errc::deadline_exceeded || e == errc::retry_after_too_long ||
                      e == errc::retry_after_past_deadline);
    case condition::refused_locally:
      return ours && (e == errc::circuit_open || e == errc::throttled_locally ||
                      e == errc::rate_limited || e == errc::budget_exhausted);
    case condition::timed_out:
      return ours ? (e == errc::attempt_timeout || e == errc::deadline_exceeded)
                  : is_system(ec, std::errc::timed_out);
    case condition::cancelled:
      return ours ? e == errc::cancelled : is_system(ec, std::errc::operation_canceled);
    case condition::pushback:
    case condition::client_error:
    case condition::answered:
      return false; // adapters' categories say which of their codes belong
    }
    return false;
  }
};

} // namespace

const std::error_category& retry_category() noexcept {
  static const retry_category_impl category;
  return category;
}

const std::error_category& condition_category() noexcept {
  static const condition_category_impl category;
  return category;
}

} // namespace coretry
