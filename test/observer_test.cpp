// SPDX-License-Identifier: BSL-1.0
// The observer (observer.hpp): the exact events of retry_async, async_retry and hedges on the
// manual clock, refusals, breaker transitions, an observer that throws, and one observer shared
// by operations on several threads.

#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/hedge.hpp>
#include <coretry/observer.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/fake_gate.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::retry_policy;

namespace {

std::string ms(std::chrono::nanoseconds d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + "ms";
}
std::string code(const std::error_code& ec) {
  return ec ? ec.message() : std::string("ok");
}

/// Writes every event as one line, with the manual clock's time.
struct recorder : coretry::retry_observer {
  std::mutex m;
  std::vector<std::string> lines;
  void add(std::string s) {
    const std::lock_guard lock(m);
    lines.push_back(ms(manual_clock::elapsed()) + " " + std::move(s));
  }
  void on_operation_started(const coretry::operation_started_event& e) override {
    add(std::string(e.label) + " start " +
        (e.kind == coretry::operation_kind::hedge ? "hedge" : "retry"));
  }
  void on_attempt_started(const coretry::attempt_started_event& e) override {
    add("attempt " + std::to_string(e.attempt));
  }
  void on_attempt_finished(const coretry::attempt_finished_event& e) override {
    add("done " + std::to_string(e.attempt) + " " + ms(e.duration) + " " +
        coretry::to_string(e.outcome) + " " + code(e.error));
  }
  void on_retry_scheduled(const coretry::retry_scheduled_event& e) override {
    add("retry " + std::to_string(e.attempt) + " in " + ms(e.delay) + " hint " + ms(e.server_hint) +
        " " + code(e.error));
  }
  void on_refused(const coretry::refusal_event& e) override {
    add("refused " + std::to_string(e.attempt) + " " + code(e.reason));
  }
  void on_hedge_started(const coretry::hedge_started_event& e) override {
    add("hedge " + std::to_string(e.attempt) + " in_flight " + std::to_string(e.in_flight) + " " +
        code(e.trigger));
  }
  void on_hedge_abandoned(const coretry::hedge_abandoned_event& e) override {
    add("abandon " + std::to_string(e.attempt));
  }
  void on_operation_finished(const coretry::operation_finished_event& e) override {
    add(std::string(e.label) + " end attempts " + std::to_string(e.attempts) + " elapsed " +
        ms(e.elapsed) + " slept " + ms(e.slept) + " reason " + code(e.reason) + " error " +
        code(e.error));
  }
  void on_breaker_transition(const coretry::breaker_transition_event& e) override {
    add(std::string(e.label) + " breaker " + coretry::to_string(e.from) + " -> " +
        coretry::to_string(e.to));
  }
};

/// Throws from every event.
struct thrower : coretry::retry_observer {
  std::atomic<int> calls{0};
  [[noreturn]] void boom() {
    ++calls;
    throw std::runtime_error("observer");
  }
  void on_operation_started(const coretry::operation_started_event&) override { boom(); }
  void on_attempt_started(const coretry::attempt_started_event&) override { boom(); }
  void on_attempt_finished(const coretry::attempt_finished_event&) override { boom(); }
  void on_retry_scheduled(const coretry::retry_scheduled_event&) override { boom(); }
  void on_refused(const coretry::refusal_event&) override { boom(); }
  void on_hedge_started(const coretry::hedge_started_event&) override { boom(); }
  void on_hedge_abandoned(const coretry::hedge_abandoned_event&) override { boom(); }
  void on_operation_finished(const coretry::operation_finished_event&) override { boom(); }
  void on_breaker_transition(const coretry::breaker_transition_event&) override { boom(); }
};

std::string refused_text() {
  return refused.message();
}

retry_policy fixed(unsigned attempts, std::shared_ptr<coretry::retry_observer> o) {
  return {.max_attempts = attempts,
          .backoff = coretry::backoff::fixed(100ms),
          .observer = std::move(o),
          .label = "svc"};
}

} // namespace

