// SPDX-License-Identifier: BSL-1.0
// Reviewer r15: probes of f86a583, where async_retry's first step runs inside the initiating
// function when the caller already runs on the operation's executor, and an outcome decided
// there is submitted through the handler's immediate executor (posted before Asio 1.28). Every
// path that can decide the outcome inside the initiation (a gate, a send rate, a budget, a
// deadline, a group, the caller's slot, an attempt completing or throwing inside its own
// initiation, a throwing hook), every token and handler binding (a strand, another context,
// use_future, use_awaitable, deferred, a counting allocator, an immediate executor), nesting,
// stack depth, and threads (a group cancelled and a slot emitted from elsewhere; an
// uncontrolled operation on a context run by two threads, and on a thread_pool).
#include <coretry/observer.hpp>
#include <coretry/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/fake_gate.hpp>

#if CORETRY_ASIO_BOOST
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/thread_pool.hpp>
#else
#include <asio/bind_allocator.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/thread_pool.hpp>
#endif
#if CORETRY_ASIO_HAS_IMMEDIATE_EXECUTOR
#if CORETRY_ASIO_BOOST
#include <boost/asio/bind_immediate_executor.hpp>
#else
#include <asio/bind_immediate_executor.hpp>
#endif
#endif

#include <atomic>
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using coretry::retry_policy;
using error_code = coretry::detail::asio_error_code;

