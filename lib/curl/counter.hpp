// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: a counter with its peak, read without locking by client::stats(). Not installed.

#include <atomic>
#include <cstddef>

namespace coretry::curl::detail {

struct counter {
  std::atomic<std::size_t> value{0};
  std::atomic<std::size_t> peak{0};
  void add(std::ptrdiff_t delta) noexcept {
    const auto d = static_cast<std::size_t>(delta);
    const std::size_t now = value.fetch_add(d, std::memory_order_relaxed) + d;
    if (delta > 0) {
      std::size_t seen = peak.load(std::memory_order_relaxed);
      while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
      }
    }
  }
};

} // namespace coretry::curl::detail
