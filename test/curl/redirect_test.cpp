// SPDX-License-Identifier: BSL-1.0
// Redirects (issue 32, findings 1, 4 and 8): every hop of a request that must not be resent goes
// out on a new connection, a request that loses its body loses the fields describing it, and one
// rule decides which caller fields cross to another origin, whatever the method.

#include <coretry/curl/client.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <cstddef>
#include <string>

#include "test_util.hpp"
#include "transfer.hpp"

namespace {

/// Leaves `n` idle keep-alive connections to `server` in `c`'s cache (n GETs at once, each
/// answered after a short delay so that none can wait for another's connection).
void fill_cache(asio::io_context& io, client& c, http_fault_server& server, int n) {
  int done = 0;
  for (int i = 0; i < n; ++i)
    c.async_perform(get(server.url("/warm")), [&](auto, auto) { ++done; });
  run_until(io, [&] { return done == n; });
}

std::size_t count_target(const http_fault_server& server, const std::string& target) {
  std::size_t n = 0;
  for (const auto& r : server.log())
    n += r.target == target ? 1 : 0;
  return n;
}

} // namespace

TEST_CASE("a POST that must not be resent reaches the server once through a 307 or 308, with "
          "idle connections in the cache") {
  // Issue 32, finding 1: libcurl followed the 307 itself and honours CURLOPT_FRESH_CONNECT on
  // the first hop only; the second hop went out on a cached connection, and libcurl resent it
  // on each one that turned out dead: the server received the POST 6 times.
  for (int status : {307, 308}) {
    CAPTURE(status);
    asio::io_context io;
    http_fault_server server(io.get_executor());
    server.set_chooser([status](std::size_t, const coretry::test::received_request& r) {
      if (r.target == "/warm")
        return http_action::delayed(50ms, "warm"); // kept alive
      if (r.target == "/order")
        return http_action{.status = status, .headers = {{"Location", "/moved"}}, .body = ""};
      return http_action::close(); // /moved: acted upon, then the connection dies unanswered
    });
    client c(io.get_executor(), {.http_version = coretry::curl::http_version_option::http1_1});
    fill_cache(io, c, server, 8);
    REQUIRE(server.accepted() == 8);
    auto req = post(server.url("/order"));
    req.follow_redirects = true;
    const auto got = perform(io, c, req);
    CHECK(got.ec == errc::got_nothing);
    CHECK(count_target(server, "/order") == 1);
    CHECK(count_target(server, "/moved") == 1);
    REQUIRE(server.log().back().target == "/moved");
    CHECK(server.log().back().method == "POST");
    CHECK(server.log().back().body == "order=1");
  }
}

TEST_CASE("fresh_connection holds for every hop of a redirect") {
  // Issue 32, finding 1: the same first-hop-only limit let the hop after a redirect of a retry
  // that asked for a new connection (after a broken one) take a cached connection.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_chooser([](std::size_t, const coretry::test::received_request& r) {
    if (r.target == "/warm")
      return http_action::delayed(50ms, "warm");
    if (r.target == "/a")
      return http_action{.status = 302, .headers = {{"Location", "/b"}}, .body = ""};
    return http_action::ok("landed");
  });
  client c(io.get_executor(), {.http_version = coretry::curl::http_version_option::http1_1});
  fill_cache(io, c, server, 4);
  const auto before = server.accepted();
  auto req = get(server.url("/a"));
  req.follow_redirects = true;
  req.fresh_connection = true;
  const auto got = perform(io, c, req);
  REQUIRE_FALSE(got.ec);
  CHECK(got.r.body == "landed");
  CHECK(server.accepted() == before + 2); // one new connection per hop
}