TEST_CASE("retry_async emits the documented events in order, with durations and delays") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused, 10ms), fail(refused, 10ms), succeed(7, 10ms)}};
  auto rec = std::make_shared<recorder>();
  int completions = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<int> {
        co_return co_await coretry::retry_async<manual_timer>([&] { return op(); }, fixed(5, rec));
      },
      [&](std::exception_ptr e, int v) {
        ++completions;
        CHECK_FALSE(e);
        CHECK(v == 7);
      });
  drive(io, [&] { return completions > 0; });
  CHECK(completions == 1);
  const std::string r = refused_text();
  CHECK(rec->lines == std::vector<std::string>{
                          "0ms svc start retry",
                          "0ms attempt 1",
                          "10ms done 1 10ms failure " + r,
                          "10ms retry 1 in 100ms hint 0ms " + r,
                          "110ms attempt 2",
                          "120ms done 2 10ms failure " + r,
                          "120ms retry 2 in 100ms hint 0ms " + r,
                          "220ms attempt 3",
                          "230ms done 3 10ms success ok",
                          "230ms svc end attempts 3 elapsed 230ms slept 200ms reason ok error ok",
                      });
}

TEST_CASE("async_retry reports giving up, a non-retryable error, and a server hint") {
  manual_clock::reset();
  asio::io_context io;
  auto rec = std::make_shared<recorder>();
  const std::string r = refused_text();

  SUBCASE("attempts exhausted") {
    scripted_op op{{fail(refused, 5ms)}};
    coretry::retry_stats stats;
    const auto out = run_retry(io, op, fixed(2, rec), stats, drive_until::idle);
    CHECK(out.completions == 1);
    CHECK(out.error == refused);
    const std::string exhausted = make_error_code(coretry::errc::attempts_exhausted).message();
    CHECK(rec->lines == std::vector<std::string>{
                            "0ms svc start retry",
                            "0ms attempt 1",
                            "5ms done 1 5ms failure " + r,
                            "5ms retry 1 in 100ms hint 0ms " + r,
                            "105ms attempt 2",
                            "110ms done 2 5ms failure " + r,
                            "110ms svc end attempts 2 elapsed 110ms slept 100ms reason " +
                                exhausted + " error " + r,
                        });
  }
  SUBCASE("not retried") {
    const auto denied = make_error_code(std::errc::permission_denied);
    scripted_op op{{fail(denied, 5ms)}};
    auto p = fixed(3, rec);
    p.retry_if = [](const std::error_code& ec) { return ec == refused; };
    coretry::retry_stats stats;
    const auto out = run_retry(io, op, p, stats, drive_until::idle);
    CHECK(out.error == denied);
    CHECK(rec->lines == std::vector<std::string>{
                            "0ms svc start retry",
                            "0ms attempt 1",
                            "5ms done 1 5ms not_retried " + denied.message(),
                            "5ms svc end attempts 1 elapsed 5ms slept 0ms reason " +
                                denied.message() + " error " + denied.message(),
                        });
  }
  SUBCASE("a server hint") {
    int calls = 0;
    int completions = 0;
    coretry::async_retry<manual_timer>(
        io.get_executor(),
        [&](coretry::attempt_context& ctx) -> asio::awaitable<std::tuple<std::error_code, int>> {
          if (++calls == 1) {
            ctx.retry_after(300ms);
            co_return std::tuple{refused, 0};
          }
          co_return std::tuple{std::error_code{}, 3};
        },
        fixed(2, rec), [&](std::error_code, int) { ++completions; });
    drive(io, [&] { return completions > 0; });
    CHECK(rec->lines == std::vector<std::string>{
                            "0ms svc start retry",
                            "0ms attempt 1",
                            "0ms done 1 0ms failure " + r,
                            "0ms retry 1 in 300ms hint 300ms " + r,
                            "300ms attempt 2",
                            "300ms done 2 0ms success ok",
                            "300ms svc end attempts 2 elapsed 300ms slept 300ms reason ok error ok",
                        });
  }
}

