// SPDX-License-Identifier: BSL-1.0
#include <coretry/curl/client.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <array>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "test_util.hpp"
#include <unistd.h>

namespace {
constexpr auto nothrow = coretry::detail::as_tuple(asio::use_awaitable);

std::error_code perform_error(asio::io_context& io, client& c, request r) {
  std::error_code result;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    auto [ec, resp] = co_await c.async_perform(std::move(r), nothrow);
    result = ec;
  }());
  return result;
}
} // namespace

TEST_CASE("perform returns status, headers and body") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push({.status = 200, .headers = {{"X-Test", "yes"}}, .body = "hello"});
  client c(io.get_executor());
  response r;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    r = co_await c.perform(get(server.url("/path?q=1")));
  }());
  CHECK(r.status == 200);
  CHECK(r.body == "hello");
  CHECK(r.header("x-test") == "yes");
  CHECK(r.header("content-length") == "5");
  REQUIRE(server.log().size() == 1);
  CHECK(server.log()[0].method == "GET");
  CHECK(server.log()[0].target == "/path?q=1");
  CHECK(c.stats().active_transfers == 0);
  CHECK(c.stats().pooled_handles == 1);
}

TEST_CASE("an HTTP error status is a response, not a transport error") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::with_status(503, "busy"));
  client c(io.get_executor());
  response r;
  run_until_done(io,
                 [&]() -> asio::awaitable<void> { r = co_await c.perform(get(server.url())); }());
  CHECK(r.status == 503);
  CHECK(r.body == "busy");
}

TEST_CASE("methods, request headers and bodies are sent") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  run_until_done(io, [&]() -> asio::awaitable<void> {
    request post{
        .method = "POST", .url = server.url(), .headers = {{"X-Key", "v"}}, .body = "payload"};
    request put{.method = "PUT", .url = server.url(), .body = "put-body"};
    request del{.method = "DELETE", .url = server.url()};
    request head_request{.method = "HEAD", .url = server.url()};
    co_await c.perform(post);
    co_await c.perform(put);
    co_await c.perform(del);
    auto head = co_await c.perform(head_request);
    CHECK(head.body.empty());
  }());
  REQUIRE(server.log().size() == 4);
  CHECK(server.log()[0].method == "POST");
  CHECK(server.log()[0].body == "payload");
  CHECK(server.log()[0].header("x-key") == "v");
  CHECK(server.log()[1].method == "PUT");
  CHECK(server.log()[1].body == "put-body");
  CHECK(server.log()[2].method == "DELETE");
  CHECK(server.log()[3].method == "HEAD");
  CHECK(server.accepted() == 1); // one keep-alive connection for all four
  CHECK(c.stats().pooled_handles == 1);
}

TEST_CASE("a request's own header lines never follow its easy handle to the next request") {
  // Requests without headers of their own share one list of the client's; the others get their
  // own. One pooled handle carries them all in turn.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor(), {.pool_size = 1});
  run_until_done(io, [&]() -> asio::awaitable<void> {
    request with_headers{.method = "POST",
                         .url = server.url(),
                         .headers = {{"X-Key", "v"}, {"Content-Type", "text/plain"}},
                         .body = "a"};
    request plain_post{.method = "POST", .url = server.url(), .body = "b"};
    request plain_get{.url = server.url()};
    request with_expect{.url = server.url(), .headers = {{"Expect", "100-continue"}}};
    co_await c.perform(with_headers);
    co_await c.perform(plain_post);
    co_await c.perform(plain_get);
    co_await c.perform(with_expect);
    co_await c.perform(plain_get);
  }());
  REQUIRE(server.log().size() == 5);
  CHECK(server.log()[0].header("x-key") == "v");
  CHECK(server.log()[0].header("content-type") == "text/plain");
  for (const std::size_t i : {1, 2, 4}) {
    CAPTURE(i);
    CHECK(server.log()[i].header("x-key").empty());
    CHECK(server.log()[i].header("content-type").empty()); // libcurl's default label removed
    CHECK(server.log()[i].header("expect").empty());
  }
  CHECK(server.log()[1].body == "b");
  CHECK(server.log()[3].header("expect") == "100-continue");
  CHECK(c.stats().pooled_handles == 1);
}

