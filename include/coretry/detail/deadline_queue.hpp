// SPDX-License-Identifier: BSL-1.0
#pragma once
// One queue of attempt deadlines per execution context and timer type, behind one armed timer.
// Private: used by the retry operation's state (retry_op.hpp).
//
// An operation whose attempts are timed (an attempt timeout or a deadline) used to arm a timer
// of its own for every attempt and cancel it when the attempt ended: a `timerfd_settime` system
// call on Linux when the timer was the earliest (always, when operations run one at a time),
// and a cancelled wait's handler afterwards. Nearly every attempt ends long before its limit,
// so here an attempt only links an entry into a min-heap (O(log n), no allocation: the entry is
// part of the operation's state) and unlinks it when it ends. One timer per context waits for
// the earliest entry; it is re-armed only when an entry due earlier than the armed expiry
// arrives, so operations with one timeout, started in order, never re-arm it.
//
// When the queue empties the timer's wait is not cancelled at once (the next attempt would have
// to arm it again): the queue lingers for a few turns of the context's run queue (a posted check,
// re-posted `linger_turns` times) and cancels the wait only if no entry arrived meanwhile. So a
// context with nothing else to do still runs out of work, as it did with a timer per attempt.
//
// Threads: every member is guarded by one mutex, and the timer is touched only under it (no
// handler ever runs inline from `cancel`, `expires_*` or `async_wait`). An entry's callback runs
// on the thread that took it off the queue, outside the lock.
//
// Lifetimes: an entry is never called once its owner is dying: `claim` takes a strong reference
// under the lock (it fails once the owner's count reached zero), and the owner's destructor
// unlinks the entry under the same lock. When the context shuts down the queue drops every
// entry uncalled and destroys its timer. An entry points at its queue only while queued, so an
// owner that dies after the context (its entry due, removed or dropped before) touches nothing.

#include <coretry/detail/asio.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace coretry::detail {

template <class WakeTimer> class deadline_queue;

/// A deadline linked into a `deadline_queue`, owned (and usually embedded) by an operation.
/// Only the queue writes its fields, under its lock.
template <class TimePoint> struct deadline_entry {
  /// Called under the queue's lock when the entry is due: a strong reference to the owner, or
  /// null when the owner is dying (the entry is then dropped, uncalled).
  std::shared_ptr<void> (*claim)(deadline_entry&) noexcept = nullptr;
  /// Called outside the lock with the owner kept alive by `claim`'s reference; `tag` is the one
  /// given to `push`.
  void (*fire)(deadline_entry&, std::uint64_t tag) noexcept = nullptr;

  TimePoint due{};
  std::uint64_t tag = 0;
  std::size_t slot = npos; ///< index in the heap, `npos` when not queued
  /// The queue holding it, while it is queued: cleared (under the queue's lock) whenever it
  /// leaves the heap (removed, due, or dropped at shutdown), so that an owner dying after its
  /// context never reaches a queue that is gone. Atomic: the owner's destructor reads it
  /// without the lock while the timer's thread may be taking the entry off.
  std::atomic<void*> queue{nullptr};

  static constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();
};

