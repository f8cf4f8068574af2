// SPDX-License-Identifier: BSL-1.0
// The hedge state machine against a reference model: thousands of randomised hedged operations
// on the manual clock, each checked for what the docs promise whatever the settings and the
// attempts do: attempts <= max_attempts, at most max_copies at once, none started at or after
// the deadline, none after the outcome was decided, each start due to the hedge delay or to a
// failure, exactly one completion, no later than the last attempt returned and the deadline,
// the winner the first success, and every breaker grant reported exactly once.
//
// CORETRY_MODEL_OPS sets the number of operations (default 20,000, about a second; the sanitizer
// builds use fewer), CORETRY_MODEL_SEED the seed (default: random; printed, and again on a
// failure).

#include <coretry/detail/deadline_queue.hpp>
#include <coretry/error.hpp>
#include <coretry/hedge.hpp>
#include <coretry/random.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/fake_gate.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <chaos/chaos_support.hpp>

using namespace std::chrono_literals;
using namespace coretry::testing;
using coretry::test::env_long;
using coretry::test::fake_gate;
using nanos = std::chrono::nanoseconds;

namespace {

const std::error_code refused = make_error_code(std::errc::connection_refused);
const std::error_code denied = make_error_code(std::errc::permission_denied);

/// How an attempt ends when nothing cuts it; `hang` succeeds after an hour.
enum class ending : std::uint8_t { success, retryable, fatal, hang };

struct plan {
  nanos after{0}; ///< zero: ends inside its first resumption, without suspending
  ending how = ending::success;
};

/// What one attempt did, as the attempt saw it.
struct attempt_log {
  nanos started{0};
  nanos ended{-1};
  ending how = ending::success;
  bool cancelled = false;
  int ends = 0;
};

/// One randomised operation: its settings, its attempts' plans, and what happened.
struct scenario {
  coretry::retry_policy policy;
  coretry::hedge_options hedge;
  std::vector<plan> plans;
  unsigned refuse_after = 0; ///< the breaker opens after this many grants (0: never)
  std::shared_ptr<fake_gate> gate = std::make_shared<fake_gate>();
  std::vector<attempt_log> attempts;
  int running = 0;
  int peak = 0;
};

nanos pick(std::mt19937_64& rng, long lo_ms, long hi_ms) {
  return std::chrono::milliseconds(std::uniform_int_distribution<long>(lo_ms, hi_ms)(rng));
}

scenario make_scenario(std::mt19937_64& rng) {
  scenario s;
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  s.policy.max_attempts = std::uniform_int_distribution<unsigned>(1, 8)(rng);
  if (coin(0.5))
    s.policy.deadline = pick(rng, 1, 150);
  if (coin(0.3))
    s.policy.attempt_timeout = pick(rng, 1, 80);
  s.policy.breaker = s.gate;
  s.policy.retry_if = [](const std::error_code& ec) { return ec == refused; };
  if (coin(0.2))
    s.refuse_after = std::uniform_int_distribution<unsigned>(1, 4)(rng);
  const int d = std::uniform_int_distribution<int>(0, 9)(rng);
  s.hedge.delay = d == 0 ? nanos::zero() : d == 1 ? coretry::unlimited : pick(rng, 1, 60);
  s.hedge.max_copies = std::uniform_int_distribution<unsigned>(1, 4)(rng);
  for (unsigned i = 0; i < s.policy.max_attempts; ++i) {
    plan p;
    p.after = coin(0.2) ? nanos::zero() : pick(rng, 1, 120);
    const int k = std::uniform_int_distribution<int>(0, 9)(rng);
    p.how = k < 3   ? ending::success
            : k < 7 ? ending::retryable
            : k < 8 ? ending::fatal
                    : ending::hang;
    s.plans.push_back(p);
  }
  return s;
}

asio::awaitable<int> attempt(scenario& s) {
  const std::size_t i = s.attempts.size();
  s.attempts.push_back({manual_clock::elapsed()});
  if (s.refuse_after && s.gate->granted >= static_cast<int>(s.refuse_after))
    s.gate->open = true;
  const plan p = s.plans.at(i);
  s.attempts[i].how = p.how;
  s.peak = std::max(s.peak, ++s.running);
  struct leave {
    scenario& s;
    std::size_t i;
    ~leave() {
      --s.running;
      ++s.attempts[i].ends;
      s.attempts[i].ended = manual_clock::elapsed();
    }
  } guard{s, i};
  if (p.after > nanos::zero() || p.how == ending::hang) {
    manual_timer t(co_await asio::this_coro::executor);
    t.expires_after(p.how == ending::hang ? nanos(1h) : p.after);
    auto [ec] = co_await t.async_wait(coretry::detail::as_tuple(asio::use_awaitable));
    if (ec) {
      s.attempts[i].cancelled = true;
      throw std::system_error(ec);
    }
  }
  if (p.how == ending::retryable)
    throw std::system_error(refused);
  if (p.how == ending::fatal)
    throw std::system_error(denied);
  co_return static_cast<int>(i + 1);
}

/// The reference model: returns what is wrong, or an empty string.
std::string check(const scenario& s, int completions, std::error_code error, int value,
                  nanos completed_at, std::size_t pending_at_completion,
                  std::size_t entries_at_completion, std::size_t pending_after,
                  const coretry::hedge_stats& stats) {
  std::ostringstream why;
  const auto& p = s.policy;
  const auto& a = s.attempts;
  if (completions != 1)
    why << "completions " << completions << "; ";
  if (pending_at_completion != 0)
    why << pending_at_completion << " waits left on the clock at the completion; ";
  if (entries_at_completion != 0)
    why << entries_at_completion << " deadline-queue entries left at the completion; ";
  if (pending_after != 0)
    why << pending_after << " waits left once the context ran out of work; ";
  if (a.size() > p.max_attempts)
    why << a.size() << " attempts > max " << p.max_attempts << "; ";
  if (stats.attempts != a.size())
    why << "stats.attempts " << stats.attempts << " != " << a.size() << "; ";
  if (s.peak > static_cast<int>(s.hedge.max_copies))
    why << "peak " << s.peak << " > max_copies; ";
  if (s.gate->granted != static_cast<int>(s.gate->log.size()))
    why << "granted " << s.gate->granted << ", reported " << s.gate->log.size() << "; ";
  if (s.gate->granted != static_cast<int>(a.size()))
    why << "granted " << s.gate->granted << " for " << a.size() << " attempts; ";
  // An attempt that ends at the very instant its timeout is due sees its own wait complete
  // although the timeout cut it: the operation keeps a value it returns then, and counts a
  // failure as a timeout.
  auto tied = [&](const attempt_log& x) {
    return !x.cancelled && p.attempt_timeout != coretry::unlimited &&
           x.ended - x.started >= p.attempt_timeout;
  };
  auto timed_out = [&](const attempt_log& x) { return x.cancelled || tied(x); };
  auto returned_value = [&](const attempt_log& x) {
    return !x.cancelled && (x.how == ending::success || x.how == ending::hang);
  };
  auto succeeded = [&](const attempt_log& x) { return returned_value(x) && !tied(x); };
  nanos last_end{0};
  nanos first_success = nanos::max();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].ends != 1)
      why << "attempt " << i + 1 << " ended " << a[i].ends << " times; ";
    last_end = std::max(last_end, a[i].ended);
    if (p.deadline != coretry::unlimited && a[i].started >= p.deadline)
      why << "attempt " << i + 1 << " started at the deadline or after; ";
    if (a[i].started > completed_at)
      why << "attempt " << i + 1 << " started after the completion; ";
    if (succeeded(a[i]))
      first_success = std::min(first_success, a[i].ended);
    if (i == 0) {
      if (a[i].started != nanos::zero())
        why << "the first attempt started late; ";
      continue;
    }
    // Why it started now: the hedge delay after the previous start, a zero delay, or a failure
    // of an earlier attempt at this instant (a cut one: its timeout; no attempt starts after
    // one is cut for any other reason).
    bool explained =
        (s.hedge.delay == nanos::zero() && a[i].started == a[i - 1].started) ||
        (s.hedge.delay != coretry::unlimited && a[i].started >= a[i - 1].started + s.hedge.delay);
    for (std::size_t j = 0; j < i && !explained; ++j)
      explained = a[j].ended == a[i].started && ((timed_out(a[j]) && !returned_value(a[j])) ||
                                                 a[j].how == ending::retryable || tied(a[j]));
    if (!explained)
      why << "attempt " << i + 1 << " started at " << a[i].started.count() << " ns unexplained; ";
  }
  if (completed_at != last_end)
    why << "completed at " << completed_at.count() << " ns, last attempt returned at "
        << last_end.count() << " ns; ";
  if (p.deadline != coretry::unlimited && completed_at > p.deadline)
    why << "completed after the deadline; ";
  if (!error) {
    if (value < 1 || static_cast<std::size_t>(value) > a.size() || !returned_value(a[value - 1]))
      why << "delivered value " << value << " from no successful attempt; ";
    else if (a[value - 1].ended > first_success)
      why << "the winner was not the first success; ";
  } else {
    if (first_success < completed_at && error != coretry::errc::deadline_exceeded)
      why << "a success at " << first_success.count() << " ns was not delivered; ";
    const bool known =
        error == refused || error == denied || error == coretry::errc::deadline_exceeded ||
        error == coretry::errc::circuit_open || error == coretry::errc::attempts_exhausted ||
        error == coretry::errc::attempt_timeout;
    if (!known)
      why << "unexpected error " << error.message() << "; ";
  }
  return why.str();
}

