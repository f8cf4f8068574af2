// SPDX-License-Identifier: BSL-1.0
// Fuzz target: backoff, retry_policy and the overload controls (circuit breaker, budgets,
// adaptive rate limiter) built from arbitrary numbers, then the pure schedule of
// include/coretry/detail/schedule.hpp driven with arbitrary attempt durations, outcomes and
// server hints.
//
// Properties: a factory either throws std::invalid_argument ("coretry::...: field = value
// (rule)") or gives a backoff whose delays are non-negative and at most its cap (plus the
// documented excess of normal and additive jitter), with a non-decreasing growth curve; a
// control either throws std::invalid_argument naming itself or works; a policy that
// validate() accepts gives a schedule that stops within max_attempts attempts,
// never sleeps past its deadline, never sleeps longer than max(cap, max_retry_after) and never
// overflows (UBSan watches the arithmetic).

#include <coretry/backoff.hpp>
#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/detail/schedule.hpp>
#include <coretry/policy.hpp>
#include <coretry/rate_limit.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>

#include <fuzzer/FuzzedDataProvider.h>

namespace {

using coretry::nanoseconds;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

/// Any double, NaN and infinities included, now and then a plain one.
double any_double(FuzzedDataProvider& in) {
  if (in.ConsumeBool())
    return std::bit_cast<double>(in.ConsumeIntegral<std::uint64_t>());
  return in.ConsumeFloatingPointInRange<double>(-4.0, 2000.0);
}

/// Any duration: small ones often, the extremes sometimes.
nanoseconds any_duration(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
  case 0:
    return nanoseconds(in.ConsumeIntegral<std::int64_t>());
  case 1:
    return nanoseconds(in.ConsumeIntegralInRange<std::int64_t>(-10, 10'000'000'000));
  case 2:
    return nanoseconds::max() - nanoseconds(in.ConsumeIntegralInRange<std::int64_t>(0, 1000));
  default:
    return nanoseconds(in.ConsumeIntegralInRange<std::int64_t>(-1000, 1000));
  }
}

void check_message(const std::invalid_argument& e) {
  const std::string_view what = e.what();
  check(what.starts_with("coretry::"), "message does not name coretry");
  check(what.find(" = ") != std::string_view::npos, "message names no value");
}

std::optional<coretry::backoff> make_backoff(FuzzedDataProvider& in) {
  try {
    std::optional<coretry::backoff> b;
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      b = coretry::backoff::fixed(any_duration(in));
      break;
    case 1: {
      const auto initial = any_duration(in);
      const auto step = any_duration(in);
      b = coretry::backoff::linear(initial, step, any_duration(in));
      break;
    }
    default: {
      const auto initial = any_duration(in);
      const double multiplier = any_double(in);
      b = coretry::backoff::exponential(initial, multiplier, any_duration(in));
      break;
    }
    }
    coretry::jitter j;
    j.kind = static_cast<coretry::jitter_kind>(in.ConsumeIntegralInRange<int>(0, 7));
    j.relative_stddev = any_double(in);
    j.max_extra = any_duration(in);
    if (in.ConsumeBool()) {
      // Through the named constructors, as a caller would.
      if (j.kind == coretry::jitter_kind::normal)
        j = coretry::jitter::normal(j.relative_stddev);
      else if (j.kind == coretry::jitter_kind::additive)
        j = coretry::jitter::additive(j.max_extra);
    }
    return b->with_jitter(j);
  } catch (const std::invalid_argument& e) {
    check_message(e);
    return std::nullopt;
  }
}

/// Builds the overload controls from arbitrary numbers; each either throws
/// std::invalid_argument naming itself or is attached to `p`.
void add_overload_controls(coretry::retry_policy& p, FuzzedDataProvider& in) {
  try {
    if (in.ConsumeBool()) {
      coretry::circuit_breaker_options o;
      o.consecutive_failures = in.ConsumeIntegral<unsigned>() % 2'000'000;
      o.failure_ratio = any_double(in);
      o.minimum_throughput = in.ConsumeIntegral<unsigned>() % 100;
      o.window = any_duration(in);
      o.window_buckets = in.ConsumeIntegral<unsigned>() % 2000;
      o.break_duration = any_duration(in);
      o.break_jitter = any_double(in);
      o.half_open_probes = in.ConsumeIntegral<unsigned>() % 100'000;
      o.seed = in.ConsumeIntegral<std::uint64_t>();
      p.breaker = std::make_shared<coretry::circuit_breaker>(o);
    }
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 1: {
      const double max_tokens = any_double(in);
      p.budget = std::make_shared<coretry::token_bucket_budget>(max_tokens, any_double(in));
      break;
    }
    case 2: {
      coretry::ratio_budget_options o;
      o.ratio = any_double(in);
      o.min_retries_per_second = any_double(in);
      o.window = any_duration(in);
      o.window_buckets = in.ConsumeIntegral<unsigned>() % 2000;
      p.budget = std::make_shared<coretry::ratio_budget>(o);
      break;
    }
    default:
      break;
    }
    if (in.ConsumeBool()) {
      coretry::adaptive_rate_options o;
      o.beta = any_double(in);
      o.scale = any_double(in);
      o.smoothing = any_double(in);
      o.measure_interval = any_duration(in);
      o.min_rate = any_double(in);
      o.burst = any_duration(in);
      o.initial_rate = any_double(in);
      p.rate_limit = std::make_shared<coretry::adaptive_rate_limiter>(o);
    }
  } catch (const std::invalid_argument& e) {
    check_message(e);
    p.breaker.reset();
    p.budget.reset();
    p.rate_limit.reset();
  }
}

