// SPDX-License-Identifier: BSL-1.0
#include <coretry/backoff.hpp>
#include <coretry/detail/refuse.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace coretry {
namespace {

using namespace std::chrono_literals;

[[noreturn]] void reject(const char* where, const char* field, const std::string& value,
                         const char* rule) {
  detail::refuse((std::string("coretry::") + where).c_str(), field, value, rule);
}

std::string show(nanoseconds d) {
  return std::to_string(d.count()) + "ns";
}

std::string show_short(nanoseconds d) {
  const auto ns = d.count();
  if (ns != 0 && ns % 1'000'000'000 == 0)
    return std::to_string(ns / 1'000'000'000) + "s";
  if (ns != 0 && ns % 1'000'000 == 0)
    return std::to_string(ns / 1'000'000) + "ms";
  if (ns != 0 && ns % 1'000 == 0)
    return std::to_string(ns / 1'000) + "us";
  return std::to_string(ns) + "ns";
}

// Converts a non-negative double count of nanoseconds, saturating at nanoseconds::max().
nanoseconds saturate(double ns) noexcept {
  constexpr double limit = static_cast<double>(nanoseconds::max().count());
  if (!(ns > 0))
    return nanoseconds::zero();
  if (ns >= limit)
    return nanoseconds::max();
  return nanoseconds(static_cast<nanoseconds::rep>(ns));
}

nanoseconds saturating_add(nanoseconds a, nanoseconds b) noexcept {
  return a > nanoseconds::max() - b ? nanoseconds::max() : a + b;
}

constexpr std::array<std::string_view, 6> jitter_names{"none",         "full",   "equal",
                                                       "decorrelated", "normal", "additive"};

} // namespace

std::string_view to_string(jitter_kind kind) noexcept {
  return jitter_names[static_cast<std::size_t>(kind)];
}

std::optional<jitter_kind> parse_jitter_kind(std::string_view name) noexcept {
  for (std::size_t i = 0; i < jitter_names.size(); ++i)
    if (jitter_names[i] == name)
      return static_cast<jitter_kind>(i);
  return std::nullopt;
}

jitter jitter::normal(double relative_stddev) {
  if (!(relative_stddev >= 0.0 && relative_stddev <= 10.0))
    reject("jitter::normal", "relative_stddev", std::to_string(relative_stddev),
           "must be in [0, 10]");
  return {jitter_kind::normal, relative_stddev};
}

jitter jitter::additive(nanoseconds max_extra) {
  if (max_extra < nanoseconds::zero())
    reject("jitter::additive", "max_extra", show(max_extra), "must not be negative");
  return {jitter_kind::additive, 0.0, max_extra};
}

jitter jitter::additive_truncated(nanoseconds max_extra) {
  if (max_extra < nanoseconds::zero())
    reject("jitter::additive_truncated", "max_extra", show(max_extra), "must not be negative");
  return {jitter_kind::additive, 0.0, max_extra, true};
}

backoff backoff::fixed(nanoseconds delay) {
  if (delay < nanoseconds::zero())
    reject("backoff::fixed", "delay", show(delay), "must not be negative");
  return {curve::fixed, delay, nanoseconds::zero(), 1.0, delay};
}

backoff backoff::linear(nanoseconds initial, nanoseconds step, nanoseconds max) {
  if (initial < nanoseconds::zero())
    reject("backoff::linear", "initial", show(initial), "must not be negative");
  if (step < nanoseconds::zero())
    reject("backoff::linear", "step", show(step), "must not be negative");
  if (max < initial)
    reject("backoff::linear", "max", show(max), "must be at least initial");
  return {curve::linear, initial, step, 1.0, max};
}

backoff backoff::exponential(nanoseconds initial, double multiplier, nanoseconds max) {
  if (initial <= nanoseconds::zero())
    reject("backoff::exponential", "initial", show(initial), "must be positive");
  if (!(multiplier >= 1.0 && multiplier <= 1000.0))
    reject("backoff::exponential", "multiplier", std::to_string(multiplier),
           "must be in [1, 1000]");
  if (max < initial)
    reject("backoff::exponential", "max", show(max), "must be at least initial");
  backoff b{curve::exponential, initial, nanoseconds::zero(), multiplier, max};
  // initial * multiplier^n >= max from n = log(max / initial) / log(multiplier) on; one more
  // step covers rounding. A multiplier of 1 never reaches a larger cap.
  const double steps = multiplier == 1.0
                           ? (max == initial ? 0.0 : HUGE_VAL)
                           : std::ceil(std::log(static_cast<double>(max.count()) /
                                                static_cast<double>(initial.count())) /
                                       std::log(multiplier)) +
                                 1.0;
  constexpr double most = std::numeric_limits<unsigned>::max();
  b.capped_from_ =
      steps >= most ? std::numeric_limits<unsigned>::max() : static_cast<unsigned>(steps);
  return b;
}

backoff backoff::with_jitter(coretry::jitter j) const {
  // Re-validate: a jitter built by hand (aggregate initialisation) skips the named constructors.
  if (j.kind == jitter_kind::normal)
    j = jitter::normal(j.relative_stddev);
  else if (j.kind == jitter_kind::additive)
    j = j.truncated ? jitter::additive_truncated(j.max_extra) : jitter::additive(j.max_extra);
  else if (static_cast<std::size_t>(j.kind) >= jitter_names.size())
    reject("backoff::with_jitter", "kind", std::to_string(static_cast<int>(j.kind)),
           "unknown jitter kind");
  if (j.kind == jitter_kind::decorrelated && initial_ <= nanoseconds::zero())
    reject("backoff::with_jitter", "initial", show(initial_),
           "decorrelated jitter needs a positive initial delay");
  backoff copy = *this;
  copy.jitter_ = j;
  return copy;
}

nanoseconds backoff::base_delay(unsigned retry) const noexcept {
  switch (curve_) {
  case curve::fixed:
    return initial_;
  case curve::linear: {
    if (step_ == nanoseconds::zero())
      return initial_;
    const auto room = (max_ - initial_) / step_; // steps before the cap
    if (static_cast<std::uint64_t>(retry) > static_cast<std::uint64_t>(room))
      return max_;
    return std::min(max_, initial_ + step_ * static_cast<nanoseconds::rep>(retry));
  }
  case curve::exponential: {
    if (retry >= capped_from_)
      return max_;
    // multiplier^retry by squaring: exact for powers of two, a few multiplies at most
    // (retry < capped_from_, which is below 2^32).
    double power = 1.0;
    double base = multiplier_;
    for (unsigned n = retry; n != 0; n >>= 1) {
      if (n & 1u)
        power *= base;
      base *= base;
    }
    return std::min(max_, saturate(static_cast<double>(initial_.count()) * power));
  }
  }
  return max_;
}

nanoseconds backoff::delay(unsigned retry, nanoseconds previous, fast_rng& rng) const noexcept {
  switch (jitter_.kind) {
  case jitter_kind::none:
    return base_delay(retry);
  case jitter_kind::full:
    return saturate(rng.uniform() * static_cast<double>(base_delay(retry).count()));
  case jitter_kind::equal: {
    const double half = static_cast<double>(base_delay(retry).count()) / 2.0;
    return saturate(half + rng.uniform() * half);
  }
  case jitter_kind::decorrelated: {
    const double lo = static_cast<double>(initial_.count());
    const double hi = std::max(lo, 3.0 * static_cast<double>(std::max(previous, initial_).count()));
    return std::min(max_, saturate(rng.uniform(lo, hi)));
  }
  case jitter_kind::normal: {
    const double d = static_cast<double>(base_delay(retry).count());
    return saturate(d + rng.normal() * d * jitter_.relative_stddev);
  }
  case jitter_kind::additive: {
    const nanoseconds sum =
        saturating_add(base_delay(retry),
                       saturate(rng.uniform() * static_cast<double>(jitter_.max_extra.count())));
    return jitter_.truncated ? std::min(sum, max_) : sum;
  }
  }
  return base_delay(retry);
}

std::string backoff::to_string() const {
  std::string out;
  switch (curve_) {
  case curve::fixed:
    out = "fixed(" + show_short(initial_) + ")";
    break;
  case curve::linear:
    out = "linear(" + show_short(initial_) + ", +" + show_short(step_) + ", max " +
          show_short(max_) + ")";
    break;
  case curve::exponential: {
    std::string m = std::to_string(multiplier_);
    m.erase(m.find_last_not_of('0') + 1);
    if (!m.empty() && m.back() == '.')
      m.pop_back();
    out = "exponential(" + show_short(initial_) + ", x" + m + ", max " + show_short(max_) + ")";
    break;
  }
  }
  if (jitter_.kind != jitter_kind::none)
    out += " + " + std::string(jitter_.truncated ? "truncated " : "") +
           std::string(coretry::to_string(jitter_.kind)) + " jitter";
  return out;
}

} // namespace coretry