TEST_CASE("refusals by the breaker and the budget are events before the operation's end") {
  manual_clock::reset();
  asio::io_context io;
  auto rec = std::make_shared<recorder>();
  const std::string open = make_error_code(coretry::errc::circuit_open).message();

  SUBCASE("the breaker refuses the first attempt") {
    auto gate = std::make_shared<fake_gate>();
    gate->open = true;
    scripted_op op{{succeed(1)}};
    auto p = fixed(3, rec);
    p.breaker = gate;
    coretry::retry_stats stats;
    const auto out = run_retry(io, op, p, stats, drive_until::idle);
    CHECK(out.error == coretry::errc::circuit_open);
    CHECK(rec->lines ==
          std::vector<std::string>{"0ms svc start retry", "0ms refused 1 " + open,
                                   "0ms svc end attempts 0 elapsed 0ms slept 0ms reason " + open +
                                       " error " + open});
  }
  SUBCASE("the budget refuses the retry") {
    struct refusing final : coretry::retry_budget {
      void on_success(std::chrono::nanoseconds) noexcept override {}
      void on_failure(std::chrono::nanoseconds) noexcept override {}
      bool try_retry(std::chrono::nanoseconds) noexcept override { return false; }
    };
    auto budget = std::make_shared<refusing>();
    scripted_op op{{fail(refused, 5ms)}};
    auto p = fixed(3, rec);
    p.budget = budget;
    coretry::retry_stats stats;
    const auto out = run_retry(io, op, p, stats, drive_until::idle);
    CHECK(out.error == refused);
    const std::string broke = make_error_code(coretry::errc::budget_exhausted).message();
    CHECK(rec->lines == std::vector<std::string>{
                            "0ms svc start retry",
                            "0ms attempt 1",
                            "5ms done 1 5ms failure " + refused_text(),
                            "5ms refused 2 " + broke,
                            "5ms svc end attempts 1 elapsed 5ms slept 0ms reason " + broke +
                                " error " + refused_text(),
                        });
  }
}

TEST_CASE("a hedge emits started, abandoned and finished for every attempt") {
  manual_clock::reset();
  asio::io_context io;
  auto rec = std::make_shared<recorder>();
  // Attempt 1 is slow (500 ms), attempt 2 quick (150 ms), attempt 3 would hang.
  scripted_op op{{succeed(1, 500ms), succeed(2, 150ms), hang()}};
  auto p = fixed(3, rec);
  p.label = "h";
  coretry::hedge_stats stats;
  const auto out = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 3}, stats);
  CHECK_FALSE(out.error);
  CHECK(out.completions == 1);
  CHECK(out.value == 2);
  const std::string aborted = coretry::test::operation_aborted.message();
  CHECK(rec->lines == std::vector<std::string>{
                          "0ms h start hedge",
                          "0ms attempt 1",
                          "100ms hedge 2 in_flight 2 ok",
                          "100ms attempt 2",
                          "200ms hedge 3 in_flight 3 ok",
                          "200ms attempt 3",
                          "250ms done 2 150ms success ok",
                          "250ms abandon 1",
                          "250ms abandon 3",
                          "250ms done 1 250ms abandoned " + aborted,
                          "250ms done 3 50ms abandoned " + aborted,
                          "250ms h end attempts 3 elapsed 250ms slept 0ms reason ok error ok",
                      });
}

