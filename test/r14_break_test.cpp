// SPDX-License-Identifier: BSL-1.0
// Reviewer r14: probes of the hedge's split into layers (030fd9e..8d37c5c): `hedge_engine`,
// `hedge_delivery` and `hedge_state`, whose intermediate handlers became namespace-scope steps
// holding the state through `op_steps`, and whose members now die in another order. Each case
// drives one place where the split could have changed behaviour: a teardown with copies in
// flight or with the outcome decided, the handler's allocator, the caller's slot and the group
// token from another thread, a cancellation from a hook, the handler's executor, the strand, an
// exception from an attempt or from the handler, and `shared_policy`.
#include <coretry/cancellation.hpp>
#include <coretry/hedge.hpp>
#include <coretry/observer.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/fake_gate.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

using namespace std::chrono_literals;
using coretry::hedge_options;
using coretry::hedge_stats;
using coretry::retry_policy;
using coretry::shared_policy;
using coretry::test::fake_gate;
using coretry::test::hang;
using coretry::test::refused;
using coretry::test::scripted_op;
using coretry::test::succeed;
using coretry::testing::drive;
using coretry::testing::manual_clock;
using coretry::testing::manual_timer;
using error_code = coretry::detail::asio_error_code;

namespace {

/// What passes through an `r14_allocator` and all its copies and rebinds.
struct r14_counts {
  std::atomic<int> allocations{0};
  std::atomic<int> deallocations{0};
  int outstanding() const { return allocations.load() - deallocations.load(); }
};

template <class T> struct r14_allocator {
  using value_type = T;
  std::shared_ptr<r14_counts> counts;

  explicit r14_allocator(std::shared_ptr<r14_counts> c) noexcept : counts(std::move(c)) {}
  template <class U> r14_allocator(const r14_allocator<U>& other) noexcept : counts(other.counts) {}

  T* allocate(std::size_t n) {
    ++counts->allocations;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    ++counts->deallocations;
    std::allocator<T>().deallocate(p, n);
  }
  template <class U> bool operator==(const r14_allocator<U>& other) const noexcept {
    return counts == other.counts;
  }
};

/// `*inner` as the operation, with a token whose use count tells how many copies of the
/// operation are still alive.
struct counted_op {
  std::shared_ptr<int> alive;
  scripted_op* inner;
  asio::awaitable<int> operator()() const { return (*inner)(); }
};

/// A `void(error_code, int)` handler that counts its calls; `alive` counts its copies.
struct counted_handler {
  std::shared_ptr<int> alive;
  int* calls;
  std::error_code* got;
  void operator()(error_code ec, int) const {
    ++*calls;
    *got = ec;
  }
};

/// The breaker heard exactly one outcome for each attempt it granted.
bool one_outcome_per_grant(const fake_gate& g) {
  return static_cast<int>(g.log.size()) == g.granted;
}

/// Calls `f` on every attempt the observer hears start.
template <class F> struct start_hook final : coretry::retry_observer {
  F f;
  explicit start_hook(F fn) : f(std::move(fn)) {}
  void on_attempt_started(const coretry::attempt_started_event& e) override { f(e.attempt); }
};
template <class F> std::shared_ptr<coretry::retry_observer> on_start(F f) {
  return std::make_shared<start_hook<F>>(std::move(f));
}

/// Counts the operations the observer hears finish.
struct finish_counter final : coretry::retry_observer {
  std::atomic<int> finished{0};
  void on_operation_finished(const coretry::operation_finished_event&) override { ++finished; }
};

/// Waits on a real timer for an hour (cancellably), after counting its call.
struct hanging_op {
  std::atomic<int>* calls;
  asio::awaitable<int> operator()() const {
    ++*calls;
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::hours(1));
    co_await t.async_wait(asio::use_awaitable);
    co_return 0;
  }
};

/// A little work that the optimizer keeps, so that two sections that overlap would show.
void busy() {
  static std::atomic<int> sink{0};
  for (int i = 0; i < 2000; ++i)
    sink.fetch_add(1, std::memory_order_relaxed);
}

