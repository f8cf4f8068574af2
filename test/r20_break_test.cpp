// SPDX-License-Identifier: BSL-1.0
// Reviewer r20's probes of 8996dc6 (a spawned attempt cut before its coroutine began). With
// Boost 1.81 (Asio 1.26, the TSan flavour) co_spawn's entry point first dispatches itself onto
// its executor; when that is a post and the spawn's slot is emitted before it resumes,
// `co_await f()` throws (caught), and the post it then takes, the coroutine not having switched
// context, throws operation_aborted out of `io_context::run()`.

#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/test_ops.hpp>

#include <chrono>
#include <exception>
#include <system_error>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;

namespace {

struct seen {
  int completions = 0;
  std::error_code error;
  int value = 0;
};

} // namespace

TEST_CASE("r20: async_retry with a fallback, its slot emitted before the spawned retry began, "
          "completes once as cancelled and nothing leaves run()") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{succeed(7)}};
  int called = 0;
  auto fb = coretry::fallback([&](const coretry::fallback_info&) {
    ++called;
    return 1;
  });
  coretry::retry_policy p;
  p.max_attempts = 3;
  p.backoff = coretry::backoff::fixed(1h);
  asio::cancellation_signal signal;
  seen s;
  // The caller's slot is emitted from a handler that runs on the context after the initiation,
  // but ahead of co_spawn's first dispatch (a post: initiated from outside the context). The
  // co_spawn's slot handler dispatches the emit onto the context: inline, from there.
  asio::post(io, [&] { signal.emit(asio::cancellation_type::terminal); });
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, fb,
      asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, int v) {
        ++s.completions;
        s.error = ec;
        s.value = v;
      }));
  bool threw = false;
  try {
    io.run();
  } catch (const std::exception&) { // boost::system::system_error, with Boost
    threw = true;
  }
  CHECK_FALSE(threw);
  CHECK(s.completions == 1);
  CHECK(coretry::detail::is_aborted(s.error));
  CHECK(called == 0);
  CHECK(op.calls == 0);
}

TEST_CASE("r20: async_retry with a fallback, its handler on a strand whose slot is emitted before "
          "the spawned retry began, completes once as cancelled on that strand") {
  manual_clock::reset();
  asio::io_context io;
  auto strand = asio::make_strand(io);
  scripted_op op{{succeed(7)}};
  int called = 0;
  auto fb = coretry::fallback([&](const coretry::fallback_info&) {
    ++called;
    return 1;
  });
  coretry::retry_policy p;
  p.max_attempts = 3;
  asio::cancellation_signal signal;
  seen s;
  bool on_strand = false;
  asio::post(strand, [&] { signal.emit(asio::cancellation_type::terminal); });
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, fb,
      asio::bind_cancellation_slot(signal.slot(),
                                   asio::bind_executor(strand, [&](std::error_code ec, int v) {
                                     ++s.completions;
                                     s.error = ec;
                                     s.value = v;
                                     on_strand = strand.running_in_this_thread();
                                   })));
  bool threw = false;
  try {
    io.run();
  } catch (const std::exception&) { // boost::system::system_error, with Boost
    threw = true;
  }
  CHECK_FALSE(threw);
  CHECK(s.completions == 1);
  CHECK(coretry::detail::is_aborted(s.error));
  CHECK(on_strand);
  CHECK(called == 0);
  CHECK(op.calls == 0);
}

TEST_CASE("r20: async_retry with a fallback, its slot emitted after the retry began, still cuts "
          "the attempt in flight") {
  manual_clock::reset();
  asio::io_context io;
  scripted_op op{{hang()}};
  int called = 0;
  auto fb = coretry::fallback([&](const coretry::fallback_info&) {
    ++called;
    return 1;
  });
  coretry::retry_policy p;
  p.max_attempts = 3;
  asio::cancellation_signal signal;
  seen s;
  coretry::async_retry<manual_timer>(
      io.get_executor(), [&] { return op(); }, p, fb,
      asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, int v) {
        ++s.completions;
        s.error = ec;
        s.value = v;
      }));
  io.poll();
  CHECK(op.calls == 1);
  signal.emit(asio::cancellation_type::terminal);
  io.restart();
  io.run();
  CHECK(s.completions == 1);
  CHECK(coretry::detail::is_aborted(s.error));
  CHECK(op.aborted == 1);
  CHECK(called == 0);
}