TEST_CASE("an observer that throws changes nothing: the operation completes once, as without") {
  manual_clock::reset();
  asio::io_context io;
  auto boom = std::make_shared<thrower>();

  SUBCASE("retry") {
    scripted_op op{{fail(refused, 10ms), fail(refused, 10ms), succeed(7, 10ms)}};
    coretry::retry_stats stats;
    const auto out = run_retry(io, op, fixed(5, boom), stats, drive_until::idle);
    CHECK(out.completions == 1);
    CHECK_FALSE(out.error);
    CHECK(out.value == 7);
    CHECK(stats.attempts == 3);
    CHECK(stats.slept == 200ms);
    CHECK_FALSE(stats.reason);
    CHECK(boom->calls == 10); // every event was offered
  }
  SUBCASE("hedge") {
    scripted_op op{{succeed(1, 500ms), succeed(2, 150ms), hang()}};
    coretry::hedge_stats stats;
    const auto out = run_hedge(io, op, fixed(3, boom), {.delay = 100ms, .max_copies = 3}, stats);
    CHECK_FALSE(out.error);
    CHECK(out.completions == 1);
    CHECK(out.value == 2);
    CHECK(stats.attempts == 3);
    CHECK(stats.abandoned == 2);
    CHECK(boom->calls == 12);
  }
  SUBCASE("breaker transitions") {
    coretry::circuit_breaker breaker(
        {.consecutive_failures = 1, .on_transition = coretry::observe_breaker(boom, "b")});
    CHECK(breaker.try_acquire(0ns));
    breaker.on_failure(0ns); // closed -> open: the observer throws, the breaker goes on
    CHECK(breaker.state() == coretry::breaker_state::open);
    CHECK(boom->calls == 1);
  }
}

TEST_CASE("observe_breaker labels a breaker's transitions") {
  manual_clock::reset();
  asio::io_context io;
  auto rec = std::make_shared<recorder>();
  auto breaker = std::make_shared<coretry::circuit_breaker>(coretry::circuit_breaker_options{
      .consecutive_failures = 2,
      .break_duration = 1s,
      .break_jitter = 0.0,
      .on_transition = coretry::observe_breaker(rec, "http://a:80")});
  scripted_op op{{fail(refused, 10ms), fail(refused, 10ms), succeed(1)}};
  auto p = fixed(3, rec);
  p.breaker = breaker;
  coretry::retry_stats stats;
  const auto out = run_retry(io, op, p, stats, drive_until::idle);
  // A breaker's refusal reports itself, whatever `report` says (one outcome per cause).
  CHECK(out.error == coretry::errc::circuit_open);
  const std::string open = make_error_code(coretry::errc::circuit_open).message();
  CHECK(rec->lines ==
        std::vector<std::string>{
            "0ms svc start retry",
            "0ms attempt 1",
            "10ms done 1 10ms failure " + refused_text(),
            "10ms retry 1 in 100ms hint 0ms " + refused_text(),
            "110ms attempt 2",
            "120ms http://a:80 breaker closed -> open",
            "120ms done 2 10ms failure " + refused_text(),
            "120ms retry 2 in 100ms hint 0ms " + refused_text(),
            "220ms refused 3 " + open,
            "220ms svc end attempts 2 elapsed 220ms slept 200ms reason " + open + " error " + open,
        });
}

TEST_CASE("one observer serves operations running on several threads at once") {
  struct counting : coretry::retry_observer {
    std::atomic<int> started{0}, finished{0}, attempts{0}, attempts_done{0}, retries{0};
    void on_operation_started(const coretry::operation_started_event&) override { ++started; }
    void on_attempt_started(const coretry::attempt_started_event&) override { ++attempts; }
    void on_attempt_finished(const coretry::attempt_finished_event&) override { ++attempts_done; }
    void on_retry_scheduled(const coretry::retry_scheduled_event&) override { ++retries; }
    void on_operation_finished(const coretry::operation_finished_event&) override { ++finished; }
  };
  auto obs = std::make_shared<counting>();
  const coretry::shared_policy policy{
      {.max_attempts = 3, .backoff = coretry::backoff::fixed(1us), .observer = obs, .label = "mt"}};
  constexpr int ops = 400;
  asio::io_context io;
  std::atomic<int> calls{0}, completions{0};
  for (int i = 0; i < ops; ++i)
    // Operation i fails (i % 3) times, then succeeds.
    coretry::async_retry(
        asio::make_strand(io),
        [&calls, i,
         n = std::make_shared<int>(0)]() -> asio::awaitable<std::tuple<std::error_code, int>> {
          ++calls;
          if ((*n)++ < i % 3)
            co_return std::tuple{refused, 0};
          co_return std::tuple{std::error_code{}, i};
        },
        policy,
        [&](std::error_code ec, int) {
          CHECK_FALSE(ec);
          ++completions;
        });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] { io.run(); });
  for (auto& t : threads)
    t.join();
  CHECK(completions == ops);
  CHECK(obs->started == ops);
  CHECK(obs->finished == ops);
  CHECK(calls == 799); // 400 first attempts and 133 + 2 * 133 retries
  CHECK(obs->attempts == 799);
  CHECK(obs->attempts_done == 799);
  CHECK(obs->retries == 399);
}