/// A min-heap of `deadline_entry` with one `WakeTimer` (a timer on `asio::any_io_executor`)
/// waiting for the earliest. An `asio::execution_context` service: one per context and timer
/// type, found with `deadline_queue::of(executor)`.
template <class WakeTimer> class deadline_queue final : public asio::execution_context::service {
public:
  using clock_type = typename WakeTimer::clock_type;
  using time_point = typename WakeTimer::time_point;
  using entry = deadline_entry<time_point>;

  /// Turns of the run queue a queue that emptied keeps its wait before it cancels it.
  static constexpr int linger_turns = 8;

  static inline asio::execution_context::id id;

  explicit deadline_queue(asio::execution_context& ctx) : service(ctx) {}
  deadline_queue(const deadline_queue&) = delete;
  deadline_queue& operator=(const deadline_queue&) = delete;

  /// The queue of `ex`'s execution context. The timer runs its handlers on `ex`, untracked.
  template <class Executor> static deadline_queue& of(const Executor& ex) {
    asio::execution_context& ctx = asio::query(ex, asio::execution::context);
    auto& q = asio::use_service<deadline_queue>(ctx);
    std::lock_guard lock(q.mutex_);
    if (!q.executor_ && !q.shut_down_)
      q.executor_.emplace(asio::prefer(ex, asio::execution::outstanding_work.untracked));
    return q;
  }

  /// Links `e`, due at `due`; its `fire` gets `tag`. `e` must not be queued.
  void push(entry& e, time_point due, std::uint64_t tag) {
    std::lock_guard lock(mutex_);
    if (shut_down_)
      return;
    e.due = due;
    e.tag = tag;
    e.queue.store(this, std::memory_order_release);
    e.slot = heap_.size();
    heap_.push_back(&e);
    sift_up(e.slot);
    ++pushes_;
    if (!wait_pending() || due < armed_for_)
      arm(due);
  }

  /// Unlinks `e` if it is still queued; true when it was (it will not fire).
  bool remove(entry& e) noexcept {
    std::lock_guard lock(mutex_);
    if (e.slot == entry::npos)
      return false;
    unlink(e.slot);
    if (heap_.empty())
      linger();
    return true;
  }

  /// `remove`, for an owner's destructor: touches no queue that shut down.
  static void forget(entry& e) noexcept {
    if (void* q = e.queue.load(std::memory_order_acquire))
      static_cast<deadline_queue*>(q)->remove(e);
  }

  /// Entries queued (for tests).
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return heap_.size();
  }
  /// Whether the timer has a wait pending (for tests).
  bool waiting() {
    std::lock_guard lock(mutex_);
    return wait_pending();
  }
  /// How many times the timer was armed (for tests and benchmarks).
  std::uint64_t arms() const {
    std::lock_guard lock(mutex_);
    return arms_;
  }