namespace {

/// `connection_refused` as a `std::error_code`, in either Asio flavour.
std::error_code refused_code() {
  return error_code(asio::error::connection_refused);
}

retry_policy tiny_policy(unsigned attempts = 3) {
  return {.max_attempts = attempts, .backoff = coretry::backoff::fixed(1us)};
}

/// How a probe attempt completes.
enum class mode { posted, inline_handler, throws, emits_then_posts };

/// A token attempt: fails `failures` times with `connection_refused`, then yields its count.
/// `posted` completes through a post to its handler's executor; `inline_handler` calls the
/// handler inside its own initiating function; `throws` throws from it; `emits_then_posts`
/// emits `emit_into` (the caller's signal) inside its initiation, after connecting its own slot
/// (which completes it with `operation_aborted`), then posts its completion unless cut.
struct probe_op {
  asio::io_context* io = nullptr;
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  int failures = 0;
  mode how = mode::posted;
  asio::cancellation_signal* emit_into = nullptr;
  template <class Token> auto operator()(Token&& token) const {
    return asio::async_initiate<Token, void(error_code, int)>(
        [this](auto handler) {
          const int n = ++*calls;
          const error_code ec =
              n <= failures ? error_code(asio::error::connection_refused) : error_code();
          if (how == mode::throws)
            throw std::runtime_error("probe_op: initiation threw");
          if (how == mode::inline_handler) {
            std::move(handler)(ec, n);
            return;
          }
          auto ex = asio::get_associated_executor(handler, io->get_executor());
          if (how == mode::emits_then_posts) {
            auto h = std::make_shared<decltype(handler)>(std::move(handler));
            auto done = std::make_shared<bool>(false);
            auto slot = asio::get_associated_cancellation_slot(*h);
            if (slot.is_connected())
              slot.assign([h, done, ex](asio::cancellation_type) {
                if (*done)
                  return;
                *done = true;
                asio::post(ex, [h] { std::move (*h)(asio::error::operation_aborted, 0); });
              });
            emit_into->emit(asio::cancellation_type::terminal);
            if (!*done) {
              *done = true;
              asio::post(ex, [h, ec, n] { std::move (*h)(ec, n); });
            }
            return;
          }
          asio::post(ex, [h = std::move(handler), ec, n]() mutable { std::move(h)(ec, n); });
        },
        token);
  }
};

/// What a handler saw.
struct seen {
  int calls = 0;
  error_code ec;
  int value = 0;
  bool inside = false; ///< called while its async_retry had not returned yet
};

/// Runs `start` inside a handler on `io`, marking the window in which async_retry runs.
struct window {
  bool open = false;
};

auto recorder(seen& s, const window& w) {
  return [&s, &w](error_code ec, int v) {
    ++s.calls;
    s.ec = ec;
    s.value = v;
    s.inside = s.inside || w.open;
  };
}

/// Starts one async_retry inside a handler running on `io` (so its first step runs inline),
/// then runs `io` to completion.
template <class Start> void start_inside(asio::io_context& io, window& w, Start start) {
  asio::post(io, [&w, start]() mutable {
    w.open = true;
    start();
    w.open = false;
  });
  io.run();
}

struct refusing_rate final : coretry::send_rate {
  std::chrono::nanoseconds acquire(std::chrono::nanoseconds) noexcept override {
    return coretry::unlimited;
  }
  void on_throttle(std::chrono::nanoseconds) noexcept override {}
  void on_success(std::chrono::nanoseconds) noexcept override {}
};

struct refusing_budget final : coretry::retry_budget {
  bool try_retry(std::chrono::nanoseconds) noexcept override { return false; }
};

struct throwing_observer final : coretry::retry_observer {
  int started = 0;
  void on_operation_started(const coretry::operation_started_event&) override {
    ++started;
    throw std::runtime_error("observer threw");
  }
  void on_attempt_started(const coretry::attempt_started_event&) override {
    throw std::runtime_error("observer threw");
  }
  void on_operation_finished(const coretry::operation_finished_event&) override {
    throw std::runtime_error("observer threw");
  }
};

/// An allocator counting what it hands out and gets back.
struct counts {
  std::atomic<long> allocated{0};
  std::atomic<long> freed{0};
};
template <class T> struct counting_allocator {
  using value_type = T;
  counts* c;
  explicit counting_allocator(counts* k) noexcept : c(k) {}
  template <class U> counting_allocator(const counting_allocator<U>& o) noexcept : c(o.c) {}
  T* allocate(std::size_t n) {
    c->allocated.fetch_add(1);
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept {
    c->freed.fetch_add(1);
    ::operator delete(p);
  }
  template <class U> bool operator==(const counting_allocator<U>& o) const noexcept {
    return c == o.c;
  }
};

} // namespace

TEST_CASE("every outcome decided inside the initiation reaches the handler once, after "
          "async_retry returns") {
  asio::io_context io(1);
  window w;
  seen s;
  retry_policy p = tiny_policy();
  probe_op op{&io};
  std::error_code want;
  SUBCASE("a gate refuses the first attempt") {
    auto gate = std::make_shared<coretry::test::fake_gate>();
    gate->open = true;
    p.breaker = gate;
    want = coretry::errc::circuit_open;
  }
  SUBCASE("a send rate refuses the first attempt") {
    p.rate_limit = std::make_shared<refusing_rate>();
    want = coretry::errc::rate_limited;
  }
  SUBCASE("a budget refuses the retry of an attempt failing inside its initiation") {
    p.budget = std::make_shared<refusing_budget>();
    op.how = mode::inline_handler;
    op.failures = 5;
    want = refused_code(); // the last error (final_error::last_error)
  }
  SUBCASE("a group cancelled before the start") {
    coretry::cancellation_source src;
    src.cancel();
    p.cancellation = src.token();
    want = coretry::test::operation_aborted;
  }
  SUBCASE("the attempt's initiation throws") {
    op.how = mode::throws;
    want = coretry::errc::unexpected_exception;
  }
  SUBCASE("on_retry throws after an attempt failed inside its initiation") {
    op.how = mode::inline_handler;
    op.failures = 1;
    p.on_retry = [](const coretry::retry_event&) { throw std::runtime_error("hook threw"); };
    want = coretry::errc::unexpected_exception;
  }
  SUBCASE("the attempts run out, each failing inside its initiation") {
    op.how = mode::inline_handler;
    op.failures = 10;
    p.max_attempts = 1;
    want = refused_code();
  }
  SUBCASE("a throwing observer, the attempt succeeding inside its initiation") {
    auto obs = std::make_shared<throwing_observer>();
    p.observer = obs;
    op.how = mode::inline_handler;
  }
  SUBCASE("a timed attempt succeeding inside its initiation") {
    p.attempt_timeout = 1h;
    p.deadline = 2h;
    op.how = mode::inline_handler;
  }
  start_inside(io, w, [&] { coretry::async_retry(io.get_executor(), op, p, recorder(s, w)); });
  CHECK(s.calls == 1);
  CHECK_FALSE(s.inside);
  CHECK(std::error_code(s.ec) == want);
  CHECK(*op.calls <= 1); // refused, or retried never: each ends at its first decision
}

TEST_CASE("an awaitable attempt that ends without suspending (the curl front end's attempt on a "
          "closed client) completes the operation once, after async_retry returns") {
  asio::io_context io(1);
  window w;
  seen s;
  int runs = 0;
  retry_policy p = tiny_policy(2);
  bool throws = false;
  SUBCASE("uncontrolled") {}
  SUBCASE("controlled") {
    p.attempt_timeout = 1h;
  }
  SUBCASE("it throws") {
    throws = true;
  }
  auto op = [&]() -> asio::awaitable<std::tuple<std::error_code, int>> {
    ++runs;
    if (throws)
      throw std::runtime_error("attempt threw");
    co_return std::tuple{coretry::test::operation_aborted, 0};
  };
  start_inside(io, w, [&] { coretry::async_retry(io.get_executor(), op, p, recorder(s, w)); });
  CHECK(runs == 1);
  CHECK(s.calls == 1);
  CHECK_FALSE(s.inside);
  CHECK(std::error_code(s.ec) == (throws ? std::error_code(coretry::errc::unexpected_exception)
                                         : coretry::test::operation_aborted));
}

TEST_CASE("the caller's slot emitted inside the first attempt's initiation cancels the operation "
          "once, after async_retry returns") {
  asio::io_context io(1);
  window w;
  seen s;
  asio::cancellation_signal sig;
  probe_op op{&io};
  op.how = mode::emits_then_posts;
  op.emit_into = &sig;
  start_inside(io, w, [&] {
    coretry::async_retry(io.get_executor(), op, tiny_policy(),
                         asio::bind_cancellation_slot(sig.slot(), recorder(s, w)));
  });
  CHECK(*op.calls == 1);
  CHECK(s.calls == 1);
  CHECK_FALSE(s.inside);
  CHECK(std::error_code(s.ec) == coretry::test::operation_aborted);
}

TEST_CASE("a handler bound to a strand gets an outcome decided inside the initiation on that "
          "strand") {
  asio::io_context io;
  auto strand = asio::make_strand(io);
  window w;
  int calls = 0;
  bool on_strand = false;
  probe_op op{&io};
  op.how = mode::inline_handler;
  start_inside(io, w, [&] {
    coretry::async_retry(io.get_executor(), op, tiny_policy(),
                         asio::bind_executor(strand, [&](error_code, int) {
                           ++calls;
                           on_strand = strand.running_in_this_thread() && !w.open;
                         }));
  });
  CHECK(calls == 1);
  CHECK(on_strand);
}

TEST_CASE("a handler bound to another context gets an outcome decided inside the initiation "
          "there") {
  asio::io_context io;
  asio::io_context other;
  window w;
  int calls = 0;
  bool on_other = false;
  probe_op op{&io};
  op.how = mode::inline_handler;
  start_inside(io, w, [&] {
    coretry::async_retry(io.get_executor(), op, tiny_policy(),
                         asio::bind_executor(other.get_executor(), [&](error_code, int) {
                           ++calls;
                           on_other = other.get_executor().running_in_this_thread();
                         }));
  });
  CHECK(calls == 0);
  other.run();
  CHECK(calls == 1);
  CHECK(on_other);
}

#if CORETRY_ASIO_HAS_IMMEDIATE_EXECUTOR
TEST_CASE("a handler with an immediate executor and a strand of its own is called on its "
          "strand, as Asio's dispatch to the immediate executor calls it") {
  asio::io_context io;
  asio::io_context other;
  auto strand = asio::make_strand(io);
  int calls = 0;
  bool on_strand = false;
  probe_op op{&io};
  op.how = mode::inline_handler;
  asio::post(io, [&] {
    coretry::async_retry(
        io.get_executor(), op, tiny_policy(),
        asio::bind_immediate_executor(other.get_executor(),
                                      asio::bind_executor(strand, [&](error_code, int) {
                                        ++calls;
                                        on_strand = strand.running_in_this_thread();
                                      })));
  });
  CHECK(io.run_one() == 1); // the start: the outcome is decided inside it
  CHECK(calls == 0);        // submitted to `other`
  other.run();              // from there on to the strand (which keeps `io` busy meanwhile)
  CHECK(calls == 0);
  io.run();
  CHECK(calls == 1);
  CHECK(on_strand);
}
#endif

TEST_CASE("use_future, deferred and use_awaitable get an outcome decided inside the initiation "
          "once") {
  asio::io_context io;
  window w;
  auto gate = std::make_shared<coretry::test::fake_gate>();
  gate->open = true;
  retry_policy refused = tiny_policy();
  refused.breaker = gate;
  probe_op op{&io};
  SUBCASE("use_future") {
    // The code as the future's value: an exception_ptr made on the system executor's thread is
    // counted with atomics TSan cannot see (test/tsan.supp).
    std::future<error_code> f;
    start_inside(io, w, [&] {
      f = coretry::async_retry(io.get_executor(), op, refused,
                               asio::use_future([](error_code ec, int) { return ec; }));
    });
    CHECK(std::error_code(f.get()) == coretry::errc::circuit_open);
  }
  SUBCASE("deferred, started inside a handler") {
    seen s;
    start_inside(io, w, [&] {
      auto d = coretry::async_retry(io.get_executor(), op, refused, coretry::test::deferred);
      std::move(d)(recorder(s, w));
    });
    CHECK(s.calls == 1);
    CHECK_FALSE(s.inside);
    CHECK(std::error_code(s.ec) == coretry::errc::circuit_open);
  }
  SUBCASE("use_awaitable, through async_retry and through retry_async's composed path") {
    int caught = 0;
    coretry::cancellation_source src;
    retry_policy controlled = refused;
    controlled.cancellation = src.token();
    probe_op inline_op{&io};
    inline_op.how = mode::inline_handler;
    retry_policy group_only = tiny_policy();
    group_only.cancellation = src.token();
    int value = 0;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          const auto ex = co_await asio::this_coro::executor;
          try {
            co_await coretry::async_retry(ex, op, refused, asio::use_awaitable);
          } catch (const coretry::test::system_error&) {
            ++caught;
          }
          try {
            co_await coretry::retry_async(op, controlled);
          } catch (const std::system_error& e) {
            caught += e.code() == coretry::errc::circuit_open ? 1 : 0;
          }
          value = co_await coretry::retry_async(inline_op, group_only);
          value += co_await coretry::retry_async([]() -> asio::awaitable<int> { co_return 10; },
                                                 group_only);
        },
        asio::detached);
    io.run();
    CHECK(caught == 2);
    CHECK(value == 11);
  }
}

