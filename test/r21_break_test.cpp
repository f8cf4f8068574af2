// SPDX-License-Identifier: BSL-1.0
// r21's probes of 610a3c2 (issue 28): `detail::fallback_allocator`, the allocator of the retry
// operation's and the hedge's own intermediate handlers. First the adaptor by itself (rebinds,
// over-aligned types, arrays, blocks freed through copies, a stateful arena, the default
// allocator's type), then the operations with an allocator that refuses at every allocation in
// turn: a caller's handler that is over-aligned, and a group cancelling from another thread
// while the operation runs on a strand of a two-thread context. Manual clock, except the threaded
// case (hour-long real waits, cancelled: nothing is timed).

#include <coretry/cancellation.hpp>
#include <coretry/detail/fallback_allocator.hpp>
#include <coretry/hedge.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::hedge_options;
using coretry::retry_policy;
using coretry::detail::fallback_allocator;
using coretry::detail::fallback_t;

namespace {

/// Counts shared by every copy and rebind of a `refusing_allocator` (atomic: the threaded case).
struct refusal_counts {
  std::atomic<int> served{0};
  std::atomic<int> refused{0};
  std::atomic<int> returned{0};
  std::atomic<long> live_bytes{0};
};

/// Serves `limit` allocations, then throws `std::bad_alloc`; or, with `once`, refuses only the
/// allocation numbered `limit` and serves the others (a transient refusal).
template <class T> struct refusing_allocator {
  using value_type = T;
  std::shared_ptr<refusal_counts> counts;
  int limit = 0;
  bool once = false;
  refusing_allocator(std::shared_ptr<refusal_counts> c, int l, bool o = false) noexcept
      : counts(std::move(c)), limit(l), once(o) {}
  template <class U>
  refusing_allocator(const refusing_allocator<U>& other) noexcept
      : counts(other.counts), limit(other.limit), once(other.once) {}
  T* allocate(std::size_t n) {
    const int k = counts->served.load() + counts->refused.load();
    if (once ? k == limit : counts->served.load() >= limit) {
      ++counts->refused;
      throw std::bad_alloc();
    }
    ++counts->served;
    counts->live_bytes += static_cast<long>(n * sizeof(T));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    ++counts->returned;
    counts->live_bytes -= static_cast<long>(n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  template <class U> bool operator==(const refusing_allocator<U>& other) const noexcept {
    return counts == other.counts;
  }
};

/// A bump arena: a pointer to a fixed buffer, throwing once the buffer is spent; blocks are
/// given back by counting only. Copies share the buffer; two arenas compare equal when they do.
struct arena_state {
  alignas(256) unsigned char bytes[4096];
  std::size_t used = 0;
  int live = 0;
};
template <class T> struct arena_allocator {
  using value_type = T;
  arena_state* arena;
  explicit arena_allocator(arena_state* a) noexcept : arena(a) {}
  template <class U> arena_allocator(const arena_allocator<U>& o) noexcept : arena(o.arena) {}
  T* allocate(std::size_t n) {
    std::size_t at = (arena->used + alignof(T) - 1) / alignof(T) * alignof(T);
    if (at + n * sizeof(T) > sizeof(arena->bytes))
      throw std::bad_alloc();
    arena->used = at + n * sizeof(T);
    ++arena->live;
    return reinterpret_cast<T*>(arena->bytes + at);
  }
  void deallocate(T* p, std::size_t) noexcept {
    const auto* b = reinterpret_cast<unsigned char*>(p);
    REQUIRE(b >= arena->bytes);
    REQUIRE(b < arena->bytes + sizeof(arena->bytes));
    --arena->live;
  }
  template <class U> bool operator==(const arena_allocator<U>& o) const noexcept {
    return arena == o.arena;
  }
};

struct alignas(64) wide {
  unsigned char b[64];
};
struct alignas(128) wider {
  unsigned char b[384];
};
struct odd {
  unsigned char b[7];
};

template <class T, class A> void fill_and_check(A& a, std::size_t n) {
  T* p = a.allocate(n);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % alignof(T) == 0);
  std::memset(static_cast<void*>(p), 0xab, n * sizeof(T)); // ASan: the whole array is ours
  a.deallocate(p, n);
}

} // namespace

TEST_CASE("r21: fallback_t of std::allocator is std::allocator itself, of any value type") {
  static_assert(std::is_same_v<fallback_t<std::allocator<void>>, std::allocator<void>>);
  static_assert(std::is_same_v<fallback_t<std::allocator<wide>>, std::allocator<wide>>);
  static_assert(std::is_same_v<decltype(coretry::detail::with_fallback(std::allocator<void>())),
                               std::allocator<void>>);
  // The allocator a handler has by default, in either flavour of Asio.
  static_assert(
      std::is_same_v<fallback_t<asio::associated_allocator_t<void (*)()>>, std::allocator<void>>);
  // A rebind of the adaptor stays the adaptor, and converts both ways.
  using fa = fallback_allocator<refusing_allocator<void>>;
  using fw = std::allocator_traits<fa>::rebind_alloc<wide>;
  static_assert(std::is_same_v<fw, fallback_allocator<refusing_allocator<wide>>>);
  static_assert(std::is_same_v<std::allocator_traits<fw>::rebind_alloc<void>, fa>);
  CHECK(true);
}

TEST_CASE("r21: fallback_allocator serves over-aligned types and arrays from both sources, "
          "aligned, and gives each block back to the source that served it") {
  for (const int limit : {0, 1, 2, 3, 5, 1000}) {
    for (const bool once : {false, true}) {
      CAPTURE(limit);
      CAPTURE(once);
      auto counts = std::make_shared<refusal_counts>();
      fallback_allocator<refusing_allocator<void>> base(
          refusing_allocator<void>(counts, limit, once));
      {
        typename std::allocator_traits<decltype(base)>::template rebind_alloc<wide> aw(base);
        typename std::allocator_traits<decltype(base)>::template rebind_alloc<wider> awr(base);
        typename std::allocator_traits<decltype(base)>::template rebind_alloc<odd> ao(base);
        typename std::allocator_traits<decltype(base)>::template rebind_alloc<char> ac(base);
        for (std::size_t n : {1u, 2u, 3u, 7u}) {
          fill_and_check<wide>(aw, n);
          fill_and_check<wider>(awr, n);
          fill_and_check<odd>(ao, n);
          fill_and_check<char>(ac, n);
        }
        // A block from one source, freed through a copy rebound twice: back to its source.
        std::vector<std::pair<wider*, std::size_t>> held;
        for (std::size_t n = 1; n < 6; ++n)
          held.emplace_back(awr.allocate(n), n);
        const fallback_allocator<refusing_allocator<odd>> via_odd(awr);
        fallback_allocator<refusing_allocator<wider>> other(via_odd);
        CHECK(other == awr);
        CHECK_FALSE(other != awr);
        for (auto [p, n] : held)
          other.deallocate(p, n);
      }
      CHECK(counts->returned == counts->served);
      CHECK(counts->live_bytes == 0);
    }
  }
}

TEST_CASE("r21: fallback_allocator over a stateful arena: blocks from the arena go back to it, "
          "blocks from the heap to the heap, and equality follows the arena") {
  arena_state one;
  arena_state two;
  fallback_allocator<arena_allocator<wider>> a{arena_allocator<wider>(&one)};
  fallback_allocator<arena_allocator<wider>> b{arena_allocator<wider>(&two)};
  fallback_allocator<arena_allocator<char>> a2(a);
  CHECK(a == a2);
  CHECK(a != b);
  std::vector<wider*> blocks;
  for (int i = 0; i < 40; ++i) { // 4 KiB: the arena runs out after a few
    wider* p = (i % 2 ? a : fallback_allocator<arena_allocator<wider>>(a2)).allocate(1);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % alignof(wider) == 0);
    std::memset(static_cast<void*>(p), 0xcd, sizeof(wider));
    blocks.push_back(p);
  }
  CHECK(one.live > 0);
  CHECK(one.live < 40);
  for (wider* p : blocks)
    fallback_allocator<arena_allocator<wider>>(a2).deallocate(p, 1);
  CHECK(one.live == 0);
  CHECK(two.live == 0);
}

