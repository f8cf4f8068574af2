// SPDX-License-Identifier: BSL-1.0
// The hedge against its twin: for each property the composed retry operation has (outstanding
// work on the handler's executor, its state from the handler's allocator, the order of its
// observer events, no strand on a one-thread context), the same script run through async_retry
// and through async_hedge (one attempt at a time, hedging off) must behave alike. Issue 28 lists
// where detail/hedge_op.hpp had drifted from detail/retry_op.hpp.
#include <coretry/budget.hpp>
#include <coretry/cancellation.hpp>
#include <coretry/hedge.hpp>
#include <coretry/observer.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <typeinfo>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

/// Which twin runs the script.
enum class twin { retry, hedge };

std::string name_of(twin t) {
  return t == twin::retry ? "async_retry" : "async_hedge";
}

/// One attempt at a time, a new one as soon as one fails: the hedge closest to a retry.
coretry::hedge_options sequential() {
  return {.delay = coretry::unlimited, .max_copies = 1};
}

/// Starts `op` through `t` on `ex` with `policy`, completing into `handler`.
template <class Timer = asio::steady_timer, class Executor, class Op, class Handler>
void start(twin t, const Executor& ex, Op op, const retry_policy& policy, Handler&& handler) {
  if (t == twin::retry)
    coretry::async_retry<Timer>(ex, std::move(op), policy, std::forward<Handler>(handler));
  else
    coretry::async_hedge<Timer>(ex, std::move(op), policy, sequential(),
                                std::forward<Handler>(handler));
}

/// A callback-style attempt: completes, through a post, with the next scripted error and the
/// attempt's number times ten. Signature `void(error_code, int)`.
struct scripted_token_op {
  asio::io_context* io;
  std::shared_ptr<std::vector<std::error_code>> script;
  std::shared_ptr<int> calls = std::make_shared<int>(0);

  template <class Token> auto operator()(Token&& token) {
    const std::size_t i = static_cast<std::size_t>(*calls);
    const std::error_code ec = i < script->size() ? (*script)[i] : std::error_code{};
    const int n = ++*calls;
    return asio::async_initiate<Token, void(error_code, int)>(
        [ec, n](auto handler, asio::io_context* ctx) {
          asio::post(*ctx, [h = std::move(handler), ec, n]() mutable {
            std::move(h)(coretry::detail::to_asio_error(ec), n * 10);
          });
        },
        token, io);
  }
};

// --- 1. Outstanding work on the handler's executor --------------------------------------------

} // namespace

TEST_CASE("a hedge's handler bound to another io_context keeps that context's run() until it "
          "completes, as async_retry's does") {
  for (const twin t : {twin::retry, twin::hedge}) {
    const std::string front = name_of(t);
    CAPTURE(front);
    asio::io_context io;      // where the operation runs
    asio::io_context home(1); // where the handler wants to run
    int calls = 0;
    std::error_code got = refused;
    int value = 0;
    start(t, io.get_executor(),
          scripted_token_op{&io, std::make_shared<std::vector<std::error_code>>(
                                     std::vector<std::error_code>{refused})},
          retry_policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms)},
          asio::bind_executor(home, [&](error_code ec, int v) {
            got = ec;
            value = v;
            ++calls;
          }));
    // Nothing has completed yet: home's run() must not return as if it had no work.
    std::thread runner([&] { io.run(); });
    home.run(); // returns only once the handler has run there
    runner.join();
    CHECK(calls == 1);
    CHECK_FALSE(got);
    CHECK(value == 20);
  }
}

// --- 2. The state from the handler's allocator ------------------------------------------------

namespace {

/// What passes through a `counting_allocator` and all its copies and rebinds.
struct allocation_counts {
  std::atomic<int> allocations{0};
  std::atomic<int> deallocations{0};
  std::atomic<std::size_t> largest{0}; ///< bytes of the largest single allocation
};

/// An allocator that counts its calls into counters its copies share.
template <class T> struct counting_allocator {
  using value_type = T;
  std::shared_ptr<allocation_counts> counts;

  explicit counting_allocator(std::shared_ptr<allocation_counts> c) noexcept
      : counts(std::move(c)) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& other) noexcept : counts(other.counts) {}

