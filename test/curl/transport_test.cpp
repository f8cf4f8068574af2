// SPDX-License-Identifier: BSL-1.0
// Proxies, decoded body limits and connection set-up bounds (issue 32, findings 3, 5, 10, 11).

#include <coretry/curl/client.hpp>
#include <coretry/curl/retry.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "test_util.hpp"

namespace {

constexpr auto nothrow = coretry::detail::as_tuple(asio::use_awaitable);

/// Sets environment variables for its lifetime (libcurl reads them at each transfer).
struct env_guard {
  explicit env_guard(std::initializer_list<std::pair<const char*, std::string>> vars) {
    for (const auto& [name, value] : vars) {
      names.emplace_back(name);
      ::setenv(name, value.c_str(), 1);
    }
  }
  ~env_guard() {
    for (const auto& n : names)
      ::unsetenv(n.c_str());
  }
  env_guard(const env_guard&) = delete;
  env_guard& operator=(const env_guard&) = delete;
  std::vector<std::string> names;
};

/// `data` as a zlib stream ("Content-Encoding: deflate") of stored, uncompressed blocks: five
/// bytes of framing per 64 KiB block, two of header and four of checksum, so the encoded body is
/// always a little longer than the decoded one.
std::string deflate_stored(const std::string& data) {
  std::string out = "\x78\x01";
  std::size_t off = 0;
  do {
    const std::size_t n = std::min<std::size_t>(data.size() - off, 0xffff);
    const bool last = off + n == data.size();
    out += static_cast<char>(last ? 1 : 0);
    out += static_cast<char>(n & 0xff);
    out += static_cast<char>(n >> 8);
    out += static_cast<char>(~n & 0xff);
    out += static_cast<char>((~n >> 8) & 0xff);
    out.append(data, off, n);
    off += n;
  } while (off < data.size());
  std::uint32_t a = 1, b = 0;
  for (unsigned char c : data) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  const std::uint32_t adler = (b << 16) | a;
  for (int shift : {24, 16, 8, 0})
    out += static_cast<char>((adler >> shift) & 0xff);
  return out;
}

std::string random_bytes(std::size_t n) {
  std::mt19937 rng(42);
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng() & 0xff);
  return s;
}

} // namespace

TEST_CASE("no_proxy in the environment does not send traffic around an explicit proxy") {
  // Issue 32, finding 3: CURLOPT_NOPROXY was set only when client_options::no_proxy was not
  // empty, so libcurl read no_proxy / NO_PROXY from the environment and went direct.
  asio::io_context io;
  http_fault_server target(io.get_executor()), proxy(io.get_executor());
  proxy.set_default(http_action::ok("via proxy"));
  target.set_default(http_action::ok("direct"));
  env_guard env{{"no_proxy", "127.0.0.1,localhost"}, {"NO_PROXY", "127.0.0.1,localhost"}};
  client_options o;
  o.proxy = proxy.url("");
  client via(io.get_executor(), o);
  CHECK(perform(io, via, get(target.url("/x"))).r.body == "via proxy");
  CHECK(target.requests() == 0);
  // The client's own no_proxy still decides.
  o.no_proxy = "127.0.0.1";
  client bypass(io.get_executor(), o);
  CHECK(perform(io, bypass, get(target.url("/y"))).r.body == "direct");
  // With proxy_from_environment and no proxy of its own, the environment decides both.
  env_guard proxy_env{{"http_proxy", proxy.url("")}};
  client_options from_env;
  from_env.proxy_from_environment = true;
  client env_client(io.get_executor(), from_env);
  CHECK(perform(io, env_client, get(target.url("/z"))).r.body == "direct");
}

TEST_CASE("a proxy's refusal of the tunnel is not retried") {
  // Issue 32, finding 5: libcurl fails a CONNECT answered 403 or 407 with CURLE_RECV_ERROR,
  // which was retried as a reset: 4 CONNECTs for one request.
  for (int status : {403, 407}) {
    CAPTURE(status);
    asio::io_context io;
    http_fault_server proxy(io.get_executor());
    proxy.set_default({.status = status, .body = "", .keep_alive = false});
    client_options o;
    o.proxy = proxy.url("");
    client c(io.get_executor(), o);
    coretry::retry_policy policy{.max_attempts = 4, .backoff = coretry::backoff::fixed(1ms)};
    std::error_code ec;
    run_until_done(io, [&]() -> asio::awaitable<void> {
      auto [e, r] =
          co_await coretry::curl::async_retry(c, get("https://origin.invalid/x"), policy, nothrow);
      ec = e;
    }());
    CHECK(ec == errc::proxy_refused);
    CHECK_FALSE(coretry::curl::is_retryable(ec));
    CHECK(proxy.requests() == 1);
    REQUIRE(proxy.log().size() == 1);
    CHECK(proxy.log()[0].method == "CONNECT");
    // The detail still names the proxy's answer.
    request req = get("https://origin.invalid/y");
    const auto once = perform(io, c, req);
    CHECK(once.ec == errc::proxy_refused);
    CHECK(once.r.error_detail.find(std::to_string(status)) != std::string::npos);
  }
}

TEST_CASE("with decompress, max_response_body counts decoded bytes, not the encoded length") {
  // Issue 32, finding 10: CURLOPT_MAXFILESIZE compared the limit with the Content-Length of the
  // encoded body: 990 incompressible bytes, 1,001 encoded, were refused under a 1,000-byte
  // limit.
  asio::io_context io;
  http_fault_server server(io.get_executor());
  const std::string fits = random_bytes(990);
  const std::string encoded = deflate_stored(fits);
  REQUIRE(encoded.size() > 1000);
  server.push({.headers = {{"Content-Encoding", "deflate"}}, .body = encoded});
  const std::string too_big = random_bytes(1010);
  server.push({.headers = {{"Content-Encoding", "deflate"}}, .body = deflate_stored(too_big)});
  server.push({.body = too_big}); // not encoded: refused as announced
  client_options o;
  o.decompress = true;
  o.max_response_body = 1000;
  client c(io.get_executor(), o);
  const auto got = perform(io, c, get(server.url("/fits")));
  REQUIRE_FALSE(got.ec);
  CHECK(got.r.body == fits);
  CHECK(perform(io, c, get(server.url("/big"))).ec == errc::filesize_exceeded);
  CHECK(perform(io, c, get(server.url("/plain"))).ec == errc::filesize_exceeded);
}

TEST_CASE("stall_timeout bounds a TLS handshake that never completes") {
  // Issue 32, finding 11: libcurl's stall check starts once the request is sent, so a server
  // that accepts the connection and never answers the handshake held the request until
  // libcurl's 300 s connect timeout. run_until fails the test after 20 s.
  asio::io_context io;
  asio::ip::tcp::acceptor silent(io, {asio::ip::make_address("127.0.0.1"), 0});
  silent.listen(); // the kernel completes TCP; nobody ever reads the ClientHello
  client_options o;
  o.stall_timeout = 1s;
  client c(io.get_executor(), o);
  auto req = get("https://127.0.0.1:" + std::to_string(silent.local_endpoint().port()) + "/");
  CHECK(perform(io, c, req).ec == errc::operation_timedout);
  // A request's own connect_timeout wins over the stall bound.
  client_options off;
  off.stall_timeout = 0s;
  client unbounded(io.get_executor(), off);
  req.connect_timeout = 300ms;
  CHECK(perform(io, unbounded, req).ec == errc::operation_timedout);
}