TEST_CASE("a handler's allocator gets back every block, inline start or not, run or destroyed") {
  counts c;
  {
    asio::io_context io(1);
    window w;
    int calls = 0;
    probe_op inline_op{&io};
    inline_op.how = mode::inline_handler;
    inline_op.failures = 1;
    probe_op posted_op{&io};
    posted_op.failures = 1;
    coretry::cancellation_source src;
    retry_policy controlled = tiny_policy();
    controlled.cancellation = src.token();
    auto h = [&](error_code ec, int) { calls += ec ? 100 : 1; };
    start_inside(io, w, [&] {
      coretry::async_retry(io.get_executor(), inline_op, tiny_policy(),
                           asio::bind_allocator(counting_allocator<void>(&c), h));
      coretry::async_retry(io.get_executor(), posted_op, controlled,
                           asio::bind_allocator(counting_allocator<void>(&c), h));
    });
    CHECK(calls == 2);
    CHECK(c.allocated.load() > 0);
    CHECK(c.allocated.load() == c.freed.load());
  }
  {
    // The outcome decided inside the initiation, its delivery still queued when the context
    // is destroyed: the handler is destroyed uncalled, and its blocks come back.
    asio::io_context io;
    int calls = 0;
    probe_op op{&io};
    op.how = mode::inline_handler;
    asio::post(io, [&] {
      coretry::async_retry(
          io.get_executor(), op, tiny_policy(),
          asio::bind_allocator(counting_allocator<void>(&c), [&](error_code, int) { ++calls; }));
    });
    CHECK(io.run_one() == 1);
    CHECK(calls == 0);
  }
  CHECK(c.allocated.load() == c.freed.load());
}