TEST_CASE("transport failures are curl errors") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());

  SUBCASE("connection refused") {
    const auto port = coretry::test::unused_port();
    CHECK(perform_error(io, c, {.url = "http://127.0.0.1:" + std::to_string(port) + "/"}) ==
          errc::couldnt_connect);
  }
  SUBCASE("reset before a reply") {
    server.push(http_action::reset());
    const auto ec = perform_error(io, c, {.url = server.url()});
    CHECK((ec == errc::recv_error || ec == errc::got_nothing || ec == errc::send_error));
  }
  SUBCASE("closed without a reply") {
    server.push(http_action::close());
    CHECK(perform_error(io, c, {.url = server.url()}) == errc::got_nothing);
  }
  SUBCASE("a hang trips request::timeout") {
    server.push(http_action::hang());
    CHECK(perform_error(io, c, {.url = server.url(), .timeout = 50ms}) == errc::operation_timedout);
  }
  SUBCASE("malformed and unsupported URLs") {
    CHECK(perform_error(io, c, {.url = "http://[::1"}) == errc::url_malformat);
    CHECK(perform_error(io, c, {.url = "ftp://127.0.0.1/"}) == errc::unsupported_protocol);
    CHECK(perform_error(io, c, {.url = ""}) == errc::url_malformat);
    // No scheme: not guessed (no DNS lookup of "not-a-url"), malformed.
    CHECK(perform_error(io, c, {.url = "not-a-url"}) == errc::url_malformat);
    CHECK(perform_error(io, c, {.url = "127.0.0.1:" + std::to_string(server.port()) + "/"}) ==
          errc::url_malformat);
    CHECK(perform_error(io, c, {.url = "1http://127.0.0.1/"}) == errc::url_malformat);
    CHECK(server.requests() == 0);
  }
  SUBCASE("the awaitable form throws std::system_error") {
    server.push(http_action::close());
    CHECK_THROWS_AS(
        run_until_done(io,
                       [&]() -> asio::awaitable<void> { co_await c.perform(get(server.url())); }()),
        std::system_error);
  }
  CHECK(c.stats().active_transfers == 0);
}

TEST_CASE("cancelling a transfer mid-body removes it and completes once with operation_aborted") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::slow_body(std::string(1000, 'x'), 5ms));
  client c(io.get_executor());
  asio::cancellation_type type = asio::cancellation_type::terminal;
  SUBCASE("terminal") {
    type = asio::cancellation_type::terminal;
  }
  SUBCASE("partial") {
    type = asio::cancellation_type::partial;
  }
  SUBCASE("total") {
    type = asio::cancellation_type::total;
  }
  asio::cancellation_signal signal;
  int completions = 0;
  std::error_code result;
  c.async_perform(get(server.url()),
                  asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, response) {
                    ++completions;
                    result = ec;
                  }));
  // Mid-body: the request arrived and the 5 s body is streaming.
  run_until(io, [&] { return server.requests() == 1; });
  CHECK(c.stats().active_transfers == 1);
  CHECK(c.stats().open_connections == 1);
  signal.emit(type);
  run_until(io, [&] { return completions == 1 && server.open_connections() == 0; });
  CHECK(completions == 1);
  CHECK(result == coretry::test::operation_aborted);
  CHECK(c.stats().active_transfers == 0);
  CHECK(c.stats().pooled_handles == 1);
  CHECK(c.stats().open_connections == 0); // an unfinished connection is closed
  CHECK(server.open_connections() == 0);
}

