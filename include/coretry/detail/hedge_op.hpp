// SPDX-License-Identifier: BSL-1.0
#pragma once
// The hedged operation: one state, attempts co_spawned beside each other in reused slots, each
// with its own cancellation signal and its own entry in the context's deadline queue (its
// attempt timeout; deadline_queue.hpp, retry_op's), one more entry for the deadline, and one
// timer (the next hedge or a paced send). Private: include <coretry/hedge.hpp>.
//
// Not yet the composed retry operation (retry_op.hpp) in a hedging mode, which issue 28 asks
// for: docs/engine_wip.md says what is shared so far and what is left.
//
// It runs on a strand, as retry_op's controlled path does, except on a context that runs one
// thread only (`runs_on_one_thread`): there it runs on the context's executor itself. Everything
// below runs there except the entry points that hop onto it (the caller's slot handler, a group
// source's notice). The state is allocated with the handler's allocator and kept alive by
// whatever may still call it: each attempt's frame, the pending timer wait, a due entry of the
// deadline queue on its way to the strand, the start when it is posted.
// Its outcome is decided once, when no attempt runs any more; the handler is called once the
// last holder has let go and the state's memory is freed (`release`), as Asio's rule for
// memory from a handler's allocator asks.
//
// Reused from the retry loop: the attempt shapes and the one rule for what an attempt threw
// (`attempt_shape`, `take_current_exception`, `judge_abandoned`; attempt_shape.hpp, and
// `judge_outcome`; retry_loop.hpp), the reservations that settle once whatever happens
// (`gate_grant`, `send_token`, `retry_charge`; reservation.hpp), the schedule's decisions and
// its one verdict per attempt (`begin_attempt`, `pace`, `classify`, `report`, `stop`;
// schedule.hpp), and the completion signatures, delivery, executor choice
// (`runs_on_one_thread`, `with_serializing_executor`), the dispatched start (`running_here`,
// `initiation_mark`), outstanding work, the handler's allocator on every intermediate handler,
// `shared_policy` referenced rather than copied, the deadline queue, and cancellation steps of
// retry_op.hpp.
//
// Built as retry_op is, in layers (docs/core.md, "What a call site costs to compile"):
// `hedge_engine` (per timer, result, held policy, strand and allocator type) holds the state
// and runs everything but what names the caller's handler or the
// operation; `hedge_delivery` adds the handler and delivers the outcome (`release`'s halves);
// `hedge_state` adds the operation, and runs it as each attempt's coroutine (`attempt`). The
// intermediate handlers are the namespace-scope steps below, which hold the state through the
// non-template base `hedge_steps`: Asio's handler machinery (a post, a strand's queue, a timer's
// wait, co_spawn) is instantiated once per timer, result, strand and allocator type, not once per
// call site.
// Each step costs one virtual call.

#include <coretry/attempt.hpp>
#include <coretry/cancellation.hpp>
#include <coretry/detail/asio.hpp>
#include <coretry/detail/fallback_allocator.hpp>
#include <coretry/detail/reservation.hpp>
#include <coretry/detail/retry_loop.hpp>
#include <coretry/detail/retry_op.hpp>
#include <coretry/detail/schedule.hpp>
#include <coretry/error.hpp>
#include <coretry/observer.hpp>
#include <coretry/policy.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace coretry::detail {

/// Checks everything that can be checked at the call (a `retry_policy`, or a `shared_policy`:
/// refused when empty).
template <class T, class Policy> void check_hedge(const Policy& p, const hedge_options& h) {
  check_policy(p);
  h.validate();
  check_result_filter<T>(policy_of(p));
}

/// What a hedge keeps of the policy it was given, as retry_op does: a `shared_policy` itself
/// (referenced, not copied), else a `retry_policy` of its own (`policy_copy`).
template <class P>
using hedge_policy_t = std::conditional_t<std::is_same_v<std::remove_cvref_t<P>, shared_policy>,
                                          shared_policy, retry_policy>;
template <class P> hedge_policy_t<P> hedge_policy(P&& p) {
  if constexpr (std::is_same_v<std::remove_cvref_t<P>, shared_policy>)
    return std::forward<P>(p);
  else
    return policy_copy(std::forward<P>(p));
}

/// Why the state cancelled a running attempt.
enum class hedge_cut : std::uint8_t {
  none,
  lost,     ///< the operation ended otherwise: abandoned, for the breaker too
  timeout,  ///< its own `attempt_timeout`: a retryable failure
  deadline, ///< the operation's deadline: a failure, and the operation is over
};

template <class T> struct hedge_outcome {
  std::error_code error;
  std::optional<stored_t<T>> value;
  std::exception_ptr exception;
  attempt_attributes attributes{}; ///< what the attempt told its context, for the observer
  nanoseconds retry_after{};       ///< the server's hint: it makes a failure a push-back
  std::error_code health_code{};   ///< `attempt_context::health_code`, for the breaker
};

/// `to = std::move(from)` for a value that may be move-constructible only.
template <class V> void move_into(std::optional<V>& to, std::optional<V>& from) {
  to.reset();
  if (from)
    to.emplace(std::move(*from));
}

/// Attempts that fail without suspending start the next one from inside the previous one's
/// launch; after this many on one stack the next start is posted instead.
inline constexpr unsigned max_inline_relaunch = 16;

