// SPDX-License-Identifier: BSL-1.0
// Issue 28: `retry_policy::classify`, one function from an attempt's outcome to the loop's
// decision, through the composed operation, the coroutine path and the hedge alike; on the
// manual clock.

#include <coretry/breaker.hpp>
#include <coretry/classify.hpp>
#include <coretry/hedge.hpp>
#include <coretry/overload.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/counters.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;
using coretry::attempt_decision;
using coretry::attempt_result;
using coretry::retry_policy;

namespace {

const std::error_code denied = make_error_code(std::errc::permission_denied);
const std::error_code timed_out = make_error_code(std::errc::timed_out);

attempt_decision retry_refused(const attempt_result& r) {
  return {.retry = r.error() == refused};
}

attempt_decision retry_timeouts_only(const attempt_result& r) {
  return {.retry = r.error() == coretry::condition::timed_out};
}

} // namespace

TEST_CASE("default_classify decides as the 0.2 predicates' defaults") {
  CHECK(coretry::default_classify(attempt_result(1, refused)).retry);
  CHECK_FALSE(coretry::default_classify(attempt_result(1, refused)).throttle);
  const attempt_decision cut = coretry::default_classify(attempt_result(2, timed_out));
  CHECK(cut.retry);
  CHECK(cut.throttle);
  CHECK_FALSE(coretry::default_classify(attempt_result(1, coretry::detail::aborted_error())).retry);
  CHECK_FALSE(coretry::default_classify(attempt_result(1, coretry::errc::cancelled)).retry);
  const int v = 3;
  CHECK_FALSE(coretry::default_classify(attempt_result(1).with_value(v)).retry);
  CHECK_FALSE(coretry::default_classify(
                  attempt_result(1, {}, std::make_exception_ptr(std::runtime_error("x"))))
                  .retry);
  const attempt_decision none = coretry::default_classify(attempt_result(1));
  CHECK_FALSE(none.retry);
  CHECK_FALSE(none.pushback);
  CHECK_FALSE(none.throttle);
  CHECK(none.retry_after == 0ns);
}

// with_value keeps a pointer: a temporary (an rvalue) is refused at compile time, so a
// classifier's own test cannot leave the result pointing at a value already destroyed.
template <class V>
concept carries = requires(attempt_result& r, V&& v) {
  r.with_value(std::forward<V>(v));
};
static_assert(carries<const int&>);
static_assert(carries<int&>);
static_assert(!carries<int>);
static_assert(!carries<const int>);
static_assert(!carries<std::string>);

TEST_CASE("attempt_result gives a value only as the type it holds") {
  const int v = 7;
  attempt_result r(4);
  CHECK_FALSE(r.has_value());
  CHECK(r.value<int>() == nullptr);
  r.with_value(v).with_retry_after(2s).with_health_code(refused);
  CHECK(r.has_value());
  REQUIRE(r.value<int>() != nullptr);
  CHECK(*r.value<int>() == 7);
  CHECK(r.value<long>() == nullptr);
  CHECK(r.attempt() == 4);
  CHECK(r.retry_after() == 2s);
  CHECK(r.health_code() == refused);
}

TEST_CASE("a classifier decides which errors are retried, and sees each attempt") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), fail(denied), succeed(3)}};
  std::vector<unsigned> attempts;
  std::vector<std::error_code> errors;
  retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(1ms)};
  p.classify = [&](const attempt_result& r) {
    attempts.push_back(r.attempt());
    errors.push_back(r.error());
    return retry_refused(r);
  };
  coretry::retry_stats stats;
  const outcome o = run_retry(io, op, p, stats);
  CHECK(o.completions == 1);
  CHECK(o.error == denied);
  CHECK(op.calls == 2);
  CHECK(attempts == std::vector<unsigned>{1, 2});
  CHECK(errors == std::vector<std::error_code>{refused, denied});
  CHECK(stats.reason == denied);
}