void spin_until(const std::atomic<int>& n, int at_least) {
  while (n.load() < at_least)
    std::this_thread::yield();
}

/// A standard executor of `ctx` that refuses every function it is given: a handler bound to it
/// cannot be dispatched.
struct refusing_executor {
  asio::io_context* ctx;
  asio::execution_context& query(asio::execution::context_t) const noexcept { return *ctx; }
  template <class F> void execute(F&&) const { throw std::runtime_error("refused"); }
  friend bool operator==(const refusing_executor& a, const refusing_executor& b) noexcept {
    return a.ctx == b.ctx;
  }
  friend bool operator!=(const refusing_executor& a, const refusing_executor& b) noexcept {
    return a.ctx != b.ctx;
  }
};

} // namespace

TEST_CASE("a context destroyed while copies run and a hedge waits destroys the handler uncalled, "
          "the operation, every block of the handler's allocator and every grant") {
  for (const int hint : {1, 2}) { // one thread: no strand; more: a strand
    CAPTURE(hint);
    manual_clock::reset();
    auto counts = std::make_shared<r14_counts>();
    auto gate = std::make_shared<fake_gate>();
    auto op_alive = std::make_shared<int>(0);
    auto handler_alive = std::make_shared<int>(0);
    coretry::cancellation_source group;
    asio::cancellation_signal caller;
    scripted_op op{{hang()}};
    int calls = 0;
    std::error_code got;
    {
      asio::io_context io(hint);
      retry_policy p{.max_attempts = 3, .breaker = gate};
      p.cancellation = group.token();
      coretry::async_hedge<manual_timer>(
          io.get_executor(), counted_op{op_alive, &op}, p,
          hedge_options{.delay = 10ms, .max_copies = 3},
          asio::bind_cancellation_slot(
              caller.slot(), asio::bind_allocator(r14_allocator<void>(counts),
                                                  counted_handler{handler_alive, &calls, &got})));
      drive(io, [&] { return op.calls == 2; });
      REQUIRE(op.calls == 2); // two copies in flight, the third's hedge timer pending
      REQUIRE(counts->outstanding() > 0);
    }
    CHECK(calls == 0);
    CHECK(op_alive.use_count() == 1);
    CHECK(handler_alive.use_count() == 1);
    CHECK(gate->granted == 2);
    CHECK(gate->count("abandoned") == 2);
    CHECK(one_outcome_per_grant(*gate));
    // Nothing of the state is reached any more: neither through the group nor the caller's slot.
    group.cancel();
    caller.emit(asio::cancellation_type::terminal);
    caller.slot().clear();
    CHECK(counts->outstanding() == 0);
    CHECK(calls == 0);
  }
}

TEST_CASE("a context destroyed after the winner decided, with the loser's cancellation still "
          "queued, destroys the handler uncalled and gives every block back") {
  for (const int hint : {1, 2}) {
    CAPTURE(hint);
    manual_clock::reset();
    auto counts = std::make_shared<r14_counts>();
    auto gate = std::make_shared<fake_gate>();
    auto handler_alive = std::make_shared<int>(0);
    scripted_op op{{hang(), succeed(7, 5ms)}};
    bool decided = false;
    int calls = 0;
    std::error_code got;
    {
      asio::io_context io(hint);
      retry_policy p{.max_attempts = 2, .breaker = gate};
      struct stopper final : coretry::retry_observer {
        asio::io_context* io;
        bool* decided;
        stopper(asio::io_context* i, bool* d) : io(i), decided(d) {}
        void on_attempt_finished(const coretry::attempt_finished_event& e) override {
          if (e.attempt == 2) { // the winner: stop before the loser's cancellation is run
            *decided = true;
            io->stop();
          }
        }
      };
      p.observer = std::make_shared<stopper>(&io, &decided);
      coretry::async_hedge<manual_timer>(
          io.get_executor(), [&] { return op(); }, p, hedge_options{.delay = 10ms, .max_copies = 2},
          asio::bind_allocator(r14_allocator<void>(counts),
                               counted_handler{handler_alive, &calls, &got}));
      drive(io, [&] { return decided; });
      REQUIRE(decided);
      REQUIRE(op.aborted == 0); // the loser has not returned yet
    }
    CHECK(calls == 0);
    CHECK(handler_alive.use_count() == 1);
    CHECK(counts->outstanding() == 0);
    CHECK(gate->granted == 2);
    CHECK(one_outcome_per_grant(*gate));
  }
}

