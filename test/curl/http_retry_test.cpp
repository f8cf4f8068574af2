// SPDX-License-Identifier: BSL-1.0
#include <coretry/breaker.hpp>
#include <coretry/curl/hedge.hpp>
#include <coretry/curl/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <ctime>
#include <vector>

#include "test_util.hpp"

namespace {

// Short, deterministic backoff: 1 ms, 2 ms, 4 ms ... capped at `max`, no jitter.
coretry::retry_policy fast_policy(unsigned attempts, std::chrono::milliseconds max = 20ms) {
  coretry::retry_policy p;
  p.max_attempts = attempts;
  p.backoff = coretry::backoff::exponential(1ms, 2.0, max);
  return p;
}

std::string http_date(std::time_t t) {
  char buf[64];
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

} // namespace

TEST_CASE("retry succeeds after scripted failures, one attempt per failure") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  // Each failure on a fresh connection: libcurl itself silently resends a request whose
  // reused keep-alive connection died before any reply, which would hide a scripted failure.
  auto closing = [](int status) {
    auto a = http_action::with_status(status);
    a.keep_alive = false;
    return a;
  };
  server.push(closing(503));
  server.push(http_action::reset());
  server.push(http_action::close());
  server.push(closing(500));
  server.push(http_action::truncated("part"));
  for (int status : {408, 429, 502, 504})
    server.push(closing(status));
  server.push(http_action::ok("finally"));
  client c(io.get_executor());
  std::vector<coretry::retry_event> events;
  auto policy = fast_policy(11, 4ms);
  policy.on_retry = [&](const coretry::retry_event& e) { events.push_back(e); };
  coretry::retry_stats stats;
  response r;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    r = co_await coretry::curl::retry(c, get(server.url()), policy, stats);
  }());
  CHECK(r.status == 200);
  CHECK(r.body == "finally");
  CHECK(stats.attempts == 10);
  CHECK(server.requests() == 10);
  REQUIRE(events.size() == 9);
  CHECK(events[0].error == coretry::curl::make_http_status_error(503));
  CHECK(events[0].error.message() == "HTTP 503 Service Unavailable");
  CHECK(coretry::curl::is_retryable(events[1].error));
  CHECK(events[1].error.category() == coretry::curl::curl_category());
  CHECK(events[2].error == errc::got_nothing);
  CHECK(events[3].error == coretry::curl::make_http_status_error(500));
  CHECK(events[4].error == errc::partial_file);
  CHECK(events[5].error == coretry::curl::make_http_status_error(408));
  CHECK(events[6].error == coretry::curl::make_http_status_error(429));
  CHECK(events[7].error == coretry::curl::make_http_status_error(502));
  CHECK(events[8].error == coretry::curl::make_http_status_error(504));
  for (std::size_t i = 0; i < events.size(); ++i) {
    CAPTURE(i);
    CHECK(events[i].attempt == i + 1);
    CHECK(events[i].delay == std::min<std::chrono::nanoseconds>(1ms * (1 << i), 4ms));
  }
  const auto s = c.stats();
  CHECK(s.waiting_retries == 0);
  CHECK(s.peak_waiting_retries == 1);
  CHECK(s.active_transfers == 0);
}

TEST_CASE("the default policy argument survives co_await on g++ 12") {
  // A default argument written `= {}` is a braced aggregate temporary in the caller's co_await
  // expression, which g++ 12 copies bitwise and destroys twice (free(): invalid pointer, ASan);
  // the front ends spell their defaults `retry_policy()`, which g++ 12 compiles correctly.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::ok("one"));
  server.push(http_action::ok("two"));
  client c(io.get_executor());
  response r1;
  response r2;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    r1 = co_await coretry::curl::retry(c, get(server.url()));
    r2 = co_await coretry::curl::hedge(c, get(server.url()));
  }());
  CHECK(r1.body == "one");
  CHECK(r2.body == "two");
}

TEST_CASE("when attempts run out on a retryable status the last response is returned") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::with_status(503, "still busy"));
  client c(io.get_executor());
  coretry::retry_stats stats;
  response r;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    r = co_await coretry::curl::retry(c, get(server.url()), fast_policy(3), stats);
  }());
  CHECK(r.status == 503);
  CHECK(r.body == "still busy");
  CHECK(server.requests() == 3);
  CHECK(stats.reason == coretry::errc::attempts_exhausted);
}

