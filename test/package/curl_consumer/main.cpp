// SPDX-License-Identifier: BSL-1.0
// Uses coretry::curl as an installed package: a retried GET to a closed loopback port (each
// attempt refused), then the core loop, all through coretry's public headers. Built by CMake
// (find_package COMPONENTS curl) and by a plain compiler command line from pkg-config, the
// latter under AddressSanitizer: Asio's handler memory crosses between this program's units
// and coretry's library, so both must allocate and free it the same way.
#include <coretry/coretry.hpp>
#include <coretry/curl/curl.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <chrono>
#include <cstdio>
#include <string>

int main() {
  using namespace std::chrono_literals;
  asio::io_context io;
  // A port nothing listens on: bind one, note it, close it.
  unsigned short port = 0;
  {
    asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  coretry::curl::client client(io.get_executor());
  coretry::curl::request req;
  req.url = "http://127.0.0.1:" + std::to_string(port) + "/";
  req.timeout = 2s;
  coretry::retry_stats stats;
  std::string outcome = "none";
  // Named: g++ 12 refuses a braced policy in the awaitable front ends (docs/core.md, "g++ 12").
  const coretry::retry_policy policy{.max_attempts = 3, .backoff = coretry::backoff::fixed(1ms)};
  asio::co_spawn(io, coretry::curl::retry(client, std::move(req), policy, stats),
                 [&](std::exception_ptr e, coretry::curl::response r) {
                   if (!e) {
                     outcome = "status " + std::to_string(r.status);
                     return;
                   }
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::system_error& err) {
                     outcome = err.code() == coretry::curl::errc::couldnt_connect ? "refused"
                                                                                  : err.what();
                   }
                 });
  io.run();
  std::printf("curl consumer: %s after %u attempts\n", outcome.c_str(), stats.attempts);
  return outcome == "refused" && stats.attempts == 3 ? 0 : 1;
}
