// SPDX-License-Identifier: BSL-1.0
// coretry::curl against a real server: nginx on loopback (Debian's nginx-light), over HTTP,
// HTTPS with a CA made at test time, and HTTP/2. Each test case starts its own nginx on a free
// port of 127.0.0.1 and stops it. Without nginx the cases skip with a message, and fail under
// CI=true.

#include <coretry/curl/curl.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>
#include <support/nginx_server.hpp>

#include <curl/curl.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include <sched.h>
#include <sys/mount.h>

using coretry::curl::http_version;
using coretry::curl::http_version_option;
using coretry::curl::tls_options;
using coretry::curl::tls_version;
using coretry::test::certs;
using coretry::test::nginx_server;

namespace {

// Whether nginx can run here. Otherwise the case is skipped with a message, or fails when
// CI=true: a CI run must not pass without having run these.
bool nginx_installed() {
  if (!coretry::test::find_nginx().empty())
    return true;
  const char* ci = std::getenv("CI");
  if (ci && std::string_view(ci) == "true")
    FAIL("nginx is not installed: the nginx integration tests cannot run (CI=true). "
         "Install it with: apt-get install nginx-light openssl");
  MESSAGE("nginx is not installed: skipped (apt-get install nginx-light openssl)");
  return false;
}

request make(std::string method, std::string url) {
  request r;
  r.method = std::move(method);
  r.url = std::move(url);
  return r;
}

coretry::retry_policy quick_policy(unsigned attempts) {
  coretry::retry_policy p;
  p.max_attempts = attempts;
  p.backoff = coretry::backoff::fixed(10ms);
  return p;
}

struct outcome {
  std::error_code ec;
  response r;
  coretry::retry_stats stats;
};

// `retry` to its end on `io`, its error caught.
outcome retry_on(asio::io_context& io, client& c, request req, coretry::retry_policy policy) {
  outcome out;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    try {
      out.r = co_await coretry::curl::retry(c, req, policy, out.stats);
    } catch (const std::system_error& e) {
      out.ec = e.code();
    }
  });
  return out;
}

// `perform` to its end on `io`; a transport error comes back with libcurl's detail.
outcome perform_on(asio::io_context& io, client& c, request req) {
  outcome out;
  bool done = false;
  c.async_perform(std::move(req), [&](std::error_code ec, response r) {
    out.ec = ec;
    out.r = std::move(r);
    done = true;
  });
  run_until(io, [&] { return done; });
  return out;
}

// Waits (briefly) until nginx logged `n` lines containing `needle`: it writes a line once the
// response is out, maybe just after the client read it.
std::size_t logged(const nginx_server& s, std::string_view needle, std::size_t n) {
  const auto limit = std::chrono::steady_clock::now() + 2s;
  while (s.requests(needle) < n && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(20ms); // and no more than that
  return s.requests(needle);
}

std::string tls_server(std::string_view extra, std::string_view listen_flags = "ssl") {
  return "server {\n"
         "  listen 127.0.0.1:@PORT@ " +
         std::string(listen_flags) +
         ";\n"
         "  ssl_certificate @CERTS@/server.pem;\n"
         "  ssl_certificate_key @CERTS@/server.key;\n" +
         std::string(extra) +
         "  location / { return 200 \"secure\\n\"; }\n"
         "}\n";
}

tls_options trusting_file() {
  tls_options t;
  t.ca_file = certs().ca.string();
  return t;
}

} // namespace