TEST_CASE("other 4xx statuses are returned at once") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::with_status(404, "nope"));
  client c(io.get_executor());
  response r;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    r = co_await coretry::curl::retry(c, get(server.url()), fast_policy(5));
  }());
  CHECK(r.status == 404);
  CHECK(server.requests() == 1);
}

TEST_CASE(
    "Retry-After is honoured up to the policy's max_retry_after, whatever the backoff's cap") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  std::vector<coretry::retry_event> events;
  auto policy = fast_policy(3, 30ms);
  policy.max_retry_after = 2s;
  policy.on_retry = [&](const coretry::retry_event& e) { events.push_back(e); };
  coretry::retry_stats stats;

  SUBCASE("delta-seconds on 503 above max_retry_after: stop at once, with the response") {
    server.push(http_action::retry_after(503, "5"));
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::retry(c, get(server.url()), policy, stats);
    }());
    CHECK(r.status == 503);
    CHECK(stats.reason == coretry::errc::retry_after_too_long);
    CHECK(events.empty());
    CHECK(server.requests() == 1);
  }
  SUBCASE("an HTTP-date on 429 above max_retry_after: the same") {
    server.push(http_action::retry_after(429, http_date(std::time(nullptr) + 10)));
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::retry(c, get(server.url()), policy, stats);
    }());
    CHECK(r.status == 429);
    CHECK(stats.reason == coretry::errc::retry_after_too_long);
    CHECK(server.requests() == 1);
  }
  SUBCASE("within max_retry_after, the hint wins over the backoff, above its cap too") {
    // The 1 s sleep is not waited out: the operation is seen asleep with one request sent and
    // a 1 s delay chosen over the 30 ms cap; the group token then ends the sleep.
    coretry::cancellation_source source;
    policy.cancellation = source.token();
    server.push(http_action::retry_after(503, "1"));
    std::error_code result;
    int done = 0;
    coretry::curl::async_retry(c, get(server.url()), policy, [&](std::error_code ec, response) {
      result = ec;
      ++done;
    });
    run_until(io, [&] { return c.stats().waiting_retries == 1; });
    CHECK(server.requests() == 1);
    CHECK(done == 0);
    source.cancel();
    run_until(io, [&] { return done == 1; });
    REQUIRE(events.size() == 1);
    CHECK(events[0].server_hint == 1s);
    CHECK(events[0].delay == 1s);
    CHECK(result == coretry::test::operation_aborted);
    CHECK(server.requests() == 1);
  }
  SUBCASE("a hint beyond the deadline ends the loop at once with the last response") {
    policy.max_retry_after = 10min;
    policy.deadline = 2s;
    server.push(http_action::retry_after(503, "120"));
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::retry(c, get(server.url()), policy, stats);
    }());
    CHECK(r.status == 503);
    CHECK(stats.attempts == 1);
    CHECK(stats.reason == coretry::errc::retry_after_past_deadline);
    CHECK(events.empty());
    CHECK(server.requests() == 1);
  }
  SUBCASE("a huge hint saturates, never overflows, and stops the loop") {
    server.push(http_action::retry_after(429, "99999999999999999999999"));
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::retry(c, get(server.url()), policy, stats);
    }());
    CHECK(r.status == 429);
    CHECK(stats.reason == coretry::errc::retry_after_too_long);
    CHECK(events.empty());
  }
  SUBCASE("garbage and Retry-After on other statuses are ignored") {
    server.push(http_action::retry_after(503, "-3"));
    server.push(http_action::retry_after(500, "5"));
    run_until_done(io, [&]() -> asio::awaitable<void> {
      auto r = co_await coretry::curl::retry(c, get(server.url()), policy);
      CHECK(r.status == 200);
    }());
    REQUIRE(events.size() == 2);
    CHECK(events[0].server_hint == 0s);
    CHECK(events[1].server_hint == 0s);
    CHECK(events[1].delay == 2ms);
  }
}

