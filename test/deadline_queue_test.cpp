// SPDX-License-Identifier: BSL-1.0
// The deadline queue behind per-attempt timeouts and deadlines (detail/deadline_queue.hpp).
#include <coretry/detail/deadline_queue.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::testing;

namespace {

using manual_queue = coretry::detail::deadline_queue<manual_timer>;
using steady_queue = coretry::detail::deadline_queue<asio::steady_timer>;

/// An owner of one entry, as an operation's state is: refcounted, unlinks itself when it dies,
/// counts its firings (with the tag each carried).
template <class Queue>
struct owner final : Queue::entry, std::enable_shared_from_this<owner<Queue>> {
  explicit owner(int id_) : id(id_) {
    this->claim = [](typename Queue::entry& e) noexcept -> std::shared_ptr<void> {
      return static_cast<owner&>(e).weak_from_this().lock();
    };
    this->fire = [](typename Queue::entry& e, std::uint64_t tag) noexcept {
      auto& self = static_cast<owner&>(e);
      self.fired.fetch_add(1);
      self.last_tag = tag;
      if (self.on_fire)
        self.on_fire(self);
    };
  }
  ~owner() { Queue::forget(*this); }
  int id;
  std::atomic<int> fired{0};
  std::uint64_t last_tag = 0;
  void (*on_fire)(owner&) = nullptr;
  std::vector<int>* order = nullptr;
};

/// Runs `io` until idle, advancing the manual clock from one wait to the next.
void drain(asio::io_context& io) {
  drive(io, [] { return false; });
}

} // namespace

TEST_CASE("deadline queue: many deadlines fire in order, each once, on one armed timer") {
  manual_clock::reset();
  asio::io_context io;
  auto& q = manual_queue::of(io.get_executor());
  std::mt19937 gen(20);
  std::uniform_int_distribution<int> ms(1, 5000);
  std::vector<std::shared_ptr<owner<manual_queue>>> owners;
  std::vector<int> order;
  std::vector<manual_clock::time_point> due;
  for (int i = 0; i < 500; ++i) {
    auto o = std::make_shared<owner<manual_queue>>(i);
    o->order = &order;
    o->on_fire = [](owner<manual_queue>& self) { self.order->push_back(self.id); };
    due.push_back(manual_clock::now() + std::chrono::milliseconds(ms(gen)));
    q.push(*o, due.back(), std::uint64_t(i) + 1);
    owners.push_back(std::move(o));
  }
  CHECK(q.size() == 500);
  CHECK(manual_clock::pending() == 1); // one wait, for the earliest
  drain(io);
  REQUIRE(order.size() == 500);
  CHECK(std::is_sorted(order.begin(), order.end(),
                       [&](int a, int b) { return due[std::size_t(a)] < due[std::size_t(b)]; }));
  for (auto& o : owners) {
    CHECK(o->fired == 1);
    CHECK(o->last_tag == std::uint64_t(o->id) + 1);
    CHECK_FALSE(q.remove(*o)); // already gone
  }
  CHECK(q.size() == 0);
  CHECK_FALSE(q.waiting());
  CHECK(manual_clock::pending() == 0);
}

TEST_CASE("deadline queue: an entry removed before its deadline never fires") {
  manual_clock::reset();
  asio::io_context io;
  auto& q = manual_queue::of(io.get_executor());
  std::mt19937 gen(21);
  std::uniform_int_distribution<int> ms(1, 1000);
  std::vector<std::shared_ptr<owner<manual_queue>>> owners;
  for (int i = 0; i < 300; ++i) {
    owners.push_back(std::make_shared<owner<manual_queue>>(i));
    q.push(*owners.back(), manual_clock::now() + std::chrono::milliseconds(ms(gen)), 1);
  }
  // Remove every other one, from the middle of the heap as well as its top.
  for (int i = 0; i < 300; i += 2)
    CHECK(q.remove(*owners[std::size_t(i)]));
  CHECK(q.size() == 150);
  drain(io);
  for (int i = 0; i < 300; ++i)
    CHECK(owners[std::size_t(i)]->fired == (i % 2 == 0 ? 0 : 1));
}

TEST_CASE("deadline queue: an earlier entry re-arms the timer; a later one does not") {
  manual_clock::reset();
  asio::io_context io;
  auto& q = manual_queue::of(io.get_executor());
  owner<manual_queue> a(1), b(2), c(3);
  q.push(a, manual_clock::now() + 100ms, 1);
  CHECK(q.arms() == 1);
  q.push(b, manual_clock::now() + 200ms, 1); // later: the armed wait serves
  CHECK(q.arms() == 1);
  q.push(c, manual_clock::now() + 50ms, 1); // earlier: re-armed
  CHECK(q.arms() == 2);
  // No owner here is refcounted: claim fails, so nothing is called, and each leaves the queue.
  drain(io);
  CHECK(a.fired + b.fired + c.fired == 0);
  CHECK(q.size() == 0);
}

