// SPDX-License-Identifier: BSL-1.0
// Reviewer r10: reproducers against 794c43a's TSan fix ("the guarded initiation posts a thrown
// exception after its catch block"): the composed operation's twin of r8's two-thread case, which
// the fix did not reach. `async_retry` on a multi-threaded io_context with nothing that can cancel
// it runs without a strand (retry_op.hpp `initiate_retry`: `!controlled`), so a token attempt's
// handler that the initiation posted runs on the other thread while the initiating thread is still
// inside `retry_op::attempt`'s `catch (...)`, which reads `in_attempt_` (`attempt_live(seq)`) and,
// if it still looks live, writes the result and calls `attempt_done` from inside the handler block
// (the same exception_ptr hand-off the fix removed elsewhere). Built in coretry_r8_tests; it runs
// under ASan (Asio 1.38) and TSan (Boost.Asio) in CI.
#include <coretry/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <system_error>
#include <thread>

using namespace std::chrono_literals;
using coretry::retry_policy;
using error_code = coretry::detail::asio_error_code;

namespace {

const std::error_code refused = make_error_code(std::errc::connection_refused);

retry_policy no_wait(unsigned attempts) {
  return {.max_attempts = attempts, .backoff = coretry::backoff::fixed(0ms)};
}

/// r8's `posts_then_throws`: the initiation posts its handler to the handler's associated
/// executor (so that the io_context's other thread may run it) and then, on the first attempt,
/// throws. `pause` widens the window in
/// which the other thread runs the handler.
struct posts_then_throws {
  asio::io_context* io;
  std::chrono::microseconds pause;
  std::atomic<int> calls{0};
  template <class Token> auto operator()(Token&& token) {
    const int n = ++calls;
    return asio::async_initiate<Token, void(error_code, int)>(
        [this, n](auto handler) {
          // Through the handler's own associated executor, as a well-behaved operation
          // completes (here the io_context's executor: the operation runs on no strand).
          auto ex = asio::get_associated_executor(handler, io->get_executor());
          asio::post(ex, [h = std::move(handler), n]() mutable { std::move(h)(error_code{}, n); });
          if (n == 1) {
            if (pause.count() > 0)
              std::this_thread::sleep_for(pause);
            throw std::system_error(refused);
          }
        },
        token);
  }
};

} // namespace

// Failed under TSan at 794c43a (fixed since) (a data race on retry_op::in_attempt_: written by
// `attempt_done` on the thread running the posted handler, read by `attempt_live` in
// `retry_op::attempt`'s catch block on the initiating thread; no happens-before between them).
// Without TSan the checks usually pass: the 200 µs pause lets the handler finish first. The
// twin of r8's "retry_async on a two-thread io_context: an initiation that posts its handler and
// then throws completes the operation once" (test/r8_break_test.cpp), fixed for the coroutine
// path only (guard_box's atomic exchange, and 794c43a's post after the catch block).
TEST_CASE("r10: async_retry on a two-thread io_context: an initiation that posts its handler "
          "and then throws completes the operation once") {
  for (int round = 0; round < 200; ++round) {
    asio::io_context io;
    posts_then_throws op{&io, 200us};
    std::atomic<int> completions{0};
    coretry::async_retry(io.get_executor(), std::ref(op), no_wait(3),
                         [&](error_code, int) { ++completions; });
    std::thread t([&io] { io.run(); });
    io.run();
    t.join();
    CHECK(completions == 1);
  }
}

// Failed at 794c43a (fixed since), without any sanitizer (and at its parent 34382f8: the catch
// block is not part of the change). The same without the pause: the posted handler and the catch
// block now overlap in time, and both may find the attempt live (`attempt_live(seq)` is a plain
// read of a plain bool): both then call `attempt_done`, on two threads at once, on one
// unsynchronised state, and both reach `finish`. Observed (5 runs of 20000 rounds, g++ 12 -O0,
// Boost.Asio): the caller's handler called twice in 6 to 11 rounds per run (`twice`), the second
// time through `*handler_` of an already reset std::optional (UB). Expected: exactly one completion
// per operation. Under TSan also: races in take_current_exception on `core_.result()`.
TEST_CASE("r10: async_retry on a two-thread io_context: handler and catch block overlapping") {
  int bad = 0, twice = 0, never = 0, extra_calls = 0;
  for (int round = 0; round < 5000; ++round) {
    asio::io_context io;
    posts_then_throws op{&io, 0us};
    std::atomic<int> completions{0};
    coretry::async_retry(io.get_executor(), std::ref(op), no_wait(3),
                         [&](error_code, int) { ++completions; });
    std::thread t([&io] { io.run(); });
    io.run();
    t.join();
    if (completions != 1 || op.calls > 3)
      ++bad;
    twice += completions > 1;
    never += completions == 0;
    extra_calls += op.calls > 3;
  }
  CAPTURE(twice);
  CAPTURE(never);
  CAPTURE(extra_calls);
  CHECK(bad == 0);
}