TEST_CASE("nginx: a 429 from limit_req with Retry-After is retried after the delay it asks") {
  if (!nginx_installed())
    return;
  nginx_server nginx("limit_req", R"(
    limit_req_zone $binary_remote_addr zone=one:1m rate=1r/s;
    server {
      listen 127.0.0.1:@PORT@;
      location /limited {
        limit_req zone=one;
        limit_req_status 429;
        add_header Retry-After 1 always;
        try_files /none @ok; # not `return`: that ends the request before limit_req's phase
      }
      location @ok { return 200 "ok\n"; }
    })");
  asio::io_context io;
  client c(io.get_executor());
  // The first request takes the one slot of the second; the next is refused at once.
  REQUIRE(perform_on(io, c, get(nginx.url("/limited"))).r.status == 200);

  SUBCASE("within max_retry_after: waits as asked, above the backoff's cap, then succeeds") {
    std::vector<coretry::retry_event> retries;
    auto policy = quick_policy(3); // a 10 ms backoff: only the server's hint can explain 1 s
    policy.on_retry = [&](const coretry::retry_event& e) { retries.push_back(e); };
    auto out = retry_on(io, c, get(nginx.url("/limited")), policy);
    REQUIRE_FALSE(out.ec);
    CHECK(out.r.status == 200);
    CHECK(out.stats.attempts == 2);
    REQUIRE(retries.size() == 1);
    CHECK(retries[0].error == coretry::curl::make_http_status_error(429));
    CHECK(retries[0].server_hint == 1s);
    CHECK(retries[0].delay >= 1s);
    CHECK(retries[0].delay <= 1s + 10ms);
    CHECK(out.stats.slept == retries[0].delay);
    CHECK(logged(nginx, "GET /limited 429", 1) == 1);
  }
  SUBCASE("beyond max_retry_after: the 429 is returned at once, nothing slept") {
    auto policy = quick_policy(3);
    policy.max_retry_after = 500ms;
    auto out = retry_on(io, c, get(nginx.url("/limited")), policy);
    REQUIRE_FALSE(out.ec);
    CHECK(out.r.status == 429);
    CHECK(out.r.header("Retry-After") == "1");
    CHECK(out.stats.attempts == 1);
    CHECK(out.stats.slept == 0ns);
    CHECK(out.stats.reason == coretry::errc::retry_after_too_long);
  }
}

TEST_CASE("nginx: 502 and 504 from a proxy are retried for GET; a POST is sent once") {
  if (!nginx_installed())
    return;
  // An upstream that accepts connections (the kernel does, into the backlog) and never answers.
  asio::io_context io;
  asio::ip::tcp::acceptor silent(io, {asio::ip::make_address("127.0.0.1"), 0});
  const auto closed = coretry::test::unused_port();
  nginx_server nginx("gateway", "server {\n"
                                "  listen 127.0.0.1:@PORT@;\n"
                                "  location /bad_gateway { proxy_pass http://127.0.0.1:" +
                                    std::to_string(closed) +
                                    "; }\n"
                                    "  location /gateway_timeout {\n"
                                    "    proxy_pass http://127.0.0.1:" +
                                    std::to_string(silent.local_endpoint().port()) +
                                    ";\n"
                                    "    proxy_read_timeout 200ms;\n"
                                    "  }\n"
                                    "}\n");
  client c(io.get_executor());
  for (const auto& [path, status] : {std::pair{"/bad_gateway", 502L}, {"/gateway_timeout", 504L}}) {
    CAPTURE(path);
    const std::string code = std::to_string(status);
    auto got = retry_on(io, c, get(nginx.url(path)), quick_policy(3));
    REQUIRE_FALSE(got.ec);
    CHECK(got.r.status == status); // attempts ran out: the last response is returned
    CHECK(got.stats.attempts == 3);
    CHECK(logged(nginx, std::string("GET ") + path + " " + code, 3) == 3);

    auto post = make("POST", nginx.url(path));
    post.body = "order=1";
    auto posted = retry_on(io, c, post, quick_policy(3));
    REQUIRE_FALSE(posted.ec);
    CHECK(posted.r.status == status);
    CHECK(posted.stats.attempts == 1);
    CHECK(logged(nginx, std::string("POST ") + path + " " + code, 1) == 1);
  }
}

TEST_CASE("nginx: a slow location: the per-attempt timeout cancels the transfer, the socket "
          "is released") {
  if (!nginx_installed())
    return;
  asio::io_context io;
  asio::ip::tcp::acceptor silent(io, {asio::ip::make_address("127.0.0.1"), 0});
  nginx_server nginx("slow", "server {\n"
                             "  listen 127.0.0.1:@PORT@;\n"
                             "  location /slow {\n"
                             "    proxy_pass http://127.0.0.1:" +
                                 std::to_string(silent.local_endpoint().port()) +
                                 ";\n"
                                 "    proxy_read_timeout 60s;\n"
                                 "  }\n"
                                 "}\n");
  client c(io.get_executor());
  const auto fds_before = coretry::test::open_fds();
  auto policy = quick_policy(2);
  policy.attempt_timeout = 200ms;
  auto out = retry_on(io, c, get(nginx.url("/slow")), policy);
  CHECK(out.ec == coretry::errc::attempt_timeout);
  CHECK(out.stats.attempts == 2);
  run_for(io, 20ms);
  const auto s = c.stats();
  CHECK(s.active_transfers == 0);
  CHECK(s.open_connections == 0); // each cancelled transfer's connection was closed
  CHECK(s.connects == 2);
  CHECK(coretry::test::open_fds() == fds_before);
  // nginx saw the client go away (499) once per attempt.
  CHECK(logged(nginx, "GET /slow 499", 2) == 2);
}