/// One attempt's share of the state, but for its timer (`hedge_engine::slot` adds it). Slots are
/// reused: one returns to the free list when its co_spawn has completed (its frame and
/// cancellation handler are gone), so the state holds as many as attempts ran at once, not one
/// per attempt.
struct hedge_slot {
  /// Bound to the attempt's co_spawn; shared with its completion, because co_spawn (Asio 1.38)
  /// may still clear its slot after the completion handler, and the state with it, is gone.
  std::shared_ptr<asio::cancellation_signal> signal = std::make_shared<asio::cancellation_signal>();
  gate_grant grant;       ///< reports `on_abandoned` if the state dies first
  std::uint64_t use = 0;  ///< which attempt holds it: a late timer wait checks it
  nanoseconds started{0}; ///< when the attempt started (with an observer)
  unsigned number = 0;
  hedge_cut cut = hedge_cut::none;
  bool running = false;
  /// Its coroutine has begun. A cut before then is not emitted: the attempt sees `cut` when it
  /// begins and ends at once (retry_op.hpp, `cut_attempt`, says why).
  bool begun = false;
};

// --- The state as its intermediate handlers see it ---------------------------------------------
//
// As retry_op's (retry_op.hpp): the posted start, the caller's slot handler, the posted cancel
// and the group's notice are retry_op's own steps (`resume_step`, `slot_cancel_step`,
// `cancel_step`, `weak_cancel_step`) through `op_steps`; the timer waits, the co_spawn
// completion and the posted relaunch are the hedge's, through `hedge_steps`.

/// The steps an intermediate handler takes on a hedge's state (`hedge_engine` implements them).
class hedge_steps : public op_steps {
public:
  using hedge_ptr = std::shared_ptr<hedge_steps>;
  /// On the strand: the deadline came.
  virtual void deadline_due() = 0;
  /// On the strand: the hedge timer armed as `generation` came due.
  virtual void hedge_due(unsigned generation) = 0;
  /// On the strand: the attempt timeout of slot `sl`, armed for its use `use`, came due.
  virtual void attempt_timer_due(hedge_slot& sl, std::uint64_t use) = 0;
  /// The co_spawn of the attempt in `sl` completed: its frame and slot handler are gone.
  virtual void attempt_freed(hedge_slot& sl) = 0;
  /// On the strand: a posted relaunch, for the failure `trigger`.
  virtual void relaunch_due(std::error_code trigger) = 0;

  // retry_op's steps for token attempts and their deadlines: a hedge has neither (its attempts
  // are co_spawned, its timeouts are its own timers), so these are never called.
  void time_out(std::uint64_t) final {}
  void spawned_attempt_done(ptr, std::exception_ptr) final {}
  void token_attempt_done(ptr) final {}

protected:
  hedge_steps() = default;
  ~hedge_steps() = default;
};

/// The deadline came due in the deadline queue (dispatched to the strand).
struct hedge_deadline_step {
  hedge_steps::hedge_ptr s;
  void operator()() const { s->deadline_due(); }
};

/// The hedge timer's wait (the next hedge, or a paced send), with the handler's allocator.
template <class Alloc> struct hedge_timer_step {
  using allocator_type = Alloc;
  hedge_steps::hedge_ptr s;
  unsigned generation = 0;
  [[no_unique_address]] Alloc alloc;
  allocator_type get_allocator() const noexcept { return alloc; }
  void operator()(std::error_code ec) const {
    if (!ec)
      s->hedge_due(generation);
  }
};

/// An attempt's timeout came due in the deadline queue (dispatched to the strand).
struct attempt_timer_step {
  hedge_steps::hedge_ptr s;
  hedge_slot* p = nullptr;
  std::uint64_t use = 0;
  void operator()() const { s->attempt_timer_due(*p, use); }
};

/// An attempt's co_spawn completion (bound to the slot of the attempt's signal, which it keeps),
/// with the handler's allocator.
template <class Alloc> struct attempt_spawned_step {
  using allocator_type = Alloc;
  hedge_steps::hedge_ptr s;
  hedge_slot* p = nullptr;
  std::shared_ptr<asio::cancellation_signal> keep;
  [[no_unique_address]] Alloc alloc;
  allocator_type get_allocator() const noexcept { return alloc; }
  void operator()(std::exception_ptr) const { s->attempt_freed(*p); }
};

/// A relaunch posted past `max_inline_relaunch`.
struct relaunch_step {
  hedge_steps::hedge_ptr s;
  std::error_code trigger;
  void operator()() const { s->relaunch_due(trigger); }
};