TEST_CASE("a POST is not retried unless it carries an Idempotency-Key or opts in") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());

  SUBCASE("plain POST: one attempt, the 503 is returned") {
    server.push(http_action::with_status(503));
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::retry(c, post(server.url()), fast_policy(5));
    }());
    CHECK(r.status == 503);
    CHECK(server.requests() == 1);
  }
  SUBCASE("plain POST: one attempt, the transport error is thrown") {
    server.push(http_action::close());
    CHECK_THROWS_AS(run_until_done(io,
                                   [&]() -> asio::awaitable<void> {
                                     co_await coretry::curl::retry(c, post(server.url()),
                                                                   fast_policy(5));
                                   }()),
                    std::system_error);
    CHECK(server.requests() == 1);
  }
  SUBCASE("plain POST on a dead keep-alive connection: not resent by libcurl either") {
    // A GET leaves a keep-alive connection; the server then drops the POST without a reply.
    // On a reused connection libcurl would resend the POST by itself on a fresh one.
    server.push(http_action::ok());
    server.push(http_action::close());
    std::error_code ec;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      co_await c.perform(get(server.url()));
      auto [e, r] = co_await coretry::curl::async_retry(
          c, post(server.url()), fast_policy(5), coretry::detail::as_tuple(asio::use_awaitable));
      ec = e;
    }());
    CHECK(ec == errc::got_nothing);
    REQUIRE(server.requests() == 2);
    CHECK(server.log()[1].method == "POST");
    CHECK(server.accepted() == 2); // the POST went out on a connection of its own
  }
  SUBCASE("keyed POST: keep-alive connections are reused") {
    auto req = post(server.url());
    req.headers.emplace_back("Idempotency-Key", "order-2");
    run_until_done(io, [&]() -> asio::awaitable<void> {
      co_await c.perform(get(server.url()));
      co_await coretry::curl::retry(c, req, fast_policy(5));
    }());
    CHECK(server.requests() == 2);
    CHECK(server.accepted() == 1);
  }
  SUBCASE("POST with Idempotency-Key is retried") {
    server.push(http_action::with_status(503));
    server.push(http_action::close());
    auto req = post(server.url());
    req.headers.emplace_back("Idempotency-Key", "order-1");
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::retry(c, req, fast_policy(5));
    }());
    CHECK(r.status == 200);
    REQUIRE(server.requests() == 3);
    for (const auto& seen : server.log()) {
      CHECK(seen.header("Idempotency-Key") == "order-1");
      CHECK(seen.body == "order=1");
    }
  }
  SUBCASE("POST with retry_non_idempotent is retried") {
    server.push(http_action::with_status(502));
    auto req = post(server.url());
    req.retry_non_idempotent = true;
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::retry(c, req, fast_policy(5));
    }());
    CHECK(r.status == 200);
    CHECK(server.requests() == 2);
  }
}

TEST_CASE("an unreachable port is retried and reported as couldnt_connect") {
  asio::io_context io;
  client c(io.get_executor());
  const std::string url = "http://127.0.0.1:" + std::to_string(coretry::test::unused_port()) + "/";
  coretry::retry_stats stats;
  std::error_code ec;
  try {
    run_until_done(io, [&]() -> asio::awaitable<void> {
      co_await coretry::curl::retry(c, get(url), fast_policy(3), stats);
    }());
  } catch (const std::system_error& e) {
    ec = e.code();
  }
  CHECK(ec == errc::couldnt_connect);
  CHECK(ec.message() == "Couldn't connect to server");
  CHECK(stats.attempts == 3);
  CHECK(c.stats().open_connections == 0);
}

TEST_CASE("an invalid URL fails at once, without retries") {
  asio::io_context io;
  client c(io.get_executor());
  for (const char* url : {"http://[::1", "not-a-url"}) {
    CAPTURE(url);
    coretry::retry_stats stats;
    std::error_code ec;
    try {
      run_until_done(io, [&]() -> asio::awaitable<void> {
        co_await coretry::curl::retry(c, get(url), fast_policy(5), stats);
      }());
    } catch (const std::system_error& e) {
      ec = e.code();
    }
    CHECK(ec == errc::url_malformat);
    CHECK(ec.message() == "URL using bad/illegal format or missing URL");
    CHECK(stats.attempts == 1);
  }
  CHECK(c.stats().pooled_handles == 1);
  CHECK(c.stats().peak_open_connections == 0);
}