TEST_CASE(
    "a classifier rejects values: retried, and the last one returned when the loop gives up") {
  manual_clock::reset();
  asio::io_context io;
  retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms)};
  int asked = 0;
  p.classify = [&](const attempt_result& r) {
    ++asked;
    CHECK(r.value<long>() == nullptr);
    const int* v = r.value<int>();
    REQUIRE(v != nullptr);
    return attempt_decision{.retry = *v == 0};
  };
  SUBCASE("accepted at the third attempt") {
    scripted_op op{{succeed(0), succeed(0), succeed(7)}};
    coretry::retry_stats stats;
    const outcome o = run_retry(io, op, p, stats);
    CHECK(!o.error);
    CHECK(o.value == 7);
    CHECK(op.calls == 3);
    CHECK(asked == 3);
    CHECK(stats.attempts == 3);
  }
  SUBCASE("rejected every time") {
    scripted_op op{{succeed(0)}};
    coretry::retry_stats stats;
    const outcome o = run_retry(io, op, p, stats);
    CHECK(!o.error);
    CHECK(o.value == 0);
    CHECK(op.calls == 3);
    CHECK(stats.reason == coretry::errc::attempts_exhausted);
    CHECK(stats.last_error == coretry::errc::result_rejected);
  }
  SUBCASE("through retry_async with a shared_policy") {
    const coretry::shared_policy shared(p);
    scripted_op op{{succeed(0), succeed(5)}};
    int got = -1;
    asio::co_spawn(io, coretry::retry_async<manual_timer>([&] { return op(); }, shared),
                   [&](std::exception_ptr e, int v) {
                     CHECK_FALSE(e);
                     got = v;
                   });
    REQUIRE(drive(io, [&] { return got >= 0; }));
    CHECK(got == 5);
    CHECK(asked == 2);
  }
}

TEST_CASE("an exception the classifier retries is a failure, rethrown when the loop gives up") {
  manual_clock::reset();
  asio::io_context io;
  int calls = 0;
  auto op = [&]() -> asio::awaitable<int> {
    ++calls;
    throw std::runtime_error("flaky");
    co_return 0;
  };
  retry_policy p{.max_attempts = 2, .backoff = coretry::backoff::fixed(1ms)};
  p.classify = [](const attempt_result& r) { return attempt_decision{.retry = !!r.exception()}; };
  std::string what;
  bool done = false;
  asio::co_spawn(io, coretry::retry_async<manual_timer>(op, p), [&](std::exception_ptr e, int) {
    done = true;
    try {
      if (e)
        std::rethrow_exception(e);
    } catch (const std::runtime_error& x) {
      what = x.what();
    }
  });
  REQUIRE(drive(io, [&] { return done; }));
  CHECK(calls == 2);
  CHECK(what == "flaky");
}

TEST_CASE("a cancellation is never retried, and not put to the classifier") {
  manual_clock::reset();
  asio::io_context io;
  coretry::cancellation_source source;
  scripted_op op{{hang()}};
  int asked = 0;
  retry_policy p{.max_attempts = 5, .cancellation = source.token()};
  p.classify = [&](const attempt_result&) {
    ++asked;
    return attempt_decision{.retry = true};
  };
  outcome o;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, record(o));
  drive(io, [&] { return op.calls == 1; });
  source.cancel();
  REQUIRE(drive(io, [&] { return o.completions > 0; }));
  CHECK(o.error == coretry::detail::aborted_error());
  CHECK(op.calls == 1);
  CHECK(asked == 0);
}

TEST_CASE("an attempt a timer cut is a retried failure, not put to the classifier") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{hang(), succeed(5)}};
  int asked = 0;
  auto rate = std::make_shared<counting_rate>();
  retry_policy p{.max_attempts = 3,
                 .attempt_timeout = 10ms,
                 .backoff = coretry::backoff::fixed(1ms),
                 .rate_limit = rate};
  p.classify = [&](const attempt_result& r) {
    ++asked;
    return coretry::default_classify(r);
  };
  coretry::retry_stats stats;
  const outcome o = run_retry(io, op, p, stats);
  CHECK(!o.error);
  CHECK(o.value == 5);
  CHECK(op.calls == 2);
  CHECK(asked == 1); // the success only
  CHECK(rate->throttles == 1);
  CHECK(rate->successes == 1);
}