TEST_CASE("cancelling through a coroutine's slot aborts the awaiting perform") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::hang());
  client c(io.get_executor());
  asio::cancellation_signal signal;
  std::exception_ptr error;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { co_await c.perform(get(server.url())); },
      asio::bind_cancellation_slot(signal.slot(), [&](std::exception_ptr e) { error = e; }));
  run_until(io, [&] { return server.requests() == 1; });
  signal.emit(asio::cancellation_type::terminal);
  run_until(io, [&] { return error != nullptr; });
  REQUIRE(error);
  try {
    std::rethrow_exception(error);
  } catch (const std::system_error& e) {
    CHECK(e.code() == coretry::test::operation_aborted);
  }
  CHECK(c.stats().active_transfers == 0);
  CHECK(c.stats().open_connections == 0);
}

TEST_CASE("requests beyond max_concurrent_requests wait in the client's queue") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::delayed(5ms));
  client c(io.get_executor(), client_options{.max_total_connections = 2});
  int ok = 0;
  for (int i = 0; i < 10; ++i)
    c.async_perform(get(server.url()), [&](std::error_code ec, response r) {
      if (!ec && r.status == 200)
        ++ok;
    });
  run_until(io, [&] { return ok == 10; });
  CHECK(ok == 10);
  const auto s = c.stats();
  CHECK(s.peak_active_transfers == 2);
  CHECK(s.peak_queued_requests == 8);
  CHECK(s.peak_open_connections <= 2);
  CHECK(server.peak_connections() <= 2);
  CHECK(s.queued_requests == 0);
}

TEST_CASE("cancelling a queued request completes it without touching libcurl") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::delayed(20ms));
  client c(io.get_executor(), client_options{.max_total_connections = 1});
  asio::cancellation_signal signal;
  std::error_code first, second;
  int done = 0;
  c.async_perform(get(server.url()), [&](std::error_code ec, response) {
    first = ec;
    ++done;
  });
  c.async_perform(get(server.url()),
                  asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, response) {
                    second = ec;
                    ++done;
                  }));
  asio::post(io, [&] { asio::post(io, [&] { signal.emit(asio::cancellation_type::total); }); });
  run_until(io, [&] { return done == 2; });
  CHECK_FALSE(first);
  CHECK(second == coretry::test::operation_aborted);
  CHECK(server.requests() == 1);
}

TEST_CASE("destroying the client aborts transfers in flight and closes every connection") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::ok());
  server.push(http_action::hang(), 3);
  auto c = std::make_unique<client>(io.get_executor());
  int aborted = 0;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    co_await c->perform(get(server.url())); // leaves one idle keep-alive connection
    for (int i = 0; i < 3; ++i)
      c->async_perform(get(server.url()), [&](std::error_code ec, response) {
        if (ec == coretry::test::operation_aborted)
          ++aborted;
      });
  }());
  // The three hung requests arrived: the idle connection was reused, two more opened.
  run_until(io, [&] { return server.requests() == 4; });
  CHECK(c->stats().open_connections == 3);
  c.reset();
  run_until(io, [&] { return aborted == 3 && server.open_connections() == 0; });
  CHECK(aborted == 3);
  CHECK(server.open_connections() == 0);
}

TEST_CASE("a client may be used from several threads of one io_context") {
  asio::io_context server_io;
  http_fault_server server(server_io.get_executor());
  auto server_work = asio::make_work_guard(server_io);
  std::thread server_thread([&] { server_io.run(); });

  asio::io_context io;
  client c(io.get_executor(), client_options{.max_total_connections = 8});
  std::atomic<int> ok{0};
  constexpr int n = 200;
  for (int i = 0; i < n; ++i)
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto r = co_await c.perform(get(server.url()));
          if (r.status == 200)
            ++ok;
        },
        asio::detached);
  std::thread t1([&] { io.run(); });
  std::thread t2([&] { io.run(); });
  t1.join();
  t2.join();
  CHECK(ok == n);
  CHECK(c.stats().peak_open_connections <= 8);
  asio::post(server_io, [&] {
    server.stop();
    server_work.reset();
  });
  server_thread.join();
}