/// The hedge's part that names neither the operation nor the caller's handler: everything but
/// running an attempt (`attempt`) and delivering the outcome (`hedge_delivery`). Compiled
/// once per timer, result, held policy, strand and allocator type, for every call site.
template <class Timer, class T, class Policy, class Strand, class Alloc>
class hedge_engine
    : public hedge_steps,
      public cancellation_registration,
      public std::enable_shared_from_this<hedge_engine<Timer, T, Policy, Strand, Alloc>> {
protected:
  using clock = typename Timer::clock_type;
  using timer_type = typename Timer::template rebind_executor<Strand>::other;
  /// The context's queue of attempt deadlines (deadline_queue.hpp), retry_op's.
  using queue_type =
      deadline_queue<typename Timer::template rebind_executor<asio::any_io_executor>::other>;

public:
  struct slot;
  /// An entry in the deadline queue: a slot's attempt timeout, tagged with the slot's `use`, or
  /// (`owner` null) the operation's deadline.
  struct slot_entry final : queue_type::entry {
    explicit slot_entry(hedge_engine& e, slot* s) noexcept : engine(&e), owner(s) {
      this->claim = &hedge_engine::claim_entry;
      this->fire = &hedge_engine::fire_entry;
    }
    hedge_engine* engine;
    slot* owner;
  };
  /// An attempt's share of the state, with its entry in the deadline queue: one entry and one
  /// cancellation signal per attempt in flight, as retry_op's one attempt has.
  struct slot : hedge_slot {
    explicit slot(hedge_engine& e) noexcept : timeout(e, this) {}
    slot_entry timeout; ///< its attempt timeout
  };

protected:
  hedge_engine(Strand strand, const Alloc& alloc, Policy policy, hedge_options hedge,
               hedge_stats* stats)
      : alloc_(alloc), strand_(std::move(strand)), held_policy_(std::move(policy)),
        policy_(policy_of(held_policy_)), hedge_(std::move(hedge)), stats_(stats),
        hedge_timer_(strand_), deadline_entry_(*this, nullptr),
        origin_(make_origin<clock>(policy_, true)) {
    hears_ = origin_.hears;
    notify = &hedge_engine::notify_from_group;
    if (stats_)
      *stats_ = hedge_stats{};
  }
  ~hedge_engine() {
    for (auto& sl : slots_)
      queue_type::forget(sl->timeout); // a due entry is never called once the state is dying
    queue_type::forget(deadline_entry_);
    policy_.cancellation.detach(*this);
  }
  hedge_engine(const hedge_engine&) = delete;
  hedge_engine& operator=(const hedge_engine&) = delete;

public:
  /// The initiation's last step: the caller's slot (any type) cancels, from any thread. Always
  /// a post (`slot_cancelled`): the completion clears that slot, which it must not do inside the
  /// slot's handler.
  template <class Slot> void connect(Slot user_slot) {
    if (!user_slot.is_connected())
      return;
    user_slot.assign(slot_cancel_step{std::weak_ptr<op_steps>(this->weak_from_this())});
  }

  /// Posted by the initiation (`resume_step`).
  void resumed(ptr) final { start(); }

  /// From the caller's slot, on any thread.
  void slot_cancelled(ptr self) final {
    cancel_seen_.store(true, std::memory_order_release);
    const Strand strand = strand_;
    // Never lost for want of memory (fallback_allocator.hpp).
    asio::post(strand, allocated(with_fallback(alloc_), cancel_step{std::move(self)}));
  }

  void start() {
    // The deadline and the seeded stream were fixed at the call (the constructor runs in the
    // initiation), however late this post runs.
    start_ = origin_.start;
    sched_.emplace(policy_, std::move(origin_), &clock_now<clock>);
    started_ = true;
    // In retry_op's order: link to the group, then the budget and the observer hear of the
    // operation, then a cancellation that came first ends it.
    const bool cancelled =
        cancel_requested_ || cancel_seen_.load(std::memory_order_acquire) ||
        (policy_.cancellation.can_be_cancelled() && !policy_.cancellation.attach(*this));
    if (policy_.budget)
      policy_.budget->on_request(start_);
    if (hears(observer_interest::operation_started))
      emit(*policy_.observer, operation_started_event{policy_.label, operation_kind::hedge});
    if (cancelled) {
      finish_abort();
      return;
    }
    if (sched_->has_deadline()) {
      const nanoseconds left =
          std::max(nanoseconds::zero(), sched_->deadline() - read_clock<clock>(true));
      queue().push(deadline_entry_, due_after<queue_type>(left), 0);
    }
    try_launch({});
  }

  /// The attempt `sl` returned (called from its frame, on the strand).
  void attempt_done(slot& sl, hedge_outcome<T> out) noexcept {
    sl.running = false;
    --in_flight_;
    if (deadlines_)
      deadlines_->remove(sl.timeout);
    const nanoseconds now = read_clock<clock>(true);
    if (!out.value && sl.cut == hedge_cut::timeout) {
      out.error = errc::attempt_timeout;
      out.exception = nullptr;
    } else if (!out.value && sl.cut == hedge_cut::deadline) {
      out.error = errc::deadline_exceeded;
      out.exception = nullptr;
    }
    const bool abandoned = sl.cut == hedge_cut::lost;
    // retry_op's rule (loop_core::ended): a cancellation that came while the attempt ran (from
    // the attempt itself, say, still on its way through the strand's queue) wins over whatever
    // the attempt reported: the attempt is abandoned, and a failure ends the operation.
    const bool cancelled =
        cancel_seen_.load(std::memory_order_acquire) || policy_.cancellation.cancelled();
    const bool timer_cut = sl.cut == hedge_cut::timeout || sl.cut == hedge_cut::deadline;
    // The policy's judgement, as the retry loop's (retry_loop.hpp): a rejected value or a
    // retried exception is this attempt's failure.
    std::exception_ptr retried;
    std::optional<attempt_decision> decided;
    if (abandoned) {
      judge_abandoned(out); // a lost copy: neither what it threw nor its value is judged
    } else {
      decided = judge_outcome(policy_, out, sl.number, !timer_cut && !cancelled, out.retry_after,
                              out.health_code, retried);
    }
    // The one verdict on this attempt, for every listener and for the decision below.
    std::exception_ptr thrown;
    const attempt_class verdict_of =
        sched_->classify(out.error, timer_cut, abandoned || cancelled || out.exception, thrown,
                         out.retry_after, out.health_code, decided ? &*decided : nullptr);
    if (thrown && !out.exception)
      out.exception = std::move(thrown);
    sched_->report(verdict_of, sl.grant, now);
    if (hears(observer_interest::attempt_finished))
      emit(*policy_.observer,
           attempt_finished(policy_.label, sl.number, now - sl.started,
                            out.exception ? std::error_code(errc::unexpected_exception) : out.error,
                            static_cast<attempt_outcome>(verdict_of.kind), out.attributes));
    if (abandoned) {
      if (stats_)
        ++stats_->abandoned;
      maybe_complete();
      return;
    }
    if (out.error && stats_) {
      stats_->last_error = out.error;
      if (stats_->reason != errc::unexpected_exception)
        stats_->exception = retried;
    }
    if (finishing_) { // cut by the deadline: the outcome is decided already
      maybe_complete();
      return;
    }
    if (out.exception) {
      finish_thrown(std::move(out.exception));
      return;
    }
    if (!out.error) {
      move_into(result_.value, out.value);
      if (stats_) {
        stats_->winner = sl.number;
        stats_->last_error = {};
        stats_->exception = nullptr;
      }
      finish(); // a success: every other attempt is abandoned
      return;
    }
    if (cancelled) {
      finish_abort();
      return;
    }
    last_error_ = out.error;
    if (retried)
      last_exception_ = std::move(retried);
    if (out.error == errc::result_rejected) {
      move_into(last_rejected_, out.value);
      rejected_by_ = sl.number;
    } else {
      last_rejected_.reset(); // an older rejected result is not the last attempt's
      rejected_by_ = 0;       // and its attempt no winner
    }
    if (verdict_of.kind != attempt_kind::failure) {
      fail(out.error, out.error);
      finish();
      return;
    }
    relaunch(out.error); // a retryable failure: the next attempt starts now
  }

protected:
  /// The attempt in `sl`, to be co_spawned on the strand: it ends with `attempt_done`.
  virtual asio::awaitable<void> attempt(slot& sl) = 0;

private:
  bool may_launch() const noexcept {
    return !finishing_ && stop_reason_ == errc{} && launched_ < policy_.max_attempts;
  }

  /// After a retryable failure: the next attempt starts now, then the operation ends if none
  /// runs and none may start. An attempt that fails without suspending calls this from inside
  /// the previous attempt's launch, so past `max_inline_relaunch` nested calls the rest is posted:
  /// the stack stays bounded, and timers (the deadline's too) get their turn in between.
  void relaunch(std::error_code trigger) {
    if (relaunch_depth_ >= max_inline_relaunch) {
      relaunch_posted_ = true;
      asio::post(strand_, allocated(with_fallback(alloc_),
                                    relaunch_step{this->shared_from_this(), trigger}));
      return;
    }
    ++relaunch_depth_;
    try_launch(trigger);
    --relaunch_depth_;
    if (!finishing_ && in_flight_ == 0 && !pacing_ && !relaunch_posted_)
      stop_launching(launched_ >= policy_.max_attempts ? errc::attempts_exhausted : stop_reason_);
  }

  /// Starts the next attempt if one may start now; `trigger` is the failure that asks for it,
  /// or empty. A hedge that is due while `max_copies` attempts run waits for a failure. With
  /// a zero delay, starts attempts in a loop up to `max_copies`.
  void try_launch(std::error_code trigger) {
    do {
      // A posted relaunch() launches the rest: looping on here, with a zero delay and attempts
      // that fail inline, would post one per turn and never give the strand back.
      if (!may_launch() || pacing_ || relaunch_posted_ || in_flight_ >= max_copies(hedge_) ||
          abort_if_cancelled())
        return;
      const nanoseconds now = read_clock<clock>(true);
      if (policy_.rate_limit && !token_) {
        const verdict v = sched_->pace(now, token_);
        if (v.stop) {
          if (hears(observer_interest::refused) && v.stop == errc::rate_limited)
            emit(*policy_.observer, refusal_event{policy_.label, v.stop, launched_ + 1});
          stop_launching(static_cast<errc>(v.stop.value()));
          return;
        }
        if (v.delay > nanoseconds::zero()) {
          pacing_ = true;
          pending_trigger_ = trigger;
          arm_hedge_timer(v.delay);
          return;
        }
      }
      if (!launch(now, std::exchange(trigger, {})))
        return;
    } while (hedge_.delay == nanoseconds::zero());
  }

  /// retry_op's order (loop_core::top): a cancellation already seen ends the operation before
  /// the rate, the budget or the gate is asked, and before the observer hears of an attempt.
  bool abort_if_cancelled() {
    if (!cancel_seen_.load(std::memory_order_acquire) && !policy_.cancellation.cancelled())
      return false;
    finish_abort();
    return true;
  }

  slot& take_slot() {
    if (free_slots_.empty()) {
      slots_.push_back(std::make_unique<slot>(*this));
      free_slots_.push_back(slots_.back().get());
    }
    slot& sl = *free_slots_.back();
    free_slots_.pop_back();
    ++sl.use;
    sl.number = launched_;
    sl.cut = hedge_cut::none;
    sl.running = true;
    return sl;
  }

  /// Starts one attempt; false when the policy refused it (the operation may be over then).
  bool launch(nanoseconds now, std::error_code trigger) {
    if (abort_if_cancelled())
      return false;
    retry_charge charge; // a hedge or retry spends the budget only once it is sent
    if (launched_ > 0 && policy_.budget) {
      if (!policy_.budget->try_retry(now)) {
        token_.returned();
        if (hears(observer_interest::refused))
          emit(*policy_.observer,
               refusal_event{policy_.label, errc::budget_exhausted, launched_ + 1});
        stop_launching(errc::budget_exhausted);
        return false;
      }
      charge = retry_charge(policy_.budget.get(), now);
    }
    gate_grant grant;
    // The token and the charge stay reserved until `on_hedge` has returned: a hook that throws
    // sends nothing, and `charge` and `token_` go back (the charge by its destructor).
    retry_charge not_yet;
    if (const std::error_code why = sched_->begin_attempt(now, grant, not_yet)) {
      token_.returned();
      if (const verdict v = sched_->refused(static_cast<errc>(why.value()), now, {}); !v.stop) {
        // Waiting for the breaker (on_open::wait), on the hedge timer as for a send token;
        // `charge` goes back meanwhile and the next launch asks the budget again.
        pacing_ = true;
        pending_trigger_ = trigger;
        arm_hedge_timer(v.delay);
        return false;
      }
      // A refusal is an overload control's (the gate, or the budget asked again after a wait
      // for the gate); a deadline reached before the attempt could start is not one.
      if (hears(observer_interest::refused) && why != errc::deadline_exceeded)
        emit(*policy_.observer, refusal_event{policy_.label, why, launched_ + 1});
      stop_launching(static_cast<errc>(why.value()));
      return false;
    }
    ++launched_;
    ++in_flight_;
    slot& sl = take_slot();
    sl.grant = std::move(grant);
    if (stats_) {
      stats_->attempts = launched_;
      stats_->peak_in_flight = std::max(stats_->peak_in_flight, in_flight_);
    }
    if (launched_ > 1 && hedge_.on_hedge) {
      std::exception_ptr thrown;
      try {
        hedge_.on_hedge(hedge_event{launched_, in_flight_, trigger});
      } catch (...) {
        thrown = std::current_exception();
      }
      if (thrown) {
        // Nothing was sent: the breaker's grant is given back, and the attempt never ran.
        unlaunch(sl, now);
        finish_thrown(std::move(thrown));
        return false;
      }
    }
    sl.started = now;
    if (launched_ > 1 && hears(observer_interest::hedge_started))
      emit(*policy_.observer, hedge_started_event{policy_.label, launched_, in_flight_, trigger});
    if (hears(observer_interest::attempt_started))
      emit(*policy_.observer, attempt_started_event{policy_.label, launched_});
    // retry_op's rule: a cancellation that arrived from a hook called above (`on_hedge`, the
    // observer's `attempt_started`, the gate) is still on its way through the strand's queue,
    // but the attempt is not sent. It ends abandoned, its grant, send token and budget charge
    // go back, and the operation ends as cancelled.
    if (cancel_seen_.load(std::memory_order_acquire) || policy_.cancellation.cancelled()) {
      unlaunch(sl, now);
      if (stats_)
        ++stats_->abandoned; // as the observer hears it
      if (hears(observer_interest::attempt_finished))
        emit(*policy_.observer,
             attempt_finished(policy_.label, sl.number, nanoseconds{0}, aborted_error(),
                              attempt_outcome::abandoned, attempt_attributes{}));
      finish_abort();
      return false;
    }
    token_.used();
    charge.used();
    not_yet.used();
    if (policy_.attempt_timeout != unlimited) {
      // retry_op's way: the slot's entry is linked into the context's deadline queue, and
      // unlinked when the attempt returns; only a timeout that comes due hops onto the strand.
      queue().push(sl.timeout, due_after<queue_type>(policy_.attempt_timeout), sl.use);
    }
    // Armed before the attempt runs: one that ends at once, inline, cancels it on completion.
    if (hedge_.delay != nanoseconds::zero() && hedge_.delay != unlimited &&
        launched_ < policy_.max_attempts)
      arm_hedge_timer(hedge_.delay);
    // co_spawn dispatches: the attempt runs here until it first suspends, and may end here.
    sl.begun = false;
    asio::co_spawn(strand_, attempt(sl),
                   asio::bind_cancellation_slot(
                       sl.signal->slot(), attempt_spawned_step<Alloc>{this->shared_from_this(), &sl,
                                                                      sl.signal, alloc_}));
    return true;
  }

  /// An attempt `launch` counted but never spawned: its slot goes back, and its grant and send
  /// token with it (the budget's charge is `launch`'s own, and goes back as it returns).
  void unlaunch(slot& sl, nanoseconds now) noexcept {
    sl.running = false;
    sl.cut = hedge_cut::lost;
    sl.grant.report(attempt_kind::abandoned, now);
    token_.returned();
    --in_flight_;
    free_slots_.push_back(&sl);
  }

  /// Armed from `attempt_done` too, where nothing may be thrown: the wait never fails for want
  /// of memory (fallback_allocator.hpp), as none of the hedge's own hops does.
  void arm_hedge_timer(nanoseconds d) {
    hedge_timer_.expires_after(std::chrono::ceil<typename timer_type::duration>(d));
    hedge_timer_.async_wait(hedge_timer_step<fallback_t<Alloc>>{
        this->shared_from_this(), ++hedge_generation_, with_fallback(alloc_)});
  }

  queue_type& queue() {
    if (!deadlines_)
      deadlines_ = &queue_type::of(inner_executor(strand_));
    return *deadlines_;
  }
  static std::shared_ptr<void> claim_entry(typename queue_type::entry& e) noexcept {
    return std::static_pointer_cast<void>(
        static_cast<slot_entry&>(e).engine->weak_from_this().lock());
  }
  // Called by the queue, on a thread of the context, with the state kept alive by
  // `claim_entry`'s reference: hops onto the strand, as retry_op's `fire_deadline` does.
  static void fire_entry(typename queue_type::entry& e, std::uint64_t use) noexcept {
    slot_entry& se = static_cast<slot_entry&>(e);
    hedge_engine& self = *se.engine;
    const Strand strand = self.strand_;
    const auto a = with_fallback(self.alloc_);
    if (se.owner)
      asio::dispatch(strand,
                     allocated(a, attempt_timer_step{self.shared_from_this(), se.owner, use}));
    else
      asio::dispatch(strand, allocated(a, hedge_deadline_step{self.shared_from_this()}));
  }

  void deadline_due() final { on_deadline(); }
  void hedge_due(unsigned generation) final {
    if (generation == hedge_generation_)
      on_hedge_timer();
  }
  void attempt_timer_due(hedge_slot& sl, std::uint64_t use) final {
    if (sl.use == use && sl.running && sl.cut == hedge_cut::none)
      cut_one(sl, hedge_cut::timeout);
  }
  void attempt_freed(hedge_slot& sl) final { free_slots_.push_back(static_cast<slot*>(&sl)); }
  void relaunch_due(std::error_code trigger) final {
    relaunch_posted_ = false;
    relaunch(trigger);
  }

  void on_hedge_timer() {
    if (finishing_)
      return;
    if (pacing_) { // the send token is due: send
      pacing_ = false;
      if (may_launch() && in_flight_ < max_copies(hedge_) &&
          launch(read_clock<clock>(true), std::exchange(pending_trigger_, {})) &&
          hedge_.delay == nanoseconds::zero())
        try_launch({});
      if (!finishing_ && in_flight_ == 0 && !pacing_ && !relaunch_posted_)
        stop_launching(launched_ >= policy_.max_attempts ? errc::attempts_exhausted : stop_reason_);
      return;
    }
    try_launch({});
  }

  void on_deadline() {
    if (finishing_)
      return;
    fail(errc::deadline_exceeded, errc::deadline_exceeded);
    finishing_ = true;
    cut_all(hedge_cut::deadline);
    maybe_complete();
  }

  /// No further attempt will start, for `why`; when none runs, the operation is over.
  void stop_launching(errc why) {
    if (stop_reason_ == errc{})
      stop_reason_ = why;
    if (finishing_ || in_flight_ > 0 || pacing_ || relaunch_posted_)
      return;
    const verdict v =
        sched_->stop(stop_reason_ == errc{} ? errc::attempts_exhausted : stop_reason_, last_error_);
    fail(v.stop, v.report);
    // Gave up on rejected results: the last one is returned (with a gate's refusal, delivered
    // with the error where the completion carries a value).
    if (!v.report || v.stop == errc::circuit_open || v.stop == errc::throttled_locally) {
      move_into(result_.value, last_rejected_);
      if (stats_)
        stats_->winner = rejected_by_;
    }
    finish();
  }

  /// What the operation reports (`report`) and why it stopped (`hedge_stats::reason`).
  void fail(std::error_code reason, std::error_code report) {
    result_.error = report;
    result_.reason = reason;
    if (stats_)
      stats_->reason = reason;
  }

  void finish_thrown(std::exception_ptr e) {
    result_.value.reset();
    fail(errc::unexpected_exception, errc::unexpected_exception);
    if (stats_)
      stats_->exception = e;
    result_.exception = std::move(e);
    finish();
  }

  void finish_abort() {
    fail(policy_.cancellation.cancelled() ? std::error_code(errc::cancelled)
                                          : coretry::detail::aborted_error(),
         coretry::detail::aborted_error());
    finish();
  }

  /// The outcome is in `result_`: cancel everything still running, complete when it returned.
  void finish() {
    finishing_ = true;
    cut_all(hedge_cut::lost);
    maybe_complete();
  }

  void cut_one(hedge_slot& sl, hedge_cut why) {
    sl.cut = why;
    if (sl.begun)
      sl.signal->emit(asio::cancellation_type::terminal);
  }

  void cut_all(hedge_cut why) {
    std::vector<slot*> running;
    for (auto& sl : slots_)
      if (sl->running && sl->cut == hedge_cut::none)
        running.push_back(sl.get());
    for (slot* sl : running) {
      sl->cut = why;
      if (hears(observer_interest::hedge_abandoned) &&
          (why == hedge_cut::lost || why == hedge_cut::deadline))
        emit(*policy_.observer, hedge_abandoned_event{policy_.label, sl->number});
    }
    for (slot* sl : running)
      if (sl->running && sl->begun)
        sl->signal->emit(asio::cancellation_type::terminal);
  }

  /// On the strand: the caller's slot or the group cancelled (`cancel_step`, `weak_cancel_step`).
  void cancel() final {
    if (!started_) {
      cancel_requested_ = true;
      return;
    }
    if (!finishing_)
      finish_abort();
  }

  void maybe_complete() {
    if (!finishing_ || in_flight_ > 0 || completed_)
      return;
    completed_ = true;
    surface_exception(result_, last_exception_); // hedge_async rethrows it
    hedge_timer_.cancel();
    if (deadlines_)
      deadlines_->remove(deadline_entry_);
    policy_.cancellation.detach(*this);
    if (stats_)
      stats_->elapsed = read_clock<clock>(true) - start_;
    if (hears(observer_interest::operation_finished))
      emit(*policy_.observer,
           operation_finished_event{policy_.label, operation_kind::hedge, launched_,
                                    read_clock<clock>(true) - start_, nanoseconds{0},
                                    result_.reason, result_.error});
    // The handler is called by `release`, once the state is freed: the cancelled attempts'
    // frames and co_spawn completions and the cancelled timer waits still hold it now.
  }

  // Always a post: the source may be cancelled from a hook running on this very strand. Weak:
  // a notice never keeps the state (and its strand) alive past its execution context; the
  // state's destructor waits in `detach` until this has returned.
  static void notify_from_group(cancellation_registration& r) noexcept {
    auto& self = static_cast<hedge_engine&>(r);
    self.cancel_seen_.store(true, std::memory_order_release);
    asio::post(self.strand_,
               allocated(with_fallback(self.alloc_),
                         weak_cancel_step{std::weak_ptr<op_steps>(self.weak_from_this())}));
  }

protected:
  bool hears(observer_interest e) const noexcept { return listens(hears_, e); }

public:
  /// The handler's associated allocator, which every intermediate handler carries (a copy
  /// each), as retry_op's do: the hedge's own hops as `fallback_t` (fallback_allocator.hpp).
  [[no_unique_address]] Alloc alloc_;

protected:
  Strand strand_;
  Policy held_policy_;         ///< a `retry_policy`, or the `shared_policy` that holds it
  const retry_policy& policy_; ///< `held_policy_`'s
  hedge_options hedge_;
  hedge_stats* stats_;
  observer_interest hears_{};                ///< asked of the observer once, by `make_origin`
  std::optional<schedule> sched_;            ///< refers to `policy_`
  timer_type hedge_timer_;                   ///< the next hedge, or the send token of a paced one
  slot_entry deadline_entry_;                ///< the operation's deadline, in the deadline queue
  std::vector<std::unique_ptr<slot>> slots_; ///< as many as ever ran at once
  std::vector<slot*> free_slots_;            ///< of `slots_`, those no attempt holds
  queue_type* deadlines_ = nullptr;          ///< found at the first timed attempt
  loop_result<T> result_;
  std::optional<stored_t<T>> last_rejected_; ///< the last result `retry_if_result` rejected
  std::error_code last_error_;
  std::exception_ptr last_exception_; ///< the last exception `retry_if_exception` accepted
  std::error_code pending_trigger_;
  nanoseconds start_{0};
  op_origin origin_; ///< read at the call; moved into the schedule by start()
  unsigned launched_ = 0;
  unsigned in_flight_ = 0;
  unsigned rejected_by_ = 0;
  unsigned hedge_generation_ = 0;
  unsigned relaunch_depth_ = 0;
  errc stop_reason_{};
  bool started_ = false;
  bool cancel_requested_ = false;
  bool finishing_ = false;
  bool completed_ = false;
  bool pacing_ = false;
  send_token token_; ///< reserved from `rate_limit` for the next attempt
  /// Set, from any thread, by the caller's slot or the group token before they post `cancel`:
  /// `launch` sends no attempt once it is set.
  std::atomic<bool> cancel_seen_{false};
  bool relaunch_posted_ = false; ///< a relaunch() is on its way through the strand's queue
};

