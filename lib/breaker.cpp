// SPDX-License-Identifier: BSL-1.0
#include <coretry/breaker.hpp>
#include <coretry/random.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reject.hpp"
#include "saturate.hpp"
#include "window.hpp"

namespace coretry {
namespace {

using std::chrono::nanoseconds;

[[noreturn]] void reject(const char* field, double value, const char* rule) {
  detail::refuse("coretry::circuit_breaker_options", field, value, rule);
}

// The state word: the state in the top two bits, its payload in the other 62.
//   closed:    the current run of failures
//   open:      the end of the break, in ns since the clock's epoch
//   half_open: probes in flight (bits 0-15) and probe successes (bits 16-31)
//   isolated:  nothing (manual control: only `reset` leaves it)
constexpr std::uint64_t payload_mask = (std::uint64_t{1} << 62) - 1;

constexpr std::uint64_t make_word(breaker_state s, std::uint64_t payload) noexcept {
  return (static_cast<std::uint64_t>(s) << 62) | (payload & payload_mask);
}
constexpr breaker_state state_of(std::uint64_t w) noexcept {
  return static_cast<breaker_state>(w >> 62);
}
constexpr std::uint64_t payload_of(std::uint64_t w) noexcept {
  return w & payload_mask;
}
constexpr std::uint64_t probes_of(std::uint64_t w) noexcept {
  return w & 0xffff;
}
constexpr std::uint64_t probe_successes(std::uint64_t w) noexcept {
  return (w >> 16) & 0xffff;
}
constexpr std::uint64_t half_open_word(std::uint64_t flight, std::uint64_t ok) noexcept {
  return make_word(breaker_state::half_open, flight | (ok << 16));
}

std::uint64_t open_word(nanoseconds until) noexcept {
  const std::int64_t t = std::max<std::int64_t>(0, until.count());
  return make_word(breaker_state::open,
                   std::min<std::uint64_t>(static_cast<std::uint64_t>(t), payload_mask));
}

} // namespace

const char* to_string(breaker_state s) noexcept {
  switch (s) {
  case breaker_state::closed:
    return "closed";
  case breaker_state::open:
    return "open";
  case breaker_state::half_open:
    return "half_open";
  case breaker_state::isolated:
    return "isolated";
  }
  return "unknown";
}

circuit_breaker::circuit_breaker(circuit_breaker_options options)
    : options_(std::move(options)), word_(make_word(breaker_state::closed, 0)),
      rng_(options_.seed ? *options_.seed : fast_rng::from_entropy()()),
      closed_at_(std::numeric_limits<std::int64_t>::min()) {
  CORETRY_ALLOW_DEPRECATED_BEGIN
  if (options_.max_concurrent_calls != 0 && options_.max_in_flight != 0 &&
      options_.max_concurrent_calls != options_.max_in_flight)
    detail::refuse_both("coretry::circuit_breaker_options", "max_concurrent_calls",
                        std::to_string(options_.max_concurrent_calls), "max_in_flight",
                        std::to_string(options_.max_in_flight));
  // Both names hold the limit in effect, so that `options()` reads alike under either.
  options_.max_concurrent_calls = options_.max_in_flight = detail::max_concurrent_calls(options_);
  CORETRY_ALLOW_DEPRECATED_END
  const auto& o = options_;
  if (o.consecutive_failures > 1'000'000)
    reject("consecutive_failures", o.consecutive_failures, "must be in [0, 1000000]");
  if (!(o.failure_ratio >= 0 && o.failure_ratio <= 1))
    reject("failure_ratio", o.failure_ratio, "must be in [0, 1]");
  if (o.consecutive_failures == 0 && o.failure_ratio == 0 && o.slow_call_duration == unlimited)
    reject("consecutive_failures", 0,
           "and failure_ratio both 0 (and no slow_call_duration): the breaker could never open");
  if (o.window_type != sliding_window::time_based && o.window_type != sliding_window::count_based)
    reject("window_type", static_cast<int>(o.window_type),
           "must be sliding_window::time_based or count_based");
  if (o.window_calls < 1 || o.window_calls > 100'000)
    reject("window_calls", o.window_calls, "must be in [1, 100000]");
  if (o.slow_call_duration <= nanoseconds::zero())
    reject("slow_call_duration (ns)", static_cast<double>(o.slow_call_duration.count()),
           "must be positive");
  if (!(o.slow_call_ratio > 0 && o.slow_call_ratio <= 1))
    reject("slow_call_ratio", o.slow_call_ratio, "must be in (0, 1]");
  if (o.minimum_throughput < 1)
    reject("minimum_throughput", o.minimum_throughput, "must be at least 1");
  if (o.window <= nanoseconds::zero())
    reject("window (ns)", static_cast<double>(o.window.count()), "must be positive");
  if (o.window_buckets < 1 || o.window_buckets > 1000)
    reject("window_buckets", o.window_buckets, "must be in [1, 1000]");
  if (o.window / o.window_buckets <= nanoseconds::zero())
    reject("window_buckets", o.window_buckets, "window / window_buckets must be at least 1 ns");
  if (o.break_duration <= nanoseconds::zero())
    reject("break_duration (ns)", static_cast<double>(o.break_duration.count()),
           "must be positive");
  if (!(o.break_jitter >= 0 && o.break_jitter < 1))
    reject("break_jitter", o.break_jitter, "must be in [0, 1)");
  if (o.half_open_probes < 1 || o.half_open_probes > 0xffff)
    reject("half_open_probes", o.half_open_probes, "must be in [1, 65535]");
  if (o.ramp < nanoseconds::zero())
    reject("ramp (ns)", static_cast<double>(o.ramp.count()), "must not be negative");
  if (o.max_concurrent_calls > 1'000'000)
    reject("max_concurrent_calls", o.max_concurrent_calls, "must be in [0, 1000000]");
  if (o.retry_interval <= nanoseconds::zero())
    reject("retry_interval (ns)", static_cast<double>(o.retry_interval.count()),
           "must be positive");
  window_successes_ =
      std::make_unique<detail::window_counter>(o.window / o.window_buckets, o.window_buckets);
  window_failures_ =
      std::make_unique<detail::window_counter>(o.window / o.window_buckets, o.window_buckets);
  window_slow_ =
      std::make_unique<detail::window_counter>(o.window / o.window_buckets, o.window_buckets);
  if (o.window_type == sliding_window::count_based)
    calls_ = std::make_unique<detail::call_window>(o.window_calls);
}

circuit_breaker::~circuit_breaker() = default;

double circuit_breaker::draw_uniform(double lo, double hi) noexcept {
  // One SplitMix64 step per draw, taken with fetch_add: the same stream a `fast_rng` seeded with
  // `seed` yields, safe from any thread.
  fast_rng draw(rng_.fetch_add(0x9e3779b97f4a7c15ull, std::memory_order_relaxed));
  return draw.uniform(lo, hi);
}

nanoseconds circuit_breaker::draw_break() noexcept {
  const double j = options_.break_jitter;
  if (j == 0)
    return options_.break_duration;
  const double u = draw_uniform(1 - j, 1 + j);
  return detail::ns_sat(static_cast<double>(options_.break_duration.count()) * u);
}

bool circuit_breaker::ramp_admits(nanoseconds now) noexcept {
  if (options_.ramp == nanoseconds::zero())
    return true;
  const std::int64_t since =
      detail::sub_sat(now.count(), closed_at_.load(std::memory_order_acquire));
  if (since >= options_.ramp.count())
    return true;
  const double fraction =
      since <= 0 ? 0.0 : static_cast<double>(since) / static_cast<double>(options_.ramp.count());
  return draw_uniform(0, 1) < fraction;
}

nanoseconds circuit_breaker::retry_after(nanoseconds now) noexcept {
  const double interval = static_cast<double>(options_.retry_interval.count());
  const std::uint64_t w = word_.load(std::memory_order_acquire);
  if (state_of(w) == breaker_state::isolated)
    return unlimited; // only `reset` ends an isolation: a waiting operation stops at once
  if (state_of(w) == breaker_state::open) {
    // Spread past the end of the break: the first to ask again is the probe, the rest find the
    // breaker half-open and come back a little later, each at its own time.
    const nanoseconds until(static_cast<std::int64_t>(payload_of(w)));
    const nanoseconds left = until > now ? until - now : nanoseconds::zero();
    return std::max(nanoseconds(1),
                    detail::add_sat(left, detail::ns_sat(interval * draw_uniform(0, 1))));
  }
  return std::max(nanoseconds(1), detail::ns_sat(interval * draw_uniform(0.5, 1.5)));
}

detail::call_window_sums circuit_breaker::window_sums(nanoseconds now) const noexcept {
  if (calls_)
    return calls_->sum();
  return {window_successes_->sum(now), window_failures_->sum(now), window_slow_->sum(now)};
}

/// The outcomes a ratio needs in the window before it is judged: `minimum_throughput`, or the
/// whole count window when it holds fewer (as resilience4j does), so that a count window smaller
/// than the minimum still opens.
static std::uint64_t minimum_calls(const circuit_breaker_options& o, bool count_window) noexcept {
  return count_window ? std::min<std::uint64_t>(o.minimum_throughput, o.window_calls)
                      : o.minimum_throughput;
}

bool circuit_breaker::ratio_tripped(nanoseconds now) const noexcept {
  if (options_.failure_ratio == 0)
    return false;
  const auto sums = window_sums(now);
  const std::uint64_t total = sums.failures + sums.successes;
  return total >= minimum_calls(options_, calls_ != nullptr) &&
         static_cast<double>(sums.failures) >= options_.failure_ratio * static_cast<double>(total);
}

bool circuit_breaker::slow_tripped(nanoseconds now) const noexcept {
  if (options_.slow_call_duration == unlimited)
    return false;
  const auto sums = window_sums(now);
  const std::uint64_t total = sums.failures + sums.successes;
  return total >= minimum_calls(options_, calls_ != nullptr) &&
         static_cast<double>(sums.slow) >= options_.slow_call_ratio * static_cast<double>(total);
}

void circuit_breaker::count_outcome(nanoseconds now, bool failure, bool slow) noexcept {
  if (calls_) {
    calls_->add(failure ? detail::call_window::failure
                        : (slow ? detail::call_window::slow : detail::call_window::success));
    return;
  }
  if (failure) {
    window_failures_->add(now);
    return;
  }
  window_successes_->add(now);
  if (slow)
    window_slow_->add(now);
}

void circuit_breaker::clear_window() noexcept {
  window_successes_->clear();
  window_failures_->clear();
  window_slow_->clear();
  if (calls_)
    calls_->clear();
}

void circuit_breaker::trip(nanoseconds now) noexcept {
  const nanoseconds until = detail::add_sat(now, draw_break());
  std::uint64_t w = word_.load(std::memory_order_acquire);
  for (;;) {
    const breaker_state from = state_of(w);
    if (from != breaker_state::closed && from != breaker_state::half_open)
      return;
    if (word_.compare_exchange_weak(w, open_word(until), std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      transition(from, breaker_state::open, now);
      return;
    }
  }
}

void circuit_breaker::transition(breaker_state from, breaker_state to, nanoseconds now) noexcept {
  switch (to) {
  case breaker_state::open:
    opened_.fetch_add(1, std::memory_order_relaxed);
    break;
  case breaker_state::half_open:
    half_opened_.fetch_add(1, std::memory_order_relaxed);
    break;
  case breaker_state::closed:
    clear_window();
    closed_.fetch_add(1, std::memory_order_relaxed);
    break;
  case breaker_state::isolated:
    isolated_.fetch_add(1, std::memory_order_relaxed);
    break;
  }
  if (options_.on_transition)
    options_.on_transition(from, to, now);
}

bool circuit_breaker::try_acquire(nanoseconds now) noexcept {
  const unsigned cap = options_.max_concurrent_calls;
  if (cap == 0)
    return acquire_state(now);
  // A slot first, then the state: a refused state hands the slot back, so no probe slot is
  // taken for an attempt the limit then refuses.
  if (in_flight_.fetch_add(1, std::memory_order_acq_rel) >= cap) {
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    refusals_.fetch_add(1, std::memory_order_relaxed);
    in_flight_refusals_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (acquire_state(now))
    return true;
  in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  return false;
}

void circuit_breaker::release_slot() noexcept {
  if (options_.max_concurrent_calls != 0)
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
}

bool circuit_breaker::acquire_state(nanoseconds now) noexcept {
  std::uint64_t w = word_.load(std::memory_order_acquire);
  for (;;) {
    switch (state_of(w)) {
    case breaker_state::closed:
      if (!ramp_admits(now)) {
        refusals_.fetch_add(1, std::memory_order_relaxed);
        ramp_refusals_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      return true;
    case breaker_state::isolated:
      refusals_.fetch_add(1, std::memory_order_relaxed);
      return false;
    case breaker_state::open: {
      if (now.count() < static_cast<std::int64_t>(payload_of(w))) {
        refusals_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      // The break is over: this attempt is the first probe.
      if (word_.compare_exchange_weak(w, half_open_word(1, 0), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        transition(breaker_state::open, breaker_state::half_open, now);
        return true;
      }
      break;
    }
    case breaker_state::half_open: {
      if (probes_of(w) >= options_.half_open_probes) {
        refusals_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      if (word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire))
        return true;
      break;
    }
    }
  }
}

void circuit_breaker::on_outcome(health h, nanoseconds now, nanoseconds duration) noexcept {
  if (h == health::healthy && duration > options_.slow_call_duration)
    succeed(now, true);
  else
    attempt_gate::on_outcome(h, now, duration);
}

void circuit_breaker::on_success(nanoseconds now) noexcept {
  succeed(now, false);
}

void circuit_breaker::succeed(nanoseconds now, bool slow) noexcept {
  release_slot();
  successes_.fetch_add(1, std::memory_order_relaxed);
  if (slow)
    slow_calls_.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t w = word_.load(std::memory_order_acquire);
  if (state_of(w) == breaker_state::closed) {
    count_outcome(now, false, slow);
    // Judged after every outcome, fast ones included: a fast call may be the one that brings
    // the window to its minimum.
    if (slow_tripped(now)) {
      trip(now);
      return;
    }
  } else if (slow && state_of(w) == breaker_state::half_open) {
    trip(now); // a slow probe: the upstream is still too slow
    return;
  }
  for (;;) {
    std::uint64_t next = 0;
    switch (state_of(w)) {
    case breaker_state::closed:
      if (payload_of(w) == 0)
        return;
      next = make_word(breaker_state::closed, 0);
      break;
    case breaker_state::open:
    case breaker_state::isolated:
      return;
    case breaker_state::half_open: {
      const std::uint64_t ok = probe_successes(w) + 1;
      if (ok >= options_.half_open_probes) {
        // Stamped before the word is: a ramp never reads an older closing time once closed.
        closed_at_.store(now.count(), std::memory_order_release);
        next = make_word(breaker_state::closed, 0);
      } else {
        next = half_open_word(probes_of(w) > 0 ? probes_of(w) - 1 : 0, ok);
      }
      break;
    }
    }
    if (word_.compare_exchange_weak(w, next, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      if (state_of(w) == breaker_state::half_open && state_of(next) == breaker_state::closed)
        transition(breaker_state::half_open, breaker_state::closed, now);
      return;
    }
  }
}

void circuit_breaker::on_failure(nanoseconds now) noexcept {
  release_slot();
  failures_.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t w = word_.load(std::memory_order_acquire);
  if (state_of(w) == breaker_state::closed)
    count_outcome(now, true, false);
  std::optional<nanoseconds> until;
  for (;;) {
    std::uint64_t next = 0;
    switch (state_of(w)) {
    case breaker_state::open:
    case breaker_state::isolated:
      return;
    case breaker_state::closed: {
      const std::uint64_t run = std::min<std::uint64_t>(payload_of(w) + 1, 0xffffffffu);
      const bool trip =
          (options_.consecutive_failures != 0 && run >= options_.consecutive_failures) ||
          ratio_tripped(now) || slow_tripped(now);
      if (!trip) {
        next = make_word(breaker_state::closed, run);
        break;
      }
      [[fallthrough]];
    }
    case breaker_state::half_open:
      if (!until)
        until = detail::add_sat(now, draw_break());
      next = open_word(*until);
      break;
    }
    if (word_.compare_exchange_weak(w, next, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      if (state_of(next) == breaker_state::open)
        transition(state_of(w), breaker_state::open, now);
      return;
    }
  }
}

health circuit_breaker::classify(const std::error_code& ec) const {
  return options_.classify ? options_.classify(ec) : default_health(ec);
}

void circuit_breaker::on_abandoned(nanoseconds) noexcept {
  abandoned_.fetch_add(1, std::memory_order_relaxed);
  release_slot();
  free_probe();
}

void circuit_breaker::on_pushback(nanoseconds) noexcept {
  pushbacks_.fetch_add(1, std::memory_order_relaxed);
  release_slot();
  free_probe();
}

void circuit_breaker::free_probe() noexcept {
  std::uint64_t w = word_.load(std::memory_order_acquire);
  while (state_of(w) == breaker_state::half_open && probes_of(w) > 0 &&
         !word_.compare_exchange_weak(w, w - 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
  }
}

// Manual control: the only ways into and out of `isolated`, apart from the automatic machine.
void circuit_breaker::isolate(nanoseconds now) noexcept {
  const std::uint64_t w =
      word_.exchange(make_word(breaker_state::isolated, 0), std::memory_order_acq_rel);
  if (state_of(w) != breaker_state::isolated)
    transition(state_of(w), breaker_state::isolated, now);
}

void circuit_breaker::reset(nanoseconds now) noexcept {
  std::uint64_t w = word_.load(std::memory_order_acquire);
  for (;;) {
    // Closing from open, half-open or isolated starts the ramp afresh, as a probe's closing
    // does: stamped before the word is, so that no attempt sees the breaker closed with an
    // older closing time (one that would skip the ramp, or resume an older one). A closed
    // breaker keeps its ramp.
    if (state_of(w) != breaker_state::closed)
      closed_at_.store(now.count(), std::memory_order_release);
    if (word_.compare_exchange_weak(w, make_word(breaker_state::closed, 0),
                                    std::memory_order_acq_rel, std::memory_order_acquire))
      break;
  }
  if (state_of(w) != breaker_state::closed) {
    transition(state_of(w), breaker_state::closed, now); // clears the window
  } else {
    clear_window();
  }
}

breaker_state circuit_breaker::state() const noexcept {
  return state_of(word_.load(std::memory_order_acquire));
}

nanoseconds circuit_breaker::open_until() const noexcept {
  const std::uint64_t w = word_.load(std::memory_order_acquire);
  return state_of(w) == breaker_state::open ? nanoseconds(static_cast<std::int64_t>(payload_of(w)))
                                            : nanoseconds::zero();
}

unsigned circuit_breaker::probes_in_flight() const noexcept {
  const std::uint64_t w = word_.load(std::memory_order_acquire);
  return state_of(w) == breaker_state::half_open ? static_cast<unsigned>(probes_of(w)) : 0;
}

unsigned circuit_breaker::failure_run() const noexcept {
  const std::uint64_t w = word_.load(std::memory_order_acquire);
  return state_of(w) == breaker_state::closed ? static_cast<unsigned>(payload_of(w)) : 0;
}

std::uint64_t circuit_breaker::window_successes(nanoseconds now) const noexcept {
  return calls_ ? calls_->sum().successes : window_successes_->sum(now);
}

std::uint64_t circuit_breaker::window_failures(nanoseconds now) const noexcept {
  return calls_ ? calls_->sum().failures : window_failures_->sum(now);
}

std::uint64_t circuit_breaker::window_slow_calls(nanoseconds now) const noexcept {
  return calls_ ? calls_->sum().slow : window_slow_->sum(now);
}

const char* to_string(sliding_window w) noexcept {
  switch (w) {
  case sliding_window::time_based:
    return "time_based";
  case sliding_window::count_based:
    return "count_based";
  }
  return "unknown";
}

} // namespace coretry

namespace coretry {

const char* to_string(health h) noexcept {
  switch (h) {
  case health::healthy:
    return "healthy";
  case health::unhealthy:
    return "unhealthy";
  case health::pushback:
    return "pushback";
  case health::ignored:
    return "ignored";
  }
  return "unknown";
}

health default_health(const std::error_code& ec) noexcept {
  if (!ec)
    return health::healthy;
  if (ec == condition::cancelled)
    return health::ignored;
  if (ec == condition::pushback)
    return health::pushback;
  if (ec == condition::client_error || ec == condition::answered)
    return health::healthy;
  return health::unhealthy;
}

} // namespace coretry
