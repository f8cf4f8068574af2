// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// A clock that moves only when a test says so, and a timer on it that meets the requirements of
/// `retry_async<Timer>`, so a test runs through minutes of backoff in microseconds of real time.
///
/// ```
/// coretry::testing::manual_clock::reset();
/// asio::io_context io;
/// co_spawn(io, coretry::retry_async<coretry::testing::manual_timer>(op, policy), detached);
/// coretry::testing::drive(io, [&] { return done; });   // jumps from one wait to the next
/// CHECK(coretry::testing::manual_clock::elapsed() == 300ms);
/// ```
///
/// The clock is process-wide (its `now()` is static, as a `Timer::clock_type` must be) and meant
/// for one test thread at a time: call `manual_clock::reset()` at the start of each test.
///
/// A test may end with operations asleep on a `manual_timer`: each wait belongs to its timer's
/// execution context (through a service of that context), and when the context is shut down
/// its waits leave the queue and their handlers are destroyed there, uncalled, as Asio does with
/// its own timers' waits. So `reset()` and `advance()` never touch a context that is gone, and
/// neither does process exit (the queue itself is never destroyed).

#include <coretry/config.hpp>
#include <coretry/detail/asio.hpp>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace coretry::testing {

/// A process-wide clock that moves only when a test says so (`advance`, `advance_to_next`),
/// for timing logic tested without real sleeps. Meets the Clock requirements; one thread.
class manual_clock {
public:
  /// Nanoseconds.
  using duration = std::chrono::nanoseconds;
  /// As `duration`'s.
  using rep = duration::rep;
  /// As `duration`'s.
  using period = duration::period;
  /// A point on this clock.
  using time_point = std::chrono::time_point<manual_clock>;
  /// Never goes backwards (except through `reset()`).
  static constexpr bool is_steady = true;

  /// The current time.
  static time_point now() noexcept { return state().now; }
  /// Time since the last reset().
  static duration elapsed() noexcept { return state().now.time_since_epoch(); }

  /// Moves time forward by `d`, completing (by posting) every wait due by then, in order.
  static void advance(duration d);
  /// Jumps to the earliest pending wait and completes it (and any due at the same instant).
  /// Returns false when nothing waits.
  static bool advance_to_next();
  /// Waits not yet completed.
  static std::size_t pending() noexcept { return state().queue.size(); }
  /// Back to time zero. Pending waits are dropped (their handlers are destroyed, not called).
  static void reset();

  /// A pending wait, as the timers enqueue it (for `basic_manual_timer`).
  struct waiter {
    virtual ~waiter() = default;
    /// `from_slot`: called by the wait's own cancellation handler, which must not clear itself.
    virtual void complete(std::error_code ec, bool from_slot = false) = 0;
    /// The timer that made the wait (`cancel_owner`).
    const void* owner = nullptr;
    const void* context = nullptr; ///< the execution context the wait belongs to
  };
  /// Pending waits by due time.
  using queue_type = std::multimap<time_point, std::shared_ptr<waiter>>;

  /// Adds `w`, due at `at` (for the timers).
  static queue_type::iterator enqueue(time_point at, std::shared_ptr<waiter> w) {
    return state().queue.emplace(at, std::move(w));
  }
  /// Removes `w` if it still waits; returns whether it did.
  static bool remove(const waiter* w);
  /// Completes every wait owned by `owner` with operation_aborted; returns how many.
  static std::size_t cancel_owner(const void* owner);
  /// Drops every wait that belongs to `context`, destroying its handler uncalled; returns how
  /// many. Called when that context shuts down.
  static std::size_t drop_context(const void* context);

private:
  struct clock_state {
    time_point now{};
    queue_type queue;
  };
  // Never destroyed: at process exit a wait may still belong to a context that outlives it.
  static clock_state& state() noexcept {
    static clock_state& s = *new clock_state;
    return s;
  }
  static void fire_due();
};

