// SPDX-License-Identifier: BSL-1.0
#pragma once
// Saturating time arithmetic for the overload controls: every `now` they take is any time on the
// caller's clock, so sums and products of durations are held at the ends of int64 instead of
// overflowing. Private to lib/.

#include <chrono>
#include <cstdint>
#include <limits>

namespace coretry::detail {

inline std::int64_t add_sat(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t r = 0;
  if (!__builtin_add_overflow(a, b, &r))
    return r;
  return b > 0 ? std::numeric_limits<std::int64_t>::max()
               : std::numeric_limits<std::int64_t>::min();
}

inline std::int64_t sub_sat(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t r = 0;
  if (!__builtin_sub_overflow(a, b, &r))
    return r;
  return b < 0 ? std::numeric_limits<std::int64_t>::max()
               : std::numeric_limits<std::int64_t>::min();
}

inline std::chrono::nanoseconds add_sat(std::chrono::nanoseconds a,
                                        std::chrono::nanoseconds b) noexcept {
  return std::chrono::nanoseconds(add_sat(a.count(), b.count()));
}

/// A count of nanoseconds held as a double, rounded and held within [0, int64 max].
inline std::chrono::nanoseconds ns_sat(double ns) noexcept {
  if (!(ns > 0)) // also NaN
    return std::chrono::nanoseconds::zero();
  if (ns >= 9.2e18)
    return std::chrono::nanoseconds::max();
  return std::chrono::nanoseconds(static_cast<std::int64_t>(ns + 0.5));
}

} // namespace coretry::detail