  T* allocate(std::size_t n) {
    ++counts->allocations;
    const std::size_t bytes = n * sizeof(T);
    std::size_t seen = counts->largest.load();
    while (bytes > seen && !counts->largest.compare_exchange_weak(seen, bytes)) {
    }
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

/// What the counting allocator saw when the handler ran.
struct allocator_run {
  int calls = 0;
  std::error_code error;
  int value = 0;
  int outstanding_at_completion = -1; ///< allocations not yet deallocated when the handler ran
};

/// Runs `op` through `t` on the manual clock, its handler bound to the counting allocator and
/// to a strand of `io` (so that the completion must queue), until nothing is left to run.
template <class Op>
allocator_run run_counted(twin t, asio::io_context& io,
                          const std::shared_ptr<allocation_counts>& counts, Op op,
                          const coretry::hedge_options& hedge = sequential()) {
  allocator_run run;
  auto handler = asio::bind_allocator(
      counting_allocator<void>(counts),
      asio::bind_executor(asio::make_strand(io), [&run, counts](error_code ec, int v) {
        ++run.calls;
        run.error = ec;
        run.value = v;
        run.outstanding_at_completion = counts->allocations - counts->deallocations;
      }));
  const retry_policy policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(10ms)};
  if (t == twin::retry)
    coretry::async_retry<manual_timer>(io.get_executor(), std::move(op), policy,
                                       std::move(handler));
  else
    coretry::async_hedge<manual_timer>(io.get_executor(), std::move(op), policy, hedge,
                                       std::move(handler));
  drive(io, [] { return false; });
  return run;
}

} // namespace

TEST_CASE("the handler's allocator serves a hedge's state, and all of it is freed before the "
          "handler runs, as with async_retry") {
  manual_clock::reset();
  for (const twin t : {twin::retry, twin::hedge}) {
    const std::string front = name_of(t);
    CAPTURE(front);
    auto counts = std::make_shared<allocation_counts>();
    asio::io_context io;
    scripted_op op{{fail(refused), fail(refused), succeed(30)}};
    const allocator_run run = run_counted(t, io, counts, [&] { return op(); });
    CHECK(run.calls == 1);
    CHECK_FALSE(run.error);
    CHECK(run.value == 30);
    CHECK(op.calls == 3);
    // The state holds the operation's copy of the policy: an allocation at least that large
    // came from the handler's allocator only if the state did.
    CHECK(counts->largest.load() >= sizeof(retry_policy));
    // Asio's rule for a composed operation: its intermediate memory is freed before its handler
    // is called.
    CHECK(run.outstanding_at_completion == 0);
    CHECK(counts->deallocations.load() == counts->allocations.load());
  }
}

TEST_CASE("a hedge whose loser is still running when the winner returns frees its state before "
          "the handler runs") {
  // The loser's frame, its co_spawn's completion and the hedge's timers still hold the state
  // when the winner decides the outcome: the handler waits until they have let go.
  manual_clock::reset();
  auto counts = std::make_shared<allocation_counts>();
  asio::io_context io;
  scripted_op op{{hang(), succeed(7, 5ms)}};
  const allocator_run run = run_counted(
      twin::hedge, io, counts, [&] { return op(); },
      coretry::hedge_options{.delay = 10ms, .max_copies = 2});
  CHECK(run.calls == 1);
  CHECK_FALSE(run.error);
  CHECK(run.value == 7);
  CHECK(op.calls == 2);
  CHECK(op.aborted == 1); // the loser was cancelled and returned
  CHECK(counts->largest.load() >= sizeof(retry_policy));
  CHECK(run.outstanding_at_completion == 0);
  CHECK(counts->deallocations.load() == counts->allocations.load());
}