TEST_CASE("a malformed request or policy throws std::invalid_argument at the call") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  auto bad = get(server.url());
  bad.headers = {{"X-A", "1\nX-B: 2"}};
  CHECK_THROWS_WITH_AS((void)coretry::curl::retry(c, bad, fast_policy(3)),
                       doctest::Contains("headers[0].value"), std::invalid_argument);
  CHECK_THROWS_AS(coretry::curl::async_retry(c, bad, fast_policy(3), asio::detached),
                  std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)coretry::curl::retry(c, get(server.url()), fast_policy(0)),
                       doctest::Contains("max_attempts"), std::invalid_argument);
  run_for(io, 10ms);
  CHECK(server.requests() == 0);
}

TEST_CASE("a per-attempt timeout cancels a hung transfer and the retry succeeds") {
  // curl::retry's attempt and policy in retry_async on the manual clock: the attempt timeout
  // and the backoff fire only when the test moves the clock, so the second attempt is never cut
  // short however slow the machine is.
  coretry::testing::manual_clock::reset();
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::hang());
  client c(io.get_executor());
  auto policy = fast_policy(3);
  policy.attempt_timeout = 50ms;
  coretry::retry_stats stats;
  response r;
  bool done = false;
  auto [attempt, p] = coretry::curl::detail::prepare_http(c, get(server.url()), policy);
  asio::co_spawn(
      io,
      coretry::retry_async<coretry::testing::manual_timer>(std::move(attempt), std::move(p), stats),
      [&](std::exception_ptr e, response got) {
        CHECK_FALSE(e);
        r = std::move(got);
        done = true;
      });
  run_until(io, [&] { return server.requests() == 1; }); // the first attempt hangs
  coretry::testing::manual_clock::advance(50ms);         // its timeout
  run_until(io, [&] { return c.stats().waiting_retries == 1; });
  CHECK(c.stats().active_transfers == 0);
  coretry::testing::manual_clock::advance(1ms); // the backoff's first delay
  run_until(io, [&] { return done; });
  CHECK(r.status == 200);
  CHECK(stats.attempts == 2);
  CHECK(c.stats().active_transfers == 0);
  CHECK(c.stats().open_connections == 1); // the hung connection was closed, the good one kept
  run_until(io, [&] { return server.open_connections() == 1; });
}

TEST_CASE("cancellation mid-sleep and mid-transfer releases everything") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  const auto baseline_fds = coretry::test::open_fds();
  auto c = std::make_unique<client>(io.get_executor());
  asio::cancellation_signal signal;
  coretry::cancellation_source source;
  int completions = 0;
  std::error_code result;
  auto policy = fast_policy(5, 10s);
  policy.cancellation = source.token();
  auto handler = asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, response) {
    ++completions;
    result = ec;
  });
  bool by_token = false;
  std::size_t sockets_after = 0; // what a cancelled operation may leave: an idle keep-alive one

  SUBCASE("mid-sleep, through the handler's slot") {
    server.push(http_action::retry_after(503, "5"));
    coretry::curl::async_retry(*c, get(server.url()), policy, handler);
    run_until(io, [&] { return c->stats().waiting_retries == 1; });
    sockets_after = 1;
  }
  SUBCASE("mid-sleep, through the group token") {
    server.push(http_action::retry_after(503, "5"));
    coretry::curl::async_retry(*c, get(server.url()), policy, handler);
    run_until(io, [&] { return c->stats().waiting_retries == 1; });
    by_token = true;
    sockets_after = 1;
  }
  SUBCASE("mid-transfer, through the handler's slot") {
    server.push(http_action::slow_body(std::string(500, 'x'), 5ms));
    coretry::curl::async_retry(*c, get(server.url()), policy, handler);
    run_until(io, [&] { return c->stats().active_transfers == 1 && server.requests() == 1; });
    run_for(io, 20ms);
  }
  SUBCASE("mid-transfer, through the group token") {
    server.push(http_action::slow_body(std::string(500, 'x'), 5ms));
    coretry::curl::async_retry(*c, get(server.url()), policy, handler);
    run_until(io, [&] { return c->stats().active_transfers == 1 && server.requests() == 1; });
    run_for(io, 20ms);
    by_token = true;
  }
  // While sleeping the operation holds no easy handle; while transferring it holds one.
  CHECK(c->stats().pooled_handles == (c->stats().waiting_retries == 1 ? 1u : 0u));
  CHECK(c->stats().open_connections == 1);
  if (by_token)
    source.cancel();
  else
    signal.emit(asio::cancellation_type::terminal);
  // Promptly, not at the end of the 5 s sleep or of the 2.5 s body: had either ended first, the
  // result would be a second request or a 200, not operation_aborted with one request sent.
  run_until(io, [&] { return completions == 1 && server.open_connections() == sockets_after; });
  CHECK(completions == 1);
  CHECK(result == coretry::test::operation_aborted);
  auto s = c->stats();
  CHECK(s.waiting_retries == 0);
  CHECK(s.active_transfers == 0);
  CHECK(s.queued_requests == 0);
  CHECK(s.pooled_handles == 1);
  CHECK(s.open_connections == sockets_after); // an aborted transfer's connection is closed
  CHECK(server.requests() == 1);
  CHECK(server.open_connections() == sockets_after);
  c.reset();
  run_until(io, [&] { return server.open_connections() == 0; });
  CHECK(coretry::test::open_fds() == baseline_fds);
}

