// SPDX-License-Identifier: BSL-1.0
#pragma once
// Private: a sliding-window event counter made of one atomic word per bucket, shared by the
// windowed retry budget and the circuit breaker. Not installed.
//
// Time is cut into buckets of `width`; bucket k holds the events with floor(now / width) == k.
// Each slot word packs the low 32 bits of its bucket index (high half) with its count (low half),
// so that moving a slot on to a newer bucket and counting in it is one compare-and-swap: no lock,
// and no count from an expired bucket can leak into a new one. The window at `now` is the
// `buckets` newest buckets up to now's, so an event stays counted for between
// (buckets - 1) * width and buckets * width.
//
// 32 bits of tag wrap (after 2^32 buckets: 50 days of 1 ms buckets), so a slot left alone that
// long would read as current. Hence `latest_`, the full index of the newest bucket seen: the
// caller that moves it on sweeps every slot more than two windows old (every slot, after a
// silence of 2^31 buckets or more). Between sweeps no slot is more than three windows older
// than `latest_`, and its 32-bit age is exact.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>

#include "saturate.hpp"

namespace coretry::detail {

class window_counter {
public:
  window_counter(std::chrono::nanoseconds width, unsigned buckets)
      : width_(width.count()), buckets_(buckets),
        slots_(std::make_unique<std::atomic<std::uint64_t>[]>(buckets)) {
    for (unsigned i = 0; i < buckets_; ++i)
      slots_[i].store(empty_, std::memory_order_relaxed);
  }

  /// The bucket index of `now` (floor division, so negative times work too).
  std::int64_t bucket(std::chrono::nanoseconds now) const noexcept {
    const std::int64_t t = now.count();
    return t >= 0 ? t / width_ : -((-t + width_ - 1) / width_);
  }

  /// Counts one event at `now`; returns the bucket it went to (for `undo`). An event older than
  /// what its slot already holds (a caller whose clock reading is a full window late) is dropped.
  std::int64_t add(std::chrono::nanoseconds now) noexcept {
    const std::int64_t k = bucket(now);
    advance(k);
    auto& slot = slots_[index(k)];
    const std::uint32_t tag = static_cast<std::uint32_t>(k);
    std::uint64_t w = slot.load(std::memory_order_relaxed);
    for (;;) {
      std::uint64_t next = 0;
      const std::int32_t age = static_cast<std::int32_t>(tag - tag_of(w));
      if (w != empty_ && age == 0) {
        if (count_of(w) == 0xffffffffu)
          return k; // saturated
        next = w + 1;
      } else if (w == empty_ || age > 0) {
        next = pack(tag, 1);
      } else {
        return k;
      }
      if (slot.compare_exchange_weak(w, next, std::memory_order_acq_rel, std::memory_order_relaxed))
        return k;
    }
  }

  /// Takes back one event counted in bucket `k`, if that bucket is still in its slot.
  void undo(std::int64_t k) noexcept {
    auto& slot = slots_[index(k)];
    const std::uint32_t tag = static_cast<std::uint32_t>(k);
    std::uint64_t w = slot.load(std::memory_order_relaxed);
    while (w != empty_ && tag_of(w) == tag && count_of(w) > 0 &&
           !slot.compare_exchange_weak(w, w - 1, std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
    }
  }

  /// Events in the window ending at `now`.
  std::uint64_t sum(std::chrono::nanoseconds now) const noexcept {
    const std::int64_t k = bucket(now);
    advance(k);
    const std::uint32_t tag = static_cast<std::uint32_t>(k);
    std::uint64_t total = 0;
    for (unsigned i = 0; i < buckets_; ++i) {
      const std::uint64_t w = slots_[i].load(std::memory_order_acquire);
      if (w == empty_)
        continue;
      const std::int32_t age = static_cast<std::int32_t>(tag - tag_of(w));
      if (age >= 0 && static_cast<std::uint32_t>(age) < buckets_)
        total += count_of(w);
    }
    return total;
  }

  /// Forgets every event.
  void clear() noexcept {
    for (unsigned i = 0; i < buckets_; ++i)
      slots_[i].store(empty_, std::memory_order_release);
  }

private:
  // A count of zero in any bucket reads the same as no bucket; `empty_` only marks a slot never
  // used, so that bucket 0 with no events is not mistaken for a live bucket.
  static constexpr std::uint64_t empty_ = ~std::uint64_t{0} << 32;

  static std::uint64_t pack(std::uint32_t tag, std::uint32_t count) noexcept {
    return (std::uint64_t{tag} << 32) | count;
  }
  static std::uint32_t tag_of(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w >> 32);
  }
  static std::uint32_t count_of(std::uint64_t w) noexcept { return static_cast<std::uint32_t>(w); }