TEST_CASE("a hedge started with a shared_policy holds the shared policy, not a copy of it, as "
          "async_retry does") {
  // The state is the largest allocation through the handler's allocator: with a shared_policy
  // it is smaller by the retry_policy a copy would have put in it (less the shared_policy's own
  // pointer and control-block reference).
  auto largest_state = [](const auto& policy) {
    manual_clock::reset();
    auto counts = std::make_shared<allocation_counts>();
    asio::io_context io;
    scripted_op op{{fail(refused), succeed(5)}};
    int value = 0;
    coretry::async_hedge<manual_timer>(
        io.get_executor(), [&] { return op(); }, policy, sequential(),
        asio::bind_allocator(counting_allocator<void>(counts), [&](error_code ec, int v) {
          CHECK_FALSE(ec);
          value = v;
        }));
    drive(io, [] { return false; });
    CHECK(value == 5);
    CHECK(counts->deallocations.load() == counts->allocations.load());
    return counts->largest.load();
  };
  const retry_policy p{.max_attempts = 3};
  const coretry::shared_policy shared{p};
  const std::size_t copied = largest_state(p);
  const std::size_t held = largest_state(shared);
  CHECK(held + sizeof(retry_policy) - sizeof(coretry::shared_policy) <= copied);
}

// --- 3. The order of the observer's events ----------------------------------------------------

namespace {

/// Writes every event both twins send, and the budget's `on_request`, into one log; the events
/// only one of them has (`retry_scheduled`, `hedge_started`, `hedge_abandoned`) are left out.
struct event_log {
  std::vector<std::string> lines;
  void add(std::string s) { lines.push_back(std::move(s)); }
};

struct logging_observer : coretry::retry_observer {
  event_log* log;
  explicit logging_observer(event_log* l) : log(l) {}
  void on_operation_started(const coretry::operation_started_event&) override {
    log->add("operation_started");
  }
  void on_attempt_started(const coretry::attempt_started_event& e) override {
    log->add("attempt_started " + std::to_string(e.attempt));
  }
  void on_attempt_finished(const coretry::attempt_finished_event& e) override {
    log->add("attempt_finished " + std::to_string(e.attempt) + " " + coretry::to_string(e.outcome));
  }
  void on_refused(const coretry::refusal_event& e) override {
    log->add("refused " + e.reason.message());
  }
  void on_operation_finished(const coretry::operation_finished_event& e) override {
    log->add("operation_finished " + std::to_string(e.attempts) + " " + e.reason.message());
  }
};

struct logging_budget : coretry::retry_budget {
  event_log* log;
  explicit logging_budget(event_log* l) : log(l) {}
  void on_request(std::chrono::nanoseconds) noexcept override { log->add("on_request"); }
  bool try_retry(std::chrono::nanoseconds) noexcept override { return true; }
};

/// How a script cancels its operation.
enum class cancel_by {
  none,
  slot_before_start,     ///< the caller's slot, emitted before the posted start ran
  group_before_start,    ///< the group token, cancelled before the posted start ran
  slot_in_attempt,       ///< the caller's slot, emitted by the first attempt, which then fails
  group_in_attempt,      ///< the group token, cancelled by the first attempt, which then fails
  group_in_attempt_wins, ///< the group token, cancelled by the first attempt, which succeeds
};

struct event_run {
  std::vector<std::string> events;
  int completions = 0;
  std::error_code error;
  int value = 0;
  int calls = 0;
};

/// Runs a script through `t` on the manual clock: attempts fail with `refused` until the third,
/// which succeeds with 3; `how` cancels it.
event_run run_logged(twin t, cancel_by how) {
  manual_clock::reset();
  asio::io_context io;
  event_log log;
  coretry::cancellation_source group;
  asio::cancellation_signal caller;
  event_run out;
  retry_policy p{.max_attempts = 4,
                 .backoff = coretry::backoff::fixed(10ms),
                 .budget = std::make_shared<logging_budget>(&log),
                 .observer = std::make_shared<logging_observer>(&log)};
  p.cancellation = group.token();
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> {
    const int n = ++calls;
    if (n == 1) {
      if (how == cancel_by::slot_in_attempt)
        caller.emit(asio::cancellation_type::terminal);
      if (how == cancel_by::group_in_attempt || how == cancel_by::group_in_attempt_wins)
        group.cancel();
      if (how == cancel_by::group_in_attempt_wins)
        co_return 1;
    }
    if (n < 3)
      throw std::system_error(refused);
    co_return n;
  };
  start<manual_timer>(t, io.get_executor(), op, p,
                      asio::bind_cancellation_slot(caller.slot(), [&](error_code ec, int v) {
                        ++out.completions;
                        out.error = ec;
                        out.value = v;
                      }));
  if (how == cancel_by::slot_before_start)
    caller.emit(asio::cancellation_type::terminal);
  if (how == cancel_by::group_before_start)
    group.cancel();
  drive(io, [] { return false; });
  out.events = log.lines;
  out.calls = calls;
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& line : v)
    s += line + "\n";
  return s;
}

} // namespace