namespace {

/// The caller's handler, over-aligned: checks where Asio put it each time it is moved into a
/// block and called.
struct alignas(128) wide_handler {
  outcome* o;
  int* misplaced;
  unsigned char pad[128 - 2 * sizeof(void*)]{};
  void operator()(std::error_code ec, int v) {
    if (reinterpret_cast<std::uintptr_t>(this) % 128 != 0)
      ++*misplaced;
    auto rec = record(*o);
    rec(ec, v);
  }
};

struct wide_run {
  outcome o;
  bool initiated = false;
  bool escaped = false;
  int misplaced = 0;
  int served = 0;
  int returned = 0;
};

template <class Start> wide_run run_wide(int limit, bool once, int hint, Start& start) {
  wide_run r;
  auto counts = std::make_shared<refusal_counts>();
  manual_clock::reset();
  {
    asio::io_context io(hint);
    try {
      start(io, asio::bind_allocator(refusing_allocator<void>(counts, limit, once),
                                     wide_handler{&r.o, &r.misplaced}));
      r.initiated = true;
    } catch (const std::bad_alloc&) {
    }
    try {
      drive(io, [&] { return r.o.completions > 0; });
      drive(io, [] { return false; });
    } catch (...) {
      r.escaped = true;
    }
  }
  manual_clock::reset();
  r.served = counts->served;
  r.returned = counts->returned;
  return r;
}

template <class Start> void check_wide(Start start) {
  for (const int hint : {1, 2}) {
    for (const bool once : {false, true}) {
      CAPTURE(hint);
      CAPTURE(once);
      const wide_run ref = run_wide(std::numeric_limits<int>::max(), false, hint, start);
      REQUIRE(ref.o.completions == 1);
      CHECK(ref.misplaced == 0);
      for (int limit = 0; limit <= ref.served; ++limit) {
        CAPTURE(limit);
        const wide_run r = run_wide(limit, once, hint, start);
        CHECK_FALSE(r.escaped);
        CHECK(r.misplaced == 0);
        CHECK(r.returned == r.served);
        if (!r.initiated) {
          CHECK(r.o.completions == 0);
          continue;
        }
        CHECK(r.o.completions == 1);
        CHECK(r.o.error == ref.o.error);
        CHECK(r.o.value == ref.o.value);
        CHECK(r.o.at == ref.o.at);
      }
    }
  }
}

} // namespace

