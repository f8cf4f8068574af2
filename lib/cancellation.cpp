// SPDX-License-Identifier: BSL-1.0
#include <coretry/cancellation.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace coretry {
namespace detail {

class cancellation_state : public std::enable_shared_from_this<cancellation_state> {
public:
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }

  bool attach(cancellation_registration& r) noexcept {
    std::lock_guard lock(mutex_);
    if (cancelled())
      return false;
    push(head_, r, 0);
    return true;
  }

  void detach(cancellation_registration& r) noexcept {
    std::unique_lock lock(mutex_);
    // A notice in progress reads `r` (and posts to its executor): its owner must not die first.
    done_.wait(lock, [&] { return !r.notifying; });
    if (r.linked)
      unlink(r);
  }

  bool cancel() noexcept {
    cancellation_registration* one_by_one = nullptr;
    cancellation_registration* posters[max_batches] = {};
    unsigned batches = 0;
    {
      std::lock_guard lock(mutex_);
      if (cancelled())
        return false;
      cancelled_.store(true, std::memory_order_release);
      // Take the whole list (newest first, so each list below is oldest first). Nothing keeps
      // an operation alive: an owner that dies meanwhile waits in detach() until its notice has
      // been sent, or unlinks itself from its batch.
      while (cancellation_registration* r = head_) {
        head_ = r->next;
        unsigned k = 0;
        if (r->batched) {
          while (k < batches && batch_context_[k] != r->context)
            ++k;
          if (k == batches && batches < max_batches) {
            batch_context_[batches++] = r->context;
            posters[k] = r;
            r->notifying = true; // posts the batch: kept alive until then
          }
        }
        if (r->batched && k < batches) {
          push(batch_head_[k], *r, static_cast<unsigned char>(k + 1));
        } else {
          r->linked = false;
          r->prev = nullptr;
          r->notifying = true;
          r->next = one_by_one;
          one_by_one = r;
        }
      }
    }
    // Outside the lock: a notice posts to the operation's executor, which takes that
    // executor's own locks. It never runs the operation inline (its unlink would wait for
    // this very notice).
    for (unsigned k = 0; k < batches; ++k)
      release(*posters[k], [&](cancellation_registration& r) {
        r.batched->post(r, cancellation_batch{weak_from_this(), k});
      });
    while (cancellation_registration* r = one_by_one) {
      one_by_one = r->next;
      r->next = nullptr;
      release(*r, [](cancellation_registration& n) { n.notify(n); });
    }
    return true;
  }

  /// A batch's work, on its operations' context: a chunk of links at a time, each notified
  /// with no lock held.
  void run_batch(unsigned k) noexcept {
    constexpr int chunk = 64;
    for (;;) {
      // Pinned, not weak: a weak handle would cost two more atomic steps per operation (the
      // lock() here and the weak count), and the chunk is notified at once, on the operations'
      // own context. The last of them to be released may destroy its operation here, outside
      // the lock (its destructor unlinks under it).
      std::shared_ptr<cancellation_registration> taken[chunk];
      int n = 0;
      {
        std::lock_guard lock(mutex_);
        while (n < chunk && batch_head_[k]) {
          cancellation_registration& r = *batch_head_[k];
          taken[n++] = r.batched->handle(r);
          unlink(r);
        }
      }
      if (n == 0)
        return;
      for (int i = 0; i < n; ++i)
        if (taken[i])
          taken[i]->batched->notify_here(*taken[i]);
    }
  }

private:
  static constexpr unsigned max_batches = 8;

  void push(cancellation_registration*& head, cancellation_registration& r,
            unsigned char list) noexcept {
    r.prev = nullptr;
    r.next = head;
    if (head)
      head->prev = &r;
    head = &r;
    r.linked = true;
    r.list = list;
  }

  void unlink(cancellation_registration& r) noexcept {
    if (r.prev)
      r.prev->next = r.next;
    else
      (r.list == 0 ? head_ : batch_head_[r.list - 1]) = r.next;
    if (r.next)
      r.next->prev = r.prev;
    r.prev = r.next = nullptr;
    r.linked = false;
  }

  /// Runs `f(r)` for a link marked `notifying`, then lets its owner go.
  template <class F> void release(cancellation_registration& r, F f) noexcept {
    f(r);
    {
      std::lock_guard lock(mutex_);
      r.notifying = false; // from here on, `r` may be destroyed by its owner
    }
    done_.notify_all();
  }

  mutable std::mutex mutex_;
  std::condition_variable done_; ///< a notice ended (`notifying` cleared)
  std::atomic<bool> cancelled_{false};
  cancellation_registration* head_ = nullptr;
  // Written once, by cancel(), under the lock.
  const void* batch_context_[max_batches] = {};
  cancellation_registration* batch_head_[max_batches] = {};
};

void cancellation_batch::operator()() const noexcept {
  if (auto s = state.lock())
    s->run_batch(index);
}

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