TEST_CASE("large bodies arrive whole (descriptors already readable are not missed)") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  std::string big(1 << 20, 'a');
  for (std::size_t i = 0; i < big.size(); i += 4096)
    big[i] = static_cast<char>('a' + (i / 4096) % 26);
  server.push(http_action::ok(big));
  server.push(http_action::ok(big));
  client c(io.get_executor());
  run_until_done(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 2; ++i) {
      auto r = co_await c.perform(get(server.url()));
      CHECK(r.body == big);
    }
  }());
}

TEST_CASE("host names go through libcurl's threaded resolver") {
  // "localhost" is answered inside libcurl; the machine's own name, when it maps to
  // 127.0.0.1, goes through the threaded resolver and its socketpair (a descriptor libcurl
  // opens itself and hands to the socket callback).
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  asio::io_context io;
  bool loopback = false;
  {
    asio::ip::tcp::resolver resolver(io);
    coretry::test::error_code ec;
    for (const auto& e : resolver.resolve(asio::ip::tcp::v4(), name, "80", ec))
      loopback = loopback || e.endpoint().address() == asio::ip::make_address("127.0.0.1");
  }
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  for (std::string host : {std::string("localhost"), std::string(name)}) {
    if (host != "localhost" && !loopback) {
      MESSAGE("skipped: ", host, " does not resolve to 127.0.0.1");
      continue;
    }
    response r;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      r = co_await c.perform(get("http://" + host + ":" + std::to_string(server.port()) + "/"));
    }());
    CHECK(r.status == 200);
  }
  CHECK(c.stats().active_transfers == 0);
}

TEST_CASE("redirects are followed when asked") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push({.status = 302, .headers = {{"Location", "/next"}}, .body = ""});
  server.push(http_action::ok("landed"));
  server.push({.status = 302, .headers = {{"Location", "/again"}}, .body = ""});
  client c(io.get_executor());
  auto req = get(server.url());
  req.follow_redirects = true;
  response followed, not_followed;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    followed = co_await c.perform(req);
    not_followed = co_await c.perform(get(server.url()));
  }());
  CHECK(followed.status == 200);
  CHECK(followed.body == "landed");
  CHECK(server.log()[1].target == "/next");
  CHECK(not_followed.status == 302);
  CHECK(not_followed.header("location") == "/again");
}

TEST_CASE("request::timeout does not count time spent in the client's queue") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::delayed(150ms, "slow"));
  server.push(http_action::ok("fast"));
  client c(io.get_executor(), client_options{.max_total_connections = 1});
  std::error_code first, second;
  response fast;
  int done = 0;
  c.async_perform(get(server.url()), [&](std::error_code ec, response) {
    first = ec;
    ++done;
  });
  auto req = get(server.url());
  req.timeout = 100ms; // shorter than its wait behind the slow request
  c.async_perform(req, [&](std::error_code ec, response r) {
    second = ec;
    fast = std::move(r);
    ++done;
  });
  run_until(io, [&] { return done == 2; });
  CHECK_FALSE(first);
  CHECK_FALSE(second);
  CHECK(fast.body == "fast");
  CHECK(c.stats().peak_queued_requests == 1);
}

