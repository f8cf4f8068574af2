// SPDX-License-Identifier: BSL-1.0
// The retry loop against a reference model: thousands of seeded operations with random
// policies (attempts, deadline, attempt timeout, backoff, breaker, budget, sending rate),
// random attempt outcomes (success, retryable or permanent failure after some time, hangs) and
// random cancellation, each run on the manual clock through async_retry or retry_async, then
// checked against what a plain simulation of the documented rules says: the outcome and the
// reason, the attempts and when they started, the time of completion; and, on every path, the
// invariants (attempts <= max, nothing past the deadline, every breaker grant reported once,
// every send token and budget retry settled).
//
// CORETRY_MODEL_SEED (default 1) and CORETRY_MODEL_OPS (default 4000) come from the
// environment; a failure prints the seed of the operation that broke, which alone replays it.

#include <coretry/budget.hpp>
#include <coretry/detail/deadline_queue.hpp>
#include <coretry/overload.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using coretry::errc;
using coretry::retry_policy;
using coretry::testing::manual_clock;
using coretry::testing::manual_timer;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

namespace {

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

const std::error_code retryable_error = make_error_code(std::errc::connection_refused);
const std::error_code permanent_error = make_error_code(std::errc::permission_denied);

enum class kind { ok, retryable, permanent, hang };
struct attempt_script {
  kind k;
  milliseconds after;
};

/// Everything random about one operation, drawn from its seed.
struct scenario {
  unsigned max_attempts;
  std::optional<milliseconds> deadline, attempt_timeout;
  milliseconds backoff;
  bool breaker, budget, rate, awaitable;
  std::vector<attempt_script> attempts; // by attempt number
  std::vector<bool> grants;             // the breaker's answers, in order
  std::vector<bool> retries;            // the budget's answers, in order
  std::vector<milliseconds> waits;      // the sending rate's, in order
  std::optional<nanoseconds> cancel_at; // at x ms + 250 us: never a tie with anything else