TEST_CASE("an async_retry started inside another's attempt, with that attempt's handler, "
          "completes it once after both return") {
  asio::io_context io;
  window w;
  seen outer;
  auto gate = std::make_shared<coretry::test::fake_gate>();
  gate->open = true;
  retry_policy refused = tiny_policy();
  refused.breaker = gate;
  auto inner_calls = std::make_shared<int>(0);
  auto op = [&](auto&& token) {
    ++*inner_calls;
    // The inner operation is refused inside its own initiation, inside the outer's.
    return coretry::async_retry(io.get_executor(), probe_op{&io}, refused,
                                std::forward<decltype(token)>(token));
  };
  start_inside(io, w, [&] {
    coretry::async_retry(io.get_executor(), op, tiny_policy(2), recorder(outer, w));
    CHECK(*inner_calls == 1);
  });
  CHECK(*inner_calls == 2);
  CHECK(outer.calls == 1);
  CHECK_FALSE(outer.inside);
  CHECK(std::error_code(outer.ec) == coretry::errc::circuit_open);
}

TEST_CASE("thousands of attempts failing inside their own initiation with no backoff do not "
          "grow the stack") {
  asio::io_context io;
  window w;
  seen s;
  probe_op op{&io};
  op.how = mode::inline_handler;
  op.failures = 1 << 30;
  retry_policy p{.max_attempts = 20000, .backoff = coretry::backoff::fixed(0ns)};
  start_inside(io, w, [&] { coretry::async_retry(io.get_executor(), op, p, recorder(s, w)); });
  CHECK(*op.calls == 20000);
  CHECK(s.calls == 1);
  CHECK_FALSE(s.inside);
  CHECK(std::error_code(s.ec) == refused_code());
}