TEST_CASE("with the caller's slot and a group token bound, every block of the handler's "
          "allocator is back before the handler runs, cancelled or not") {
  for (const int how : {0, 1, 2}) { // not cancelled; the caller's slot; the group
    CAPTURE(how);
    manual_clock::reset();
    auto counts = std::make_shared<r14_counts>();
    asio::io_context io;
    coretry::cancellation_source group;
    asio::cancellation_signal caller;
    scripted_op op{{hang(), succeed(9, 30ms)}};
    int calls = 0;
    int outstanding_at_call = -1;
    std::error_code got;
    int value = 0;
    retry_policy p{.max_attempts = 3};
    p.cancellation = group.token();
    coretry::async_hedge<manual_timer>(
        io.get_executor(), [&] { return op(); }, p, hedge_options{.delay = 10ms, .max_copies = 3},
        asio::bind_cancellation_slot(
            caller.slot(), asio::bind_allocator(r14_allocator<void>(counts),
                                                asio::bind_executor(asio::make_strand(io),
                                                                    [&](error_code ec, int v) {
                                                                      ++calls;
                                                                      got = ec;
                                                                      value = v;
                                                                      outstanding_at_call =
                                                                          counts->outstanding();
                                                                    }))));
    drive(io, [&] { return op.calls == 2; });
    if (how == 1)
      caller.emit(asio::cancellation_type::terminal);
    if (how == 2)
      group.cancel();
    drive(io, [] { return false; });
    CHECK(calls == 1);
    CHECK(outstanding_at_call == 0);
    CHECK(counts->outstanding() == 0);
    if (how == 0) {
      CHECK_FALSE(got);
      CHECK(value == 9);
    } else {
      CHECK(got == coretry::test::operation_aborted);
      CHECK(op.aborted == 2); // both copies were cut and returned
    }
  }
}

TEST_CASE("the caller's slot emitted from another thread while copies run and a hedge timer is "
          "pending completes once with operation_aborted") {
  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    asio::io_context io(2);
    auto work = asio::make_work_guard(io);
    std::thread t1([&] { io.run(); });
    std::thread t2([&] { io.run(); });
    asio::cancellation_signal caller;
    std::atomic<int> calls{0};
    std::atomic<int> completions{0};
    std::error_code got;
    std::promise<void> done;
    // Started on the context: the caller's slot is used on one thread at a time, as Asio asks.
    auto on_io = asio::make_strand(io);
    asio::post(on_io, [&] {
      coretry::async_hedge(io.get_executor(), hanging_op{&calls}, retry_policy{.max_attempts = 5},
                           hedge_options{.delay = 1ms, .max_copies = 3},
                           asio::bind_cancellation_slot(
                               caller.slot(), asio::bind_executor(on_io, [&](error_code ec, int) {
                                 got = ec;
                                 if (++completions == 1)
                                   done.set_value();
                               })));
    });
    spin_until(calls, 1 + round % 3); // one, two or three copies in flight
    asio::post(on_io, [&] { caller.emit(asio::cancellation_type::terminal); });
    done.get_future().wait();
    work.reset();
    t1.join();
    t2.join();
    CHECK(completions == 1);
    CHECK(got == coretry::test::operation_aborted);
  }
}

