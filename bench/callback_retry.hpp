// SPDX-License-Identifier: BSL-1.0
#pragma once
// The baselines written without coroutines, as a careful Asio programmer writes a retry with
// completion handlers and a steady_timer, and the token-based operation both sides retry.
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>

namespace coretry::bench {

/// A callback-style operation: completes through a post to its handler's executor with `ec`
/// and 1. Signature `void(std::error_code, int)`; takes any completion token.
template <class Token>
auto post_result(const asio::io_context::executor_type& ex, std::error_code ec, Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, int)>(
      [ec](auto handler, const asio::io_context::executor_type& ex) {
        auto hex = asio::get_associated_executor(handler, ex);
        asio::post(hex, [h = std::move(handler), ec]() mutable { std::move(h)(ec, 1); });
      },
      token, ex);
}

/// The hand-written retry: a heap state holding the timer (made at the first sleep), the
/// operation started again from the timer's handler. `Op` is called as `op(handler)`.
template <class Op, class Handler>
class callback_retry : public std::enable_shared_from_this<callback_retry<Op, Handler>> {
public:
  callback_retry(asio::io_context::executor_type ex, Op op, Handler h, int max_attempts,
                 std::chrono::steady_clock::duration delay)
      : ex_(ex), op_(std::move(op)), handler_(std::move(h)), max_(max_attempts), delay_(delay) {}

  void start() {
    ++attempt_;
    op_([self = this->shared_from_this()](std::error_code ec, int v) { self->done(ec, v); });
  }

private:
  void done(std::error_code ec, int v) {
    if (!ec || attempt_ == max_)
      return handler_(ec, v);
    if (!timer_)
      timer_.emplace(ex_);
    timer_->expires_after(delay_);
    timer_->async_wait([self = this->shared_from_this()](std::error_code e) {
      if (e)
        return self->handler_(e, 0);
      self->start();
    });
  }

  asio::io_context::executor_type ex_;
  Op op_;
  Handler handler_;
  int max_;
  int attempt_ = 0;
  std::chrono::steady_clock::duration delay_;
  std::optional<asio::steady_timer> timer_;
};

template <class Op, class Handler>
void start_callback_retry(asio::io_context::executor_type ex, Op op, Handler h, int max_attempts,
                          std::chrono::steady_clock::duration delay) {
  std::make_shared<callback_retry<Op, Handler>>(ex, std::move(op), std::move(h), max_attempts,
                                                delay)
      ->start();
}

} // namespace coretry::bench
