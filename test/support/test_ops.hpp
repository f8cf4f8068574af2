// SPDX-License-Identifier: BSL-1.0
#pragma once
// Scripted operations for retry-loop tests: each call follows the next step of a script.

#include <coretry/testing/manual_clock.hpp>

#include <support/asio.hpp>

#include <chrono>
#include <system_error>
#include <vector>

namespace coretry::test {
using namespace coretry::testing;

/// One scripted attempt: wait `after` on the manual clock, then fail with `error`, or succeed
/// with `value` when `error` is empty. `hang` waits (cancellably) for an hour instead.
struct step {
  std::error_code error{};
  int value = 0;
  std::chrono::nanoseconds after{0};
  bool hang = false;
};

inline step fail(std::error_code ec, std::chrono::nanoseconds after = {}) {
  return {ec, 0, after};
}
inline step succeed(int v, std::chrono::nanoseconds after = {}) {
  return {{}, v, after};
}
inline step hang() {
  return {{}, 0, {}, true};
}

inline const std::error_code refused = make_error_code(std::errc::connection_refused);

/// Plays a script; records each call's start time and whether a wait was cancelled.
struct scripted_op {
  std::vector<step> script{};
  int calls = 0;
  int aborted = 0; ///< attempts that saw their wait cancelled
  std::vector<manual_clock::duration> started{};

  asio::awaitable<int> operator()() {
    const step s = script.at(static_cast<std::size_t>(
        calls < static_cast<int>(script.size()) ? calls : static_cast<int>(script.size()) - 1));
    ++calls;
    started.push_back(manual_clock::elapsed());
    if (s.hang || s.after > std::chrono::nanoseconds::zero()) {
      manual_timer t(co_await asio::this_coro::executor);
      t.expires_after(s.hang ? std::chrono::hours(1) : s.after);
      auto [ec] = co_await t.async_wait(coretry::detail::as_tuple(asio::use_awaitable));
      if (ec) {
        ++aborted;
        throw std::system_error(ec);
      }
    }
    if (s.error)
      throw std::system_error(s.error);
    co_return s.value;
  }
};

/// An attempt that waits (cancellably) on a real timer for an hour.
inline asio::awaitable<int> hang_on_steady_timer() {
  asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::hours(1));
  co_await t.async_wait(asio::use_awaitable);
  co_return 0;
}

} // namespace coretry::test