TEST_CASE("a 303 drops the caller's body fields with the body, on every method") {
  // Issue 32, finding 4: the caller's Content-Length stayed on the GET a 303 made, so the
  // server waited for a body that never came, until the request's timeout (PUT on the client's
  // own redirect path, POST on libcurl's).
  for (const char* method : {"PUT", "POST", "PATCH", "DELETE"}) {
    CAPTURE(method);
    asio::io_context io;
    http_fault_server server(io.get_executor());
    server.push({.status = 303, .headers = {{"Location", "/result"}}, .body = ""});
    server.push(http_action::ok("done"));
    client c(io.get_executor());
    request req;
    req.method = method;
    req.url = server.url("/submit");
    req.body = "payload";
    req.headers = {{"Content-Length", "7"},
                   {"Content-Type", "text/plain"},
                   {"Content-Encoding", "identity"},
                   {"Idempotency-Key", "k1"},
                   {"X-Keep", "1"}};
    req.follow_redirects = true;
    req.timeout = 5s; // before the fix: every attempt ran into it
    const auto got = perform(io, c, req);
    REQUIRE_FALSE(got.ec);
    CHECK(got.r.body == "done");
    REQUIRE(server.log().size() == 2);
    const auto& second = server.log()[1];
    CHECK(second.method == "GET");
    CHECK(second.body.empty());
    CHECK(second.header("Content-Length").empty());
    CHECK(second.header("Content-Type").empty());
    CHECK(second.header("Content-Encoding").empty());
    CHECK(second.header("X-Keep") == "1");
    CHECK(second.header("Idempotency-Key") == "k1");
  }
}

TEST_CASE("a POST that a 301 or 302 makes a GET drops its body fields too") {
  for (int status : {301, 302}) {
    CAPTURE(status);
    asio::io_context io;
    http_fault_server server(io.get_executor());
    server.push({.status = status, .headers = {{"Location", "/result"}}, .body = ""});
    server.push(http_action::ok("done"));
    client c(io.get_executor());
    auto req = post(server.url("/submit"));
    req.headers = {{"Content-Type", "application/x-www-form-urlencoded"}};
    req.follow_redirects = true;
    req.timeout = 5s;
    const auto got = perform(io, c, req);
    REQUIRE_FALSE(got.ec);
    REQUIRE(server.log().size() == 2);
    CHECK(server.log()[1].method == "GET");
    CHECK(server.log()[1].body.empty());
    CHECK(server.log()[1].header("Content-Type").empty());
  }
}

TEST_CASE("one rule for every method: credentials and Host do not cross to another origin") {
  // Issue 32, finding 8: on the redirects libcurl followed (GET, POST), Proxy-Authorization went
  // to the other origin and the caller's Host to another port; the client's own path (PUT,
  // ...) dropped both.
  struct hop {
    const char* method;
    int status;
  };
  for (const hop h : {hop{"GET", 302}, hop{"HEAD", 301}, hop{"POST", 307}, hop{"POST", 303},
                      hop{"PUT", 308}, hop{"DELETE", 302}}) {
    CAPTURE(h.method);
    CAPTURE(h.status);
    asio::io_context io;
    http_fault_server first(io.get_executor()), other(io.get_executor());
    first.push({.status = h.status, .headers = {{"Location", other.url("/there")}}, .body = ""});
    client c(io.get_executor());
    request req;
    req.method = h.method;
    req.url = first.url("/here");
    if (std::string(h.method) != "HEAD")
      req.body = "payload";
    req.headers = {{"Authorization", "Bearer secret"},
                   {"Proxy-Authorization", "Basic cHJveHk6c2VjcmV0"},
                   {"Cookie", "session=1"},
                   {"Host", "127.0.0.1:" + std::to_string(first.port())},
                   {"X-Keep", "1"}};
    req.follow_redirects = true;
    req.retry_non_idempotent = true;
    req.timeout = 5s;
    const auto got = perform(io, c, req);
    REQUIRE_FALSE(got.ec);
    REQUIRE(first.log().size() == 1);
    CHECK(first.log()[0].header("Proxy-Authorization") == "Basic cHJveHk6c2VjcmV0");
    REQUIRE(other.log().size() == 1);
    const auto& there = other.log()[0];
    CHECK(there.header("Authorization").empty());
    CHECK(there.header("Proxy-Authorization").empty());
    CHECK(there.header("Cookie").empty());
    CHECK(there.header("Host") == "127.0.0.1:" + std::to_string(other.port()));
    CHECK(there.header("X-Keep") == "1");
  }
}