TEST_CASE("deadline queue: an owner destroyed while queued is never called") {
  manual_clock::reset();
  asio::io_context io;
  auto& q = manual_queue::of(io.get_executor());
  auto keep = std::make_shared<owner<manual_queue>>(1);
  auto gone = std::make_shared<owner<manual_queue>>(2);
  q.push(*gone, manual_clock::now() + 10ms, 1);
  q.push(*keep, manual_clock::now() + 20ms, 1);
  gone.reset(); // unlinks itself
  CHECK(q.size() == 1);
  drain(io);
  CHECK(keep->fired == 1);
}

TEST_CASE("deadline queue: a context destroyed with entries queued calls none of them") {
  manual_clock::reset();
  std::vector<std::shared_ptr<owner<manual_queue>>> owners;
  {
    asio::io_context io;
    auto& q = manual_queue::of(io.get_executor());
    for (int i = 0; i < 10; ++i) {
      owners.push_back(std::make_shared<owner<manual_queue>>(i));
      q.push(*owners.back(), manual_clock::now() + std::chrono::milliseconds(i + 1), 1);
    }
    io.poll();
  }
  manual_clock::advance(1s); // nothing of that context is left to complete
  for (auto& o : owners)
    CHECK(o->fired == 0);
  owners.clear(); // and the owners' destructors touch no queue that is gone
}

TEST_CASE("deadline queue: an owner that fired or was removed, dying after its context, touches "
          "no queue") {
  // The queue forgets only the entries it holds when the context shuts down; an entry that left
  // it earlier (fired, or removed) must not keep pointing at it, or its owner's destructor, run
  // after the context (and the queue) are gone, locks a destroyed mutex (ASan:
  // heap-use-after-free).
  manual_clock::reset();
  auto fired = std::make_shared<owner<manual_queue>>(1);
  auto removed = std::make_shared<owner<manual_queue>>(2);
  {
    asio::io_context io;
    auto& q = manual_queue::of(io.get_executor());
    q.push(*fired, manual_clock::now() + 10ms, 1);
    q.push(*removed, manual_clock::now() + 20ms, 1);
    CHECK(q.remove(*removed));
    drain(io);
    CHECK(fired->fired == 1);
    CHECK(removed->fired == 0);
  }
  CHECK(static_cast<void*>(fired->queue) == nullptr);
  CHECK(static_cast<void*>(removed->queue) == nullptr);
  fired.reset(); // their destructors run after the queue died
  removed.reset();
}

TEST_CASE("deadline queue: an emptied queue cancels its wait, so the context runs out of work") {
  asio::io_context io;
  auto& q = steady_queue::of(io.get_executor());
  auto o = std::make_shared<owner<steady_queue>>(1);
  q.push(*o, std::chrono::steady_clock::now() + 1h, 1);
  CHECK(q.waiting());
  CHECK(q.remove(*o));
  const auto t0 = std::chrono::steady_clock::now();
  io.run(); // would wait an hour if the wait stayed
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK_FALSE(q.waiting());
  CHECK(o->fired == 0);
}

TEST_CASE("deadline queue: attempts with one timeout, one after another, arm its timer once") {
  asio::io_context io;
  int done = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const coretry::retry_policy p{.attempt_timeout = 10s};
        for (int i = 0; i < 50; ++i) {
          co_await coretry::retry_async(
              []() -> asio::awaitable<int> {
                co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                co_return 1;
              },
              p);
          ++done;
        }
      },
      asio::detached);
  io.run();
  CHECK(done == 50);
  auto& q = steady_queue::of(io.get_executor());
  CHECK(q.arms() <= 2);
  CHECK(q.size() == 0);
  CHECK_FALSE(q.waiting());
}