nanoseconds saturating_add(nanoseconds a, nanoseconds b) {
  return a > nanoseconds::max() - b ? nanoseconds::max() : a + b;
}

/// The largest delay `b` may return for any retry.
nanoseconds bound(const coretry::backoff& b) {
  const auto& j = b.jitter_spec();
  if (j.kind == coretry::jitter_kind::additive)
    return saturating_add(b.max_delay(), j.max_extra);
  if (j.kind == coretry::jitter_kind::normal) {
    // Marsaglia's polar method never draws beyond about 12.2 standard deviations.
    const double top =
        static_cast<double>(b.max_delay().count()) * (1.0 + 13.0 * j.relative_stddev);
    return top >= 9.2e18 ? nanoseconds::max() : nanoseconds(static_cast<std::int64_t>(top));
  }
  return b.max_delay();
}

void check_backoff(const coretry::backoff& b, FuzzedDataProvider& in) {
  check(b.initial() >= nanoseconds::zero(), "negative initial");
  check(b.max_delay() >= b.initial(), "cap below initial");
  check(!b.to_string().empty(), "empty description");
  const nanoseconds top = bound(b);
  coretry::fast_rng rng(in.ConsumeIntegral<std::uint64_t>());
  nanoseconds previous = b.initial();
  nanoseconds last_base = nanoseconds::zero();
  for (unsigned n = 0; n < 80; ++n) {
    const nanoseconds base = b.base_delay(n);
    check(base >= nanoseconds::zero() && base <= b.max_delay(), "growth curve out of [0, cap]");
    check(base >= last_base, "growth curve decreasing");
    last_base = base;
    const nanoseconds d = b.delay(n, previous, rng);
    check(d >= nanoseconds::zero(), "negative delay");
    check(d <= top, "delay above its cap");
    previous = d;
  }
  for (unsigned n : {1000u, 65536u, 1u << 31, std::numeric_limits<unsigned>::max()}) {
    const nanoseconds d = b.delay(n, previous, rng);
    check(d >= nanoseconds::zero() && d <= top, "delay of a far retry out of range");
    check(b.base_delay(n) >= last_base, "growth curve decreasing far out");
  }
}

