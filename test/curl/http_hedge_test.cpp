// SPDX-License-Identifier: BSL-1.0
// coretry::curl::hedge against the loopback fault server. The hedge delay runs on the manual
// clock where the test needs to say when the next copy starts.

#include <coretry/curl/hedge.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <stdexcept>
#include <string>

#include "test_util.hpp"

namespace {

std::string refusal(const request& req) {
  asio::io_context io;
  client c(io.get_executor());
  try {
    coretry::curl::async_hedge(c, req, {}, {}, [](std::error_code, response) {});
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

} // namespace

TEST_CASE("a hung request is hedged; the second copy wins and the first transfer is cancelled") {
  coretry::testing::manual_clock::reset();
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::hang());
  server.push(http_action::ok("second"));
  client c(io.get_executor());
  coretry::retry_policy policy;
  policy.max_attempts = 3;
  coretry::hedge_options options;
  options.delay = 50ms;
  coretry::hedge_stats stats;
  response r;
  bool done = false;
  auto [attempt, p] = coretry::curl::detail::prepare_hedge(c, get(server.url()), policy);
  asio::co_spawn(io,
                 coretry::hedge_async<coretry::testing::manual_timer>(std::move(attempt),
                                                                      std::move(p), options, stats),
                 [&](std::exception_ptr e, response got) {
                   CHECK_FALSE(e);
                   r = std::move(got);
                   done = true;
                 });
  run_until(io, [&] { return server.requests() == 1; }); // the first copy hangs
  CHECK(c.stats().active_transfers == 1);
  coretry::testing::manual_clock::advance(50ms); // the hedge is due
  run_until(io, [&] { return done; });
  CHECK(r.status == 200);
  CHECK(r.body == "second");
  CHECK(stats.attempts == 2);
  CHECK(stats.winner == 2);
  CHECK(stats.abandoned == 1);
  CHECK(server.requests() == 2);
  // The loser's transfer left libcurl and its unfinished connection was closed.
  CHECK(c.stats().active_transfers == 0);
  CHECK(c.stats().open_connections == 1);
  run_until(io, [&] { return server.open_connections() == 1; });
}

TEST_CASE("a retryable status starts the next copy at once; a final status ends it") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  coretry::retry_policy policy;
  policy.max_attempts = 3;
  coretry::hedge_options options;
  options.delay = 10s; // only failures start copies here

  SUBCASE("503 then 200") {
    server.push(http_action::with_status(503));
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::hedge(c, get(server.url()), policy, options);
    }());
    CHECK(r.status == 200);
    CHECK(server.requests() == 2);
  }
  SUBCASE("every copy 503: the last response is returned") {
    server.set_default(http_action::with_status(503, "busy"));
    coretry::hedge_stats stats;
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::hedge(c, get(server.url()), policy, options, stats);
    }());
    CHECK(r.status == 503);
    CHECK(r.body == "busy");
    CHECK(server.requests() == 3);
    CHECK(stats.reason == coretry::errc::attempts_exhausted);
  }
  SUBCASE("a 404 is final") {
    server.push(http_action::with_status(404));
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::hedge(c, get(server.url()), policy, options);
    }());
    CHECK(r.status == 404);
    CHECK(server.requests() == 1);
  }
}

TEST_CASE("hedging refuses a request that is not safe to send twice, at the call") {
  auto plain = post("http://127.0.0.1:1/");
  const std::string why = refusal(plain);
  CHECK(why.find("POST") != std::string::npos);
  CHECK(why.find("Idempotency-Key") != std::string::npos);
  // Allowed to be retried is not allowed to run twice at once.
  auto opted_in = plain;
  opted_in.retry_non_idempotent = true;
  CHECK(refusal(opted_in) != "accepted");
  auto patch = plain;
  patch.method = "PATCH";
  CHECK(refusal(patch) != "accepted");
  CHECK_FALSE(coretry::curl::may_hedge(plain));
  CHECK(coretry::curl::may_hedge(get("http://127.0.0.1:1/")));

  SUBCASE("a keyed POST is hedged, every copy carrying its key") {
    coretry::testing::manual_clock::reset();
    asio::io_context io;
    http_fault_server server(io.get_executor());
    server.push(http_action::hang());
    client c(io.get_executor());
    auto keyed = post(server.url());
    keyed.headers.emplace_back("Idempotency-Key", "order-7");
    CHECK(refusal(keyed) == "accepted");
    coretry::hedge_options options;
    options.delay = 20ms;
    response r;
    bool done = false;
    auto [attempt, p] = coretry::curl::detail::prepare_hedge(c, keyed, {});
    asio::co_spawn(io,
                   coretry::hedge_async<coretry::testing::manual_timer>(std::move(attempt),
                                                                        std::move(p), options),
                   [&](std::exception_ptr e, response got) {
                     CHECK_FALSE(e);
                     r = std::move(got);
                     done = true;
                   });
    run_until(io, [&] { return server.requests() == 1; });
    coretry::testing::manual_clock::advance(20ms);
    run_until(io, [&] { return done; });
    CHECK(r.status == 200);
    REQUIRE(server.requests() == 2);
    for (const auto& seen : server.log()) {
      CHECK(seen.method == "POST");
      CHECK(seen.header("Idempotency-Key") == "order-7");
    }
  }
}

TEST_CASE("cancelling a hedged request aborts every copy in flight") {
  coretry::testing::manual_clock::reset();
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::hang());
  client c(io.get_executor());
  asio::cancellation_signal signal;
  int completions = 0;
  std::error_code result;
  coretry::hedge_options options;
  options.delay = 20ms;
  auto [attempt, p] = coretry::curl::detail::prepare_hedge(c, get(server.url()), {});
  coretry::async_hedge<coretry::testing::manual_timer>(
      c.get_executor(), std::move(attempt), std::move(p), options,
      asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, response) {
        ++completions;
        result = ec;
      }));
  run_until(io, [&] { return server.requests() == 1; });
  coretry::testing::manual_clock::advance(20ms);
  run_until(io, [&] { return server.requests() == 2 && c.stats().active_transfers == 2; });
  signal.emit(asio::cancellation_type::terminal);
  run_until(io, [&] { return completions == 1; });
  CHECK(result == coretry::test::operation_aborted);
  CHECK(c.stats().active_transfers == 0);
  run_until(io, [&] { return server.open_connections() == 0; });
  CHECK(c.stats().open_connections == 0);
}

TEST_CASE("hedge honours the policy's retry_if_result in place of the status classification") {
  // Issue 18, finding 6: the user's filter was silently replaced.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  coretry::hedge_options options;
  options.delay = 10s;
  SUBCASE("retry on 409") {
    server.push(http_action::with_status(409));
    auto policy =
        coretry::retry_policy{}.retry_if_result([](const response& r) { return r.status == 409; });
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::hedge(c, get(server.url()), policy, options);
    }());
    CHECK(r.status == 200);
    CHECK(server.requests() == 2);
  }
  SUBCASE("never by status") {
    server.set_default(http_action::with_status(503));
    auto policy = coretry::retry_policy{}.retry_if_result([](const response&) { return false; });
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::hedge(c, get(server.url()), policy, options);
    }());
    CHECK(r.status == 503);
    CHECK(server.requests() == 1);
  }
}