TEST_CASE("nginx https: an untrusted certificate fails verification at once, not retried") {
  if (!nginx_installed())
    return;
  nginx_server nginx("https_untrusted", tls_server(""));
  asio::io_context io;
  client c(io.get_executor());
  auto out = retry_on(io, c, get(nginx.url("/", true)), quick_policy(3));
  CHECK(out.ec == errc::peer_failed_verification);
  CHECK(coretry::curl::is_tls_error(out.ec));
  CHECK_FALSE(coretry::curl::is_retryable(out.ec));
  CHECK(out.stats.attempts == 1);
  MESSAGE("untrusted: ", out.ec.message());
  CHECK(out.ec.message().find("certificate was not verified") != std::string::npos);

  // perform() says more: libcurl's own account, through the exception's what().
  std::string what;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    try {
      co_await c.perform(get(nginx.url("/", true)));
    } catch (const std::system_error& e) {
      what = e.what();
    }
  });
  MESSAGE("perform: ", what);
  CHECK(what.find("SSL certificate problem") != std::string::npos);
  // So does retry's.
  what.clear();
  run_until_done(io, [&]() -> asio::awaitable<void> {
    try {
      co_await coretry::curl::retry(c, get(nginx.url("/", true)), quick_policy(3));
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::peer_failed_verification);
      what = e.what();
    }
  });
  CHECK(what.find("SSL certificate problem") != std::string::npos);
  CHECK(perform_on(io, c, get(nginx.url("/", true))).r.error_detail.find("SSL certificate") !=
        std::string::npos);
  CHECK(logged(nginx, "GET /", 0) == 0); // no request ever reached nginx
}

TEST_CASE("nginx https: the test CA as file, as hashed directory and as blob, per client or "
          "per request") {
  if (!nginx_installed())
    return;
  nginx_server nginx("https_trusted", tls_server(""));
  asio::io_context io;
  const auto& ca = certs();
  tls_options file, dir, blob;
  file.ca_file = ca.ca.string();
  dir.ca_path = ca.ca_dir.string();
  blob.ca_blob = ca.ca_pem;
  for (const auto& [name, tls] :
       {std::pair{"ca_file", file}, std::pair{"ca_path", dir}, std::pair{"ca_blob", blob}}) {
    CAPTURE(name);
    // Client-wide.
    client_options o;
    o.tls = tls;
    client c(io.get_executor(), o);
    auto out = perform_on(io, c, get(nginx.url("/", true)));
    CHECK_MESSAGE(!out.ec, out.ec.message(), ": ", out.r.error_detail);
    CHECK(out.r.status == 200);
    CHECK(out.r.body == "secure\n");
    // Per request, on a client that trusts only the system bundle.
    client plain(io.get_executor());
    auto req = get(nginx.url("/", true));
    req.tls = tls;
    out = perform_on(io, plain, req);
    CHECK_MESSAGE(!out.ec, out.ec.message(), ": ", out.r.error_detail);
    CHECK(out.r.status == 200);
    // A request's settings replace the client's as a whole.
    auto untrusting = get(nginx.url("/", true));
    untrusting.tls = tls_options{};
    CHECK(perform_on(io, c, untrusting).ec == errc::peer_failed_verification);
  }
  // The host name is checked too: the certificate is for 127.0.0.1 and localhost only.
  client c(io.get_executor(), {.tls = file});
  auto wrong_host = get("https://127.0.0.2:" + std::to_string(nginx.port()) + "/");
  wrong_host.connect_timeout = 2s;
  const auto out = perform_on(io, c, wrong_host);
  if (out.ec != errc::couldnt_connect) { // 127.0.0.2 may not be routed to nginx's 127.0.0.1
    CHECK(out.ec == errc::peer_failed_verification);
    MESSAGE("wrong host: ", out.r.error_detail);
  }
  // Insecure, by name only: verification off.
  tls_options insecure;
  insecure.insecure_skip_verify = true;
  client lax(io.get_executor(), {.tls = insecure});
  CHECK(perform_on(io, lax, get(nginx.url("/", true))).r.status == 200);
}