TEST_CASE("controlled operations started inside run() on a one-thread context complete once "
          "while another thread cancels their group and emits their slots") {
  constexpr int n = 64;
  asio::io_context io(1);
  coretry::cancellation_source src;
  retry_policy p{.max_attempts = 1000000, .backoff = coretry::backoff::fixed(1us)};
  p.cancellation = src.token();
  std::vector<asio::cancellation_signal> sigs(n);
  std::atomic<int> done{0};
  std::atomic<bool> started{false};
  std::vector<int> calls(n, 0);
  probe_op failing{&io};
  failing.failures = 1 << 30;
  probe_op failing_inline{&io};
  failing_inline.failures = 1 << 30;
  failing_inline.how = mode::inline_handler;
  asio::post(io, [&] {
    for (int i = 0; i < n; ++i) {
      auto h = [&, i](error_code, int) {
        ++calls[static_cast<std::size_t>(i)];
        done.fetch_add(1);
      };
      const probe_op& op = i % 2 ? failing : failing_inline;
      if (i % 4 < 2)
        coretry::async_retry(io.get_executor(), op, p, h);
      else
        coretry::async_retry(
            io.get_executor(), op, p,
            asio::bind_cancellation_slot(sigs[static_cast<std::size_t>(i)].slot(), h));
    }
    started.store(true);
  });
  std::thread other([&] {
    while (!started.load())
      std::this_thread::yield();
    // The slots are emitted on the handler's executor, as Asio requires; the group from here.
    asio::post(io, [&] {
      for (auto& s : sigs)
        s.emit(asio::cancellation_type::terminal);
    });
    src.cancel();
  });
  io.run();
  other.join();
  CHECK(done.load() == n);
  for (int c : calls)
    CHECK(c == 1);
}

