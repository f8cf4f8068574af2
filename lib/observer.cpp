// SPDX-License-Identifier: BSL-1.0
#include <coretry/observer.hpp>

#include <atomic>
#include <utility>

namespace coretry {

retry_observer::~retry_observer() = default;

const char* to_string(attempt_outcome o) noexcept {
  switch (o) {
  case attempt_outcome::success:
    return "success";
  case attempt_outcome::failure:
    return "failure";
  case attempt_outcome::not_retried:
    return "not_retried";
  case attempt_outcome::abandoned:
    return "abandoned";
  }
  return "unknown";
}

std::function<void(breaker_state, breaker_state, nanoseconds)>
observe_breaker(std::shared_ptr<retry_observer> observer, std::string label) {
  return [o = std::move(observer), l = std::move(label)](breaker_state from, breaker_state to,
                                                         nanoseconds now) noexcept {
    if (!o || !listens(o->interests(), observer_interest::breaker_transition))
      return;
    try {
      o->on_breaker_transition(breaker_transition_event{l, from, to, now});
    } catch (...) { // an observer does not change what it watches (observer.hpp)
    }
  };
}

std::shared_ptr<circuit_breaker> make_observed_breaker(circuit_breaker_options options,
                                                       std::shared_ptr<retry_observer> observer,
                                                       std::string label) {
  // The breaker is made after its hook: the hook finds it through a cell filled in once it is.
  auto self = std::make_shared<std::atomic<const circuit_breaker*>>(nullptr);
  options.on_transition = [own = std::move(options.on_transition), o = std::move(observer),
                           l = std::move(label),
                           self](breaker_state from, breaker_state to, nanoseconds now) noexcept {
    if (own)
      own(from, to, now);
    if (!o || !listens(o->interests(), observer_interest::breaker_transition))
      return;
    try {
      o->on_breaker_transition(
          breaker_transition_event{l, from, to, now, self->load(std::memory_order_acquire)});
    } catch (...) { // an observer does not change what it watches (observer.hpp)
    }
  };
  auto breaker = std::make_shared<circuit_breaker>(std::move(options));
  self->store(breaker.get(), std::memory_order_release);
  return breaker;
}

namespace detail {

#define CORETRY_EMIT(event, member)                                                                \
  void emit(retry_observer& o, const event& e) noexcept {                                          \
    try {                                                                                          \
      o.member(e);                                                                                 \
    } catch (...) { /* dropped: an observer does not change what it watches (observer.hpp) */      \
    }                                                                                              \
  }

CORETRY_EMIT(operation_started_event, on_operation_started)
CORETRY_EMIT(attempt_started_event, on_attempt_started)
CORETRY_EMIT(attempt_finished_event, on_attempt_finished)
CORETRY_EMIT(retry_scheduled_event, on_retry_scheduled)
CORETRY_EMIT(refusal_event, on_refused)
CORETRY_EMIT(hedge_started_event, on_hedge_started)
CORETRY_EMIT(hedge_abandoned_event, on_hedge_abandoned)
CORETRY_EMIT(operation_finished_event, on_operation_finished)

#undef CORETRY_EMIT

} // namespace detail
} // namespace coretry
