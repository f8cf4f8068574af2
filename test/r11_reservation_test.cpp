// SPDX-License-Identifier: BSL-1.0
// Reviewer r11: fb866e3 made gate_grant, send_token and retry_charge one template,
// reservation<Control, Give>. These cases pin the behaviour the three classes had before (at
// 966d674's parent): each settles once; a move leaves the source empty; a move-assignment gives
// back what the target held, then takes the source; the destructor gives back; the time
// reported. PASS at b6904aa (what held), and at 794c43a (before fb866e3) alike.

#include <coretry/detail/reservation.hpp>

#include <doctest/doctest.h>
#include <support/fake_gate.hpp>

#include <chrono>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using coretry::detail::gate_grant;
using coretry::detail::retry_charge;
using coretry::detail::send_token;
using std::chrono::nanoseconds;

namespace {

nanoseconds clock_now = 0ns;
nanoseconds read_clock() noexcept {
  return clock_now;
}

struct latency_gate final : coretry::attempt_gate {
  std::vector<std::pair<coretry::health, nanoseconds>> heard; // (health, latency)
  std::vector<nanoseconds> at;
  bool try_acquire(nanoseconds) noexcept override { return true; }
  void on_success(nanoseconds) noexcept override {}
  void on_failure(nanoseconds) noexcept override {}
  void on_abandoned(nanoseconds) noexcept override {}
  void on_outcome(coretry::health h, nanoseconds now, nanoseconds latency) noexcept override {
    heard.emplace_back(h, latency);
    at.push_back(now);
  }
};

struct log_rate final : coretry::send_rate {
  std::vector<nanoseconds> released;
  nanoseconds acquire(nanoseconds) noexcept override { return 0ns; }
  void release(nanoseconds now) noexcept override { released.push_back(now); }
  void on_throttle(nanoseconds) noexcept override {}
  void on_success(nanoseconds) noexcept override {}
};

struct log_budget final : coretry::retry_budget {
  std::vector<nanoseconds> refunded;
  bool try_retry(nanoseconds) noexcept override { return true; }
  void refund(nanoseconds granted_at) noexcept override { refunded.push_back(granted_at); }
};

} // namespace

TEST_CASE("r11: gate_grant: abandoned once, at the clock's now, latency from the grant") {
  latency_gate g;
  clock_now = 30ns;
  {
    gate_grant a(&g, read_clock, 10ns);
    gate_grant b(std::move(a));
    CHECK_FALSE(a);
    CHECK(b);
    CHECK(b.gate() == &g);
    a.abandoned(); // empty: nothing
    CHECK(g.heard.empty());
  } // b's destructor: abandoned at 30 ns, 20 ns after the grant
  REQUIRE(g.heard.size() == 1);
  CHECK(g.heard[0].first == coretry::health::ignored);
  CHECK(g.heard[0].second == 20ns);
  CHECK(g.at[0] == 30ns);
  {
    gate_grant a(&g, nullptr, 50ns); // no clock: reported at the grant's time
    a.report(coretry::health::healthy, 70ns);
    a.report(coretry::health::unhealthy, 80ns); // once
    a.abandoned();
    CHECK(a.gate() == nullptr);
  }
  REQUIRE(g.heard.size() == 2);
  CHECK(g.heard[1] == std::pair{coretry::health::healthy, nanoseconds(20ns)});
  {
    gate_grant a(&g, nullptr, 100ns);
    gate_grant b(&g, nullptr, 200ns);
    a = std::move(b); // a's grant abandoned at its own time (latency 0), then b's taken
    REQUIRE(g.heard.size() == 3);
    CHECK(g.heard[2] == std::pair{coretry::health::ignored, nanoseconds(0ns)});
    CHECK(g.at[2] == 100ns);
    a = std::move(a); // self: nothing
    CHECK(g.heard.size() == 3);
    a.report(coretry::health::unhealthy, 250ns);
    CHECK(g.heard[3] == std::pair{coretry::health::unhealthy, nanoseconds(50ns)});
  }
  CHECK(g.heard.size() == 4);
  // A clock earlier than the grant: latency zero, not negative.
  {
    gate_grant a(&g, nullptr, 100ns);
    a.report(coretry::health::healthy, 90ns);
  }
  CHECK(g.heard[4].second == 0ns);
}

TEST_CASE("r11: send_token: released once at the clock's now unless used") {
  log_rate r;
  clock_now = 7ns;
  {
    send_token t(&r, read_clock, 3ns);
    send_token u(std::move(t));
    u.used();
    u.returned();
  }
  CHECK(r.released.empty());
  {
    send_token t(&r, read_clock, 3ns);
    send_token u(&r, nullptr, 5ns);
    t = std::move(u); // t's token released (clock: 7 ns); u's taken
    REQUIRE(r.released.size() == 1);
    CHECK(r.released[0] == 7ns);
  } // t (u's, no clock) released at 5 ns
  REQUIRE(r.released.size() == 2);
  CHECK(r.released[1] == 5ns);
}

TEST_CASE("r11: retry_charge: refunded once with the time it was granted, unless used") {
  log_budget b;
  clock_now = 99ns;
  {
    retry_charge c(&b, 4ns);
    retry_charge d;
    d = std::move(c);
    CHECK_FALSE(c);
    d.returned();
    d.returned();
  }
  REQUIRE(b.refunded.size() == 1);
  CHECK(b.refunded[0] == 4ns); // the grant's time, never the clock's
  {
    retry_charge c(&b, 6ns);
    c.used();
  }
  CHECK(b.refunded.size() == 1);
}