  explicit scenario(std::uint64_t seed) {
    std::mt19937_64 g(seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
    auto chance = [&](int percent) { return pick(1, 100) <= percent; };
    max_attempts = static_cast<unsigned>(pick(1, 6));
    if (chance(60))
      deadline = milliseconds(pick(20, 400));
    if (chance(50))
      attempt_timeout = milliseconds(pick(10, 120));
    backoff = milliseconds(pick(0, 80));
    breaker = chance(40);
    budget = chance(40);
    rate = chance(40);
    awaitable = chance(50);
    for (int i = 0; i < 8; ++i) {
      const int r = pick(1, 100);
      const kind k = r <= 25   ? kind::ok
                     : r <= 75 ? kind::retryable
                     : r <= 85 ? kind::permanent
                               : kind::hang;
      attempts.push_back({k, milliseconds(pick(0, 60))});
      grants.push_back(chance(85));
      retries.push_back(chance(80));
      waits.push_back(chance(50) ? 0ms : milliseconds(pick(1, 90)));
    }
    if (chance(30))
      cancel_at = milliseconds(pick(0, 300)) + 250us;
    if (!deadline && !attempt_timeout && !cancel_at) // nothing would ever end a hang
      for (auto& a : attempts)
        if (a.k == kind::hang)
          a.k = kind::retryable;
  }

  std::string describe() const {
    std::ostringstream o;
    o << "max_attempts " << max_attempts << ", deadline "
      << (deadline ? std::to_string(deadline->count()) : "-") << ", attempt_timeout "
      << (attempt_timeout ? std::to_string(attempt_timeout->count()) : "-") << ", backoff "
      << backoff.count() << ", breaker " << breaker << ", budget " << budget << ", rate " << rate
      << ", " << (awaitable ? "retry_async" : "async_retry") << ", cancel at "
      << (cancel_at ? std::to_string(cancel_at->count()) : "-");
    return o.str();
  }
};

/// What the reference model predicts.
struct expectation {
  bool ambiguous = false; ///< two events at the same instant: only the invariants are checked
  std::error_code error;  ///< reported; empty on success
  std::error_code reason; ///< retry_stats::reason
  std::vector<nanoseconds> starts;
  nanoseconds end{0};
  int breaker_failures = 0, breaker_successes = 0, breaker_abandoned = 0;
};

/// The documented rules, as a straight simulation.
expectation model(const scenario& s) {
  expectation e;
  nanoseconds t{0};
  const nanoseconds never = nanoseconds::max();
  const nanoseconds dl = s.deadline ? nanoseconds(*s.deadline) : never;
  const nanoseconds cancel = s.cancel_at ? *s.cancel_at : never;
  std::size_t grant_i = 0, retry_i = 0, wait_i = 0;
  std::error_code last;
  auto stop = [&](errc reason) {
    e.reason = reason;
    // The deadline and a breaker's refusal report themselves; otherwise the last error.
    e.error = reason == errc::deadline_exceeded || reason == errc::circuit_open || !last
                  ? std::error_code(reason)
                  : last;
    e.end = t;
    return e;
  };
  auto aborted = [&] {
    e.reason = coretry::test::operation_aborted;
    e.error = coretry::test::operation_aborted;
    e.end = cancel;
    return e;
  };
  for (;;) {
    if (cancel <= t)
      return aborted();
    if (s.rate) {
      const nanoseconds wait = s.waits.at(wait_i++);
      if (wait > 0ns && dl != never && (t >= dl || wait >= dl - t))
        return stop(errc::deadline_exceeded);
      if (wait > 0ns) {
        if (cancel < t + wait)
          return aborted();
        t += wait;
      }
    }
    if (dl != never && t >= dl)
      return stop(errc::deadline_exceeded);
    if (s.breaker && !s.grants.at(grant_i++))
      return stop(errc::circuit_open);
    e.starts.push_back(t);
    const attempt_script a = s.attempts.at(e.starts.size() - 1);
    const nanoseconds timeout = s.attempt_timeout ? nanoseconds(*s.attempt_timeout) : never;
    const nanoseconds left = dl != never ? dl - t : never;
    const bool by_deadline = left <= timeout;
    const nanoseconds limit = by_deadline ? left : timeout;
    const nanoseconds run = a.k == kind::hang ? never : nanoseconds(a.after);
    if (run == limit && limit != never)
      e.ambiguous = true;
    const nanoseconds ends = run < limit ? run : limit; // never + t would overflow: compare first
    if (ends != never && cancel < t + ends) {
      ++e.breaker_abandoned;
      return aborted();
    }
    if (ends == never) { // a hang with nothing to cut it: only a cancellation ends it
      ++e.breaker_abandoned;
      return aborted();
    }
    t += ends;
    std::error_code ec;
    bool cut = false;
    if (run >= limit) {
      cut = true;
      ec = by_deadline ? std::error_code(errc::deadline_exceeded)
                       : std::error_code(errc::attempt_timeout);
    } else if (a.k == kind::retryable) {
      ec = retryable_error;
    } else if (a.k == kind::permanent) {
      ec = permanent_error;
    }
    if (!ec) {
      ++e.breaker_successes;
      e.end = t;
      return e;
    }
    // The gate's own classification (default_health), whatever retry_if says (issue 28): the
    // permanent error (permission denied) is unhealthy too.
    if (cut || coretry::default_health(ec) == coretry::health::unhealthy)
      ++e.breaker_failures;
    else
      ++e.breaker_successes;
    last = ec;
    if (cut && by_deadline)
      return stop(errc::deadline_exceeded);
    if (ec == permanent_error) {
      e.reason = e.error = ec;
      e.end = t;
      return e;
    }
    if (e.starts.size() >= s.max_attempts)
      return stop(errc::attempts_exhausted);
    if (dl != never && t >= dl)
      return stop(errc::deadline_exceeded);
    const nanoseconds delay = s.backoff;
    if (dl != never && delay >= dl - t)
      return stop(errc::deadline_exceeded);
    if (s.budget && !s.retries.at(retry_i++))
      return stop(errc::budget_exhausted);
    if (delay > 0ns) {
      if (cancel < t + delay)
        return aborted();
      t += delay;
    }
  }
}

// --- Fakes that count what they hand out and hear back ---------------------------------------

struct model_gate final : coretry::attempt_gate {
  const std::vector<bool>* answers;
  std::size_t asked = 0;
  int granted = 0, successes = 0, failures = 0, abandoned = 0;
  explicit model_gate(const std::vector<bool>& a) : answers(&a) {}
  bool try_acquire(nanoseconds) noexcept override {
    const bool yes = answers->at(asked++);
    granted += yes;
    return yes;
  }
  void on_success(nanoseconds) noexcept override { ++successes; }
  void on_failure(nanoseconds) noexcept override { ++failures; }
  void on_abandoned(nanoseconds) noexcept override { ++abandoned; }
};

struct model_budget final : coretry::retry_budget {
  const std::vector<bool>* answers;
  std::size_t asked = 0;
  int granted = 0, refunded = 0;
  explicit model_budget(const std::vector<bool>& a) : answers(&a) {}
  bool try_retry(nanoseconds) noexcept override {
    const bool yes = answers->at(asked++);
    granted += yes;
    return yes;
  }
  void refund(nanoseconds) noexcept override { ++refunded; }
};

struct model_rate final : coretry::send_rate {
  const std::vector<milliseconds>* waits;
  std::size_t acquired = 0;
  int released = 0, heard = 0;
  explicit model_rate(const std::vector<milliseconds>& w) : waits(&w) {}
  nanoseconds acquire(nanoseconds) noexcept override { return waits->at(acquired++); }
  void release(nanoseconds) noexcept override { ++released; }
  void on_throttle(nanoseconds) noexcept override { ++heard; }
  void on_success(nanoseconds) noexcept override { ++heard; }
};

struct scripted {
  const scenario* s;
  std::vector<nanoseconds>* starts;
  asio::awaitable<int> operator()() {
    const attempt_script a = s->attempts.at(starts->size());
    starts->push_back(manual_clock::now().time_since_epoch());
    manual_timer timer(co_await asio::this_coro::executor);
    timer.expires_after(a.k == kind::hang ? nanoseconds(24h) : nanoseconds(a.after));
    co_await timer.async_wait(asio::use_awaitable); // throws operation_aborted when cut
    if (a.k == kind::retryable)
      throw std::system_error(retryable_error);
    if (a.k == kind::permanent)
      throw std::system_error(permanent_error);
    co_return 7;
  }
};

/// The same script as a token-based attempt: a wait on the manual clock whose handler keeps the
/// attempt's cancellation slot (the attempt timer and the caller's cancel reach it there).
struct scripted_token {
  const scenario* s;
  std::vector<nanoseconds>* starts;
  std::vector<std::unique_ptr<manual_timer>>* timers; // outlive every wait
  asio::io_context* io;
  template <class Token> auto operator()(Token&& token) {
    const attempt_script a = s->attempts.at(starts->size());
    starts->push_back(manual_clock::now().time_since_epoch());
    timers->push_back(std::make_unique<manual_timer>(io->get_executor()));
    manual_timer* timer = timers->back().get();
    timer->expires_after(a.k == kind::hang ? nanoseconds(24h) : nanoseconds(a.after));
    return asio::async_initiate<Token, void(coretry::test::error_code, int)>(
        [timer, a](auto handler) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto ex = asio::get_associated_executor(handler);
          timer->async_wait(asio::bind_cancellation_slot(
              slot,
              asio::bind_executor(ex, [a, h = std::move(handler)](std::error_code ec) mutable {
                if (!ec && a.k == kind::retryable)
                  ec = retryable_error;
                else if (!ec && a.k == kind::permanent)
                  ec = permanent_error;
                std::move(h)(coretry::detail::to_asio_error(ec), ec ? 0 : 7);
              })));
        },
        token);
  }
};

/// The same, as an attempt returning a deferred operation.
struct scripted_deferred {
  scripted_token inner;
  auto operator()() { return inner(coretry::test::deferred); }
};

/// Runs one operation; returns what went wrong, or an empty string.
std::string run_one(std::uint64_t seed) {
  const scenario s(seed);
  const expectation want = model(s);
  manual_clock::reset();
  std::string bad;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok && bad.empty())
      bad = what;
  };
  auto gate = std::make_shared<model_gate>(s.grants);
  auto budget = std::make_shared<model_budget>(s.retries);
  auto rate = std::make_shared<model_rate>(s.waits);
  std::vector<nanoseconds> starts;
  {
    asio::io_context io;
    retry_policy p{.max_attempts = s.max_attempts, .backoff = coretry::backoff::fixed(s.backoff)};
    if (s.deadline)
      p.deadline = *s.deadline;
    if (s.attempt_timeout)
      p.attempt_timeout = *s.attempt_timeout;
    p.retry_if = [](const std::error_code& ec) { return ec == retryable_error; };
    if (s.breaker)
      p.breaker = gate;
    if (s.budget)
      p.budget = budget;
    if (s.rate)
      p.rate_limit = rate;
    coretry::retry_stats stats;
    asio::cancellation_signal cancel;
    int completions = 0;
    std::error_code got;
    nanoseconds ended{0};
    // The hedge model's rule (chaos/hedge_model_test.cpp; docs/core.md, "The deadline queue"):
    // when the handler runs, the operation has left no wait of its own on the clock (only the
    // canceller's may be there) and no entry in the context's deadline queue; the queue may keep
    // its one wait, which lingers a few turns, and is gone once the context has nothing to do.
    auto& queue = coretry::detail::deadline_queue<manual_timer>::of(io.get_executor());
    bool canceller_waiting = false;
    std::size_t waits_left = 0, entries_left = 0;
    auto done = [&](std::error_code ec) {
      ++completions;
      got = ec;
      ended = manual_clock::now().time_since_epoch();
      const std::size_t waits = manual_clock::pending() - (queue.waiting() ? 1 : 0);
      waits_left = canceller_waiting && waits > 0 ? waits - 1 : waits;
      entries_left = queue.size();
    };
    std::vector<std::unique_ptr<manual_timer>> timers;
    // Each front end with each attempt shape, chosen by the seed apart from the scenario.
    auto launch = [&](auto op) {
      if (s.awaitable) {
        asio::co_spawn(
            io,
            [&, op]() -> asio::awaitable<void> { // `op` dies with this call: copied
              try {
                (void)co_await coretry::retry_async<manual_timer>(op, p, stats);
                done({});
              } catch (const std::system_error& e) {
                done(e.code());
              }
            },
            asio::bind_cancellation_slot(cancel.slot(), [](std::exception_ptr) {}));
      } else {
        coretry::async_retry<manual_timer>(
            io.get_executor(), op, p, stats,
            asio::bind_cancellation_slot(cancel.slot(),
                                         [&](std::error_code ec, int) { done(ec); }));
      }
    };
    const scripted_token token_op{&s, &starts, &timers, &io};
    switch (seed % 3) {
    case 0:
      launch(scripted{&s, &starts});
      break;
    case 1:
      launch(token_op);
      break;
    default:
      launch(scripted_deferred{token_op});
      break;
    }
    // The cancellation is a wait on the manual clock like any other, so that stepping from one
    // wait to the next runs everything due before it first.
    manual_timer canceller(io);
    if (s.cancel_at) {
      canceller.expires_after(*s.cancel_at);
      canceller_waiting = true;
      canceller.async_wait([&](std::error_code ec) {
        canceller_waiting = false;
        if (!ec)
          cancel.emit(asio::cancellation_type::terminal);
      });
    }
    coretry::testing::drive(io, [&] { return completions > 0; });
    canceller.cancel();
    io.restart();
    io.poll();
    check(completions == 1, "completions " + std::to_string(completions));
    check(waits_left == 0,
          std::to_string(waits_left) + " waits left on the clock at the completion");
    check(entries_left == 0,
          std::to_string(entries_left) + " deadline-queue entries left at the completion");
    check(manual_clock::pending() == 0,
          std::to_string(manual_clock::pending()) + " waits left once the context ran out of work");
    check(stats.attempts <= s.max_attempts, "attempts past max_attempts");
    check(stats.attempts == starts.size(), "stats.attempts differs from the attempts started");
    if (s.deadline) {
      for (auto st : starts)
        check(st < nanoseconds(*s.deadline), "an attempt started at or past the deadline");
      check(ended <= nanoseconds(*s.deadline) ||
                (s.cancel_at && got == coretry::test::operation_aborted && ended <= *s.cancel_at),
            "completed after the deadline");
    }
    if (!want.ambiguous) {
      check(got == want.error, "error " + got.message() + ", model says " + want.error.message());
      if (want.error)
        check(stats.reason == want.reason || (want.reason == coretry::test::operation_aborted &&
                                              stats.reason == coretry::test::operation_aborted),
              "reason " + stats.reason.message() + ", model says " + want.reason.message());
      check(starts == want.starts, "attempt start times differ from the model's");
      check(ended == want.end, "completed at " + std::to_string(ended.count()) +
                                   " ns, model says " + std::to_string(want.end.count()));
      if (s.breaker) {
        check(gate->failures == want.breaker_failures, "breaker failures differ from the model's");
        check(gate->successes == want.breaker_successes,
              "breaker successes differ from the model's");
        check(gate->abandoned == want.breaker_abandoned,
              "breaker abandoned differ from the model's");
      }
    }
  } // the context and every frame in it are gone: every reservation must be settled now
  manual_clock::reset();
  if (s.breaker)
    check(gate->granted == gate->successes + gate->failures + gate->abandoned,
          "a breaker grant not reported exactly once");
  if (s.budget) {
    const int retries_sent = starts.empty() ? 0 : static_cast<int>(starts.size()) - 1;
    check(budget->granted == retries_sent + budget->refunded, "a budget retry not settled");
  }
  if (s.rate)
    check(static_cast<int>(rate->acquired) == static_cast<int>(starts.size()) + rate->released,
          "a send token not settled");
  if (!bad.empty())
    bad += " [" + s.describe() + "]";
  return bad;
}

} // namespace

TEST_CASE("the retry loop agrees with the reference model on thousands of seeded operations") {
  const std::uint64_t seed = env_or("CORETRY_MODEL_SEED", 1);
  const std::uint64_t ops = env_or("CORETRY_MODEL_OPS", 4000);
  std::uint64_t ambiguous = 0;
  for (std::uint64_t i = 0; i < ops; ++i) {
    const std::uint64_t op_seed = seed * 1'000'003 + i;
    ambiguous += model(scenario(op_seed)).ambiguous;
    const std::string bad = run_one(op_seed);
    if (!bad.empty()) {
      FAIL_CHECK("operation " << i << " (replay: CORETRY_MODEL_SEED=" << seed
                              << " CORETRY_MODEL_OPS=" << i + 1 << "): " << bad);
      break;
    }
  }
  MESSAGE(ops << " operations from seed " << seed << ", " << ambiguous
              << " with simultaneous events (invariants only)");
}