TEST_CASE("the classifier's hint, push-back and throttle reach the loop, the gate and the rate") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), succeed(1)}};
  auto breaker = counting_breaker();
  auto rate = std::make_shared<counting_rate>();
  std::vector<std::chrono::nanoseconds> delays;
  retry_policy p{.max_attempts = 3,
                 .backoff = coretry::backoff::fixed(1ms),
                 .on_retry = [&](const coretry::retry_event& e) { delays.push_back(e.delay); },
                 .breaker = breaker,
                 .rate_limit = rate};
  p.classify = [](const attempt_result& r) {
    if (r.error() == refused)
      return attempt_decision{.retry = true, .pushback = true, .throttle = true, .retry_after = 2s};
    return attempt_decision{};
  };
  coretry::retry_stats stats;
  const outcome o = run_retry(io, op, p, stats);
  CHECK(!o.error);
  CHECK(o.value == 1);
  REQUIRE(delays.size() == 1);
  CHECK(delays[0] >= 2s);
  CHECK(o.at >= 2s);
  CHECK(counts_of(*breaker) == counts{1, 0, 1, 0});
  CHECK(rate->throttles == 1);
  CHECK(rate->successes == 1);
}

TEST_CASE("a classifier's hint holds for its own attempt only, whether the attempt takes a context "
          "or not") {
  // An attempt that takes no `attempt_context` runs with the loop's 8-byte `context_free`; one
  // that takes it, with the full context. The hint must be forgotten at each new attempt alike.
  static_assert(
      std::is_same_v<coretry::detail::context_for<scripted_op>, coretry::detail::context_free>);
  auto with_context = [](coretry::attempt_context&) -> asio::awaitable<int> { co_return 1; };
  static_assert(std::is_same_v<coretry::detail::context_for<decltype(with_context)>,
                               coretry::attempt_context>);
  for (const bool takes_context : {false, true}) {
    CAPTURE(takes_context);
    manual_clock::reset();
    asio::io_context io;
    scripted_op op{{fail(refused), fail(refused), succeed(7)}};
    std::vector<std::chrono::nanoseconds> delays;
    retry_policy p{.max_attempts = 3,
                   .backoff = coretry::backoff::fixed(1ms),
                   .on_retry = [&](const coretry::retry_event& e) { delays.push_back(e.delay); }};
    p.classify = [](const attempt_result& r) {
      // A hint on the first failure only.
      return attempt_decision{.retry = true, .retry_after = r.attempt() == 1 ? 2s : 0s};
    };
    coretry::retry_stats stats;
    outcome o;
    if (takes_context)
      coretry::async_retry<manual_timer>(
          io.get_executor(), [&](coretry::attempt_context&) { return op(); }, p, stats, record(o));
    else
      coretry::async_retry<manual_timer>(
          io.get_executor(), [&] { return op(); }, p, stats, record(o));
    drive(io, [&] { return o.completions > 0; });
    CHECK(!o.error);
    CHECK(o.value == 7);
    REQUIRE(delays.size() == 2);
    CHECK(delays[0] == 2s);
    CHECK(delays[1] == 1ms);
  }
}

TEST_CASE("narrowing the classifier does not change what the breaker hears") {
  // One attempt per operation, each ending as its script says: refused, timed out by the
  // system, cut by the attempt timeout, a permanent error, a success.
  const std::vector<step> one_of_each{fail(refused), fail(timed_out), hang(), fail(denied),
                                      succeed(1)};
  auto run_all = [&](bool narrow, bool hedged) {
    manual_clock::reset();
    asio::io_context io;
    auto breaker = counting_breaker();
    for (const step& s : one_of_each) {
      scripted_op op{{s}};
      retry_policy p{.max_attempts = 1, .attempt_timeout = 10ms, .breaker = breaker};
      p.classify = narrow ? retry_timeouts_only : coretry::default_classify;
      outcome o;
      if (hedged) {
        coretry::hedge_stats stats;
        o = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 2}, stats);
      } else {
        coretry::retry_stats stats;
        o = run_retry(io, op, p, stats);
      }
      CHECK(o.completions == 1);
    }
    return counts_of(*breaker);
  };
  for (const bool hedged : {false, true}) {
    CAPTURE(hedged);
    const counts wide = run_all(false, hedged);
    const counts narrow = run_all(true, hedged);
    CHECK(wide == narrow);
    // refused, timed_out, the attempt timeout and the permanent error are failures.
    CHECK(wide == counts{1, 4, 0, 0});
  }
}

TEST_CASE("a hedge asks the policy's classifier about each copy") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{succeed(0), succeed(0), succeed(9)}};
  int asked = 0;
  retry_policy p{.max_attempts = 3};
  p.classify = [&](const attempt_result& r) {
    ++asked;
    const int* v = r.value<int>();
    return attempt_decision{.retry = v != nullptr && *v == 0};
  };
  coretry::hedge_stats stats;
  const outcome o = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 1}, stats);
  CHECK(o.completions == 1);
  CHECK(!o.error);
  CHECK(o.value == 9);
  CHECK(op.calls == 3);
  CHECK(asked == 3);
}

