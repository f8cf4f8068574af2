// SPDX-License-Identifier: BSL-1.0
#pragma once
// Helpers shared by the curl adapter's tests.

#include <coretry/curl/client.hpp>
#include <coretry/curl/request.hpp>

#include <support/asio.hpp>
#include <support/http_fault_server.hpp>

#include <chrono>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include <sys/resource.h>
#include <unistd.h>

namespace coretry::test {

/// A GET request. Tests build requests through functions: g++ 12 miscompiles braced aggregate
/// temporaries with default member initializers inside co_await expressions.
inline curl::request get(std::string url) {
  curl::request r;
  r.url = std::move(url);
  return r;
}

/// A POST with a small form body: not idempotent unless the test adds an Idempotency-Key.
inline curl::request post(std::string url) {
  curl::request r;
  r.method = "POST";
  r.url = std::move(url);
  r.body = "order=1";
  return r;
}

/// Runs `io` until `done()` holds (the fault server keeps `io` busy forever; without one, `io`
/// is restarted whenever it ran out of work); fails after 20 s.
template <class Predicate> void run_until(asio::io_context& io, Predicate done) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > limit)
      throw std::runtime_error("test timed out");
    if (io.stopped()) // it ran out of work earlier (no fault server): let new work run
      io.restart();
    io.run_one_for(std::chrono::milliseconds(100));
  }
}

/// Runs the coroutine `aw` on `io` to its end; rethrows what it threw.
template <class Awaitable> void run_until_done(asio::io_context& io, Awaitable aw) {
  std::exception_ptr error;
  bool done = false;
  asio::co_spawn(io, std::move(aw), [&](std::exception_ptr e) {
    error = e;
    done = true;
  });
  run_until(io, [&] { return done; });
  if (error)
    std::rethrow_exception(error);
}

/// Lets `io` run for `d` (to let closes and completions land).
inline void run_for(asio::io_context& io, std::chrono::milliseconds d) {
  io.run_for(d);
  io.restart();
}

/// A loopback port nobody listens on (bound, then closed).
inline unsigned short unused_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

inline asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

/// Descriptors open in this process now (entries of /proc/self/fd, less the one used to list
/// them): a test compares it before and after, to show nothing leaked.
inline std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n - 1;
}

/// The machine's own name when it resolves to 127.0.0.1 (libcurl then goes through its
/// threaded resolver and the socketpair it opens itself), else "localhost" (resolved inside
/// libcurl).
inline std::string loopback_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0)
    return "localhost";
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  coretry::test::error_code ec;
  for (const auto& e : resolver.resolve(asio::ip::tcp::v4(), name, "80", ec))
    if (e.endpoint().address() == asio::ip::make_address("127.0.0.1"))
      return name;
  return "localhost";
}

/// Raises the soft descriptor limit to the hard one.
inline void raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

/// How one `client::async_perform` ended: its error and its response.
struct perform_outcome {
  std::error_code ec;
  curl::response r;
};

/// Runs one `async_perform` of `req` on `c` to its end (the context run until then).
inline perform_outcome perform(asio::io_context& io, curl::client& c, curl::request req) {
  perform_outcome out;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] =
        co_await c.async_perform(std::move(req), coretry::detail::as_tuple(asio::use_awaitable));
    out.ec = ec;
    out.r = std::move(r);
  }());
  return out;
}

} // namespace coretry::test

// The names every curl test file uses (test files only include this header).
using namespace std::chrono_literals;
using coretry::curl::client;
using coretry::curl::client_options;
using coretry::curl::errc;
using coretry::curl::request;
using coretry::curl::response;
using coretry::test::get;
using coretry::test::http_action;
using coretry::test::http_fault_server;
using coretry::test::perform;
using coretry::test::post;
using coretry::test::run_for;
using coretry::test::run_until;
using coretry::test::run_until_done;