/// The hedge's part that names the caller's handler but not the operation: it delivers the
/// outcome (`release` calls `take_completion` and `post_completion`). Every call site with the
/// same handler type (each `hedge_async` for one result type, say) shares it.
template <class Timer, class T, class Policy, class Strand, class Handler, class Executor,
          class Deliver>
class hedge_delivery
    : public hedge_engine<Timer, T, Policy, Strand, asio::associated_allocator_t<Handler>> {
  using engine = hedge_engine<Timer, T, Policy, Strand, asio::associated_allocator_t<Handler>>;

protected:
  hedge_delivery(Strand strand, Handler handler, const Executor& ex, Policy policy,
                 hedge_options hedge, hedge_stats* stats)
      : engine(std::move(strand), asio::get_associated_allocator(handler), std::move(policy),
               std::move(hedge), stats),
        handler_(std::move(handler)), executor_(ex) {
    // Until it completes, the operation keeps its handler's executor busy, as retry_op and
    // Asio's composed operations do: a handler bound to another context keeps that context's
    // run() from returning before the completion arrives.
    handler_work_.emplace(track_work(asio::get_associated_executor(*handler_, executor_)));
  }
  ~hedge_delivery() = default;

  using handler_work_type = work_t<asio::associated_executor_t<Handler, Executor>>;

  /// What `release` hands on to the handler's executor once the state is gone.
  struct completion {
    Handler handler;
    loop_result<T> result;
    std::optional<handler_work_type> work;
    Executor io_executor;

    completion(Handler h, loop_result<T> r, std::optional<handler_work_type> w, const Executor& e)
        : handler(std::move(h)), result(std::move(r)), work(std::move(w)), io_executor(e) {}

    void operator()() {
      auto ex = asio::get_associated_executor(handler, io_executor);
      const auto a = asio::get_associated_allocator(handler);
      [[maybe_unused]] auto held = std::move(work); // released after the dispatch
      // deliver_step clears the caller's slot on the handler's executor, where the caller emits
      // into it, as retry_op does: clearing it on the operation's would race with an emit on the
      // caller's thread.
      asio::dispatch(ex, allocated(with_fallback(a), deliver_step<Handler, T, Deliver>{
                                                         std::move(handler), std::move(result)}));
    }
  };
  /// `release`'s first half, before the state is destroyed: a completed operation's handler, its
  /// outcome and the strand to post them through.
  void take_completion(std::optional<completion>& done, std::optional<Strand>& strand) {
    if (this->completed_) {
      done.emplace(std::move(*handler_), std::move(this->result_), std::move(handler_work_),
                   executor_);
      strand.emplace(this->strand_);
    }
  }

  /// `release`'s second half, once the state's memory is given back.
  static void post_completion(std::optional<completion>& done,
                              std::optional<Strand>& strand) noexcept {
    if (!done)
      return;
    try {
      // Through the operation's executor first: the holder that let go is still running there,
      // and shared_ptr frees its control block (that allocator's memory too) after this returns.
      // Never fails for want of the handler's allocator (fallback_allocator.hpp).
      const auto a = with_fallback(asio::get_associated_allocator(done->handler));
      asio::post(*strand, allocated(a, std::move(*done)));
    } catch (...) {
      // The heap itself ran out: the handler is destroyed uncalled, as at a teardown.
    }
  }

  std::optional<Handler> handler_;
  std::optional<handler_work_type> handler_work_; ///< released when the handler is called
  Executor executor_;
};

