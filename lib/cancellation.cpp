#include <coretry/cancellation.hpp>

#include <atomic>
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
    std::lock_guard lock(mutex_);
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
    cancellation_registration* pinned = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (cancelled())
        return false;
      cancelled_.store(true, std::memory_order_release);
      // Take the whole list. A link whose owner is being destroyed fails to pin (its destructor
      // is waiting for this lock to unlink it) and is only marked unlinked; the others are kept
      // alive by their pin and chained through `next` for the notices below.
      while (cancellation_registration* r = head_) {
        head_ = r->next;
        r->linked = false;
        r->prev = nullptr;
        r->next = nullptr;
        if (r->pin(*r)) {
          r->next = pinned;
          pinned = r;
        }
      }
    }
    // Outside the lock: a notice may run arbitrary executor code, including, on an inline
    // executor, an operation that completes and unlinks itself from this very source. Links that
    // allow it are gathered per (context, kind) into one chain each and notified with one
    // handler; a source rarely serves more than a few contexts, and past `max_batches` of them
    // the rest are notified one by one (no allocation here: cancel() cannot fail).
    struct batch {
      const void* key;
      void (*notify)(cancellation_registration*) noexcept;
      cancellation_registration* head;
    };
    constexpr int max_batches = 8;
    batch batches[max_batches];
    int n = 0;
    while (cancellation_registration* r = pinned) {
      pinned = r->next;
      r->next = nullptr;
      if (r->batch_key && r->notify_batch) {
        int i = 0;
        while (i < n && (batches[i].key != r->batch_key || batches[i].notify != r->notify_batch))
          ++i;
        if (i < n) {
          r->next = batches[i].head;
          batches[i].head = r;
          continue;
        }
        if (n < max_batches) {
          batches[n++] = {r->batch_key, r->notify_batch, r};
          continue;
        }
      }
      r->notify(*r);
    }
    for (int i = 0; i < n; ++i)
      batches[i].notify(batches[i].head);
    return true;
  }

private:
  mutable std::mutex mutex_;
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
