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

#include <coretry/detail/asio.hpp>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <system_error>

namespace coretry::testing {

class manual_clock {
public:
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<manual_clock>;
  static constexpr bool is_steady = true;

  static time_point now() noexcept { return state().now; }
  /// Time since the last reset().
  static duration elapsed() noexcept { return state().now.time_since_epoch(); }

  /// Moves time forward by `d`, completing (by posting) every wait due by then, in order.
  static void advance(duration d);
  /// Jumps to the earliest pending wait and completes it (and any due at the same instant).
  /// Returns false when nothing waits.
  static bool advance_to_next();
  static std::size_t pending() noexcept { return state().queue.size(); }
  /// Back to time zero. Pending waits are dropped (their handlers are destroyed, not called).
  static void reset();

  struct waiter {
    virtual ~waiter() = default;
    /// `from_slot`: called by the wait's own cancellation handler, which must not clear itself.
    virtual void complete(std::error_code ec, bool from_slot = false) = 0;
    const void* owner = nullptr;
  };
  using queue_type = std::multimap<time_point, std::shared_ptr<waiter>>;

  static queue_type::iterator enqueue(time_point at, std::shared_ptr<waiter> w) {
    return state().queue.emplace(at, std::move(w));
  }
  /// Removes `w` if it still waits; returns whether it did.
  static bool remove(const waiter* w);
  /// Completes every wait owned by `owner` with operation_aborted; returns how many.
  static std::size_t cancel_owner(const void* owner);

private:
  struct clock_state {
    time_point now{};
    queue_type queue;
  };
  static clock_state& state() noexcept {
    static clock_state s;
    return s;
  }
  static void fire_due();
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
  s.queue.clear();
  s.now = time_point{};
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
  using clock_type = manual_clock;
  using duration = manual_clock::duration;
  using time_point = manual_clock::time_point;
  using executor_type = Executor;
  template <class OtherExecutor> struct rebind_executor {
    using other = basic_manual_timer<OtherExecutor>;
  };

  template <class OtherExecutor>
  explicit basic_manual_timer(const OtherExecutor& ex) : executor_(ex) {}
  explicit basic_manual_timer(asio::io_context& ctx) : executor_(ctx.get_executor()) {}
  basic_manual_timer(const basic_manual_timer&) = delete;
  basic_manual_timer& operator=(const basic_manual_timer&) = delete;
  ~basic_manual_timer() { cancel(); }

  executor_type get_executor() const noexcept { return executor_; }
  time_point expiry() const noexcept { return expiry_; }

  std::size_t expires_after(duration d) {
    const std::size_t n = cancel();
    expiry_ = manual_clock::now() + d;
    return n;
  }
  std::size_t cancel() { return manual_clock::cancel_owner(this); }

  /// Completion signature void(error_code), Asio's error_code (`boost::system::error_code` with
  /// Boost.Asio); terminal/partial/total cancellation supported.
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
      asio::post(ex, [h = std::move(handler), ec]() mutable {
        std::move(h)(coretry::detail::to_asio_error(ec));
      });
    }
    Handler handler;
    Executor executor;
  };

  template <class Handler> void start(Handler handler) {
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto op = std::make_shared<wait_op<Handler>>(std::move(handler), executor_);
    op->owner = this;
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