/// Ties manual waits to their execution context: when the context shuts down (before the
/// services registered earlier, its scheduler among them), the waits that belong to it leave the
/// clock's queue and are destroyed uncalled. Registered by a timer's first wait on a context.
class manual_clock_service final : public asio::execution_context::service {
public:
  /// The service's key in its execution context.
  static inline asio::execution_context::id id;
  /// Made by `asio::use_service`.
  explicit manual_clock_service(asio::execution_context& ctx) : service(ctx) {}
  /// Drops any wait registered after the shutdown too.
  ~manual_clock_service() override { manual_clock::drop_context(&context()); }

private:
  void shutdown() override { manual_clock::drop_context(&context()); }
};

inline void manual_clock::fire_due() {
  auto& s = state();
  while (!s.queue.empty() && s.queue.begin()->first <= s.now) {
    auto w = std::move(s.queue.begin()->second);
    s.queue.erase(s.queue.begin());
    w->complete({});
  }
}

inline void manual_clock::advance(duration d) {
  auto& s = state();
  const time_point target = s.now + d;
  while (!s.queue.empty() && s.queue.begin()->first <= target) {
    s.now = std::max(s.now, s.queue.begin()->first);
    fire_due();
  }
  s.now = target;
}

inline bool manual_clock::advance_to_next() {
  auto& s = state();
  if (s.queue.empty())
    return false;
  s.now = std::max(s.now, s.queue.begin()->first);
  fire_due();
  return true;
}

inline void manual_clock::reset() {
  auto& s = state();
  // Emptied first, destroyed after: destroying a handler destroys its frame, whose own timers
  // then cancel their waits in the queue.
  queue_type dropped;
  dropped.swap(s.queue);
  dropped.clear();
  s.now = time_point{};
}

inline std::size_t manual_clock::drop_context(const void* context) {
  auto& q = state().queue;
  std::vector<std::shared_ptr<waiter>> dropped;
  for (auto it = q.begin(); it != q.end();) {
    if (it->second->context == context) {
      dropped.push_back(std::move(it->second));
      it = q.erase(it);
    } else {
      ++it;
    }
  }
  const std::size_t n = dropped.size();
  dropped.clear(); // outside the queue: see reset()
  return n;
}

inline bool manual_clock::remove(const waiter* w) {
  auto& q = state().queue;
  for (auto it = q.begin(); it != q.end(); ++it)
    if (it->second.get() == w) {
      q.erase(it);
      return true;
    }
  return false;
}