TEST_CASE("a redirect within the origin keeps the caller's fields") {
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.push({.status = 302, .headers = {{"Location", "/there"}}, .body = ""});
  client c(io.get_executor());
  auto req = get(server.url("/here"));
  req.headers = {{"Authorization", "Bearer secret"}, {"Proxy-Authorization", "Basic eA=="}};
  req.follow_redirects = true;
  const auto got = perform(io, c, req);
  REQUIRE_FALSE(got.ec);
  REQUIRE(server.log().size() == 2);
  CHECK(server.log()[1].header("Authorization") == "Bearer secret");
  CHECK(server.log()[1].header("Proxy-Authorization") == "Basic eA==");
}

TEST_CASE("the redirect rule: origins differ by scheme, host or port") {
  using coretry::curl::detail::redirect_request;
  auto with_fields = [] {
    request r;
    r.method = "GET";
    r.url = "https://api.example/a";
    r.headers = {{"authorization", "x"},
                 {"PROXY-AUTHORIZATION", "y"},
                 {"Host", "api.example"},
                 {"Cookie", "c"},
                 {"Accept", "*/*"}};
    return r;
  };
  for (const char* to : {"http://api.example/b", "https://api.example:8443/b",
                         "https://other.example/b", "https://user@api.example/b"}) {
    CAPTURE(to);
    auto r = with_fields();
    redirect_request(r, 302, r.url, to);
    CHECK(r.url == to);
    REQUIRE(r.headers.size() == 1);
    CHECK(r.headers[0].first == "Accept");
  }
  auto same = with_fields();
  redirect_request(same, 307, same.url, "HTTPS://API.example/b?q=1");
  CHECK(same.headers.size() == 5);

  // Method and body: the table of docs/curl.md.
  struct row {
    const char* method;
    long status;
    const char* then;
    bool keeps_body;
  };
  for (const row w : {row{"POST", 301, "GET", false}, row{"POST", 302, "GET", false},
                      row{"POST", 303, "GET", false}, row{"POST", 307, "POST", true},
                      row{"POST", 308, "POST", true}, row{"PUT", 301, "PUT", true},
                      row{"PUT", 303, "GET", false}, row{"HEAD", 303, "HEAD", true},
                      row{"GET", 303, "GET", false}, row{"PATCH", 302, "PATCH", true}}) {
    CAPTURE(w.method);
    CAPTURE(w.status);
    request r;
    r.method = w.method;
    r.url = "http://a.example/x";
    if (std::string(w.method) != "HEAD")
      r.body = "b";
    r.headers = {{"Content-Type", "text/plain"}, {"Transfer-Encoding", "chunked"}};
    redirect_request(r, w.status, r.url, "http://a.example/y");
    CHECK(r.method == w.then);
    CHECK(r.headers.size() == (w.keeps_body ? 2u : 0u));
    if (!w.keeps_body)
      CHECK(r.body.empty());
  }
}

TEST_CASE("the next hop of a redirect does not wait behind requests queued since its first") {
  // Each hop is a transfer of its own; it continues a request admitted already, so it goes
  // first when the client's queue is full, as when libcurl followed redirects inside one
  // transfer.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  server.set_chooser([](std::size_t, const coretry::test::received_request& r) {
    if (r.target == "/a")
      return http_action{
          .status = 307, .headers = {{"Location", "/a2"}}, .body = "", .delay = 100ms};
    return http_action::ok(r.target);
  });
  client c(io.get_executor(), {.max_concurrent_requests = 1});
  int done = 0;
  auto a = get(server.url("/a"));
  a.follow_redirects = true;
  c.async_perform(a, [&](auto, auto) { ++done; });
  for (const char* path : {"/b", "/c"})
    c.async_perform(get(server.url(path)), [&](auto, auto) { ++done; });
  run_until(io, [&] { return done == 3; });
  REQUIRE(server.log().size() == 4);
  CHECK(server.log()[0].target == "/a");
  CHECK(server.log()[1].target == "/a2");
  CHECK(server.log()[2].target == "/b");
  CHECK(server.log()[3].target == "/c");
}