std::string describe(const scenario& s) {
  std::ostringstream o;
  o << "max_attempts " << s.policy.max_attempts << ", deadline "
    << (s.policy.deadline == coretry::unlimited ? -1 : s.policy.deadline.count())
    << " ns, attempt_timeout "
    << (s.policy.attempt_timeout == coretry::unlimited ? -1 : s.policy.attempt_timeout.count())
    << " ns, delay " << (s.hedge.delay == coretry::unlimited ? -1 : s.hedge.delay.count())
    << " ns, max_copies " << s.hedge.max_copies << ", breaker refuses after " << s.refuse_after
    << "; attempts:";
  for (const auto& a : s.attempts)
    o << " [" << a.started.count() / 1000 << "-" << a.ended.count() / 1000 << " us "
      << static_cast<int>(a.how) << (a.cancelled ? " cut" : "") << "]";
  return o.str();
}

} // namespace

TEST_CASE("model: hedged operations keep every promise under random settings and attempts") {
  const long operations = env_long("CORETRY_MODEL_OPS", 20000);
  const auto seed =
      static_cast<std::uint64_t>(env_long("CORETRY_MODEL_SEED", std::random_device{}()));
  std::printf("hedge model: %ld operations, seed %llu (CORETRY_MODEL_SEED to replay)\n", operations,
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  asio::io_context io;
  // The rule for both front ends (the retry model has it too, test/loop_model_test.cpp; see
  // docs/core.md, "The deadline queue"): when the handler runs, the operation has left no wait of
  // its own on the clock and no entry in the context's deadline queue; the queue may still keep
  // its one wait, which lingers a few turns of the run queue so that the next timed attempt need
  // not arm it again, and is gone once the context has nothing else to do.
  auto& queue = coretry::detail::deadline_queue<manual_timer>::of(io.get_executor());
  long failures = 0;
  for (long n = 0; n < operations && failures < 5; ++n) {
    manual_clock::reset();
    scenario s = make_scenario(rng);
    int completions = 0;
    std::error_code error;
    int value = 0;
    nanos completed_at{-1};
    std::size_t pending_at_completion = 0;
    std::size_t entries_at_completion = 0;
    coretry::hedge_stats stats;
    coretry::async_hedge<manual_timer>(
        io.get_executor(), [&] { return attempt(s); }, s.policy, s.hedge, stats,
        [&](std::error_code ec, int v) {
          ++completions;
          error = ec;
          value = v;
          completed_at = manual_clock::elapsed();
          pending_at_completion = manual_clock::pending() - (queue.waiting() ? 1 : 0);
          entries_at_completion = queue.size();
        });
    drive(io, [] { return false; }); // on until nothing at all is left
    const std::string wrong =
        check(s, completions, error, value, completed_at, pending_at_completion,
              entries_at_completion, manual_clock::pending(), stats);
    if (!wrong.empty()) {
      ++failures;
      FAIL_CHECK("seed " << seed << ", operation " << n << " (" << describe(s) << "): " << wrong);
    }
  }
  CHECK(manual_clock::pending() == 0);
}
