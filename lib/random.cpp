// SPDX-License-Identifier: BSL-1.0
#include <coretry/random.hpp>

#include <cmath>
#include <random>

namespace coretry {

fast_rng fast_rng::from_entropy() noexcept {
  thread_local std::uint64_t stream = [] {
    std::uint64_t seed = 0;
    try {
      std::random_device device;
      seed = (static_cast<std::uint64_t>(device()) << 32) ^ device();
    } catch (...) {
      // No entropy source: fall back to a per-thread address, still distinct per thread.
    }
    int local = 0;
    return seed ^ reinterpret_cast<std::uintptr_t>(&local);
  }();
  // Each call advances the per-thread stream by one SplitMix step, so seeds never repeat.
  fast_rng mixer(stream);
  stream += 0x9e3779b97f4a7c15ull;
  return fast_rng(mixer());
}

double fast_rng::normal() noexcept {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u = 0;
  double v = 0;
  double s = 0;
  do {
    u = uniform(-1.0, 1.0);
    v = uniform(-1.0, 1.0);
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  const double scale = std::sqrt(-2.0 * std::log(s) / s);
  spare_ = v * scale;
  has_spare_ = true;
  return u * scale;
}

} // namespace coretry
