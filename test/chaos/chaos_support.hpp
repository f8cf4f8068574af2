// SPDX-License-Identifier: BSL-1.0
#pragma once
// What both chaos tests share: their knobs from the environment, the seed they print, and the
// descriptor count they compare.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

namespace coretry::test {

inline long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v ? std::atol(v) : fallback;
}

inline long open_fds() {
  long n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

/// CORETRY_CHAOS_SEED, or a fresh one; printed either way, with how to replay it.
inline std::uint64_t chaos_seed(const char* what, long operations) {
  const auto seed =
      static_cast<std::uint64_t>(env_long("CORETRY_CHAOS_SEED", std::random_device{}()));
  std::printf("%s: %ld operations, seed %llu (CORETRY_CHAOS_SEED to replay)\n", what, operations,
              static_cast<unsigned long long>(seed));
  return seed;
}

} // namespace coretry::test