TEST_CASE("the group token cancelled from another thread while copies run completes once, and a "
          "cancel after the completion changes nothing") {
  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    asio::io_context io(2);
    auto work = asio::make_work_guard(io);
    std::thread t1([&] { io.run(); });
    std::thread t2([&] { io.run(); });
    coretry::cancellation_source group;
    std::atomic<int> calls{0};
    std::atomic<int> completions{0};
    std::error_code got;
    std::promise<void> done;
    retry_policy p{.max_attempts = 5};
    p.cancellation = group.token();
    coretry::async_hedge(io.get_executor(), hanging_op{&calls}, p,
                         hedge_options{.delay = 1ms, .max_copies = 3}, [&](error_code ec, int) {
                           got = ec;
                           if (++completions == 1)
                             done.set_value();
                         });
    spin_until(calls, 1 + round % 3);
    group.cancel(); // this thread, not the context's
    done.get_future().wait();
    group.cancel();
    work.reset();
    t1.join();
    t2.join();
    CHECK(completions == 1);
    CHECK(got == coretry::test::operation_aborted);
  }
}

TEST_CASE("a group cancelled from a hook as a hedge starts sends no copy, and every grant and "
          "the budget's charge go back") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  coretry::cancellation_source group;
  scripted_op op{{hang()}};
  retry_policy p{.max_attempts = 3, .breaker = gate};
  p.cancellation = group.token();
  p.observer = on_start([&](unsigned attempt) {
    if (attempt == 2)
      group.cancel(); // on the strand, inside the launch of the second copy
  });
  hedge_stats stats;
  coretry::test::outcome o;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, hedge_options{.delay = 10ms, .max_copies = 3},
      stats, coretry::test::record(o));
  drive(io, [] { return false; });
  CHECK(o.completions == 1);
  CHECK(o.error == coretry::test::operation_aborted);
  CHECK(op.calls == 1); // the second copy was counted, then not sent
  CHECK(op.aborted == 1);
  CHECK(stats.abandoned == 2);
  CHECK(gate->granted == 2);
  CHECK(gate->count("abandoned") == 2);
  CHECK(one_outcome_per_grant(*gate));
}

TEST_CASE("the handler runs on its associated executor, never on the operation's, and after "
          "the last copy has returned") {
  manual_clock::reset();
  asio::io_context io;      // the operation's
  asio::io_context home(1); // the handler's
  auto home_strand = asio::make_strand(home);
  scripted_op op{{hang(), succeed(4, 5ms)}};
  int calls = 0;
  bool on_home = false;
  bool loser_returned = false;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); }, retry_policy{.max_attempts = 2},
      hedge_options{.delay = 10ms, .max_copies = 2},
      asio::bind_executor(home_strand, [&](error_code ec, int v) {
        ++calls;
        on_home = home_strand.running_in_this_thread();
        loser_returned = op.aborted == 1;
        CHECK_FALSE(ec);
        CHECK(v == 4);
      }));
  drive(io, [] { return false; });
  CHECK(calls == 0); // queued on home, which has not run
  CHECK(op.aborted == 1);
  home.run();
  CHECK(calls == 1);
  CHECK(on_home);
  CHECK(loser_returned);
}

TEST_CASE("on a two-thread pool, the copies, the hooks and the observer never run at once") {
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    asio::thread_pool pool(2);
    std::atomic<int> inside{0};
    std::atomic<bool> overlap{false};
    auto enter = [&] {
      if (inside.fetch_add(1) != 0)
        overlap = true;
    };
    auto leave = [&] { inside.fetch_sub(1); };
    std::atomic<int> calls{0};
    auto op = [&]() -> asio::awaitable<int> {
      enter();
      const int n = ++calls;
      leave();
      asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::microseconds(50 * n));
      co_await t.async_wait(asio::use_awaitable);
      enter();
      busy();
      leave();
      if (n < 4)
        throw std::system_error(refused);
      co_return n;
    };
    retry_policy p{.max_attempts = 6};
    p.observer = on_start([&](unsigned) {
      enter();
      busy();
      leave();
    });
    hedge_options h{.delay = std::chrono::microseconds(20), .max_copies = 3};
    h.on_hedge = [&](const coretry::hedge_event&) {
      enter();
      busy();
      leave();
    };
    auto f = coretry::async_hedge(pool.get_executor(), op, p, h, asio::use_future);
    const int v = f.get();
    pool.join();
    CHECK(v >= 4);
    CHECK_FALSE(overlap.load());
  }
}