TEST_CASE("client_options are validated at construction") {
  asio::io_context io;
  CHECK_THROWS_WITH_AS(client(io.get_executor(), client_options{.max_total_connections = -1}),
                       "coretry::curl::client_options: max_total_connections = -1 (must be 0 "
                       "(unlimited) or more)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(client(io.get_executor(), client_options{.max_host_connections = -2}),
                       doctest::Contains("max_host_connections = -2"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(client(io.get_executor(), client_options{.max_idle_connections = -3}),
                       doctest::Contains("max_idle_connections = -3"), std::invalid_argument);
  CHECK_NOTHROW(client(io.get_executor(), client_options{.max_total_connections = 0,
                                                         .max_host_connections = 0,
                                                         .max_concurrent_requests = 0,
                                                         .pool_size = 0,
                                                         .max_idle_connections = 0}));
}

TEST_CASE("TLS and HTTP version options are validated, naming the field and its value") {
  asio::io_context io;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path();
  const fs::path file = dir / ("coretry-tls-" + std::to_string(::getpid()) + ".pem");
  { std::ofstream(file) << "not a certificate\n"; }
  using coretry::curl::tls_options;
  auto tls = [](auto change) {
    tls_options t;
    change(t);
    return t;
  };
  struct bad_case {
    tls_options tls;
    const char* field;
  };
  const bad_case cases[] = {
      {tls([](tls_options& t) { t.ca_file = "/nonexistent/ca.pem"; }),
       "tls.ca_file = \"/nonexistent/ca.pem\" (must name an existing file)"},
      {tls([&](tls_options& t) { t.ca_file = dir.string(); }), "tls.ca_file = "},
      {tls([&](tls_options& t) { t.ca_path = file.string(); }), "tls.ca_path = "},
      {tls([](tls_options& t) { t.ca_blob = "junk"; }), "tls.ca_blob = \"junk\" (must hold PEM"},
      {tls([](tls_options& t) { t.client_cert = "/nonexistent/c.pem"; }), "tls.client_cert = "},
      {tls([&](tls_options& t) { t.client_key = file.string(); }), "tls.client_key = "},
      {tls([](tls_options& t) { t.min_version = static_cast<coretry::curl::tls_version>(9); }),
       "tls.min_version = 9"},
      {tls([&](tls_options& t) { t.ca_file = file.string() + std::string(1, '\0'); }),
       "tls.ca_file = "},
  };
  for (const auto& bc : cases) {
    CAPTURE(bc.field);
    client_options o;
    o.tls = bc.tls;
    CHECK_THROWS_WITH_AS(client(io.get_executor(), o),
                         doctest::Contains((std::string("client_options: ") + bc.field).c_str()),
                         std::invalid_argument);
    request r = get("https://127.0.0.1/");
    r.tls = bc.tls;
    CHECK_THROWS_WITH_AS(r.validate(),
                         doctest::Contains((std::string("request: ") + bc.field).c_str()),
                         std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(client(io.get_executor(), client_options{.max_streams_per_connection = -1}),
                       doctest::Contains("max_streams_per_connection = -1"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      client(io.get_executor(),
             client_options{.http_version = static_cast<coretry::curl::http_version_option>(7)}),
      doctest::Contains("http_version = 7"), std::invalid_argument);
  tls_options good;
  good.ca_file = file.string(); // existence is checked, contents by libcurl at the handshake
  good.ca_path = dir.string();
  good.client_cert = file.string();
  good.client_key = file.string();
  good.min_version = coretry::curl::tls_version::tls1_3;
  CHECK_NOTHROW(good.validate());
  CHECK_NOTHROW(client(io.get_executor(), client_options{.tls = good}));
  fs::remove(file);
}

TEST_CASE("a malformed request throws std::invalid_argument at the call and sends nothing") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  auto with = [&](auto change) {
    request r = get(server.url());
    change(r);
    return r;
  };
  struct bad_case {
    request req;
    const char* message;
  };
  const bad_case cases[] = {
      {with([](request& r) { r.method = ""; }), "request: method = \"\""},
      {with([](request& r) { r.method = "GET /x HTTP/1.1\r\nX:"; }),
       "request: method = \"GET /x HTTP/1.1\\r\\nX:\""},
      {with([](request& r) { r.url += std::string(1, '\0') + "evil"; }), "request: url = "},
      {with([](request& r) {
         r.headers = {{"Good", "1"}, {"Bad Name", "v"}};
       }),
       "request: headers[1].name = \"Bad Name\""},
      {with([](request& r) {
         r.headers = {{"X-A", "v\r\nInjected: 1"}};
       }),
       "request: headers[0].value = \"v\\r\\nInjected: 1\""},
      {with([](request& r) { r.connect_timeout = -1ms; }), "request: connect_timeout = -1ms"},
      {with([](request& r) { r.timeout = -5ms; }), "request: timeout = -5ms"},
      {with([](request& r) { r.max_redirects = -1; }), "request: max_redirects = -1"},
      {with([](request& r) {
         r.method = "HEAD";
         r.body = "x";
       }),
       "request: body = 1 bytes"},
  };
  int handler_calls = 0;
  for (const auto& bc : cases) {
    CAPTURE(bc.message);
    CHECK_THROWS_WITH_AS(bc.req.validate(), doctest::Contains(bc.message), std::invalid_argument);
    CHECK_THROWS_AS(c.async_perform(bc.req, [&](std::error_code, response) { ++handler_calls; }),
                    std::invalid_argument);
    CHECK_THROWS_AS((void)c.perform(bc.req), std::invalid_argument);
  }
  run_for(io, 20ms);
  CHECK(handler_calls == 0);
  CHECK(server.requests() == 0);
  CHECK(c.stats().peak_active_transfers == 0);
  CHECK(c.stats().peak_queued_requests == 0);
  // The boundaries are accepted.
  CHECK_NOTHROW(with([](request& r) {
                  r.method = "M-SEARCH";
                  r.headers = {{"X-Empty", ""}, {"X-Tab", "a\tb"}};
                  r.max_redirects = 0;
                }).validate());
}

TEST_CASE("every method keeps its name, with or without a body") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  client c(io.get_executor());
  auto make = [&](std::string method, std::string body) {
    request r = get(server.url());
    r.method = std::move(method);
    r.body = std::move(body);
    return r;
  };
  const std::vector<std::pair<std::string, std::string>> sent = {
      {"GET", "query-body"}, {"DELETE", "why"}, {"PATCH", "p"}, {"OPTIONS", ""},
      {"PUT", ""},           {"POST", ""},      {"GET", ""},
  };
  run_until_done(io, [&]() -> asio::awaitable<void> {
    for (const auto& [method, body] : sent)
      co_await c.perform(make(method, body));
  }());
  REQUIRE(server.log().size() == sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    CAPTURE(i);
    CHECK(server.log()[i].method == sent[i].first);
    CHECK(server.log()[i].body == sent[i].second);
  }
}

TEST_CASE("a completion is never invoked from inside the initiating call") {
  asio::io_context io;
  client c(io.get_executor());
  int calls = 0;
  std::error_code ec;
  // Fails synchronously inside libcurl's set-up (unsupported scheme): still posted.
  c.async_perform(get("ftp://127.0.0.1/"), [&](std::error_code e, response) {
    ++calls;
    ec = e;
  });
  CHECK(calls == 0);
  run_until(io, [&] { return calls == 1; });
  CHECK(ec == errc::unsupported_protocol);
  CHECK(ec.message() == "Unsupported protocol");
}

TEST_CASE("a redirect loop stops at max_redirects") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default({.status = 302, .headers = {{"Location", "/loop"}}, .body = ""});
  client c(io.get_executor());
  auto req = get(server.url());
  req.follow_redirects = true;
  req.max_redirects = 2;
  CHECK(perform_error(io, c, req) == errc::too_many_redirects);
  CHECK(server.requests() == 3); // the request and two redirects
}

TEST_CASE("a body shorter than its Content-Length is a partial_file error") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::truncated("half", 10));
  client c(io.get_executor());
  CHECK(perform_error(io, c, get(server.url())) == errc::partial_file);
  run_for(io, 10ms);
  CHECK(c.stats().open_connections == 0); // the broken connection is not kept
}

