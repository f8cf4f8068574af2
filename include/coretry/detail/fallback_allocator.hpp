// SPDX-License-Identifier: BSL-1.0
#pragma once
// The allocator of the operation's own intermediate handlers. Private: used by the retry
// operation (retry_op.hpp) and the hedge (hedge_op.hpp).
//
// Every intermediate handler carries the caller's handler's associated allocator, as Asio's
// composed operations' do. Many of the operation's own hops are made where no exception may
// leave: a due attempt deadline (the deadline queue calls `fire` outside any handler of the
// operation), a group's notice (`cancellation_source::cancel()` is `noexcept`, on any thread),
// the hedge's re-armed timer or posted relaunch once an attempt returned (at the end of the
// attempt's coroutine). The others would lose the operation if they threw (the posted start, a
// sleep, a cancellation's hop, the completion's dispatch: the state or the handler goes with
// them), or leave a strand stalled (its queued handler posted, its own scheduling not). An
// allocator that throws there (an arena that has run out) would end the process, or the
// operation uncompleted. So they carry `fallback_allocator`: it asks the handler's allocator
// first and, when that throws, the default heap. A token attempt's handler carries it too: the
// attempt's operation may ask it for memory inside `run()` (posting its completion), where a
// refusal would lose the attempt and the operation with it. Only co_spawn's completion keeps the
// allocator as it is (co_spawn never allocates with it).
//
// The alternative, undoing the step and letting the exception leave `run()`, has no `run()` to
// leave from a group's notice (it runs on the thread calling `cancel()`), and an attempt's
// coroutine has nowhere to send it but its co_spawn completion, which the hedge ignores.
//
// With `std::allocator` (the default) nothing changes: `fallback_t<std::allocator<T>>` is
// `std::allocator<T>`, and the handlers are the types they were.

#include <cstddef>
#include <limits>
#include <memory>
#include <new>

namespace coretry::detail {

/// `Alloc`, but never short of memory: `allocate` asks `Alloc` and, should it throw, the default
/// heap (`std::allocator`). Each block starts with a prefix saying which of the two served it,
/// so any copy or rebind gives it back to the right one. Two compare equal when their `Alloc`s
/// do. Costs one prefix of `alignof(T)` bytes per block from `Alloc`, and a branch.
template <class Alloc> class fallback_allocator {
  using traits = std::allocator_traits<Alloc>;

public:
  /// `Alloc`'s.
  using value_type = typename traits::value_type;
  /// `Alloc`'s.
  using is_always_equal = typename traits::is_always_equal;
  /// A `fallback_allocator` of `Alloc` rebound to `U`.
  template <class U> struct rebind {
    /// The rebound allocator.
    using other = fallback_allocator<typename traits::template rebind_alloc<U>>;
  };

  /// Allocates from `a` while it serves.
  explicit fallback_allocator(const Alloc& a) noexcept : inner_(a) {}
  /// A rebind of `other`.
  template <class A2>
  fallback_allocator(const fallback_allocator<A2>& other) noexcept : inner_(other.inner()) {}

  /// Memory for `n` values: from `Alloc` if it serves, else from the default heap.
  value_type* allocate(std::size_t n) {
    using unit = unit_of<value_type>;
    using unit_alloc = typename traits::template rebind_alloc<unit>;
    constexpr std::size_t per_value = sizeof(value_type) / sizeof(unit);
    if (n > (std::numeric_limits<std::size_t>::max() - 1) / per_value)
      throw std::bad_array_new_length();
    const std::size_t units = n * per_value + 1;
    unit* block = nullptr;
    unsigned char spare = 0;
    try {
      unit_alloc a(inner_);
      block = std::allocator_traits<unit_alloc>::allocate(a, units);
    } catch (...) {
      block = std::allocator<unit>().allocate(units);
      spare = 1;
    }
    ::new (static_cast<void*>(block)) unsigned char(spare);
    return reinterpret_cast<value_type*>(block + 1);
  }

  /// Gives `p` back to whichever allocator served it.
  void deallocate(value_type* p, std::size_t n) noexcept {
    using unit = unit_of<value_type>;
    using unit_alloc = typename traits::template rebind_alloc<unit>;
    constexpr std::size_t per_value = sizeof(value_type) / sizeof(unit);
    unit* block = reinterpret_cast<unit*>(p) - 1;
    const std::size_t units = n * per_value + 1;
    if (*static_cast<unsigned char*>(static_cast<void*>(block)) != 0) {
      std::allocator<unit>().deallocate(block, units);
    } else {
      unit_alloc a(inner_);
      std::allocator_traits<unit_alloc>::deallocate(a, block, units);
    }
  }

  /// The allocator asked first.
  const Alloc& inner() const noexcept { return inner_; }

  /// Equal when the allocators asked first are: each can give back the other's blocks.
  template <class A2> bool operator==(const fallback_allocator<A2>& other) const noexcept {
    return inner_ == other.inner();
  }

private:
  /// The blocks' grain: one of them in front of the values holds the prefix, and the values
  /// stay aligned.
  template <class T> struct alignas(T) unit_of { unsigned char bytes[alignof(T)]; };

  Alloc inner_;
};

/// `fallback_t`'s choice.
template <class Alloc> struct fallback_of { using type = fallback_allocator<Alloc>; };
template <class T> struct fallback_of<std::allocator<T>> {
  using type = std::allocator<T>; // never short of memory but when the heap is
};
/// The allocator of a handler that must not fail: `fallback_allocator<Alloc>`, or
/// `std::allocator` itself.
template <class Alloc> using fallback_t = typename fallback_of<Alloc>::type;

/// `a`, for a handler that must not fail (see `fallback_t`).
template <class Alloc> fallback_t<Alloc> with_fallback(const Alloc& a) noexcept {
  return fallback_t<Alloc>(a);
}

} // namespace coretry::detail
