// SPDX-License-Identifier: BSL-1.0
// Reviewer r13: probes of e7d3e0d, where initiate_retry takes the policy by forwarding reference
// down to the state, which moves (or copies) it once. Every completion token that stores the
// initiation's arguments, runs the initiation later or more than once (deferred, copied and
// started twice; use_awaitable; as_tuple; redirect_error; use_future; bind_executor; consign;
// parallel_group), with a `retry_policy` or a `shared_policy`, named, const or
// temporary, on the plain, the controlled and the strand path. Each run must see the whole
// policy (its `on_retry`, its label), and the caller's policy must be left as it was.
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>

#if CORETRY_ASIO_BOOST
#include <boost/asio/consign.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/redirect_error.hpp>
#else
#include <asio/experimental/parallel_group.hpp>
#include <asio/redirect_error.hpp>
#if ASIO_VERSION >= 102400
#include <asio/consign.hpp>
#endif
#endif

#include <array>
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

using namespace std::chrono_literals;
using coretry::retry_policy;
using coretry::shared_policy;
using coretry::testing::manual_clock;
using coretry::testing::manual_timer;
using error_code = coretry::detail::asio_error_code;

#define R13_HAS_NEW_TOKENS (CORETRY_ASIO_BOOST || ASIO_VERSION >= 102400)

namespace {

const std::string long_label(64, 'r'); // on the heap: a moved-from copy is empty

/// Each copy (each operation's own) fails its first call (connection refused) and succeeds with
/// 7 on its second; `calls` counts every copy's calls.
struct flip_op {
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  mutable int own = 0;
  asio::awaitable<int> operator()() const {
    ++*calls;
    if (++own == 1)
      throw std::system_error(make_error_code(std::errc::connection_refused));
    co_return 7;
  }
};

/// A policy whose every owning member a moved-from copy would have lost: `on_retry` counts into
/// `*retries`, and the label is long.
retry_policy counted(std::shared_ptr<int> retries, bool controlled) {
  retry_policy p{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms)};
  p.on_retry = [retries](const coretry::retry_event&) { ++*retries; };
  p.label = long_label;
  if (controlled)
    p.attempt_timeout = 1h;
  return p;
}

bool intact(const retry_policy& p) {
  return static_cast<bool>(p.on_retry) && p.label == long_label;
}

} // namespace

TEST_CASE("a deferred async_retry, copied and started twice, runs its whole policy each time and "
          "leaves the caller's policy as it was") {
  for (bool controlled : {false, true}) {
    for (unsigned hint : {1u, 2u}) { // 2: not one thread, so a controlled operation has a strand
      CAPTURE(controlled);
      CAPTURE(hint);
      manual_clock::reset();
      asio::io_context io(static_cast<int>(hint));
      auto retries = std::make_shared<int>(0);
      retry_policy policy = counted(retries, controlled);
      const retry_policy& named = policy;
      flip_op op;
      auto d =
          coretry::async_retry<manual_timer>(io.get_executor(), op, named, coretry::test::deferred);
      CHECK(intact(policy));
      auto copy = d;
      int done = 0;
      int sum = 0;
      auto h = [&](error_code ec, int v) {
        CHECK(!ec);
        ++done;
        sum += v;
      };
      d(h);               // an lvalue: its arguments stay for the next start
      d(h);               // again
      std::move(copy)(h); // an rvalue: its arguments are moved out
      REQUIRE(coretry::testing::drive(io, [&] { return done == 3; }));
      CHECK(sum == 21);
      CHECK(*op.calls == 6);
      CHECK(*retries == 3);
      CHECK(intact(policy));
      // and the lvalue deferred operation still holds its whole policy: a fourth start retries
      d(h);
      REQUIRE(coretry::testing::drive(io, [&] { return done == 4; }));
      CHECK(*retries == 4);
    }
  }
}

TEST_CASE("a deferred async_retry with a shared_policy, named const or temporary, started twice, "
          "runs under it each time") {
  for (bool controlled : {false, true}) {
    CAPTURE(controlled);
    manual_clock::reset();
    asio::io_context io(2);
    auto retries = std::make_shared<int>(0);
    const shared_policy named(counted(retries, controlled));
    flip_op op;
    auto a =
        coretry::async_retry<manual_timer>(io.get_executor(), op, named, coretry::test::deferred);
    auto b = coretry::async_retry<manual_timer>(io.get_executor(), op,
                                                shared_policy(counted(retries, controlled)),
                                                coretry::test::deferred);
    int done = 0;
    auto h = [&](error_code ec, int v) {
      CHECK(!ec);
      CHECK(v == 7);
      ++done;
    };
    a(h);
    b(h);
    std::move(a)(h);
    std::move(b)(h);
    REQUIRE(coretry::testing::drive(io, [&] { return done == 4; }));
    CHECK(*retries == 4);
    CHECK(static_cast<bool>(named));
    CHECK(intact(*named));
  }
}