TEST_CASE("connection limits: per host, idle cache and handle pool are bounded") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_default(http_action::delayed(5ms));

  SUBCASE("max_host_connections bounds the sockets to one host") {
    client c(io.get_executor(), client_options{.max_total_connections = 0,
                                               .max_host_connections = 2,
                                               .max_concurrent_requests = 2});
    int ok = 0;
    for (int i = 0; i < 8; ++i)
      c.async_perform(get(server.url()),
                      [&](std::error_code ec, response r) { ok += !ec && r.status == 200; });
    run_until(io, [&] { return ok == 8; });
    CHECK(c.stats().peak_open_connections == 2);
    CHECK(server.peak_connections() == 2);
  }
  SUBCASE("pool_size and max_idle_connections bound what stays after a burst") {
    client c(io.get_executor(),
             client_options{.max_total_connections = 8, .pool_size = 3, .max_idle_connections = 2});
    int ok = 0;
    for (int i = 0; i < 8; ++i)
      c.async_perform(get(server.url()),
                      [&](std::error_code ec, response r) { ok += !ec && r.status == 200; });
    // libcurl closes the idle surplus as the transfers end; the server sees it a little later.
    run_until(io, [&] { return ok == 8 && server.open_connections() == 2; });
    const auto s = c.stats();
    CHECK(s.peak_active_transfers == 8);
    CHECK(s.peak_open_connections == 8);
    CHECK(s.pooled_handles == 3);   // the rest were cleaned up
    CHECK(s.open_connections == 2); // libcurl closed the idle surplus
    CHECK(server.open_connections() == 2);
  }
}

