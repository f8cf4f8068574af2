// SPDX-License-Identifier: BSL-1.0
#pragma once
// One operation run on the manual clock until it completes, and what its handler saw: the
// fixture the retry-loop, gate, observer and hedge tests share.

#include <coretry/hedge.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <support/asio.hpp>

#include <chrono>
#include <system_error>
#include <type_traits>

namespace coretry::test {

/// How an operation completed, as its `void(error_code, int)` handler saw it.
struct outcome {
  int completions = 0; ///< times the handler ran
  std::error_code error;
  int value = 0;
  std::chrono::nanoseconds at{0}; ///< on the manual clock, at the last completion
};

/// A `void(error_code, int)` handler that records into `o`.
inline auto record(outcome& o) {
  return [&o](std::error_code ec, int v) {
    ++o.completions;
    o.error = ec;
    o.value = v;
    o.at = coretry::testing::manual_clock::elapsed();
  };
}

/// How far `run_retry` and `run_hedge` drive the manual clock.
enum class drive_until {
  completion, ///< until the handler has run
  idle,       ///< then on until nothing is left, so that a late attempt or timer would show
};

/// `async_retry` of `op()` on `io` with manual timers, driven as `until` says.
template <typename Op>
outcome run_retry(asio::io_context& io, Op& op, const retry_policy& p, retry_stats& stats,
                  drive_until until = drive_until::completion) {
  outcome o;
  coretry::async_retry<coretry::testing::manual_timer>(
      io.get_executor(), [&] { return op(); }, p, stats, record(o));
  coretry::testing::drive(io, [&] { return o.completions > 0; });
  if (until == drive_until::idle)
    coretry::testing::drive(io, [] { return false; });
  return o;
}

/// `async_hedge` of `op()` (or `op(attempt_context&)`) on `io` with manual timers, driven until
/// idle by default (a hedge started after the completion would show).
template <typename Op>
outcome run_hedge(asio::io_context& io, Op& op, const retry_policy& p, const hedge_options& h,
                  hedge_stats& stats, drive_until until = drive_until::idle) {
  outcome o;
  if constexpr (std::is_invocable_v<Op&, coretry::attempt_context&>)
    coretry::async_hedge<coretry::testing::manual_timer>(
        io.get_executor(), [&](coretry::attempt_context& ctx) { return op(ctx); }, p, h, stats,
        record(o));
  else
    coretry::async_hedge<coretry::testing::manual_timer>(
        io.get_executor(), [&] { return op(); }, p, h, stats, record(o));
  coretry::testing::drive(io, [&] { return o.completions > 0; });
  if (until == drive_until::idle)
    coretry::testing::drive(io, [] { return false; });
  return o;
}

} // namespace coretry::test
