#include <coretry/cancellation.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace coretry {
namespace detail {

class cancellation_state {
public:
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }

  bool attach(cancellation_registration& r) noexcept {
    std::lock_guard lock(mutex_);
    if (cancelled())
      return false;
    r.prev = nullptr;
    r.next = head_;
    if (head_)
      head_->prev = &r;
    head_ = &r;
    r.linked = true;
    return true;
  }

  void detach(cancellation_registration& r) noexcept {
    std::unique_lock lock(mutex_);
    // A notice in progress reads `r` (and posts to its executor): its owner must not die first.
    done_.wait(lock, [&] { return !r.notifying; });
    if (!r.linked)
      return;
    if (r.prev)
      r.prev->next = r.next;
    else
      head_ = r.next;
    if (r.next)
      r.next->prev = r.prev;
    r.linked = false;
  }

  bool cancel() noexcept {
    cancellation_registration* taken = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (cancelled())
        return false;
      cancelled_.store(true, std::memory_order_release);
      // Take the whole list, oldest link first. Nothing keeps an operation alive: an owner
      // that dies meanwhile waits in detach() until its notice has been sent.
      while (cancellation_registration* r = head_) {
        head_ = r->next;
        r->linked = false;
        r->prev = nullptr;
        r->notifying = true;
        r->next = taken;
        taken = r;
      }
    }
    // Outside the lock: a notice posts to the operation's executor, which takes that
    // executor's own locks. It never runs the operation inline (its unlink would wait for
    // this very notice).
    while (cancellation_registration* r = taken) {
      taken = r->next;
      r->next = nullptr;
      r->notify(*r);
      {
        std::lock_guard lock(mutex_);
        r->notifying = false; // from here on, `r` may be destroyed by its owner
      }
      done_.notify_all();
    }
    return true;
  }

private:
  mutable std::mutex mutex_;
  std::condition_variable done_; ///< a notice ended (`notifying` cleared)
  std::atomic<bool> cancelled_{false};
  cancellation_registration* head_ = nullptr;
};

} // namespace detail

cancellation_source::cancellation_source()
    : state_(std::make_shared<detail::cancellation_state>()) {}

cancellation_token cancellation_source::token() const noexcept {
  return cancellation_token(state_);
}

bool cancellation_source::cancel() noexcept {
  return state_->cancel();
}

bool cancellation_source::cancelled() const noexcept {
  return state_->cancelled();
}

bool cancellation_token::cancelled() const noexcept {
  return state_ && state_->cancelled();
}

bool cancellation_token::attach(detail::cancellation_registration& r) const noexcept {
  return state_ && state_->attach(r);
}

void cancellation_token::detach(detail::cancellation_registration& r) const noexcept {
  if (state_)
    state_->detach(r);
}

} // namespace coretry