TEST_CASE("no descriptor outlives the client, resolver socketpairs included") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::ok(), 2);
  server.push(http_action::hang(), 2);
  const std::string host = coretry::test::loopback_host_name();
  MESSAGE("second host name: ", host);
  const auto baseline = coretry::test::open_fds();
  int aborted = 0;
  {
    client c(io.get_executor());
    run_until_done(io, [&]() -> asio::awaitable<void> {
      co_await c.perform(get(server.url()));
      // A name (through the threaded resolver when it can) and a numeric host.
      co_await c.perform(get("http://" + host + ":" + std::to_string(server.port()) + "/"));
      for (int i = 0; i < 2; ++i)
        c.async_perform(get(server.url()), [&](std::error_code ec, response) {
          aborted += ec == coretry::test::operation_aborted;
        });
    }());
    run_until(io, [&] { return server.requests() == 4; });
    CHECK(coretry::test::open_fds() > baseline);
    // The named host's connection idle; the numeric host's one reused by a hung transfer, a
    // second one opened for the other.
    CHECK(c.stats().open_connections == 3);
    CHECK(c.stats().active_transfers == 2);
  }
  // The aborted handlers run and the server sees the closes.
  run_until(io, [&] { return aborted == 2 && server.open_connections() == 0; });
  CHECK(aborted == 2);
  CHECK(server.open_connections() == 0);
  CHECK(coretry::test::open_fds() == baseline);
}

TEST_CASE("a client may be destroyed while other threads run its io_context") {
  asio::io_context server_io;
  http_fault_server server(server_io.get_executor());
  // 40,000 bytes, 8 every millisecond: 5 s a body, so every transfer is still running when
  // the client is destroyed, whatever the machine's load.
  server.set_default(http_action::slow_body(std::string(40000, 'x'), 1ms, 8));
  auto server_work = asio::make_work_guard(server_io);
  std::thread server_thread([&] { server_io.run(); });

  for (int round = 0; round < 3; ++round) {
    asio::io_context io;
    auto work = asio::make_work_guard(io);
    std::thread t1([&] { io.run(); });
    std::thread t2([&] { io.run(); });
    std::atomic<int> aborted{0};
    std::array<std::atomic<int>, 16> calls{};
    {
      client c(io.get_executor(), client_options{.max_total_connections = 8});
      for (std::size_t i = 0; i < calls.size(); ++i)
        c.async_perform(get(server.url()), [&, i](std::error_code ec, response) {
          ++calls[i];
          aborted += ec == coretry::test::operation_aborted;
        });
      // Destroy while bodies stream in: socket and timer handlers are running on t1 and t2.
      // The short sleep only varies the moment; nothing asserted depends on it.
      while (c.stats().active_transfers < 8) // atomic counters: readable from any thread
        std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(1 + 2 * round));
    }
    work.reset();
    t1.join();
    t2.join();
    for (const auto& n : calls)
      CHECK(n == 1);
    CHECK(aborted == 16); // 8 mid-body, 8 queued
  }
  asio::post(server_io, [&] {
    server.stop();
    server_work.reset();
  });
  server_thread.join();
}

