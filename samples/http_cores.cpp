// SPDX-License-Identifier: BSL-1.0
// http_cores: HTTP with retries on every core. One io_context, one coretry::curl::client and one
// thread per core; the requests are shared out between them. A client runs every libcurl call
// under its own lock, so one client on a context run by many threads would serialize: a client
// per thread is the way to use every core.
//
//   http_cores [--requests N]   (default 400)
//
// Talks to a loopback HTTP/1.1 server it runs itself, which answers the first attempt of each
// request with 503 (retried) and the second with 200. Exits with 0 when every request ended with 200.
#include <coretry/coretry.hpp>
#include <coretry/curl/curl.hpp>

#include "support/cli.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using asio::ip::tcp;

namespace {

constexpr auto no_throw = asio::experimental::as_tuple(asio::use_awaitable);

/// Answers a path's first request with 503 and every later one with 200.
asio::awaitable<void> serve(tcp::socket s, std::set<std::string>& failed_once, long& seen) {
  std::string buf;
  for (;;) {
    auto [ec, n] =
        co_await asio::async_read_until(s, asio::dynamic_buffer(buf), "\r\n\r\n", no_throw);
    if (ec)
      co_return;
    const std::string path = buf.substr(0, buf.find(' ', 4)); // "GET /<id>"
    buf.erase(0, n);
    ++seen;
    const std::string_view reply =
        failed_once.insert(path).second
            ? "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
            : "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    auto [wec, wn] = co_await asio::async_write(s, asio::buffer(reply), no_throw);
    if (wec)
      co_return;
  }
}

asio::awaitable<void> listen(tcp::acceptor& acceptor, std::set<std::string>& failed_once,
                             long& seen) {
  for (;;) {
    auto [ec, s] = co_await acceptor.async_accept(no_throw);
    if (ec)
      co_return;
    asio::co_spawn(acceptor.get_executor(), serve(std::move(s), failed_once, seen), asio::detached);
  }
}

void usage(std::FILE* out) {
  std::fputs("usage: http_cores [--requests N]\n"
             "  --requests  requests over all cores (default 400)\n",
             out);
}

} // namespace

int main(int argc, char** argv) {
  long requests = 400;
  namespace cli = sample_support::cli;
  cli::parse("http_cores", argc, argv, 1, {{"requests", true}}, usage,
             [&](std::string_view a, const std::string& v) {
               if (a == "requests")
                 requests = static_cast<long>(cli::whole(a, v, 1, 1'000'000));
             });

  // The server, on a thread of its own.
  asio::io_context server_io(1);
  tcp::acceptor acceptor(server_io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  std::set<std::string> failed_once; // touched by the server's thread only
  long seen = 0;
  asio::co_spawn(server_io, listen(acceptor, failed_once, seen), asio::detached);
  std::thread server([&] { server_io.run(); });
  const std::string url =
      "http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()) + "/";

  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const coretry::retry_policy policy{.max_attempts = 5, .backoff = coretry::backoff::fixed(1ms)};
  std::atomic<long> next{0};
  std::vector<long> ok(cores, 0);
  auto run_core = [&](unsigned core) {
    asio::io_context io(1); // this core's context, client and thread
    coretry::curl::client client(io.get_executor(), {.max_total_connections = 8});
    for (int w = 0; w < 8; ++w)
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            for (long id; (id = next++) < requests;) {
              // Named, not braced inside co_await: see docs/curl.md on g++ 12.
              coretry::curl::request req{.url = url + std::to_string(id)};
              auto r = co_await coretry::curl::retry(client, std::move(req), policy);
              ok[core] += r.status == 200;
            }
          },
          asio::detached);
    io.run();
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (unsigned core = 1; core < cores; ++core)
    threads.emplace_back(run_core, core);
  run_core(0);
  for (auto& t : threads)
    t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  asio::post(server_io, [&] {
    acceptor.close();
    server_io.stop();
  });
  server.join();

  long total = 0;
  for (unsigned core = 0; core < cores; ++core) {
    std::printf("core %u: %ld requests answered 200\n", core, ok[core]);
    total += ok[core];
  }
  std::printf("%ld of %ld requests ok on %u cores in %.3f s (%ld server answers, the first to "
              "each request 503)\n",
              total, requests, cores, s, seen);
  return total == requests ? 0 : 1;
}