TEST_CASE("a hedge sends its events in async_retry's order for the same script") {
  for (const cancel_by how : {cancel_by::none, cancel_by::slot_before_start,
                              cancel_by::group_before_start, cancel_by::slot_in_attempt,
                              cancel_by::group_in_attempt, cancel_by::group_in_attempt_wins}) {
    CAPTURE(static_cast<int>(how));
    const event_run retry = run_logged(twin::retry, how);
    const event_run hedge = run_logged(twin::hedge, how);
    CHECK(retry.completions == 1);
    CHECK(hedge.completions == 1);
    CHECK(joined(hedge.events) == joined(retry.events));
    CHECK(hedge.error == retry.error);
    CHECK(hedge.value == retry.value);
    CHECK(hedge.calls == retry.calls);
    // on_request first, then operation_started, whatever the cancellation did.
    REQUIRE(hedge.events.size() >= 2);
    CHECK(hedge.events[0] == "on_request");
    CHECK(hedge.events[1] == "operation_started");
  }
}

// --- 4. No strand on a one-thread context -----------------------------------------------------

TEST_CASE("a hedge on a one-thread io_context takes no strand, as async_retry does; a cancel "
          "from another thread completes it once") {
  for (const twin t : {twin::retry, twin::hedge}) {
    for (const int hint : {1, -1}) {
      const std::string front = name_of(t);
      CAPTURE(front);
      CAPTURE(hint);
      std::optional<asio::io_context> ctx;
      if (hint == 1)
        ctx.emplace(1);
      else
        ctx.emplace();
      asio::io_context& io = *ctx;
      coretry::cancellation_source source;
      std::atomic<int> started{0};
      bool on_strand = false;
      int calls = 0;
      std::error_code got;
      retry_policy policy{.max_attempts = 5, .backoff = coretry::backoff::fixed(1h)};
      policy.cancellation = source.token();
      // An awaitable attempt runs on the operation's executor: a strand, or the context's own.
      auto op = [&]() -> asio::awaitable<int> {
        const asio::any_io_executor ex = co_await asio::this_coro::executor;
        on_strand = ex.target_type() == typeid(asio::strand<asio::io_context::executor_type>);
        ++started;
        if (t == twin::hedge) { // the hedge has no backoff: the attempt itself waits
          asio::steady_timer wait(ex, 1h);
          co_await wait.async_wait(asio::use_awaitable);
        }
        throw std::system_error(refused);
      };
      start(t, io.get_executor(), op, policy, [&](error_code ec, int) {
        ++calls;
        got = ec;
      });
      while (started == 0)
        io.run_one();
      io.poll();             // the retry's attempt fails and it sleeps; the hedge's waits
      REQUIRE(started == 1); // for an hour either way
      CHECK(on_strand == (hint != 1));
      std::thread other([&] { source.cancel(); });
      other.join();
      io.restart();
      io.run_for(std::chrono::seconds(5));
      CHECK(calls == 1);
      CHECK(got == operation_aborted);
      CHECK(started == 1);
    }
  }
}