TEST_CASE("a classifier that throws ends the operation with unexpected_exception") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(refused), succeed(1)}};
  retry_policy p{.max_attempts = 3};
  p.classify = [](const attempt_result&) -> attempt_decision {
    throw std::runtime_error("classifier");
  };
  coretry::retry_stats stats;
  const outcome o = run_retry(io, op, p, stats);
  CHECK(o.completions == 1);
  CHECK(o.error == coretry::errc::unexpected_exception);
  CHECK(op.calls == 1);
}

TEST_CASE("a classifier beside a predicate it replaces is refused at the call") {
  auto with_classify = [] {
    retry_policy p;
    p.classify = coretry::default_classify;
    return p;
  };
  auto refused_with = [](const retry_policy& p, const std::string& field) {
    CAPTURE(field);
    try {
      p.validate();
      FAIL("validate() accepted classify with " << field);
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK(what.find("classify") != std::string::npos);
      CHECK(what.find(field) != std::string::npos);
    }
  };
  retry_policy a = with_classify();
  a.retry_if = [](const std::error_code&) { return true; };
  refused_with(a, "retry_if");
  retry_policy b = with_classify();
  b.pushback_if = [](const std::error_code&) { return true; };
  refused_with(b, "pushback_if");
  retry_policy c = with_classify();
  c.throttle_if = [](const std::error_code&) { return true; };
  refused_with(c, "throttle_if");
  retry_policy d = with_classify().retry_if_result([](int v) { return v == 0; });
  refused_with(d, "retry_if_result");
  retry_policy e = with_classify();
  e.retry_if_exception = [](const std::exception_ptr&) { return true; };
  refused_with(e, "retry_if_exception");
  CHECK_NOTHROW(with_classify().validate());

  asio::io_context io;
  int completions = 0;
  CHECK_THROWS_AS(coretry::async_retry(
                      io.get_executor(), []() -> asio::awaitable<int> { co_return 1; }, a,
                      [&](std::error_code, int) { ++completions; }),
                  std::invalid_argument);
  io.run();
  CHECK(completions == 0);
}

// --- A decision may leave fields open (attempt_decision::given) -----------------------------

// Every decision written field by field gives all four; the factories give fewer.
static_assert(attempt_decision{}.gives(coretry::decision_fields::all));
static_assert(attempt_decision{.retry = true}.given == coretry::decision_fields::all);
static_assert(attempt_decision{
    .retry = true, .pushback = true, .throttle = true, .retry_after = std::chrono::seconds(1)}
                  .gives(coretry::decision_fields::all));
static_assert(attempt_decision::no_opinion().given == coretry::decision_fields::none);
static_assert(attempt_decision::only_retry(true).given == coretry::decision_fields::retry);
static_assert(attempt_decision::only_retry(true).retry);
static_assert(!attempt_decision::only_retry(false).retry);
static_assert(std::is_aggregate_v<attempt_decision>);

