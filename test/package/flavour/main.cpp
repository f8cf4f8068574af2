// SPDX-License-Identifier: BSL-1.0
// An application in its own Asio's spelling (boost::asio and boost::system::error_code with
// Boost.Asio), using an installed coretry built for that Asio.
#include <coretry/coretry.hpp>

#if CORETRY_ASIO_BOOST
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
namespace net = boost::asio;
using error_code = boost::system::error_code;
#else
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
namespace net = asio;
using error_code = std::error_code;
#endif

#include <chrono>
#include <cstdio>
#include <system_error>

int main() {
  using namespace std::chrono_literals;
  net::io_context io;
  coretry::retry_policy policy{.backoff = coretry::backoff::fixed(1ms)};

  // The awaitable front end, with an operation failing once in the application's error_code.
  int calls = 0;
  int value = 0;
  net::co_spawn(io,
                coretry::retry_async(
                    [&]() -> net::awaitable<int> {
                      if (++calls < 2)
                        throw std::system_error(make_error_code(std::errc::connection_refused));
                      co_return 5;
                    },
                    policy),
                [&](std::exception_ptr e, int v) { value = e ? -1 : v; });

  // The token front end: the handler takes the application's error_code, and a cancelled
  // operation reports the application's own operation_aborted.
  net::cancellation_signal cancel;
  error_code cancelled_with;
  coretry::retry_policy forever = policy;
  forever.max_attempts = 1000;
  coretry::async_retry(
      io.get_executor(),
      []() -> net::awaitable<int> {
        throw std::system_error(make_error_code(std::errc::connection_refused));
        co_return 0;
      },
      forever,
      net::bind_cancellation_slot(cancel.slot(), [&](error_code ec, int) { cancelled_with = ec; }));
  net::steady_timer t(io, 20ms);
  t.async_wait([&](error_code) { cancel.emit(net::cancellation_type::terminal); });

  io.run();
  const bool ok = value == 5 && calls == 2 && cancelled_with == net::error::operation_aborted;
  std::printf("flavour consumer: value %d after %d calls; cancelled with \"%s\"\n", value, calls,
              cancelled_with.message().c_str());
  return ok ? 0 : 1;
}
