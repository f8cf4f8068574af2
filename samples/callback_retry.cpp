// SPDX-License-Identifier: BSL-1.0
// Retries a callback-style Asio operation, with no coroutine anywhere: async_retry takes an
// initiating function (the attempt) and reports to a plain completion handler.
//
// A loopback server is not listening yet: the first connects are refused. After the second
// failure the server starts listening; the third connect succeeds and reads the greeting.
#include <coretry/coretry.hpp>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/write.hpp>

#include <chrono>
#include <cstdio>
#include <string>

using namespace std::chrono_literals;
using asio::ip::tcp;

int main() {
  asio::io_context io;

  // A free loopback port, with nobody listening on it for now.
  tcp::endpoint server_at;
  {
    tcp::acceptor probe(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    server_at = probe.local_endpoint();
  }
  tcp::acceptor acceptor(io);
  tcp::socket served(io);
  const std::string greeting = "hello from the server\n";
  auto start_server = [&] {
    acceptor.open(tcp::v4());
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    acceptor.bind(server_at);
    acceptor.listen();
    acceptor.async_accept(served, [&](std::error_code ec) {
      if (!ec)
        asio::async_write(served, asio::buffer(greeting), [](std::error_code, std::size_t) {});
    });
  };

  coretry::retry_policy policy{
      .max_attempts = 5,
      .deadline = 5s,
      .backoff = coretry::backoff::exponential(10ms, 2.0, 200ms),
      .on_retry =
          [&](const coretry::retry_event& e) {
            std::printf("connect %u failed (%s); retrying in %.0f ms\n", e.attempt,
                        e.error.message().c_str(), e.delay.count() / 1e6);
            if (e.attempt == 2)
              start_server();
          },
  };

  tcp::socket client(io);
  std::string line;
  int status = 1;
  // The attempt: an initiating function taking the completion token coretry passes. Per-attempt
  // timeouts and cancellation reach the connect through the token's cancellation slot.
  auto connect = [&](auto&& token) {
    client.close(); // a refused socket is not reused
    return client.async_connect(server_at, std::forward<decltype(token)>(token));
  };
  coretry::async_retry(io.get_executor(), connect, policy, [&](std::error_code ec) {
    if (ec) {
      std::printf("gave up: %s\n", ec.message().c_str());
      return;
    }
    asio::async_read_until(client, asio::dynamic_buffer(line), '\n',
                           [&](std::error_code ec, std::size_t) {
                             if (ec) {
                               std::printf("read failed: %s\n", ec.message().c_str());
                               return;
                             }
                             std::printf("connected; read: %s", line.c_str());
                             status = line == greeting ? 0 : 1;
                           });
  });
  io.run();
  return status;
}