TEST_CASE("complete takes each field the decision gives from it, and the others from the "
          "fallback") {
  using coretry::decision_fields;
  const attempt_decision fallback{
      .retry = true, .pushback = true, .throttle = true, .retry_after = 5s};
  // Nothing given: the fallback whole.
  const attempt_decision none = coretry::complete(attempt_decision::no_opinion(), fallback);
  CHECK(none.retry);
  CHECK(none.pushback);
  CHECK(none.throttle);
  CHECK(none.retry_after == 5s);
  CHECK(none.gives(decision_fields::all));
  // Each field alone: that one from the decision (false, zero), the three others the fallback's.
  const std::pair<decision_fields, const char*> fields[] = {
      {decision_fields::retry, "retry"},
      {decision_fields::pushback, "pushback"},
      {decision_fields::throttle, "throttle"},
      {decision_fields::retry_after, "retry_after"}};
  for (const auto& [field, name] : fields) {
    CAPTURE(name);
    const attempt_decision d{.given = field}; // every value false or zero
    const attempt_decision c = coretry::complete(d, fallback);
    CHECK(c.retry == (field != decision_fields::retry));
    CHECK(c.pushback == (field != decision_fields::pushback));
    CHECK(c.throttle == (field != decision_fields::throttle));
    CHECK(c.retry_after == (field == decision_fields::retry_after ? 0s : 5s));
    CHECK(c.gives(decision_fields::all));
  }
  // Two fields: both kept, whatever the fallback says.
  const attempt_decision two{.retry = false,
                             .throttle = false,
                             .given = decision_fields::retry | decision_fields::throttle};
  CHECK(two.gives(decision_fields::retry));
  CHECK_FALSE(two.gives(decision_fields::retry | decision_fields::pushback));
  const attempt_decision c2 = coretry::complete(two, fallback);
  CHECK_FALSE(c2.retry);
  CHECK(c2.pushback);
  CHECK_FALSE(c2.throttle);
  CHECK(c2.retry_after == 5s);
  // A decision that gives all four is itself.
  const attempt_decision all{.retry = true, .retry_after = 1s};
  const attempt_decision c3 = coretry::complete(all, attempt_decision{.throttle = true});
  CHECK(c3.retry);
  CHECK_FALSE(c3.pushback);
  CHECK_FALSE(c3.throttle);
  CHECK(c3.retry_after == 1s);
  // only_retry: retry from it, the rest from the fallback.
  const attempt_decision c4 = coretry::complete(attempt_decision::only_retry(false), fallback);
  CHECK_FALSE(c4.retry);
  CHECK(c4.pushback);
  CHECK(c4.throttle);
  CHECK(c4.retry_after == 5s);
}

TEST_CASE("a classifier that leaves throttle open gets default_classify's through the loop, "
          "retried and hedged") {
  // It retries time-outs and refused connections alike, and says nothing of the rate:
  // default_classify slows the rate on the time-out only. A decision that gave `throttle`
  // (false) would slow it on neither.
  const auto only_retry = [](const attempt_result& r) {
    return attempt_decision::only_retry(r.error() == refused || r.error() == timed_out);
  };
  {
    manual_clock::reset();
    asio::io_context io;
    scripted_op op{{fail(timed_out), fail(refused), succeed(4)}};
    auto rate = std::make_shared<counting_rate>();
    retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms), .rate_limit = rate};
    p.classify = only_retry;
    coretry::retry_stats stats;
    const outcome o = run_retry(io, op, p, stats);
    CHECK(!o.error);
    CHECK(o.value == 4);
    CHECK(op.calls == 3);
    CHECK(rate->throttles == 1);
    CHECK(rate->successes == 2);
  }
  {
    manual_clock::reset();
    asio::io_context io;
    scripted_op op{{fail(timed_out), fail(refused), succeed(4)}};
    auto rate = std::make_shared<counting_rate>();
    retry_policy p{.max_attempts = 3, .rate_limit = rate};
    p.classify = only_retry;
    coretry::hedge_stats stats;
    const outcome o = run_hedge(io, op, p, {.delay = 100ms, .max_copies = 1}, stats);
    CHECK(!o.error);
    CHECK(o.value == 4);
    CHECK(rate->throttles == 1);
  }
  {
    // The same classifier giving `throttle` (false) too: no throttle at all.
    manual_clock::reset();
    asio::io_context io;
    scripted_op op{{fail(timed_out), fail(refused), succeed(4)}};
    auto rate = std::make_shared<counting_rate>();
    retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms), .rate_limit = rate};
    p.classify = [](const attempt_result& r) {
      return attempt_decision{.retry = r.error() == refused || r.error() == timed_out};
    };
    coretry::retry_stats stats;
    const outcome o = run_retry(io, op, p, stats);
    CHECK(o.value == 4);
    CHECK(rate->throttles == 0);
  }
}

TEST_CASE("a classifier with no opinion decides as default_classify: errors retried, values "
          "accepted, exceptions final") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{fail(denied), fail(refused), succeed(0)}};
  retry_policy p{.max_attempts = 5, .backoff = coretry::backoff::fixed(1ms)};
  p.classify = [](const attempt_result&) { return attempt_decision::no_opinion(); };
  coretry::retry_stats stats;
  const outcome o = run_retry(io, op, p, stats);
  CHECK(!o.error);
  CHECK(o.value == 0); // accepted: a value is no failure by default
  CHECK(op.calls == 3);
  CHECK(stats.attempts == 3);
}