TEST_CASE("r21: a caller's handler aligned to 128 bytes, its allocator refusing at every "
          "allocation in turn (for good, or once): one completion, aligned, nothing leaked") {
  SUBCASE("async_retry: a failure, a sleep, an attempt timeout, a success") {
    check_wide([](asio::io_context& io, auto handler) {
      retry_policy p{.max_attempts = 4, .attempt_timeout = 10ms};
      p.backoff = coretry::backoff::fixed(3ms);
      coretry::async_retry<manual_timer>(io.get_executor(),
                                         scripted_op{{fail(refused), hang(), succeed(7, 1ms)}}, p,
                                         std::move(handler));
    });
  }
  SUBCASE("async_hedge: a hedge delay, an attempt timeout, a relaunch, a success") {
    check_wide([](asio::io_context& io, auto handler) {
      coretry::async_hedge<manual_timer>(
          io.get_executor(), scripted_op{{hang(), fail(refused, 2ms), succeed(9, 4ms)}},
          retry_policy{.max_attempts = 5, .attempt_timeout = 20ms},
          hedge_options{.delay = 5ms, .max_copies = 2}, std::move(handler));
    });
  }
}

namespace {

/// A handler that counts its calls atomically (it runs on either thread).
struct counting_handler {
  std::atomic<int>* calls;
  void operator()(std::error_code, int) { ++*calls; }
};

/// Waits (at most a minute: a lost operation fails the test rather than hanging it) until `f`.
template <class F> bool await_true(F f) {
  for (int i = 0; i < 60000 && !f(); ++i)
    std::this_thread::sleep_for(1ms);
  return f();
}

/// `start(strand, policy, handler)` on a strand of a context run by two threads, its allocator
/// refusing from allocation `limit` on (or only that one); a group cancels from this thread once
/// an attempt has started. The operation completes once, and every block goes back.
template <class Start> void check_threaded(Start start) {
  for (const bool once : {false, true}) {
    for (int limit = 0; limit < 48; ++limit) {
      CAPTURE(once);
      CAPTURE(limit);
      auto counts = std::make_shared<refusal_counts>();
      std::atomic<int> calls{0};
      std::atomic<int> started{0};
      bool initiated = false;
      {
        asio::io_context io(2);
        auto guard = asio::make_work_guard(io);
        auto strand = asio::make_strand(io);
        coretry::cancellation_source source;
        retry_policy p{.max_attempts = 3};
        p.cancellation = source.token();
        std::thread a([&] { io.run(); });
        std::thread b([&] { io.run(); });
        try {
          start(strand, p, &started,
                asio::bind_allocator(refusing_allocator<void>(counts, limit, once),
                                     counting_handler{&calls}));
          initiated = true;
        } catch (const std::bad_alloc&) {
        }
        if (initiated) {
          CHECK(await_true([&] { return started.load() > 0; }));
          source.cancel();
          CHECK(await_true([&] { return calls.load() > 0; }));
        }
        guard.reset();
        a.join();
        b.join();
      }
      CHECK(calls == (initiated ? 1 : 0));
      CHECK(counts->returned == counts->served);
    }
  }
}

/// An attempt that says it started, then waits an hour on a real timer (cancellably).
asio::awaitable<int> started_then_hang(std::atomic<int>* started) {
  ++*started;
  co_return co_await hang_on_steady_timer();
}

} // namespace