TEST_CASE("deadline queue: entries pushed and removed from several threads fire exactly once") {
  // Real time, tiny deadlines: an entry either is removed in time (and never fires) or fires
  // once. Counts shrink under the sanitizers (CORETRY_DEADLINE_OPS).
  const char* env = std::getenv("CORETRY_DEADLINE_OPS");
  const int per_thread = env ? std::atoi(env) : 2000;
  asio::io_context io(4);
  auto work = asio::make_work_guard(io);
  std::vector<std::thread> runners;
  for (int i = 0; i < 2; ++i)
    runners.emplace_back([&] { io.run(); });
  auto& q = steady_queue::of(io.get_executor());
  constexpr int pushers = 3;
  std::vector<std::vector<std::shared_ptr<owner<steady_queue>>>> owners(pushers);
  std::vector<std::vector<char>> removed(pushers);
  std::vector<std::thread> threads;
  for (int t = 0; t < pushers; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 gen(unsigned(30 + t));
      std::uniform_int_distribution<int> us(0, 2000);
      for (int i = 0; i < per_thread; ++i) {
        auto o = std::make_shared<owner<steady_queue>>(i);
        q.push(*o, std::chrono::steady_clock::now() + std::chrono::microseconds(us(gen)), 1);
        owners[std::size_t(t)].push_back(o);
        removed[std::size_t(t)].push_back(0);
        if (i % 3 == 0) // some removed at once, most probably in time
          removed[std::size_t(t)].back() = q.remove(*o) ? 1 : 0;
        if (i % 7 == 0) // some dropped while queued
          owners[std::size_t(t)].back().reset();
      }
    });
  for (auto& t : threads)
    t.join();
  // Everything left is due within 2 ms of its push.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (q.size() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  work.reset();
  for (auto& r : runners)
    r.join();
  CHECK(q.size() == 0);
  for (int t = 0; t < pushers; ++t)
    for (int i = 0; i < per_thread; ++i)
      if (const auto& o = owners[std::size_t(t)][std::size_t(i)])
        CHECK(o->fired == (removed[std::size_t(t)][std::size_t(i)] ? 0 : 1));
}

namespace {

// For the test below: what the timer's claim saw (statics: `claim` is a plain function).
std::atomic<int> claim_phase{0};
std::atomic<bool> owner_destroyed{false};
std::atomic<bool> freed_under_claim{false};

/// An owner whose `claim` takes its time: it waits until the test has dropped the last
/// reference, then long enough for a destructor that does not wait to have finished.
struct slow_claim_owner final : steady_queue::entry,
                                std::enable_shared_from_this<slow_claim_owner> {
  slow_claim_owner() {
    this->claim = [](steady_queue::entry& e) noexcept -> std::shared_ptr<void> {
      std::weak_ptr<slow_claim_owner> w = static_cast<slow_claim_owner&>(e).weak_from_this();
      claim_phase.store(1);
      while (claim_phase.load() < 2)
        std::this_thread::yield();
      std::this_thread::sleep_for(100ms);
      if (owner_destroyed.load())
        freed_under_claim.store(true);
      return w.lock();
    };
    this->fire = [](steady_queue::entry&, std::uint64_t) noexcept { claim_phase.store(3); };
  }
  ~slow_claim_owner() {
    steady_queue::forget(*this);
    owner_destroyed.store(true);
  }
};

} // namespace

TEST_CASE("deadline queue: an owner dying while the timer claims its entry waits for the claim") {
  // Issue 32, finding 18: the entry was unlinked (published as not queued) before `claim` ran,
  // so an owner dying then skipped the queue's lock and freed the entry under the claim.
  claim_phase = 0;
  owner_destroyed = false;
  freed_under_claim = false;
  asio::io_context io(1);
  auto& q = steady_queue::of(io.get_executor());
  auto o = std::make_shared<slow_claim_owner>();
  q.push(*o, std::chrono::steady_clock::now(), 1);
  std::thread runner([&] { io.run(); });
  while (claim_phase.load() < 1)
    std::this_thread::yield();
  claim_phase.store(2);
  o.reset(); // the last reference, while the timer's thread is inside `claim`
  runner.join();
  CHECK(owner_destroyed.load());
  CHECK_FALSE(freed_under_claim.load());
  CHECK(claim_phase.load() == 2); // claimed by nobody: never fired
  CHECK(q.size() == 0);
}

TEST_CASE(
    "deadline queue: a wait dropped by manual_clock::reset() is armed afresh by the next push") {
  // Issue 32, finding 15: reset() destroys the queue's pending wait uncalled; the queue went on
  // believing it waited until the old instant, so a later deadline at or after it never fired.
  manual_clock::reset();
  asio::io_context io;
  auto& q = manual_queue::of(io.get_executor());
  manual_clock::advance(100s);
  auto a = std::make_shared<owner<manual_queue>>(1);
  q.push(*a, manual_clock::now() + 1s, 1); // armed for 101 s
  CHECK(q.remove(*a));
  CHECK(manual_clock::pending() == 1);
  manual_clock::reset(); // the clock back to 0, the wait dropped
  CHECK(manual_clock::pending() == 0);
  CHECK_FALSE(q.waiting());
  auto b = std::make_shared<owner<manual_queue>>(2);
  q.push(*b, manual_clock::now() + 200s, 2); // later than the stale 101 s
  CHECK(manual_clock::pending() == 1);
  drain(io);
  CHECK(b->fired == 1);
  CHECK(b->last_tag == 2);
  CHECK(a->fired == 0);
}