/// One hedged operation: the engine and the delivery with the operation `Op`, which it runs for
/// each attempt (`attempt`).
template <class Timer, class T, class Op, class Policy, class Strand, class Handler, class Executor,
          class Deliver>
class hedge_state final
    : public hedge_delivery<Timer, T, Policy, Strand, Handler, Executor, Deliver> {
  using delivery = hedge_delivery<Timer, T, Policy, Strand, Handler, Executor, Deliver>;
  using typename delivery::completion;
  using typename delivery::slot;

public:
  hedge_state(Strand strand, Handler handler, const Executor& ex, Op op, Policy policy,
              hedge_options hedge, hedge_stats* stats)
      : delivery(std::move(strand), std::move(handler), ex, std::move(policy), std::move(hedge),
                 stats),
        op_(std::move(op)) {}
  // Unlinked from the group before anything of the state dies, as when it was one class: a
  // notice running now has returned once this returns (the engine's destructor detaches again,
  // which does nothing then). Since the split, the operation and the handler (uncalled, at a
  // teardown) die before the engine's members (the slots and their grants, the timers, the
  // policy) rather than after them; none of those refers to the operation or the handler.
  ~hedge_state() { this->policy_.cancellation.detach(*this); }

  /// The state's deleter (`initiate_hedge`). The state lives in memory from its handler's
  /// allocator, as retry_op's does, and Asio's rule is that such memory is freed before the
  /// handler is called. So the handler is called from here, when the last holder (an attempt's
  /// frame or completion, a timer wait, a posted step) lets go: the state is destroyed and its
  /// memory given back first. Uncompleted (its execution context is torn down), the handler is
  /// destroyed uncalled with the state.
  template <class Alloc> static void release(hedge_state* p, Alloc alloc) noexcept {
    using traits = std::allocator_traits<Alloc>;
    std::optional<completion> done;
    std::optional<Strand> strand;
    p->take_completion(done, strand);
    traits::destroy(alloc, p);
    traits::deallocate(alloc, p, 1);
    delivery::post_completion(done, strand);
  }

private:
  using self_ptr = std::shared_ptr<hedge_state>;

  asio::awaitable<void> attempt(slot& sl) override {
    return run_attempt(std::static_pointer_cast<hedge_state>(this->shared_from_this()), &sl);
  }

  static asio::awaitable<void> run_attempt(self_ptr s, slot* sl) {
    using shape = attempt_shape<Op>; // attempt_shape.hpp
    hedge_outcome<T> out;
    attempt_context ctx(sl->number);
    sl->begun = true;
    if (sl->cut != hedge_cut::none) {
      out.error = coretry::detail::aborted_error(); // cut before it began
    } else {
      try {
        if constexpr (shape::awaits_void) {
          co_await shape::start(s->op_, ctx);
          out.value.emplace();
        } else {
          shape::take(out, co_await shape::await_outcome(s->op_, ctx));
        }
      }
      CORETRY_DETAIL_CATCH_OUTCOME(out)
    }
    out.attributes = ctx.attributes();
    out.retry_after = ctx.retry_after();
    out.health_code = ctx.health_code();
    // Asio 1.26 (Boost 1.81): when the coroutine ends without having switched context, co_spawn
    // posts once and lets that post throw, out of io_context::run, if the attempt was cut.
    co_await asio::this_coro::throw_if_cancelled(false);
    s->attempt_done(*sl, std::move(out));
  }
  Op op_;
};