// ---- Regressions found by a hostile review --------------------------------------------------

TEST_CASE("a budget refusal after an on_open::wait wait is a refused event") {
  // retry_loop.hpp emits `refused` after begin_attempt only for circuit_open and
  // throttled_locally; begin_attempt also returns budget_exhausted (schedule.hpp: the retry's
  // charge asked again after a breaker wait), and that refusal is lost.
  manual_clock::reset();
  asio::io_context io;
  auto rec = std::make_shared<recorder>();
  struct once_open final : coretry::attempt_gate {
    int asks = 0;
    bool try_acquire(std::chrono::nanoseconds) noexcept override { return ++asks != 2; }
    void on_success(std::chrono::nanoseconds) noexcept override {}
    void on_failure(std::chrono::nanoseconds) noexcept override {}
    void on_abandoned(std::chrono::nanoseconds) noexcept override {}
    std::chrono::nanoseconds retry_after(std::chrono::nanoseconds) noexcept override {
      return 50ms;
    }
  };
  struct one_retry final : coretry::retry_budget {
    int asks = 0;
    void on_success(std::chrono::nanoseconds) noexcept override {}
    void on_failure(std::chrono::nanoseconds) noexcept override {}
    bool try_retry(std::chrono::nanoseconds) noexcept override { return ++asks == 1; }
  };
  scripted_op op{{fail(refused, 5ms), succeed(2)}};
  auto p = fixed(3, rec);
  p.breaker = std::make_shared<once_open>();
  p.when_open = coretry::on_open::wait;
  p.budget = std::make_shared<one_retry>();
  coretry::retry_stats stats;
  (void)run_retry(io, op, p, stats, drive_until::idle);
  CHECK(stats.reason == coretry::errc::budget_exhausted);
  const std::string broke = make_error_code(coretry::errc::budget_exhausted).message();
  bool seen = false;
  for (const auto& l : rec->lines)
    seen = seen || l.find("refused 2 " + broke) != std::string::npos;
  CHECK_MESSAGE(
      seen, "events: " << [&] {
        std::string s;
        for (const auto& l : rec->lines)
          s += "\n  " + l;
        return s;
      }());
}

TEST_CASE("a hedge cut by the deadline reports hedge_abandoned for the running attempts") {
  // observer.hpp: hedge_abandoned when "an attempt still running is cancelled because the
  // operation ended otherwise: ... or the deadline passed". hedge_op.hpp on_deadline cuts with
  // hedge_cut::deadline and cut_all emits hedge_abandoned only for hedge_cut::lost.
  manual_clock::reset();
  asio::io_context io;
  auto rec = std::make_shared<recorder>();
  scripted_op op{{hang(), hang()}};
  auto p = fixed(2, rec);
  p.label = "h";
  p.deadline = 250ms;
  int completions = 0;
  coretry::async_hedge<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, {.delay = 100ms, .max_copies = 2},
      [&](std::error_code ec, int) {
        ++completions;
        CHECK(ec == coretry::errc::deadline_exceeded);
      });
  drive(io, [&] { return completions > 0; });
  drive(io, [] { return false; });
  CHECK(completions == 1);
  int abandons = 0;
  std::string all;
  for (const auto& l : rec->lines) {
    abandons += l.find("abandon ") != std::string::npos;
    all += "\n  " + l;
  }
  CHECK_MESSAGE(abandons == 2, "events:" << all);
}