TEST_CASE("async_retry awaited through use_awaitable, as_tuple and redirect_error, and a deferred "
          "operation awaited, runs its whole policy") {
  for (bool controlled : {false, true}) {
    CAPTURE(controlled);
    manual_clock::reset();
    asio::io_context io(2);
    auto retries = std::make_shared<int>(0);
    retry_policy policy = counted(retries, controlled);
    const shared_policy shared(counted(retries, controlled));
    flip_op op;
    int sum = 0;
    bool finished = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto ex = co_await asio::this_coro::executor;
          sum += co_await coretry::async_retry<manual_timer>(ex, op, policy, asio::use_awaitable);
          auto [ec, v] = co_await coretry::async_retry<manual_timer>(
              ex, op, shared, coretry::detail::as_tuple(asio::use_awaitable));
          CHECK(!ec);
          sum += v;
          error_code ec2;
          sum += co_await coretry::async_retry<manual_timer>(
              ex, op, std::as_const(policy), asio::redirect_error(asio::use_awaitable, ec2));
          CHECK(!ec2);
          auto d = coretry::async_retry<manual_timer>(ex, op, policy, coretry::test::deferred);
          sum += co_await d(asio::use_awaitable);
          sum += co_await d(asio::use_awaitable);
          sum += co_await coretry::retry_async<manual_timer>(op, policy);
          sum += co_await coretry::retry_async<manual_timer>(
              op, policy, coretry::fallback([](const coretry::fallback_info&) { return 0; }));
          finished = true;
        },
        asio::detached);
    REQUIRE(coretry::testing::drive(io, [&] { return finished; }));
    CHECK(sum == 49);
    CHECK(*retries == 7);
    CHECK(intact(policy));
  }
}

// Not `experimental::use_promise`: its promise runs on the initiation's associated executor, and
// initiate_retry has none (Asio 1.38 then fails to compile `promise::operator()`), before and
// after e7d3e0d alike.
TEST_CASE("async_retry through use_future, bind_executor and consign runs its whole policy") {
  for (bool controlled : {false, true}) {
    CAPTURE(controlled);
    manual_clock::reset();
    asio::io_context io(2);
    auto retries = std::make_shared<int>(0);
    retry_policy policy = counted(retries, controlled);
    flip_op op;
    auto f = coretry::async_retry<manual_timer>(io.get_executor(), op, policy, asio::use_future);
    int done = 0;
    auto other = asio::make_strand(io);
    coretry::async_retry<manual_timer>(io.get_executor(), op, policy,
                                       asio::bind_executor(other, [&](error_code ec, int v) {
                                         CHECK(!ec);
                                         CHECK(v == 7);
                                         CHECK(other.running_in_this_thread());
                                         ++done;
                                       }));
    int expected = 2;
#if R13_HAS_NEW_TOKENS
    auto kept = std::make_shared<int>(0);
    coretry::async_retry<manual_timer>(io.get_executor(), op, std::move(policy),
                                       asio::consign(
                                           [&](error_code ec, int v) {
                                             CHECK(!ec);
                                             CHECK(v == 7);
                                             ++done;
                                           },
                                           kept));
    // `policy` was moved into the call's own copy (held_policy_t): the caller asked for that.
    policy = counted(retries, controlled);
    expected = 3;
#endif
    REQUIRE(coretry::testing::drive(
        io, [&] { return done == expected - 1 && f.wait_for(0s) == std::future_status::ready; }));
    CHECK(f.get() == 7);
    CHECK(*retries == expected);
#if R13_HAS_NEW_TOKENS
    CHECK(kept.use_count() == 1);
#endif
    CHECK(intact(policy));
  }
}

TEST_CASE("a parallel_group of deferred async_retry operations runs each under its whole policy") {
  for (bool controlled : {false, true}) {
    CAPTURE(controlled);
    manual_clock::reset();
    asio::io_context io(2);
    auto retries = std::make_shared<int>(0);
    retry_policy policy = counted(retries, controlled);
    const shared_policy shared(counted(retries, controlled));
    flip_op op;
    flip_op op2;
    bool finished = false;
    asio::experimental::make_parallel_group(
        coretry::async_retry<manual_timer>(io.get_executor(), op, policy, coretry::test::deferred),
        coretry::async_retry<manual_timer>(io.get_executor(), op2, shared, coretry::test::deferred))
        .async_wait(asio::experimental::wait_for_all(),
                    [&](std::array<std::size_t, 2>, error_code e1, int v1, error_code e2, int v2) {
                      CHECK(!e1);
                      CHECK(!e2);
                      CHECK(v1 + v2 == 14);
                      finished = true;
                    });
    REQUIRE(coretry::testing::drive(io, [&] { return finished; }));
    CHECK(*retries == 2);
    CHECK(intact(policy));
  }
}

TEST_CASE("a deferred async_retry with a fallback, started twice, runs its whole policy each time "
          "and falls back each time") {
  for (bool controlled : {false, true}) {
    CAPTURE(controlled);
    manual_clock::reset();
    asio::io_context io(2);
    auto retries = std::make_shared<int>(0);
    retry_policy policy = counted(retries, controlled);
    policy.max_attempts = 1; // the first attempt fails: the fallback answers
    policy.on_retry = nullptr;
    policy.retry_if = [retries](const std::error_code&) {
      ++*retries; // asked once per run, by the run's own copy
      return true;
    };
    flip_op op;
    auto d = coretry::async_retry<manual_timer>(
        io.get_executor(), op, policy,
        coretry::fallback([](const coretry::fallback_info&) { return 5; }),
        coretry::test::deferred);
    int done = 0;
    int sum = 0;
    auto h = [&](error_code ec, int v) {
      CHECK(!ec);
      ++done;
      sum += v;
    };
    d(h);
    std::move(d)(h);
    REQUIRE(coretry::testing::drive(io, [&] { return done == 2; }));
    CHECK(sum == 10);
    CHECK(*op.calls == 2);
    CHECK(*retries == 2);
    CHECK(static_cast<bool>(policy.retry_if));
    CHECK(policy.label == long_label);
  }
}