  /// Moves `latest_` on to `k` if it is newer; the caller that does sweeps the slots.
  void advance(std::int64_t k) const noexcept {
    std::int64_t last = latest_.load(std::memory_order_acquire);
    while (k > last) {
      if (latest_.compare_exchange_weak(last, k, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        sweep(k, last);
        return;
      }
    }
  }

  /// Empties every slot more than two windows older than bucket `k`; all of them when the previous
  /// newest bucket `prev` is so far back that 32-bit ages may have wrapped.
  void sweep(std::int64_t k, std::int64_t prev) const noexcept {
    constexpr std::int64_t wrap = std::int64_t{1} << 31;
    const bool all =
        prev == none_ || sub_sat(k, prev) >= wrap - static_cast<std::int64_t>(buckets_);
    const std::uint32_t tag = static_cast<std::uint32_t>(k);
    for (unsigned i = 0; i < buckets_; ++i) {
      std::uint64_t w = slots_[i].load(std::memory_order_acquire);
      if (w == empty_)
        continue;
      const std::int32_t age = static_cast<std::int32_t>(tag - tag_of(w));
      // Two windows, not one: a caller whose clock reads a little late still sees its window.
      if (all || age >= 2 * static_cast<std::int32_t>(buckets_)) // a newer one (age < 0) stays
        slots_[i].compare_exchange_strong(w, empty_, std::memory_order_acq_rel,
                                          std::memory_order_relaxed);
    }
  }

  static constexpr std::int64_t none_ = std::numeric_limits<std::int64_t>::min();
  std::size_t index(std::int64_t k) const noexcept {
    const std::int64_t n = buckets_;
    return static_cast<std::size_t>(((k % n) + n) % n);
  }

  std::int64_t width_;
  unsigned buckets_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> slots_;
  mutable std::atomic<std::int64_t> latest_{none_}; ///< the newest bucket seen
};

/// What a breaker's window holds.
struct call_window_sums {
  std::uint64_t successes = 0; ///< slow ones included
  std::uint64_t failures = 0;
  std::uint64_t slow = 0;
};

/// The circuit breaker's count-based window: the last `size` outcomes, one atomic byte each in a
/// ring, with running totals. Each outcome takes the next slot (one fetch-and-add), swaps out the
/// oldest and moves the totals by the difference, so reading the sums costs three loads whatever
/// the size. Under concurrent adds a read may see one add's totals half moved; it never drifts.
class call_window {
public:
  enum : std::uint8_t { empty = 0, success = 1, slow = 2, failure = 3 };

  explicit call_window(unsigned size)
      : size_(size), slots_(std::make_unique<std::atomic<std::uint8_t>[]>(size)) {
    for (unsigned i = 0; i < size_; ++i)
      slots_[i].store(empty, std::memory_order_relaxed);
  }

  /// Counts one outcome (`success`, `slow` or `failure`), forgetting the oldest.
  void add(std::uint8_t kind) noexcept {
    const std::uint64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    const std::uint8_t old =
        slots_[static_cast<std::size_t>(i % size_)].exchange(kind, std::memory_order_acq_rel);
    move(kind, 1);
    move(old, -1);
  }

  using sums = call_window_sums;
  sums sum() const noexcept { return {read(successes_), read(failures_), read(slow_)}; }

  /// Forgets every outcome.
  void clear() noexcept {
    for (unsigned i = 0; i < size_; ++i)
      move(slots_[i].exchange(empty, std::memory_order_acq_rel), -1);
  }

private:
  void move(std::uint8_t kind, std::int64_t by) noexcept {
    switch (kind) {
    case slow:
      slow_.fetch_add(by, std::memory_order_relaxed);
      [[fallthrough]];
    case success:
      successes_.fetch_add(by, std::memory_order_relaxed);
      break;
    case failure:
      failures_.fetch_add(by, std::memory_order_relaxed);
      break;
    default:
      break;
    }
  }
  static std::uint64_t read(const std::atomic<std::int64_t>& n) noexcept {
    const std::int64_t v = n.load(std::memory_order_relaxed);
    return v > 0 ? static_cast<std::uint64_t>(v) : 0; // a concurrent add half moved
  }

  unsigned size_;
  std::unique_ptr<std::atomic<std::uint8_t>[]> slots_;
  std::atomic<std::uint64_t> next_{0};
  std::atomic<std::int64_t> successes_{0};
  std::atomic<std::int64_t> failures_{0};
  std::atomic<std::int64_t> slow_{0};
};

} // namespace coretry::detail
