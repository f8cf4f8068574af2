// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// The per-operation random source behind every jittered delay.

#include <coretry/export.hpp>

#include <cstdint>
#include <limits>

namespace coretry {

/// A small, fast pseudo-random generator (SplitMix64: one 64-bit word of state, an add and three
/// xor-shift-multiply steps per draw; it passes BigCrush). Each retry operation owns one, so a
/// draw takes no lock and makes no system call. Satisfies `std::uniform_random_bit_generator`.
///
/// Not cryptographic. Seed it for reproducible tests; `fast_rng::from_entropy()` gives each
/// operation a distinct stream without touching `std::random_device` more than once per thread.
class CORETRY_API fast_rng {
public:
  /// The type of the numbers it draws.
  using result_type = std::uint64_t;

  /// A generator seeded with `seed`: the same sequence for the same seed.
  constexpr explicit fast_rng(std::uint64_t seed) noexcept : state_(seed) {}

  /// A generator whose seed mixes a per-thread counter with entropy read once per thread.
  static fast_rng from_entropy() noexcept;

  /// The smallest number it draws.
  static constexpr result_type min() noexcept { return 0; }
  /// The largest number it draws.
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  /// The next number, uniform over [min(), max()].
  constexpr result_type operator()() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  /// A double uniform in [0, 1), with 53 random bits.
  constexpr double uniform() noexcept { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }

  /// A double uniform in [lo, hi).
  constexpr double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }

  /// A standard normal variate N(0, 1) (Marsaglia's polar method; the spare value is cached).
  double normal() noexcept;

private:
  std::uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

} // namespace coretry