private:
  void shutdown() override {
    std::lock_guard lock(mutex_);
    shut_down_ = true;
    for (entry* e : heap_) {
      e->slot = entry::npos;
      e->queue.store(nullptr, std::memory_order_release);
    }
    heap_.clear();
    heap_.shrink_to_fit();
    waiting_ = false;
    timer_.reset();
    executor_.reset();
  }

  // --- Under the lock.

  void arm(time_point due) {
    if (!timer_)
      timer_.emplace(*executor_);
    if constexpr (requires { timer_->expires_at(due); })
      timer_->expires_at(due);
    else
      timer_->expires_after(due - clock_type::now());
    waiting_ = true;
    armed_for_ = due;
    ++arms_;
    timer_->async_wait(wait_handler{this, ++wait_generation_});
  }

  /// The timer's handler. A wait can end without its handler being called: destroyed with the
  /// timer's queue (`testing::manual_clock::reset()` drops every wait; a context's shutdown
  /// does too). The handler's death then tells the queue, so that `waiting_` and `armed_for_`
  /// never describe a wait that no longer exists (a later push arms afresh). It takes no lock:
  /// it may die inside a call made under this queue's lock.
  struct wait_handler {
    deadline_queue* q;
    std::uint64_t generation;
    wait_handler(deadline_queue* queue, std::uint64_t g) noexcept : q(queue), generation(g) {}
    wait_handler(wait_handler&& o) noexcept
        : q(std::exchange(o.q, nullptr)), generation(o.generation) {}
    wait_handler(const wait_handler&) = delete;
    wait_handler& operator=(const wait_handler&) = delete;
    wait_handler& operator=(wait_handler&&) = delete;
    ~wait_handler() {
      if (q)
        q->dropped_.store(generation, std::memory_order_release);
    }
    template <class Ec> void operator()(const Ec& ec) {
      deadline_queue* queue = std::exchange(q, nullptr);
      queue->on_timer(generation, !ec);
    }
  };

  /// Whether the wait `waiting_` speaks of still exists (under the lock).
  bool wait_pending() {
    if (waiting_ && dropped_.load(std::memory_order_acquire) == wait_generation_)
      waiting_ = false;
    return waiting_;
  }

  void linger() {
    if (!wait_pending() || checking_)
      return;
    checking_ = true;
    post_check(pushes_, linger_turns);
  }
  void post_check(std::uint64_t pushes, int turns) {
    asio::post(*executor_, [this, pushes, turns] { check(pushes, turns); });
  }
  // Cancels the wait once the queue has stayed empty, with no push, for `turns` more turns.
  void check(std::uint64_t pushes, int turns) {
    std::lock_guard lock(mutex_);
    if (shut_down_)
      return;
    if (!heap_.empty() || !wait_pending() || pushes != pushes_) {
      checking_ = false;
      if (heap_.empty() && waiting_) // pushed and removed again since: linger afresh
        linger();
      return;
    }
    if (turns > 0)
      return post_check(pushes, turns - 1);
    checking_ = false;
    waiting_ = false;
    ++wait_generation_;
    timer_->cancel();
  }

  // --- The timer's handler, on any thread of the context.

  void on_timer(std::uint64_t generation, bool expired) {
    struct due_entry {
      entry* e;
      std::uint64_t tag;
      std::shared_ptr<void> owner;
    };
    std::vector<due_entry> fired;
    {
      std::lock_guard lock(mutex_);
      if (shut_down_ || generation != wait_generation_)
        return;
      waiting_ = false;
      const time_point now = clock_type::now();
      while (expired && !heap_.empty() && !(now < heap_.front()->due)) {
        // Claimed while still linked: an owner dying meanwhile sees its entry queued, so its
        // `forget` waits on this lock instead of freeing the entry under `claim`. Once unlinked,
        // the entry is read again only through the reference `claim` took.
        entry* e = heap_.front();
        const std::uint64_t tag = e->tag;
        auto owner = e->claim(*e);
        unlink(0);
        if (owner)
          fired.push_back({e, tag, std::move(owner)});
      }
      if (!heap_.empty())
        arm(heap_.front()->due);
    }
    for (auto& f : fired)
      f.e->fire(*f.e, f.tag);
  }

  // --- The heap, under the lock.

  void unlink(std::size_t i) noexcept {
    entry* gone = heap_[i];
    gone->slot = entry::npos;
    gone->queue.store(nullptr, std::memory_order_release);
    entry* last = heap_.back();
    heap_.pop_back();
    if (gone == last)
      return;
    heap_[i] = last;
    last->slot = i;
    if (i > 0 && last->due < heap_[(i - 1) / 2]->due)
      sift_up(i);
    else
      sift_down(i);
  }
  void sift_up(std::size_t i) noexcept {
    entry* e = heap_[i];
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!(e->due < heap_[parent]->due))
        break;
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, e);
  }
  void sift_down(std::size_t i) noexcept {
    entry* e = heap_[i];
    const std::size_t n = heap_.size();
    for (;;) {
      std::size_t child = 2 * i + 1;
      if (child >= n)
        break;
      if (child + 1 < n && heap_[child + 1]->due < heap_[child]->due)
        ++child;
      if (!(heap_[child]->due < e->due))
        break;
      place(i, heap_[child]);
      i = child;
    }
    place(i, e);
  }
  void place(std::size_t i, entry* e) noexcept {
    heap_[i] = e;
    e->slot = i;
  }

  mutable std::mutex mutex_;
  std::vector<entry*> heap_;
  std::optional<asio::any_io_executor> executor_; ///< untracked: a wait keeps no work guard
  std::optional<WakeTimer> timer_;
  time_point armed_for_{};
  std::uint64_t wait_generation_ = 0; ///< of the wait that counts; older completions are ignored
  /// The generation of the last wait destroyed uncalled (`wait_handler`); written without the
  /// lock.
  std::atomic<std::uint64_t> dropped_{0};
  std::uint64_t pushes_ = 0;
  std::uint64_t arms_ = 0;
  bool waiting_ = false;
  bool checking_ = false;
  bool shut_down_ = false;
};

/// When an entry pushed now into a `Queue` is due, `limit` from now (never past the clock's end).
template <class Queue>
typename Queue::time_point due_after(std::chrono::nanoseconds limit) noexcept {
  using qclock = typename Queue::clock_type;
  const auto now = qclock::now();
  const auto left = std::chrono::ceil<typename qclock::duration>(limit);
  return left >= qclock::time_point::max() - now ? qclock::time_point::max() : now + left;
}

} // namespace coretry::detail