TEST_CASE("async_perform works with use_future and deferred tokens") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::ok("future"));
  server.push(http_action::ok("deferred"));
  client c(io.get_executor());
  auto f = c.async_perform(get(server.url()), asio::use_future);
  run_until(io, [&] { return f.wait_for(0s) == std::future_status::ready; });
  CHECK(f.get().body == "future");

  auto op = c.async_perform(get(server.url()), coretry::test::deferred);
  run_for(io, 20ms);
  CHECK(server.requests() == 1); // nothing starts before the deferred operation is launched
  response r;
  run_until_done(
      io, [&]() -> asio::awaitable<void> { r = co_await std::move(op)(asio::use_awaitable); }());
  CHECK(r.body == "deferred");
  CHECK(server.requests() == 2);
}

TEST_CASE("the client runs no thread of its own and does not poll while it waits") {
  auto threads = [] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
      ++n;
    return n;
  };
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push(http_action::hang());
  const auto before = threads();
  client c(io.get_executor());
  int done = 0;
  c.async_perform(get(server.url()), [&](std::error_code, response) { ++done; });
  run_until(io, [&] { return server.requests() == 1; });
  // 200 ms of a transfer waiting on a silent server: a handful of handler runs at most, where
  // a poll loop would run thousands.
  const std::size_t handlers = io.run_for(200ms);
  io.restart();
  CHECK(handlers < 10);
  CHECK(threads() <= before); // none added (an earlier test's resolver thread may still exit)
  CHECK(c.stats().active_transfers == 1);
  CHECK(done == 0);
}

TEST_CASE("connect_timeout bounds the connection set-up") {
  // A listener that never accepts, its backlog filled: further SYNs are dropped, so a connect
  // to it neither succeeds nor is refused (loopback only).
  asio::io_context io;
  asio::ip::tcp::acceptor listener(io);
  const asio::ip::tcp::endpoint any(asio::ip::make_address("127.0.0.1"), 0);
  listener.open(any.protocol());
  listener.bind(any);
  listener.listen(1);
  const auto ep = listener.local_endpoint();
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> fillers;
  for (int i = 0; i < 4; ++i) {
    fillers.push_back(std::make_unique<asio::ip::tcp::socket>(io));
    fillers.back()->async_connect(ep, [](std::error_code) {});
  }
  run_for(io, 20ms);
  const auto fds_before = coretry::test::open_fds();
  auto cp = std::make_unique<client>(io.get_executor());
  client& c = *cp;
  auto req = get("http://127.0.0.1:" + std::to_string(ep.port()) + "/");
  req.connect_timeout = 100ms;
  // The connect neither succeeds nor is refused: only connect_timeout can end it, so a timeout
  // error is the proof (no wall-clock window needed).
  const auto ec = perform_error(io, c, req);
  CHECK(ec == errc::operation_timedout);
  // libcurl 7.88 closes a socket whose connect timed out without CLOSESOCKETFUNCTION: the
  // client notices (the counter is right) and never closes that number again.
  CHECK(c.stats().open_connections == 0);
  cp.reset();
  run_for(io, 10ms);
  CHECK(coretry::test::open_fds() == fds_before);
}