TEST_CASE("nginx https: a client certificate required by nginx is sent from cert and key files") {
  if (!nginx_installed())
    return;
  nginx_server nginx("https_client_cert", tls_server("  ssl_verify_client on;\n"
                                                     "  ssl_client_certificate @CERTS@/ca.pem;\n"));
  asio::io_context io;
  auto with_cert = trusting_file();
  with_cert.client_cert = certs().client_cert.string();
  with_cert.client_key = certs().client_key.string();
  client c(io.get_executor(), {.tls = with_cert});
  auto out = perform_on(io, c, get(nginx.url("/", true)));
  CHECK_MESSAGE(!out.ec, out.ec.message(), ": ", out.r.error_detail);
  CHECK(out.r.status == 200);
  // Without one nginx answers 400 ("No required SSL certificate was sent"), a final status.
  client without(io.get_executor(), {.tls = trusting_file()});
  auto refused = retry_on(io, without, get(nginx.url("/", true)), quick_policy(3));
  CHECK_FALSE(refused.ec);
  CHECK(refused.r.status == 400);
  CHECK(refused.stats.attempts == 1);
}

TEST_CASE("nginx https: a minimum TLS version above what nginx offers fails the handshake, "
          "not retried") {
  if (!nginx_installed())
    return;
  nginx_server nginx("https_tls12", tls_server("  ssl_protocols TLSv1.2;\n"));
  asio::io_context io;
  auto tls13 = trusting_file();
  tls13.min_version = tls_version::tls1_3;
  client c(io.get_executor(), {.tls = tls13});
  auto out = retry_on(io, c, get(nginx.url("/", true)), quick_policy(3));
  CHECK(out.ec == errc::ssl_connect_error);
  CHECK(coretry::curl::is_tls_error(out.ec));
  CHECK(out.stats.attempts == 1);
  MESSAGE("min TLS 1.3 against TLS 1.2: ", out.ec.message());
  // TLS 1.2 (the default minimum) is accepted.
  client ok(io.get_executor(), {.tls = trusting_file()});
  CHECK(perform_on(io, ok, get(nginx.url("/", true))).r.status == 200);
}

namespace {

struct burst_result {
  int ok = 0;
  int http2 = 0;
  int http1_1 = 0;
  std::size_t connects = 0;
  std::size_t peak_open = 0;
  std::size_t peak_active = 0;
  std::chrono::milliseconds wall{0};
};

// `n` concurrent GETs through one client on this thread.
burst_result burst(const std::string& url, client_options o, int n) {
  asio::io_context io;
  client c(io.get_executor(), o);
  burst_result b;
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i)
    c.async_perform(get(url), [&](std::error_code ec, response r) {
      ++done;
      if (!ec && r.status == 200)
        ++b.ok;
      b.http2 += r.version == http_version::http2;
      b.http1_1 += r.version == http_version::http1_1;
    });
  run_until(io, [&] { return done == n; });
  b.wall = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  const auto s = c.stats();
  b.connects = s.connects;
  b.peak_open = s.peak_open_connections;
  b.peak_active = s.peak_active_transfers;
  return b;
}

} // namespace

TEST_CASE("nginx http2: 1,000 concurrent GETs to one host share at most 2 connections") {
  if (!nginx_installed())
    return;
  nginx_server nginx("http2", tls_server("  http2_max_concurrent_streams 1000;\n", "ssl http2"));
  constexpr int n = 1000;
  client_options h2;
  h2.tls = trusting_file();
  h2.max_streams_per_connection = 1000;
  const auto two = burst(nginx.url("/", true), h2, n);
  client_options h1 = h2;
  h1.http_version = http_version_option::http1_1;
  const auto one = burst(nginx.url("/", true), h1, n);
  client_options h2_default_streams = h2;
  h2_default_streams.max_streams_per_connection = 0; // libcurl's 100
  const auto two_100 = burst(nginx.url("/", true), h2_default_streams, n);
  MESSAGE("1,000 concurrent GETs over TLS, one client, one thread: HTTP/2 ", two.connects,
          " connection(s), peak ", two.peak_active, " transfers in libcurl, ", two.wall.count(),
          " ms; HTTP/1.1 ", one.connects, " connections, ", one.wall.count(),
          " ms; HTTP/2 with 100 streams per connection ", two_100.connects, " connections, ",
          two_100.wall.count(), " ms");
  // libcurl 7.88 opens a connection for each transfer that finds the connections full, when
  // they arrive together: up to max_total_connections. Hence max_streams_per_connection = the
  // server's limit above, for the fewest connections.
  CHECK(two_100.ok == n);
  CHECK(two_100.peak_open <= 64);
  CHECK(two.ok == n);
  CHECK(two.http2 == n);
  CHECK(two.connects <= 2);
  CHECK(two.peak_open <= 2);
  CHECK(two.peak_active > 64); // the admission limit did not cap streams at the connections
  CHECK(one.ok == n);
  CHECK(one.http1_1 == n);
  CHECK(one.peak_open <= 64);
}