inline std::size_t manual_clock::cancel_owner(const void* owner) {
  auto& q = state().queue;
  std::size_t n = 0;
  for (auto it = q.begin(); it != q.end();) {
    if (it->second->owner == owner) {
      auto w = std::move(it->second);
      it = q.erase(it);
      w->complete(coretry::detail::aborted_error());
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

/// A timer on manual_clock with the subset of asio::basic_waitable_timer that coretry uses.
template <class Executor = asio::any_io_executor> class basic_manual_timer {
public:
  /// As `asio::basic_waitable_timer`.
  using clock_type = manual_clock;
  /// As `asio::basic_waitable_timer`.
  using duration = manual_clock::duration;
  /// As `asio::basic_waitable_timer`.
  using time_point = manual_clock::time_point;
  /// As `asio::basic_waitable_timer`.
  using executor_type = Executor;
  /// The same timer on another executor type.
  template <class OtherExecutor> struct rebind_executor {
    /// The rebound timer type.
    using other = basic_manual_timer<OtherExecutor>;
  };

  /// A timer whose handlers run on `ex` unless they have an executor of their own.
  template <class OtherExecutor>
  explicit basic_manual_timer(const OtherExecutor& ex) : executor_(ex) {}
  /// A timer on `ctx`'s executor.
  explicit basic_manual_timer(asio::io_context& ctx) : executor_(ctx.get_executor()) {}
  basic_manual_timer(const basic_manual_timer&) = delete;
  basic_manual_timer& operator=(const basic_manual_timer&) = delete;
  ~basic_manual_timer() { cancel(); }

  /// The timer's executor.
  executor_type get_executor() const noexcept { return executor_; }
  /// When the next wait is due.
  time_point expiry() const noexcept { return expiry_; }

  /// Cancels pending waits (they complete with `operation_aborted`) and sets the expiry to
  /// `now() + d`; returns how many it cancelled.
  std::size_t expires_after(duration d) {
    const std::size_t n = cancel();
    expiry_ = manual_clock::now() + d;
    return n;
  }
  /// Cancels pending waits (they complete with `operation_aborted`); returns how many.
  std::size_t cancel() { return manual_clock::cancel_owner(this); }

  /// Waits until the manual clock reaches the expiry (`manual_clock::advance`,
  /// `manual_clock::advance_to_next`).
  ///
  /// @par Completion Signature
  /// `void(error_code)`, Asio's `error_code` (`boost::system::error_code` with Boost.Asio):
  /// empty when the expiry was reached, `operation_aborted` when the wait was cancelled
  /// (`cancel`, `expires_after`, the timer's destruction, the handler's slot). The handler is
  /// posted to its associated executor (by default the timer's).
  ///
  /// @par Per-Operation Cancellation
  /// Terminal, partial and total cancellation through the handler's slot remove the wait; the
  /// handler gets `operation_aborted`.
  template <class WaitToken> auto async_wait(WaitToken&& token) {
    return asio::async_initiate<WaitToken, void(coretry::detail::asio_error_code)>(
        [self = this](auto handler) { self->start(std::move(handler)); }, token);
  }

private:
  template <class Handler> struct wait_op final : manual_clock::waiter {
    wait_op(Handler h, Executor ex) : handler(std::move(h)), executor(std::move(ex)) {}
    void complete(std::error_code ec, bool from_slot) override {
      auto slot = asio::get_associated_cancellation_slot(handler);
      if (!from_slot && slot.is_connected())
        slot.clear();
      auto ex = asio::get_associated_executor(handler, executor);
      const auto alloc = asio::get_associated_allocator(handler);
      asio::post(ex, asio::bind_allocator(alloc, [h = std::move(handler), ec]() mutable {
                   std::move(h)(coretry::detail::to_asio_error(ec));
                 }));
    }
    Handler handler;
    Executor executor;
  };

  static asio::execution_context& context_of(const Executor& ex) {
    if constexpr (asio::execution::is_executor<Executor>::value)
      return asio::query(ex, asio::execution::context_as<asio::execution_context&>);
    else
      return ex.context();
  }

  template <class Handler> void start(Handler handler) {
    auto slot = asio::get_associated_cancellation_slot(handler);
    asio::execution_context& ctx = context_of(executor_);
    asio::use_service<manual_clock_service>(ctx);
    // The wait's memory comes from the handler's associated allocator, as an Asio timer's does.
    using alloc_type = typename std::allocator_traits<
        asio::associated_allocator_t<Handler>>::template rebind_alloc<wait_op<Handler>>;
    const alloc_type alloc(asio::get_associated_allocator(handler));
    auto op = std::allocate_shared<wait_op<Handler>>(alloc, std::move(handler), executor_);
    op->owner = this;
    op->context = &ctx;
    manual_clock::enqueue(expiry_, op);
    if (slot.is_connected()) {
      slot.assign([w = std::weak_ptr<manual_clock::waiter>(op)](asio::cancellation_type) {
        if (auto p = w.lock(); p && manual_clock::remove(p.get()))
          p->complete(coretry::detail::aborted_error(), true);
      });
    }
  }

  Executor executor_;
  time_point expiry_{};
};

/// `basic_manual_timer` on `asio::any_io_executor`.
using manual_timer = basic_manual_timer<>;

/// Runs `ctx` until `done()` holds, advancing the manual clock whenever nothing else can run.
/// Returns false if everything is idle with `done()` still false.
template <class Done> bool drive(asio::io_context& ctx, Done done) {
  for (;;) {
    ctx.restart();
    ctx.poll();
    if (done())
      return true;
    if (!manual_clock::advance_to_next()) {
      ctx.restart();
      ctx.poll();
      return done();
    }
  }
}

} // namespace coretry::testing
