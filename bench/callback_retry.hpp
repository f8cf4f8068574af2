// SPDX-License-Identifier: BSL-1.0
#pragma once
// The baselines written without coroutines, as a careful Asio programmer writes a retry with
// completion handlers and a steady_timer, and the token-based operation both sides retry.
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
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
      [ec](auto handler, const asio::io_context::executor_type& io_ex) {
        auto hex = asio::get_associated_executor(handler, io_ex);
        asio::post(hex, [h = std::move(handler), ec]() mutable { std::move(h)(ec, 1); });
      },
      token, ex);
}

/// The hand-written retry: a heap state holding the timer (made at the first sleep), the
/// operation started again from the timer's handler. `Op` is called as `op(handler)`. With a
/// connected `slot`, its sleep is cancelled through it (one `cancellation_signal` per retry).
template <class Op, class Handler>
class callback_retry : public std::enable_shared_from_this<callback_retry<Op, Handler>> {
public:
  callback_retry(asio::io_context::executor_type ex, Op op, Handler h, int max_attempts,
                 std::chrono::steady_clock::duration delay, asio::cancellation_slot slot = {})
      : ex_(ex), op_(std::move(op)), handler_(std::move(h)), max_(max_attempts), delay_(delay),
        slot_(slot) {}

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
    auto then = [self = this->shared_from_this()](std::error_code e) {
      if (e)
        return self->handler_(e, 0);
      self->start();
    };
    if (slot_.is_connected())
      timer_->async_wait(asio::bind_cancellation_slot(slot_, std::move(then)));
    else
      timer_->async_wait(std::move(then));
  }

  asio::io_context::executor_type ex_;
  Op op_;
  Handler handler_;
  int max_;
  int attempt_ = 0;
  std::chrono::steady_clock::duration delay_;
  asio::cancellation_slot slot_;
  std::optional<asio::steady_timer> timer_;
};

template <class Op, class Handler>
void start_callback_retry(asio::io_context::executor_type ex, Op op, Handler h, int max_attempts,
                          std::chrono::steady_clock::duration delay,
                          asio::cancellation_slot slot = {}) {
  std::make_shared<callback_retry<Op, Handler>>(ex, std::move(op), std::move(h), max_attempts,
                                                delay, slot)
      ->start();
}

/// The hand-written retry with a per-attempt timeout: one timer made with the state, armed for
/// each attempt and cancelled when the attempt completes; when it fires first it cancels the
/// attempt through a `cancellation_signal` bound to the attempt's handler. A failed attempt is
/// retried after `delay` on the same timer. A completion left over from an earlier use of the
/// timer is told apart by a generation count.
template <class Op, class Handler>
class callback_timeout_retry
    : public std::enable_shared_from_this<callback_timeout_retry<Op, Handler>> {
public:
  callback_timeout_retry(asio::io_context::executor_type ex, Op op, Handler h, int max_attempts,
                         std::chrono::steady_clock::duration timeout,
                         std::chrono::steady_clock::duration delay)
      : op_(std::move(op)), handler_(std::move(h)), max_(max_attempts), timeout_(timeout),
        delay_(delay), timer_(ex) {}

  void start() {
    ++attempt_;
    in_attempt_ = true;
    timer_.expires_after(timeout_);
    timer_.async_wait([self = this->shared_from_this(), g = ++generation_](std::error_code e) {
      if (!e && g == self->generation_ && self->in_attempt_)
        self->signal_.emit(asio::cancellation_type::terminal);
    });
    op_(asio::bind_cancellation_slot(
        signal_.slot(),
        [self = this->shared_from_this()](std::error_code ec, int v) { self->done(ec, v); }));
  }

private:
  void done(std::error_code ec, int v) {
    in_attempt_ = false;
    timer_.cancel();
    if (!ec || attempt_ == max_)
      return handler_(ec, v);
    timer_.expires_after(delay_);
    timer_.async_wait([self = this->shared_from_this(), g = ++generation_](std::error_code e) {
      if (g != self->generation_)
        return;
      if (e)
        return self->handler_(e, 0);
      self->start();
    });
  }

  Op op_;
  Handler handler_;
  int max_;
  int attempt_ = 0;
  unsigned generation_ = 0;
  bool in_attempt_ = false;
  std::chrono::steady_clock::duration timeout_;
  std::chrono::steady_clock::duration delay_;
  asio::steady_timer timer_;
  asio::cancellation_signal signal_;
};

template <class Op, class Handler>
void start_callback_timeout_retry(asio::io_context::executor_type ex, Op op, Handler h,
                                  int max_attempts, std::chrono::steady_clock::duration timeout,
                                  std::chrono::steady_clock::duration delay) {
  std::make_shared<callback_timeout_retry<Op, Handler>>(ex, std::move(op), std::move(h),
                                                        max_attempts, timeout, delay)
      ->start();
}

} // namespace coretry::bench
