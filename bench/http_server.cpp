// SPDX-License-Identifier: BSL-1.0
// coretry_bench_server: the HTTP/1.1 server of the HTTP benchmarks, on 127.0.0.1, one thread,
// keep-alive. A request for /r/<id> fails with 503 the first time it is seen when the rule says
// so, and gets "200 ok" otherwise:
//   --fail=half    ids with an even number fail their first attempt (a fixed half)
//   --fail=first   every id fails its first attempt
//   --ids=N        ids run from 0 to N-1 (others get 404)
// Prints "port <n>" once listening; exits when its standard input closes.
#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/read_until.hpp>
#include <asio/streambuf.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "harness.hpp"

using asio::ip::tcp;
namespace cb = coretry::bench;

namespace {

constexpr auto no_throw = asio::experimental::as_tuple(asio::use_awaitable);
constexpr std::string_view ok_reply = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
constexpr std::string_view busy_reply =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
constexpr std::string_view missing_reply = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";

struct rules {
  bool fail_all_first = false;
  std::vector<unsigned char> seen;
};

std::string_view reply_for(rules& r, std::string_view head) {
  // "GET /r/<id> HTTP/1.1"
  const auto slash = head.find("/r/");
  if (slash == std::string_view::npos)
    return missing_reply;
  unsigned long id = 0;
  std::size_t i = slash + 3;
  for (; i < head.size() && head[i] >= '0' && head[i] <= '9'; ++i)
    id = id * 10 + static_cast<unsigned long>(head[i] - '0');
  if (i == slash + 3 || id >= r.seen.size())
    return missing_reply;
  const bool first = r.seen[id] == 0;
  r.seen[id] = 1;
  if (first && (r.fail_all_first || id % 2 == 0))
    return busy_reply;
  return ok_reply;
}

asio::awaitable<void> serve(tcp::socket s, rules& r) {
  asio::streambuf in;
  for (;;) { // ends when the client closes its connection
    auto [ec, n] = co_await asio::async_read_until(s, in, "\r\n\r\n", no_throw);
    if (ec)
      co_return;
    const std::string_view head(static_cast<const char*>(in.data().data()), n);
    const std::string_view reply = reply_for(r, head);
    in.consume(n);
    auto [wec, w] = co_await asio::async_write(s, asio::buffer(reply), no_throw);
    if (wec)
      co_return;
  }
}

asio::awaitable<void> accept(tcp::acceptor& a, rules& r) {
  for (;;) {
    auto [ec, s] = co_await a.async_accept(no_throw);
    if (ec == asio::error::operation_aborted)
      co_return;
    if (!ec) {
      s.set_option(tcp::no_delay(true));
      asio::co_spawn(a.get_executor(), serve(std::move(s), r), asio::detached);
    }
  }
}

} // namespace

int main(int argc, char** argv) try {
  rules r;
  const std::string fail = cb::option(argc, argv, "fail", "half");
  if (fail != "half" && fail != "first")
    throw std::invalid_argument("--fail must be half or first, not '" + fail + "'");
  r.fail_all_first = fail == "first";
  r.seen.assign(static_cast<std::size_t>(cb::count_option(argc, argv, "ids", 10'000)), 0);

  asio::io_context io(1);
  tcp::acceptor acceptor(io);
  const tcp::endpoint ep(asio::ip::address_v4::loopback(), 0);
  acceptor.open(ep.protocol());
  acceptor.set_option(tcp::acceptor::reuse_address(true));
  acceptor.bind(ep);
  acceptor.listen(4096);
  asio::co_spawn(io, accept(acceptor, r), asio::detached);

  // Stop when the parent closes our stdin (or dies).
  asio::posix::stream_descriptor parent(io, ::dup(0));
  char byte = 0;
  parent.async_read_some(asio::buffer(&byte, 1), [&](std::error_code, std::size_t) { io.stop(); });

  std::printf("port %u\n", static_cast<unsigned>(acceptor.local_endpoint().port()));
  std::fflush(stdout);
  io.run();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "coretry_bench_server: %s\n", e.what());
  return 2;
}