void run_schedule(const coretry::retry_policy& p, FuzzedDataProvider& in) {
  const nanoseconds start(in.ConsumeIntegralInRange<std::int64_t>(0, std::int64_t{1} << 62));
  coretry::detail::schedule s(p, start);
  const nanoseconds top = std::max(bound(p.backoff), p.max_retry_after);
  nanoseconds now = start;
  if (p.budget)
    p.budget->on_request(start);
  // Stop the run, not the schedule, after this many attempts: max_attempts may be 2^32 - 1.
  const unsigned limit = std::min(p.max_attempts, 300u);
  coretry::detail::retry_charge charge; // the budget's retry, until it is sent
  for (;;) {
    coretry::detail::send_token token;
    if (p.rate_limit) {
      const auto v = s.pace(now, token);
      if (v.stop == coretry::errc::rate_limited) {
        check(!token, "a refused send token was reserved");
        return;
      }
      if (v.stop) {
        check(v.stop == coretry::errc::deadline_exceeded, "pacing stopped for another reason");
        check(s.has_deadline(), "pacing stopped without a deadline");
        check(!token, "a send token kept after giving up");
        return;
      }
      check(v.delay >= nanoseconds::zero(), "negative pacing wait");
      if (s.has_deadline() && v.delay > nanoseconds::zero())
        check(v.delay < s.deadline() - now, "pacing past the deadline");
      if (now > nanoseconds::max() - v.delay)
        return; // no clock lives that long
      now += v.delay;
    }
    coretry::detail::gate_grant grant;
    if (const auto why = s.begin_attempt(now, grant, charge)) {
      if (why == coretry::errc::circuit_open) {
        check(p.breaker != nullptr, "circuit_open without a breaker");
      } else {
        check(why == coretry::errc::deadline_exceeded, "refused an attempt for another reason");
        check(s.has_deadline() && now >= s.deadline(), "refused an attempt before the deadline");
      }
      return;
    }
    charge.used(); // the loop spends it when it sends the attempt
    check(!charge, "a retry sent but not spent");
    token.used();
    check(s.attempts() <= p.max_attempts, "more attempts than max_attempts");
    bool by_deadline = false;
    const nanoseconds run_limit = s.attempt_limit(now, by_deadline);
    check(run_limit > nanoseconds::zero(), "an attempt with no time to run");
    const nanoseconds ran = nanoseconds(in.ConsumeIntegralInRange<std::int64_t>(
        0, std::min<std::int64_t>(run_limit.count(), 100'000'000'000)));
    if (now > nanoseconds::max() - ran)
      return; // no clock lives that long
    now += ran;
    const bool cut = by_deadline && ran == run_limit;
    const bool succeeded = in.ConsumeIntegralInRange<int>(0, 7) == 0;
    const auto error = succeeded
                           ? std::error_code()
                           : (in.ConsumeBool() ? std::make_error_code(std::errc::connection_refused)
                                               : std::error_code(coretry::errc::attempt_timeout));
    // One verdict, heard by the breaker, the sending rate and the budget.
    std::exception_ptr thrown;
    const auto verdict_of = s.classify(error, cut, false, thrown);
    check(!thrown, "a default predicate threw");
    check(!cut || verdict_of.kind == coretry::detail::attempt_kind::failure,
          "a cut attempt that is not a failure");
    s.report(verdict_of, grant, now);
    check(!grant, "a breaker grant left unreported");
    if (succeeded)
      return;
    coretry::detail::attempt_end end{error, cut, std::max(nanoseconds::zero(), any_duration(in)),
                                     verdict_of.kind};
    const auto v = s.after_failure(end, now, &charge);
    if (v.stop) {
      if (v.stop == coretry::errc::attempts_exhausted)
        check(s.attempts() == p.max_attempts, "exhausted before max_attempts");
      else if (v.stop == coretry::errc::retry_after_too_long)
        check(end.hint > p.max_retry_after, "refused a hint within max_retry_after");
      else if (v.stop == coretry::errc::retry_after_past_deadline)
        check(s.has_deadline() && end.hint >= s.deadline() - now, "refused a hint in time");
      else if (v.stop == coretry::errc::budget_exhausted)
        check(p.budget != nullptr, "budget_exhausted without a budget");
      else
        check(v.stop == coretry::errc::deadline_exceeded, "stopped for an unknown reason");
      return;
    }
    check(s.attempts() < p.max_attempts, "retrying beyond max_attempts");
    check(v.delay >= nanoseconds::zero(), "negative sleep");
    check(v.delay >= end.hint, "sleeping less than the server asked");
    check(v.delay <= top, "sleeping longer than the cap and max_retry_after allow");
    if (s.has_deadline())
      check(v.delay < s.deadline() - now, "sleeping past the deadline");
    if (now > nanoseconds::max() - v.delay)
      return; // no clock lives that long
    now += v.delay;
    if (s.attempts() >= limit)
      return;
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  auto b = make_backoff(in);
  if (!b)
    return 0;
  check_backoff(*b, in);

  coretry::retry_policy p;
  p.backoff = *b;
  p.max_attempts = in.ConsumeBool() ? in.ConsumeIntegralInRange<unsigned>(0, 20)
                                    : in.ConsumeIntegral<unsigned>();
  p.deadline = in.ConsumeBool() ? coretry::unlimited : any_duration(in);
  p.attempt_timeout = in.ConsumeBool() ? coretry::unlimited : any_duration(in);
  if (in.ConsumeBool())
    p.max_retry_after = any_duration(in);
  p.seed = in.ConsumeIntegral<std::uint64_t>();
  add_overload_controls(p, in);
  try {
    p.validate();
  } catch (const std::invalid_argument& e) {
    check_message(e);
    return 0;
  }
  run_schedule(p, in);
  return 0;
}