TEST_CASE("a group token cancels every sleeping retry") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::retry_after(503, "5"));
  client c(io.get_executor());
  coretry::cancellation_source source;
  auto policy = fast_policy(5, 10s);
  policy.cancellation = source.token();
  int aborted = 0;
  for (int i = 0; i < 20; ++i)
    coretry::curl::async_retry(c, get(server.url()), policy, [&](std::error_code ec, response) {
      if (ec == coretry::test::operation_aborted)
        ++aborted;
    });
  run_until(io, [&] { return c.stats().waiting_retries == 20; });
  CHECK(c.stats().open_connections <= 20);
  source.cancel();
  run_until(io, [&] { return aborted == 20; });
  CHECK(server.requests() == 20); // at once: no sleep ended, no second attempt went out
  CHECK(c.stats().waiting_retries == 0);
}

TEST_CASE("1,000 concurrent retrying requests complete once each within the connection limit") {
  coretry::test::raise_fd_limit();
  asio::io_context io;
  http_fault_server server(io.get_executor());
  // The first 1,500 requests fail with 503: most operations retry at least once.
  server.set_chooser([](std::size_t index, const coretry::test::received_request&) {
    return index < 1500 ? http_action::with_status(503) : http_action::ok();
  });
  constexpr long limit = 32;
  constexpr int n = 1000;
  client c(io.get_executor(), client_options{.max_total_connections = limit});
  auto policy = fast_policy(30, 20ms);
  std::string scenario;
  bool long_sleeps = false;
  SUBCASE("short backoff: 1-20 ms, full jitter (sleeps shorter than the queue)") {
    scenario = "backoff 1-20 ms";
    policy.backoff =
        coretry::backoff::exponential(1ms, 2.0, 20ms).with_jitter(coretry::jitter::full());
  }
  SUBCASE("long backoff: 100-200 ms, equal jitter, on the manual clock (everyone sleeps at once)") {
    scenario = "backoff 100-200 ms";
    long_sleeps = true;
    policy.backoff =
        coretry::backoff::exponential(100ms, 2.0, 200ms).with_jitter(coretry::jitter::equal());
  }
  std::vector<int> completions(n, 0);
  int ok = 0, done = 0;
  const auto start = std::chrono::steady_clock::now();
  if (!long_sleeps) {
    for (int i = 0; i < n; ++i)
      coretry::curl::async_retry(c, get(server.url("/item/" + std::to_string(i))), policy,
                                 [&, i](std::error_code ec, response r) {
                                   ++completions[static_cast<std::size_t>(i)];
                                   ++done;
                                   if (!ec && r.status == 200)
                                     ++ok;
                                 });
    run_until(io, [&] { return done == n; });
  } else {
    // The same operations (curl::retry's attempt and policy) in retry_async on the manual
    // clock: a sleep ends only when the test moves the clock. Each round lets every unfinished
    // operation fall asleep, then wakes them all, however slow the machine.
    coretry::testing::manual_clock::reset();
    for (int i = 0; i < n; ++i) {
      auto [attempt, p] = coretry::curl::detail::prepare_http(
          c, get(server.url("/item/" + std::to_string(i))), policy);
      asio::co_spawn(
          io,
          coretry::retry_async<coretry::testing::manual_timer>(std::move(attempt), std::move(p)),
          [&, i](std::exception_ptr e, response r) {
            ++completions[static_cast<std::size_t>(i)];
            ++done;
            if (!e && r.status == 200)
              ++ok;
          });
    }
    for (;;) {
      run_until(io, [&] { return done + static_cast<int>(c.stats().waiting_retries) == n; });
      if (done == n)
        break;
      coretry::testing::manual_clock::advance(1s); // beyond every delay of this backoff
      run_until(io, [&] { return c.stats().waiting_retries == 0; });
    }
    CHECK(coretry::testing::manual_clock::pending() == 0);
  }
  const auto wall = std::chrono::steady_clock::now() - start;
  run_for(io, 20ms);
  const auto s = c.stats();
  for (int k : completions)
    REQUIRE(k == 1);
  CHECK(ok == n);
  CHECK(server.requests() == 1500 + n);
  CHECK(s.peak_open_connections <= static_cast<std::size_t>(limit));
  CHECK(server.peak_connections() <= static_cast<std::size_t>(limit));
  CHECK(s.open_connections <= static_cast<std::size_t>(limit));
  CHECK(s.waiting_retries == 0);
  CHECK(s.active_transfers == 0);
  CHECK(s.queued_requests == 0);
  CHECK(s.peak_waiting_retries > 0);
  // Sockets follow the connection limit, not the number of operations asleep in backoff: on
  // the manual clock all 1,000 first attempts fail before any sleep ends.
  if (long_sleeps)
    CHECK(s.peak_waiting_retries == static_cast<std::size_t>(n));
  MESSAGE(scenario, ": 1000 requests, 2500 attempts: peak open sockets ", s.peak_open_connections,
          " (limit ", limit, "), peak active transfers ", s.peak_active_transfers, ", peak queued ",
          s.peak_queued_requests, ", peak waiting retries ", s.peak_waiting_retries,
          ", server peak connections ", server.peak_connections(), ", wall ",
          std::chrono::duration_cast<std::chrono::milliseconds>(wall).count(), " ms");
}