TEST_CASE("nginx http2: an https host without HTTP/2 is not slowed by waiting for multiplexing") {
  if (!nginx_installed())
    return;
  nginx_server nginx("https_http1", tls_server(""));
  constexpr int n = 1000;
  client_options o;
  o.tls = trusting_file();
  const auto offered = burst(nginx.url("/", true), o, n); // http2_tls: ALPN, nginx says 1.1
  o.http_version = http_version_option::http1_1;
  const auto plain = burst(nginx.url("/", true), o, n);
  MESSAGE("1,000 GETs to an HTTP/1.1-only https host: offering h2 ", offered.connects,
          " connections, ", offered.wall.count(), " ms; HTTP/1.1 only ", plain.connects,
          " connections, ", plain.wall.count(), " ms");
  CHECK(offered.ok == n);
  CHECK(offered.http1_1 == n);
  CHECK(offered.peak_open <= 64);
  CHECK(offered.peak_active <= 64); // admitted as HTTP/1.1: libcurl queues nothing
  CHECK(plain.ok == n);
}

TEST_CASE("nginx http2: streams per connection are limited apart from connections") {
  if (!nginx_installed())
    return;
  nginx_server nginx("http2_streams",
                     tls_server("  http2_max_concurrent_streams 1000;\n", "ssl http2"));
  client_options o;
  o.tls = trusting_file();
  o.max_streams_per_connection = 10;
  o.max_total_connections = 4;
  const auto b = burst(nginx.url("/", true), o, 200);
  MESSAGE("200 GETs, 10 streams per connection, 4 connections: ", b.connects, " connections, peak ",
          b.peak_active, " transfers in libcurl, ", b.wall.count(), " ms");
  CHECK(b.ok == 200);
  CHECK(b.http2 == 200);
  CHECK(b.peak_open <= 4);
  CHECK(b.peak_active <= 40);
  CHECK(b.peak_active > 4);
}

TEST_CASE("nginx http2: prior knowledge speaks HTTP/2 over plain http (h2c)") {
  if (!nginx_installed())
    return;
  nginx_server nginx("h2c", "server {\n"
                            "  listen 127.0.0.1:@PORT@ http2;\n"
                            "  location / { return 200 \"h2c\\n\"; }\n"
                            "}\n");
  asio::io_context io;
  client_options o{.http_version = http_version_option::http2_prior_knowledge};
  // Issue 18, finding 3: libcurl before 8.0 broke every request after the first on a prior
  // knowledge connection ("Error in the HTTP2 framing layer"); the client refuses the option
  // there.
  if (curl_version_info(CURLVERSION_NOW)->version_num < 0x080000) {
    CHECK_THROWS_WITH_AS(client(io.get_executor(), o),
                         doctest::Contains("http_version = http2_prior_knowledge"),
                         std::invalid_argument);
    return;
  }
  client h2c(io.get_executor(), o);
  for (int i = 0; i < 3; ++i) {
    auto out = perform_on(io, h2c, get(nginx.url("/")));
    CHECK_FALSE(out.ec);
    CHECK(out.r.version == http_version::http2);
    CHECK(std::string(coretry::curl::to_string(out.r.version)) == "HTTP/2");
  }
}

TEST_CASE("nginx http2: a server's stream limit below the client's is kept, nothing refused") {
  if (!nginx_installed())
    return;
  // nginx resets a stream beyond http2_max_concurrent_streams with REFUSED_STREAM ("concurrent
  // streams exceeded" in its log). libcurl reads nginx's SETTINGS before it opens streams (the
  // transfers wait for the connection: PIPEWAIT), so none is refused; one that were would be
  // resent by libcurl, then retried as errc::http2_stream (classify_test).
  nginx_server nginx("http2_refused",
                     tls_server("  http2_max_concurrent_streams 4;\n", "ssl http2"));
  asio::io_context io;
  client c(io.get_executor(), {.max_total_connections = 2, .tls = trusting_file()});
  constexpr int n = 100;
  int ok = 0, done = 0;
  unsigned retried = 0;
  for (int i = 0; i < n; ++i) {
    auto policy = quick_policy(5);
    policy.on_retry = [&](const coretry::retry_event& e) {
      ++retried;
      MESSAGE("retry: ", e.error.message());
    };
    coretry::curl::async_retry(c, get(nginx.url("/", true)), policy,
                               [&](std::error_code ec, response r) {
                                 ++done;
                                 ok += !ec && r.status == 200;
                               });
  }
  run_until(io, [&] { return done == n; });
  MESSAGE("100 GETs, nginx allowing 4 streams: ", c.stats().connects, " connections, ", retried,
          " retries");
  CHECK(ok == n);
  CHECK(c.stats().peak_open_connections <= 2);
  CHECK(nginx.error_log().find("concurrent streams exceeded") == std::string::npos);
}

