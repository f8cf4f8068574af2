// SPDX-License-Identifier: BSL-1.0
// What async_retry's composed operation allocates, and from where: its state is one allocation
// of the handler's allocator whether or not the operation is controlled (a controlled state holds
// its control block, the attempt's cancellation signal, group link and deadline entry, inside that
// allocation), and a controlled operation takes nothing more from the global heap than one
// nothing can cancel.
//
// This binary replaces the global `operator new` to count its calls: nothing else is linked into
// it.
#include <coretry/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <system_error>

namespace {
std::atomic<long> global_allocations{0};
} // namespace

void* operator new(std::size_t n) {
  global_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n))
    return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

using namespace std::chrono_literals;
using coretry::retry_policy;
using coretry::test::error_code;

namespace {

/// What passes through a `counting_allocator` and all its copies and rebinds.
struct allocation_counts {
  int allocations = 0;
  int deallocations = 0;
};

/// A handler's allocator that counts its calls into counters its copies share.
template <class T> struct counting_allocator {
  using value_type = T;
  std::shared_ptr<allocation_counts> counts;

  explicit counting_allocator(std::shared_ptr<allocation_counts> c) noexcept
      : counts(std::move(c)) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& other) noexcept : counts(other.counts) {}

  T* allocate(std::size_t n) {
    ++counts->allocations;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    ++counts->deallocations;
    std::allocator<T>().deallocate(p, n);
  }
  template <class U> bool operator==(const counting_allocator<U>& other) const noexcept {
    return counts == other.counts;
  }
};

/// A token attempt that succeeds with 7 through a post made with its handler's allocator, as
/// Asio's own operations make theirs.
struct succeeds_at_once {
  asio::io_context* io;
  template <class Token> auto operator()(Token&& token) const {
    return asio::async_initiate<Token, void(error_code, int)>(
        [](auto handler, asio::io_context* ctx) {
          const auto a = asio::get_associated_allocator(handler);
          asio::post(*ctx, asio::bind_allocator(a, [h = std::move(handler)]() mutable {
            std::move(h)(error_code{}, 7);
          }));
        },
        token, io);
  }
};

/// One async_retry on `io` (run by this thread, one thread only), started from outside `run()`,
/// its handler bound to a counting allocator; `bind` may bind a cancellation slot too.
struct one_run {
  int calls = 0;
  error_code error;
  int value = 0;
  int allocations = 0;       ///< of the handler's allocator, when the handler ran
  long global = 0;           ///< global `operator new` calls from the start until the handler ran
  bool all_returned = false; ///< every allocation of the handler's allocator deallocated, after
};

template <class Bind>
one_run run_once(asio::io_context& io, const retry_policy& policy, Bind bind) {
  one_run r;
  auto counts = std::make_shared<allocation_counts>();
  const long before = global_allocations.load();
  coretry::async_retry(
      io.get_executor(), succeeds_at_once{&io}, policy,
      bind(asio::bind_allocator(counting_allocator<void>(counts), [&](error_code ec, int v) {
        r.global = global_allocations.load() - before;
        r.allocations = counts->allocations;
        ++r.calls;
        r.error = ec;
        r.value = v;
      })));
  io.restart();
  io.run();
  r.all_returned = counts->allocations == counts->deallocations;
  return r;
}

} // namespace

TEST_CASE("an async_retry nothing can cancel and a controlled one each complete once, their state "
          "in one allocation of the handler's allocator and their control block in it") {
  // The handler's allocator serves the state, the posted start (the initiation runs outside
  // run()) and the attempt's post: three allocations, whether or not the operation is
  // controlled. What comes from the global heap (the policy's copy) is the same for both: a
  // controlled operation's control block is in its state, not an allocation of its own. The
  // caches Asio and the deadline queue fill on a thread's first operation of a kind are filled
  // by a first run of each, not counted.
  constexpr int state = 1, start = 1, attempt_post = 1;
  asio::io_context io(1); // one thread: a controlled operation needs no strand
  coretry::cancellation_source group;
  asio::cancellation_signal caller;
  const retry_policy plain{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms)};
  retry_policy policy = plain;
  auto no_slot = [](auto h) { return h; };
  auto with_slot = [&](auto h) {
    return asio::bind_cancellation_slot(caller.slot(), std::move(h));
  };
  auto second_run = [&](const retry_policy& p, auto bind) {
    run_once(io, p, bind);
    return run_once(io, p, bind);
  };
  const one_run uncontrolled = second_run(plain, no_slot);
  CHECK(uncontrolled.calls == 1);
  CHECK(uncontrolled.allocations == state + start + attempt_post);
  CHECK(uncontrolled.all_returned);

  std::string which;
  one_run r;
  SUBCASE("a group token") {
    which = "group token";
    policy.cancellation = group.token();
    r = second_run(policy, no_slot);
  }
  SUBCASE("the caller's cancellation slot") {
    which = "caller's slot";
    r = second_run(policy, with_slot);
  }
  SUBCASE("an attempt timeout") {
    which = "attempt timeout";
    policy.attempt_timeout = 1h;
    r = second_run(policy, no_slot);
  }
  CAPTURE(which);
  CHECK(r.calls == 1);
  CHECK_FALSE(r.error);
  CHECK(r.value == 7);
  CHECK(r.allocations == state + start + attempt_post);
  CHECK(r.global == uncontrolled.global);
  CHECK(r.all_returned);
}