TEST_CASE("an attempt that throws something other than system_error while a copy runs ends the "
          "operation once; hedge_async rethrows it as itself") {
  manual_clock::reset();
  asio::io_context io;
  auto gate = std::make_shared<fake_gate>();
  int calls = 0;
  int cut = 0;
  auto op = [&]() -> asio::awaitable<int> {
    const int n = ++calls;
    manual_timer t(co_await asio::this_coro::executor);
    t.expires_after(n == 1 ? 1h : 5ms);
    auto [ec] = co_await t.async_wait(coretry::detail::as_tuple(asio::use_awaitable));
    if (ec) {
      ++cut;
      throw std::system_error(ec);
    }
    throw std::logic_error("copy 2 is broken");
  };
  hedge_stats stats;
  std::string what;
  int completions = 0;
  // Named outside the co_await expression: g++ 12 miscompiles an aggregate temporary built
  // inside one (detail/braced_policy.hpp).
  const retry_policy policy{.max_attempts = 3, .breaker = gate};
  const hedge_options hedge{.delay = 10ms, .max_copies = 2};
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          co_await coretry::hedge_async<manual_timer>(op, policy, hedge, stats);
        } catch (const std::logic_error& e) {
          what = e.what();
        }
        ++completions;
      },
      asio::detached);
  drive(io, [] { return false; });
  CHECK(completions == 1);
  CHECK(what == "copy 2 is broken");
  CHECK(calls == 2);
  CHECK(cut == 1);
  CHECK(stats.reason == std::error_code(coretry::errc::unexpected_exception));
  CHECK(one_outcome_per_grant(*gate));
}

TEST_CASE("a handler that throws lets the exception out of run() once, and the hedge has left "
          "nothing behind") {
  for (const int hint : {1, 2}) {
    CAPTURE(hint);
    manual_clock::reset();
    auto counts = std::make_shared<r14_counts>();
    asio::io_context io(hint);
    scripted_op op{{hang(), succeed(3, 5ms)}};
    int calls = 0;
    coretry::async_hedge<manual_timer>(
        io.get_executor(), [&] { return op(); }, retry_policy{.max_attempts = 2},
        hedge_options{.delay = 10ms, .max_copies = 2},
        asio::bind_allocator(r14_allocator<void>(counts), [&](error_code, int) {
          ++calls;
          throw std::runtime_error("handler");
        }));
    int thrown = 0;
    for (int i = 0; i < 10; ++i) {
      try {
        drive(io, [] { return false; });
        break;
      } catch (const std::runtime_error&) {
        ++thrown;
      }
    }
    CHECK(thrown == 1);
    CHECK(calls == 1);
    CHECK(op.aborted == 1);
    CHECK(counts->outstanding() == 0);
  }
}

TEST_CASE("a hedge on a shared_policy copies its hooks and group token, and leaves it intact; a "
          "moved-from one is refused at the call") {
  manual_clock::reset();
  asio::io_context io;
  coretry::cancellation_source group;
  auto observer = std::make_shared<finish_counter>();
  retry_policy base{.max_attempts = 3, .observer = observer};
  base.cancellation = group.token();
  base.label = std::string(40, 'h');
  const shared_policy shared{base};
  scripted_op op{{hang()}};
  coretry::test::outcome a;
  coretry::test::outcome b;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); }, shared,
      hedge_options{.delay = 10ms, .max_copies = 2}, coretry::test::record(a));
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); }, shared,
      hedge_options{.delay = 10ms, .max_copies = 2}, coretry::test::record(b));
  drive(io, [&] { return op.calls == 4; });
  REQUIRE(op.calls == 4);
  group.cancel();
  drive(io, [] { return false; });
  CHECK(a.completions == 1);
  CHECK(b.completions == 1);
  CHECK(a.error == coretry::test::operation_aborted);
  CHECK(b.error == coretry::test::operation_aborted);
  CHECK(op.aborted == 4);
  CHECK(observer->finished == 2);
  CHECK(shared->label == std::string(40, 'h'));
  CHECK(shared->observer == observer);

  shared_policy gone{retry_policy{}};
  const shared_policy taken = std::move(gone);
  int called = 0;
  CHECK_THROWS_AS(coretry::async_hedge(
                      io.get_executor(), [&] { return op(); }, gone, hedge_options{},
                      [&](error_code, int) { ++called; }),
                  std::invalid_argument);
  io.restart();
  CHECK(io.poll() == 0); // nothing started
  CHECK(called == 0);
}