TEST_CASE("nginx http2: a connection closed with GOAWAY: the requests beyond it still succeed") {
  if (!nginx_installed())
    return;
  // nginx sends GOAWAY once a connection has carried keepalive_requests streams.
  nginx_server nginx("http2_goaway", tls_server("  keepalive_requests 20;\n", "ssl http2"));
  asio::io_context io;
  client c(io.get_executor(), {.tls = trusting_file()});
  constexpr int n = 200;
  int ok = 0, done = 0;
  unsigned attempts = 0, retried = 0;
  std::vector<coretry::retry_stats> stats(n);
  for (int i = 0; i < n; ++i) {
    auto policy = quick_policy(5);
    policy.on_retry = [&](const coretry::retry_event& e) {
      ++retried;
      MESSAGE("GOAWAY retry: ", e.error.message());
    };
    coretry::curl::async_retry(c, get(nginx.url("/", true)), policy, stats[i],
                               [&](std::error_code ec, response r) {
                                 ++done;
                                 ok += !ec && r.status == 200;
                               });
  }
  run_until(io, [&] { return done == n; });
  for (const auto& s : stats)
    attempts += s.attempts;
  MESSAGE("200 GETs, GOAWAY every 20 streams: ", c.stats().connects, " connections, ", attempts,
          " attempts, ", retried, " retries");
  CHECK(ok == n);
  CHECK(c.stats().connects >= n / 20);
}

namespace {
std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Issue 18, finding 2: what a child process in its own mount namespace checks, with the test
// CA bind-mounted over /etc/ssl/certs as the system's bundle and directory.
void pinning_checks(const std::filesystem::path& other_dir) {
  nginx_server nginx("https_pinning", tls_server(""));
  asio::io_context io;
  auto with = [&](tls_options t) {
    client c(io.get_executor(), {.tls = std::move(t)});
    return perform_on(io, c, get(nginx.url("/", true)));
  };
  // The system store is the one this test controls: it trusts nginx's issuer.
  const auto system = with({});
  REQUIRE_MESSAGE(!system.ec, "system store not in use: ", system.r.error_detail);
  CHECK(system.r.status == 200);
  // Pinned to another CA, in each form: nothing of the system store is trusted any more.
  tls_options blob, file, dir;
  blob.ca_blob = read_text(other_dir / "other.pem");
  file.ca_file = (other_dir / "other.pem").string();
  dir.ca_path = (other_dir / "capath").string();
  for (const auto& [name, t] :
       {std::pair{"ca_blob", blob}, std::pair{"ca_file", file}, std::pair{"ca_path", dir}}) {
    CAPTURE(name);
    const auto pinned = with(t);
    CHECK(pinned.ec == errc::peer_failed_verification);
  }
  // Pinned to the right CA: accepted.
  CHECK(with(trusting_file()).r.status == 200);
}
} // namespace

TEST_CASE("nginx https: a pinned CA replaces the system's bundle and directory") {
  if (!nginx_installed())
    return;
  namespace fs = std::filesystem;
  const auto& ca = certs();
  const fs::path work = ca.dir / "pinning";
  fs::remove_all(work);
  fs::create_directories(work / "system");
  fs::create_directories(work / "capath");
  // The "system" store: the test CA as bundle and as hashed directory.
  fs::copy(ca.ca_dir, work / "system", fs::copy_options::copy_symlinks);
  fs::copy_file(ca.ca, work / "system" / "ca-certificates.crt");
  // Another CA, which did not sign nginx's certificate.
  const std::string make_other =
      "cd '" + work.string() +
      "' && openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
      " -keyout other.key -out other.pem -days 2 -subj '/CN=coretry other CA'"
      " -addext basicConstraints=critical,CA:TRUE >/dev/null 2>&1 && cp other.pem capath/ &&"
      " openssl rehash capath >/dev/null 2>&1";
  REQUIRE(std::system(make_other.c_str()) == 0);
  // This thread alone enters a mount namespace of its own, where the test's store is mounted
  // over /etc/ssl/certs (libcurl's built-in CAINFO and CAPATH on Debian); the TLS handshakes run
  // on this thread. Needs root (CAP_SYS_ADMIN): skipped otherwise.
  if (::unshare(CLONE_NEWNS) != 0 ||
      ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount((work / "system").c_str(), "/etc/ssl/certs", nullptr, MS_BIND, nullptr) != 0) {
    MESSAGE("no private mount namespace here (needs root): pinning test skipped");
    return;
  }
  struct unmount {
    ~unmount() { ::umount2("/etc/ssl/certs", MNT_DETACH); }
  } restore;
  pinning_checks(work);
}