TEST_CASE("a retry asleep when its client is destroyed, then its io_context, touches nothing") {
  // The usual declaration order: io_context first, client second. Leaving the scope destroys
  // the client while the retry sleeps (a 5 s Retry-After), then the io_context destroys the
  // sleeping frame, which must not reach back into the freed client (ASan checks).
  int completions = 0;
  {
    asio::io_context io;
    http_fault_server server(io.get_executor());
    server.push(http_action::retry_after(503, "5"));
    client c(io.get_executor());
    coretry::curl::async_retry(c, get(server.url()), fast_policy(3),
                               [&](std::error_code, response) { ++completions; });
    run_until(io, [&] { return c.stats().waiting_retries == 1; });
    CHECK(server.requests() == 1);
  }
  CHECK(completions == 0); // destroyed uncalled with its io_context, as Asio does
}

TEST_CASE("a retry whose client is destroyed while it sleeps completes once, sending nothing") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::with_status(503));
  auto c = std::make_unique<client>(io.get_executor());
  auto policy = fast_policy(5);
  int retries = 0;
  // The hook runs just before the sleep: the client goes away exactly then, deterministically.
  policy.on_retry = [&](const coretry::retry_event&) {
    ++retries;
    c.reset();
  };
  int completions = 0;
  std::error_code result;
  response last;
  coretry::curl::async_retry(*c, get(server.url()), policy, [&](std::error_code ec, response r) {
    ++completions;
    result = ec;
    last = std::move(r);
  });
  run_until(io, [&] { return completions == 1; });
  run_for(io, 20ms); // let any stray work land
  CHECK(completions == 1);
  CHECK(result == coretry::test::operation_aborted);
  CHECK(retries == 1);
  CHECK(server.requests() == 1);
}

TEST_CASE("a retry whose client is destroyed mid-transfer completes once with operation_aborted") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::hang());
  auto c = std::make_unique<client>(io.get_executor());
  int completions = 0;
  std::error_code result;
  coretry::curl::async_retry(*c, get(server.url()), fast_policy(5),
                             [&](std::error_code ec, response) {
                               ++completions;
                               result = ec;
                             });
  run_until(io, [&] { return server.requests() == 1; });
  c.reset();
  run_until(io, [&] { return completions == 1; });
  run_for(io, 20ms);
  CHECK(completions == 1);
  CHECK(result == coretry::test::operation_aborted);
  CHECK(server.requests() == 1);
}