TEST_CASE("a context destroyed before the posted start ran destroys the handler uncalled and "
          "never calls the operation") {
  for (const int hint : {1, 2}) {
    CAPTURE(hint);
    manual_clock::reset();
    auto counts = std::make_shared<r14_counts>();
    auto handler_alive = std::make_shared<int>(0);
    auto op_alive = std::make_shared<int>(0);
    coretry::cancellation_source group;
    scripted_op op{{hang()}};
    int calls = 0;
    std::error_code got;
    {
      asio::io_context io(hint);
      retry_policy p{.max_attempts = 3};
      p.cancellation = group.token();
      coretry::async_hedge<manual_timer>(
          io.get_executor(), counted_op{op_alive, &op}, p,
          hedge_options{.delay = 10ms, .max_copies = 2},
          asio::bind_allocator(r14_allocator<void>(counts),
                               counted_handler{handler_alive, &calls, &got}));
      REQUIRE(counts->outstanding() > 0);
    }
    group.cancel();
    CHECK(op.calls == 0);
    CHECK(calls == 0);
    CHECK(handler_alive.use_count() == 1);
    CHECK(op_alive.use_count() == 1);
    CHECK(counts->outstanding() == 0);
  }
}

TEST_CASE("a context destroyed with copies in flight gives back the work it held on the "
          "handler's own context, whose run() then returns") {
  manual_clock::reset();
  asio::io_context home(1);
  scripted_op op{{hang()}};
  int calls = 0;
  {
    asio::io_context io;
    coretry::async_hedge<manual_timer>(
        io.get_executor(), [&] { return op(); }, retry_policy{.max_attempts = 3},
        hedge_options{.delay = 10ms, .max_copies = 2},
        asio::bind_executor(home, [&](error_code, int) { ++calls; }));
    drive(io, [&] { return op.calls == 2; });
    REQUIRE(op.calls == 2);
    CHECK(home.poll() == 0);
    CHECK_FALSE(home.stopped()); // the hedge's work keeps it
  }
  home.run(); // would block for ever if the destroyed hedge still held work on home
  CHECK(calls == 0);
}

TEST_CASE("with no hedge delay, a cancellation from the first copy's own start sends no further "
          "copy") {
  for (const bool by_group : {true, false}) {
    CAPTURE(by_group);
    manual_clock::reset();
    asio::io_context io;
    coretry::cancellation_source group;
    asio::cancellation_signal caller;
    int calls = 0;
    int cut = 0;
    auto op = [&]() -> asio::awaitable<int> {
      if (++calls == 1) {
        if (by_group)
          group.cancel();
        else
          caller.emit(asio::cancellation_type::terminal);
      }
      manual_timer t(co_await asio::this_coro::executor);
      t.expires_after(1h);
      auto [ec] = co_await t.async_wait(coretry::detail::as_tuple(asio::use_awaitable));
      if (ec) {
        ++cut;
        throw std::system_error(ec);
      }
      co_return 1;
    };
    retry_policy p{.max_attempts = 5};
    p.cancellation = group.token();
    coretry::test::outcome o;
    coretry::async_hedge<manual_timer>(
        io.get_executor(), op, p, hedge_options{.delay = 0ns, .max_copies = 3},
        asio::bind_cancellation_slot(caller.slot(), coretry::test::record(o)));
    drive(io, [] { return false; });
    CHECK(o.completions == 1);
    CHECK(o.error == coretry::test::operation_aborted);
    CHECK(calls == 1);
    CHECK(cut == 1);
  }
}