TEST_CASE("nginx http2: a retry after a stream reset opens a new connection; after a 503 it "
          "reuses the pooled one") {
  if (!nginx_installed())
    return;
  // `return 444` over HTTP/2 makes nginx reset the stream (RST_STREAM): libcurl fails the
  // transfer with errc::http2_stream and keeps the connection in its pool.
  nginx_server nginx("http2_reset", tls_server("  location /reset { return 444; }\n"
                                               "  location /busy { return 503; }\n",
                                               "ssl http2"));
  asio::io_context io;
  client c(io.get_executor(), {.tls = trusting_file()});
  std::vector<std::string> errors;
  auto policy = quick_policy(3);
  policy.on_retry = [&](const coretry::retry_event& e) { errors.push_back(e.error.message()); };
  auto reset = retry_on(io, c, get(nginx.url("/reset", true)), policy);
  CHECK(reset.stats.attempts == 3);
  REQUIRE(!errors.empty());
  MESSAGE("after a stream reset: ", errors.front(), "; ", c.stats().connects,
          " connections for 3 attempts");
  CHECK(reset.ec == coretry::curl::errc::http2_stream);
  CHECK(c.stats().connects == 3); // each retry on a new connection

  client pooled(io.get_executor(), {.tls = trusting_file()});
  auto busy = retry_on(io, pooled, get(nginx.url("/busy", true)), quick_policy(3));
  CHECK(busy.stats.attempts == 3);
  CHECK(busy.r.status == 503);
  MESSAGE("after 503s: ", pooled.stats().connects, " connection(s) for 3 attempts");
  CHECK(pooled.stats().connects == 1);
}

namespace {

struct admitted {
  int ok = 0;
  int timed_out = 0;
  int other = 0;
  std::size_t peak_active = 0;
  std::size_t peak_open = 0;
  std::chrono::milliseconds wall{0};
};

// `n` copies of `req` at once through `c`, to their ends.
admitted concurrently(asio::io_context& io, client& c, const request& req, int n) {
  admitted a;
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i)
    c.async_perform(req, [&](std::error_code ec, response r) {
      ++done;
      if (!ec && r.status == 200)
        ++a.ok;
      else if (ec == coretry::curl::errc::operation_timedout)
        ++a.timed_out;
      else
        ++a.other;
    });
  run_until(io, [&] { return done == n; });
  a.wall = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  a.peak_active = c.stats().peak_active_transfers;
  a.peak_open = c.stats().peak_open_connections;
  return a;
}

} // namespace

TEST_CASE("nginx http2: POSTs to a known HTTP/2 origin are admitted as whole connections, none "
          "times out queued inside libcurl") {
  if (!nginx_installed())
    return;
  // Issue 18, finding 4: a POST that may not be retried goes out on a fresh connection
  // (CURLOPT_FRESH_CONNECT), also to an origin known to speak HTTP/2; admitted as one stream,
  // 40 of them waited inside libcurl for 4 connections and their request::timeout expired.
  asio::io_context io;
  coretry::test::http_fault_server slow(io.get_executor());
  slow.set_default(coretry::test::http_action::delayed(400ms));
  nginx_server nginx(
      "http2_admission",
      tls_server("  location /slow { proxy_pass " + slow.url("") + "; }\n", "ssl http2"));
  client_options o;
  o.tls = trusting_file();
  o.max_total_connections = 4;
  o.max_streams_per_connection = 10;
  client c(io.get_executor(), o);
  // The origin is learned: HTTP/2.
  auto first = perform_on(io, c, get(nginx.url("/", true)));
  REQUIRE(first.r.version == http_version::http2);
  constexpr int n = 40;
  request req = post(nginx.url("/slow", true));
  req.body = "payload";
  req.timeout = 1500ms; // 10 rounds of 0.4 s would pass it: only the client's queue may wait
  auto plain = concurrently(io, c, req, n);
  MESSAGE("40 POSTs of 0.4 s, 4 connections: ", plain.ok, " ok, ", plain.timed_out,
          " timed out, peak ", plain.peak_active, " in libcurl, ", plain.wall.count(), " ms");
  CHECK(plain.ok == n);
  CHECK(plain.timed_out == 0);
  CHECK(plain.peak_active <= 5); // the first GET's stream and 4 fresh connections
  CHECK(plain.peak_open <= 4);
  // A fresh connection asked for (the retry after a broken connection) costs the same.
  client fresh(io.get_executor(), o);
  REQUIRE(perform_on(io, fresh, get(nginx.url("/", true))).r.version == http_version::http2);
  request get_fresh = get(nginx.url("/slow", true));
  get_fresh.fresh_connection = true;
  get_fresh.timeout = 1500ms;
  auto f = concurrently(io, fresh, get_fresh, n);
  MESSAGE("40 GETs on fresh connections of 0.4 s, 4 connections: ", f.ok, " ok, ", f.timed_out,
          " timed out, ", f.wall.count(), " ms");
  CHECK(f.ok == n);
  CHECK(f.timed_out == 0);
}