template <class Timer, class T, class Deliver> struct initiate_hedge {
  template <class Handler, class Op, class Policy>
  void operator()(Handler&& handler, handler_executor, Op op, Policy policy, hedge_options hedge,
                  hedge_stats* stats) const {
    const auto ex = asio::get_associated_executor(handler);
    (*this)(std::forward<Handler>(handler), ex, std::move(op), std::move(policy), std::move(hedge),
            stats);
  }

  template <class Handler, class Executor, class Op, class Policy>
  void operator()(Handler&& handler, const Executor& ex, Op op, Policy policy, hedge_options hedge,
                  hedge_stats* stats) const {
    auto user_slot = asio::get_associated_cancellation_slot(handler);
    auto launch = [&](const auto& exec) {
      using exec_type = std::decay_t<decltype(exec)>;
      using state_type =
          hedge_state<Timer, T, Op, Policy, exec_type, std::decay_t<Handler>, Executor, Deliver>;
      // One allocation for the state, with the handler's allocator, as retry_op makes its own;
      // `state_type::release` frees it before the handler is called.
      using alloc_type = typename std::allocator_traits<
          asio::associated_allocator_t<std::decay_t<Handler>>>::template rebind_alloc<state_type>;
      using traits = std::allocator_traits<alloc_type>;
      alloc_type alloc(asio::get_associated_allocator(handler));
      state_type* raw = traits::allocate(alloc, 1);
      try {
        traits::construct(alloc, raw, exec, std::forward<Handler>(handler), ex, std::move(op),
                          std::move(policy), std::move(hedge), stats);
      } catch (...) {
        traits::deallocate(alloc, raw, 1);
        throw;
      }
      // The control block comes from the same allocator; should it fail, the deleter runs.
      std::shared_ptr<state_type> s(
          raw, [alloc](state_type* p) noexcept { state_type::release(p, alloc); }, alloc);
      s->connect(user_slot);
      // retry_op's start (`retry_engine::start`): dispatched, so when this thread runs the
      // operation's executor already the first attempts start inside the initiating function.
      // The handler is never called from there: `release` always posts it.
      if (running_here(exec)) {
        const initiation_mark mark(s.get());
        s->start();
        return;
      }
      const auto a = with_fallback(s->alloc_); // never fails: `s` goes with it
      asio::post(exec, resume_step<std::decay_t<decltype(a)>>{std::move(s), a});
    };
    // retry_op's choice (initiate_retry): no strand on a context that runs one thread only. A
    // hedge has more than one thing pending at once (its attempts, its timers), so it takes a
    // strand everywhere else.
    if (runs_on_one_thread(ex))
      launch(ex);
    else
      with_serializing_executor(ex, launch);
  }
};

/// hedge_async's body: the initiation itself, awaited.
/// `Policy`: a `retry_policy` or a `shared_policy` (`hedge_policy_t`), moved into the state.
template <class Timer, class T, class Op, class Policy>
asio::awaitable<T> hedge_entry(Op&& op, Policy&& policy, hedge_options&& hedge,
                               hedge_stats* stats) {
  static_assert(!std::is_reference_v<Policy>);
  check_hedge<T>(policy, hedge);
  auto a = asio::async_initiate<const asio::use_awaitable_t<>&, exception_signature_t<T>>(
      initiate_hedge<Timer, T, deliver_exception>{}, asio::use_awaitable, handler_executor{},
      std::move(op), std::move(policy), std::move(hedge), stats);
  if constexpr (std::is_same_v<delivered_t<T>, T>)
    return a;
  else
    return take_optional<T>(std::move(a));
}

} // namespace coretry::detail