TEST_CASE("r21: a group cancelling from another thread, the operation on a strand of a two-thread "
          "context, its allocator refusing at every allocation in turn: one completion, nothing "
          "leaked, no terminate") {
  SUBCASE("async_retry") {
    check_threaded([](auto strand, const retry_policy& p, std::atomic<int>* started, auto h) {
      coretry::async_retry(
          strand, [started] { return started_then_hang(started); }, p, std::move(h));
    });
  }
  SUBCASE("async_hedge") {
    check_threaded([](auto strand, const retry_policy& p, std::atomic<int>* started, auto h) {
      coretry::async_hedge(
          strand, [started] { return started_then_hang(started); }, p,
          hedge_options{.delay = 0ns, .max_copies = 3}, std::move(h));
    });
  }
}

namespace {

/// `h`, called with success, with `h`'s allocator as its own (as `asio::append` would).
template <class H> struct with_success {
  H h;
  using allocator_type = asio::associated_allocator_t<H>;
  allocator_type get_allocator() const noexcept { return asio::get_associated_allocator(h); }
  void operator()() { std::move(h)(std::error_code()); }
};

/// A token attempt whose operation completes as Asio's own do: from a handler of its own (one
/// with no allocator), it posts the attempt's handler to that handler's executor, a post that
/// asks the handler's associated allocator for memory, inside `run()`.
struct completes_through_post {
  asio::io_context* io;
  template <class Token> auto operator()(Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [io = io](auto h) {
          asio::post(*io, [h = std::move(h)]() mutable {
            const auto ex = asio::get_associated_executor(h);
            asio::post(ex, with_success<decltype(h)>{std::move(h)});
          });
        },
        token);
  }
};

} // namespace

TEST_CASE("r21: a token attempt's handler, posted at its completion with an allocator that "
          "refuses once, neither loses the operation nor throws out of run()") {
  int lost = 0;
  int escaped_runs = 0;
  for (int k = 0; k < 12; ++k) {
    CAPTURE(k);
    auto counts = std::make_shared<refusal_counts>();
    int calls = 0;
    bool escaped = false;
    bool initiated = false;
    {
      asio::io_context io(1);
      try {
        coretry::async_retry(io.get_executor(), completes_through_post{&io},
                             retry_policy{.max_attempts = 2},
                             asio::bind_allocator(refusing_allocator<void>(counts, k, true),
                                                  [&calls](std::error_code) { ++calls; }));
        initiated = true;
      } catch (const std::bad_alloc&) {
      }
      for (int i = 0; i < 4; ++i) {
        try {
          io.run();
          break;
        } catch (...) {
          escaped = true;
          io.restart();
        }
      }
    }
    if (!initiated)
      continue;
    CHECK_FALSE(escaped);
    CHECK(calls == 1);
    lost += calls == 0 ? 1 : 0;
    escaped_runs += escaped ? 1 : 0;
    CHECK(counts->returned == counts->served);
  }
  CHECK(lost == 0);
  CHECK(escaped_runs == 0);
}