TEST_CASE("uncontrolled operations started inside run() on a context run by two threads, and on "
          "a thread_pool, complete once") {
  constexpr int n = 64;
  std::atomic<int> done{0};
  std::atomic<int> inside{0};
  SUBCASE("io_context") {
    asio::io_context io;
    probe_op failing{&io};
    failing.failures = 3;
    probe_op failing_inline{&io};
    failing_inline.failures = 3;
    failing_inline.how = mode::inline_handler;
    retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(1us)};
    for (int i = 0; i < n; ++i)
      asio::post(io, [&, i] {
        thread_local bool in = false;
        in = true;
        probe_op op = i % 2 ? failing : failing_inline;
        op.calls = std::make_shared<int>(0); // its own: the operations run on two threads
        coretry::async_retry(io.get_executor(), op, p, [&](error_code ec, int) {
          inside.fetch_add(in ? 1 : 0);
          done.fetch_add(ec ? 1000 : 1);
        });
        in = false;
      });
    std::thread t([&] { io.run(); });
    io.run();
    t.join();
  }
  SUBCASE("thread_pool") {
    asio::thread_pool pool(2);
    asio::io_context unused;
    probe_op failing_inline{&unused};
    failing_inline.failures = 3;
    failing_inline.how = mode::inline_handler;
    retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(1us)};
    for (int i = 0; i < n; ++i)
      asio::post(pool, [&] {
        thread_local bool in = false;
        in = true;
        probe_op op = failing_inline;
        op.calls = std::make_shared<int>(0);
        coretry::async_retry(pool.get_executor(), op, p, [&](error_code ec, int) {
          inside.fetch_add(in ? 1 : 0);
          done.fetch_add(ec ? 1000 : 1);
        });
        in = false;
      });
    pool.join();
  }
  CHECK(done.load() == n);
  CHECK(inside.load() == 0);
}

TEST_CASE("a controlled operation on a caller's strand of a two-thread context completes once "
          "while another thread cancels its group") {
  constexpr int n = 32;
  asio::io_context io;
  auto strand = asio::make_strand(io);
  coretry::cancellation_source src;
  retry_policy p{.max_attempts = 1000000, .backoff = coretry::backoff::fixed(1us)};
  p.cancellation = src.token();
  probe_op failing{&io};
  failing.failures = 1 << 30;
  probe_op failing_inline{&io};
  failing_inline.failures = 1 << 30;
  failing_inline.how = mode::inline_handler;
  std::atomic<int> done{0};
  std::atomic<int> off_strand{0};
  std::atomic<bool> started{false};
  asio::post(strand, [&] {
    for (int i = 0; i < n; ++i)
      coretry::async_retry(strand, i % 2 ? failing : failing_inline, p, [&](error_code ec, int) {
        off_strand.fetch_add(strand.running_in_this_thread() ? 0 : 1);
        done.fetch_add(ec == asio::error::operation_aborted ? 1 : 1000);
      });
    started.store(true);
  });
  std::thread t([&] { io.run(); });
  std::thread canceller([&] {
    while (!started.load())
      std::this_thread::yield();
    src.cancel();
  });
  io.run();
  t.join();
  canceller.join();
  CHECK(done.load() == n);
  CHECK(off_strand.load() == 0);
}