TEST_CASE("nginx http2: a version learned through a redirect is the last hop's origin's") {
  if (!nginx_installed())
    return;
  // Issue 18, finding 4: an HTTP/1.1 origin redirecting to an HTTP/2 one was remembered as
  // HTTP/2 itself; 40 requests to it were then admitted as streams and waited inside libcurl
  // for its 4 HTTP/1.1 connections until their timeout.
  asio::io_context io;
  nginx_server h2("redirect_target", tls_server("", "ssl http2"));
  // The first hop: https without HTTP/2 (ALPN says http/1.1), 0.4 s to answer with a 302.
  coretry::test::http_fault_server slow(io.get_executor());
  slow.set_default(
      {.status = 302, .headers = {{"Location", h2.url("/", true)}}, .body = "", .delay = 400ms});
  nginx_server h1("redirect_source",
                  tls_server("  location /go { proxy_pass " + slow.url("") + "; }\n"));
  client_options o;
  o.tls = trusting_file();
  o.max_total_connections = 4;
  o.max_streams_per_connection = 10;
  client c(io.get_executor(), o);
  request req = get(h1.url("/go", true));
  req.follow_redirects = true;
  auto first = perform_on(io, c, req);
  REQUIRE(first.r.status == 200);
  REQUIRE(first.r.version == http_version::http2);
  constexpr int n = 40;
  req.timeout = 1500ms;
  auto a = concurrently(io, c, req, n);
  MESSAGE("40 GETs to an HTTP/1.1 origin of 0.4 s redirecting to HTTP/2, 4 connections: ", a.ok,
          " ok, ", a.timed_out, " timed out, peak ", a.peak_active, " in libcurl, ", a.wall.count(),
          " ms");
  CHECK(a.ok == n);
  CHECK(a.timed_out == 0);
  // Each hop is a transfer of its own (the client follows every redirect itself, issue 32):
  // an HTTP/1.1 hop takes a connection's share, an HTTP/2 hop a stream's, so more transfers
  // than connections may be in libcurl at once, never more connections than allowed.
  CHECK(a.peak_open <= 4);
}

TEST_CASE("nginx https: an HTTPS proxy's handshake uses the client's tls settings") {
  // Issue 32, finding 5: no CURLOPT_PROXY_CA* option was set, so an HTTPS proxy was verified
  // against the system bundle alone, and a client certificate never reached it. nginx stands
  // in for the proxy: a plain http:// URL goes to an HTTPS proxy as an absolute-form request
  // over TLS, which nginx answers itself.
  if (!nginx_installed())
    return;
  nginx_server nginx("https_proxy", tls_server("  ssl_verify_client on;\n"
                                               "  ssl_client_certificate @CERTS@/ca.pem;\n"));
  asio::io_context io;
  auto with_cert = trusting_file();
  with_cert.client_cert = certs().client_cert.string();
  with_cert.client_key = certs().client_key.string();
  client_options o;
  o.tls = with_cert;
  o.proxy = nginx.url("", true);
  client c(io.get_executor(), o);
  auto out = perform_on(io, c, get("http://origin.invalid/"));
  CHECK_MESSAGE(!out.ec, out.ec.message(), ": ", out.r.error_detail);
  CHECK(out.r.status == 200);
  CHECK(out.r.body == "secure\n");
  // Without the client's CA the proxy is not trusted.
  client_options untrusted;
  untrusted.proxy = nginx.url("", true);
  client u(io.get_executor(), untrusted);
  CHECK(perform_on(io, u, get("http://origin.invalid/")).ec == errc::peer_failed_verification);
}