TEST_CASE("retry honours the policy's retry_if_result in place of the status classification") {
  // Issue 18, finding 6: the user's filter was silently replaced by is_retryable_status.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  SUBCASE("retry on 409: the filter is called, and a 409 is retried") {
    server.push(http_action::with_status(409));
    int calls = 0;
    auto policy = fast_policy(3).retry_if_result([&](const response& r) {
      ++calls;
      return r.status == 409;
    });
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::retry(c, get(server.url()), policy);
    }());
    CHECK(r.status == 200);
    CHECK(calls == 2);
    CHECK(server.requests() == 2);
  }
  SUBCASE("never retry by status: a 503 is returned at once") {
    server.set_default(http_action::with_status(503));
    auto policy = fast_policy(3).retry_if_result([](const response&) { return false; });
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await coretry::curl::retry(c, get(server.url()), policy);
    }());
    CHECK(r.status == 503);
    CHECK(server.requests() == 1);
  }
  SUBCASE("a filter on another result type is refused at the call") {
    auto policy = fast_policy(3).retry_if_result([](const int&) { return false; });
    CHECK_THROWS_AS(
        coretry::curl::async_retry(c, get(server.url()), policy, [](std::error_code, response) {}),
        std::invalid_argument);
  }
}

TEST_CASE("an observer sees each HTTP attempt's method and status, labelled scheme://host:port") {
  struct recorder : coretry::retry_observer {
    std::vector<std::string> lines;
    void on_attempt_finished(const coretry::attempt_finished_event& e) override {
      const auto* method = e.attributes.find(coretry::http::attribute::request_method);
      const auto* status = e.attributes.find(coretry::http::attribute::response_status_code);
      lines.push_back(std::string(e.label) + " " + std::string(method ? method->text() : "") + " " +
                      std::to_string(status ? status->integer() : 0) + " " +
                      coretry::to_string(e.outcome));
    }
    void on_retry_scheduled(const coretry::retry_scheduled_event& e) override {
      lines.push_back("retry " + std::to_string(e.attempt) + " hint " +
                      std::to_string(e.server_hint.count() / 1'000'000'000));
    }
    void on_operation_finished(const coretry::operation_finished_event& e) override {
      lines.push_back("end " + std::to_string(e.attempts) + " " + (e.error ? "error" : "ok"));
    }
  };
  asio::io_context io;
  http_fault_server server(io.get_executor());
  auto a = http_action::with_status(503);
  a.headers.emplace_back("Retry-After", "0");
  server.push(a);
  server.push(http_action::ok("yes"));
  client c(io.get_executor());
  auto rec = std::make_shared<recorder>();
  auto policy = fast_policy(3);
  policy.observer = rec;
  response r;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    r = co_await coretry::curl::retry(c, get(server.url()), policy);
  }());
  CHECK(r.status == 200);
  // server.url() is http://127.0.0.1:<port>/...: the label is its scheme, host and port.
  const std::string url = server.url();
  const std::string label = url.substr(0, url.find('/', std::string("http://").size()));
  CHECK(rec->lines == std::vector<std::string>{label + " GET 503 failure", "retry 1 hint 0",
                                               label + " GET 200 success", "end 2 ok"});
}

TEST_CASE("a 429 is retried but is no breaker failure; a 503 without Retry-After is one") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  auto closing = [](int status) {
    auto a = http_action::with_status(status);
    a.keep_alive = false;
    return a;
  };
  for (int i = 0; i < 3; ++i)
    server.push(closing(429));                     // no Retry-After: pushback_if
  server.push(http_action::retry_after(503, "0")); // a hint of 0 s: no push-back, a failure
  server.push(http_action::ok("finally"));
  client c(io.get_executor());
  auto breaker = std::make_shared<coretry::circuit_breaker>(
      coretry::circuit_breaker_options{.consecutive_failures = 2, .seed = 1});
  auto policy = fast_policy(6, 4ms);
  policy.breaker = breaker;
  response r;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    r = co_await coretry::curl::retry(c, get(server.url()), policy);
  }());
  CHECK(r.status == 200);
  CHECK(breaker->pushbacks() == 3);
  CHECK(breaker->failures() == 1);
  CHECK(breaker->successes() == 1);
  CHECK(breaker->times_opened() == 0);
}