TEST_CASE("a handler whose executor refuses it lets that exception out of run() once, and the "
          "hedge has left nothing behind") {
  for (const int hint : {1, 2}) {
    CAPTURE(hint);
    manual_clock::reset();
    auto counts = std::make_shared<r14_counts>();
    auto handler_alive = std::make_shared<int>(0);
    asio::io_context io(hint);
    scripted_op op{{hang(), succeed(3, 5ms)}};
    int calls = 0;
    std::error_code got;
    coretry::async_hedge<manual_timer>(
        io.get_executor(), [&] { return op(); }, retry_policy{.max_attempts = 2},
        hedge_options{.delay = 10ms, .max_copies = 2},
        asio::bind_allocator(r14_allocator<void>(counts),
                             asio::bind_executor(refusing_executor{&io},
                                                 counted_handler{handler_alive, &calls, &got})));
    int thrown = 0;
    for (int i = 0; i < 10; ++i) {
      try {
        drive(io, [] { return false; });
        break;
      } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()) == "refused");
        ++thrown;
      }
    }
    CHECK(thrown == 1);
    CHECK(calls == 0);
    CHECK(op.aborted == 1);
    CHECK(handler_alive.use_count() == 1);
    CHECK(counts->outstanding() == 0);
  }
}

namespace {

/// Sends the first attempt at once and makes every later one wait 20 ms; counts each call.
struct counting_rate final : coretry::send_rate {
  int acquired = 0;
  int released = 0;
  int outcomes = 0;
  std::chrono::nanoseconds acquire(std::chrono::nanoseconds) noexcept override {
    return ++acquired == 1 ? std::chrono::nanoseconds::zero() : std::chrono::nanoseconds(20ms);
  }
  void release(std::chrono::nanoseconds) noexcept override { ++released; }
  void on_throttle(std::chrono::nanoseconds) noexcept override { ++outcomes; }
  void on_success(std::chrono::nanoseconds) noexcept override { ++outcomes; }
};

} // namespace

TEST_CASE("a hedge paced by its send rate, cancelled or torn down while it waits, hands the "
          "reserved token back once, before the handler runs") {
  for (const bool teardown : {false, true}) {
    CAPTURE(teardown);
    manual_clock::reset();
    auto rate = std::make_shared<counting_rate>();
    auto handler_alive = std::make_shared<int>(0);
    asio::cancellation_signal caller;
    scripted_op op{{hang()}};
    int calls = 0;
    int released_at_call = -1;
    std::error_code got;
    {
      asio::io_context io;
      retry_policy p{.max_attempts = 3, .rate_limit = rate};
      coretry::async_hedge<manual_timer>(
          io.get_executor(), [&] { return op(); }, p, hedge_options{.delay = 10ms, .max_copies = 2},
          asio::bind_cancellation_slot(caller.slot(), [&, handler_alive](error_code ec, int) {
            ++calls;
            got = ec;
            released_at_call = rate->released;
          }));
      drive(io, [&] { return rate->acquired == 2; }); // the hedge is due, and waits for its token
      REQUIRE(rate->acquired == 2);
      REQUIRE(op.calls == 1);
      if (!teardown) {
        caller.emit(asio::cancellation_type::terminal);
        drive(io, [] { return false; });
      }
    }
    CHECK(op.calls == 1); // the paced copy was never sent
    CHECK(rate->released == 1);
    CHECK(handler_alive.use_count() == 1);
    if (teardown) {
      CHECK(calls == 0);
    } else {
      CHECK(calls == 1);
      CHECK(got == coretry::test::operation_aborted);
      CHECK(released_at_call == 1);
      CHECK(op.aborted == 1);
    }
    caller.slot().clear();
  }
}
