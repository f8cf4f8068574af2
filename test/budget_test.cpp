// SPDX-License-Identifier: BSL-1.0
// Retry budgets on their own, with explicit times: the gRPC token bucket and the sliding-window
// ratio budget.

#include <coretry/budget.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using coretry::ratio_budget;
using coretry::ratio_budget_options;

namespace {

std::string rejection(ratio_budget_options o) {
  try {
    ratio_budget b(o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "valid";
}

int grant_all(ratio_budget& b, std::chrono::nanoseconds now, int asks) {
  int granted = 0;
  for (int i = 0; i < asks; ++i)
    granted += b.try_retry(now) ? 1 : 0;
  return granted;
}

} // namespace

TEST_CASE(
    "the token bucket refuses retries once half the bucket is spent, and refills on success") {
  coretry::token_bucket_budget b(10, 0.5);
  CHECK(b.try_retry({}));
  for (int i = 0; i < 4; ++i)
    b.on_failure({});
  CHECK(b.tokens() == doctest::Approx(6));
  CHECK(b.try_retry({}));
  b.on_failure({}); // 5 left: not more than half
  CHECK_FALSE(b.try_retry({}));
  b.on_success({}); // 5.5
  CHECK(b.try_retry({}));
  for (int i = 0; i < 100; ++i)
    b.on_success({});
  CHECK(b.tokens() == doctest::Approx(10)); // capped
  for (int i = 0; i < 100; ++i)
    b.on_failure({});
  CHECK(b.tokens() == doctest::Approx(0)); // floored
  CHECK_THROWS_AS(coretry::token_bucket_budget(0, 0.1), std::invalid_argument);
  CHECK_THROWS_AS(coretry::token_bucket_budget(10, 0), std::invalid_argument);
}

TEST_CASE("the token bucket ignores the time it is given") {
  coretry::token_bucket_budget b(4, 1);
  b.on_failure(0s);
  b.on_failure(1000s);
  CHECK(b.tokens() == doctest::Approx(2));
  CHECK_FALSE(b.try_retry(-5s));
}

TEST_CASE("the ratio budget allows ratio times the requests of the window plus the reserve") {
  // 10 % of the requests, plus 1 retry per second of a 10 s window: 10 in reserve.
  ratio_budget b({.ratio = 0.1, .min_retries_per_second = 1, .window = 10s, .window_buckets = 10});
  for (int i = 0; i < 200; ++i)
    b.on_request(3s);
  CHECK(b.requests(3s) == 200);
  CHECK(b.allowance(3s) == doctest::Approx(30));
  CHECK(grant_all(b, 3s, 100) == 30);
  CHECK(b.retries(3s) == 30);
  CHECK(b.granted() == 30);
  CHECK(b.refused() == 70);
  // One more request is worth a tenth of a retry: not enough for one.
  b.on_request(3s);
  CHECK_FALSE(b.try_retry(3s));
  for (int i = 0; i < 9; ++i)
    b.on_request(3s);
  CHECK(b.try_retry(3s)); // 210 requests: 21 + 10 = 31
  CHECK_FALSE(b.try_retry(3s));
}

TEST_CASE("the reserve lets a quiet client retry with no request seen, and charges nothing later") {
  ratio_budget b(
      {.ratio = 0.1, .min_retries_per_second = 0.5, .window = 10s, .window_buckets = 10});
  CHECK(grant_all(b, 0s, 10) == 5); // 0.5/s over 10 s
  // Later requests earn their own share in full: the reserve was not a loan.
  for (int i = 0; i < 100; ++i)
    b.on_request(1s);
  CHECK(grant_all(b, 1s, 20) == 10); // 10 + 5 = 15 allowed, 5 used
}

TEST_CASE("with no reserve and no ratio the ratio budget refuses every retry") {
  ratio_budget b({.ratio = 0, .min_retries_per_second = 0});
  b.on_request(0s);
  CHECK_FALSE(b.try_retry(0s));
  CHECK(b.retries(0s) == 0); // a refused retry is not counted
}

TEST_CASE("requests and retries leave the window bucket by bucket") {
  // Buckets of 1 s: an event in [k s, (k+1) s) counts until (k+10) s.
  ratio_budget b({.ratio = 0.5, .min_retries_per_second = 0, .window = 10s, .window_buckets = 10});
  for (int i = 0; i < 10; ++i)
    b.on_request(500ms); // bucket 0
  for (int i = 0; i < 10; ++i)
    b.on_request(1s); // bucket 1
  CHECK(grant_all(b, 1s, 20) == 10);
  CHECK(b.requests(9999ms) == 20);
  CHECK(b.retries(9999ms) == 10);
  // At 10 s bucket 0 (requests and the retries) is gone; bucket 1 stays.
  CHECK(b.requests(10s) == 10);
  CHECK(b.retries(10s) == 10); // the retries were counted at 1 s, in bucket 1
  CHECK(b.retries(11s - 1ns) == 10);
  CHECK(b.retries(11s) == 0);
  CHECK(b.requests(11s) == 0);
  CHECK(b.allowance(11s) == doctest::Approx(0));
  CHECK_FALSE(b.try_retry(11s));
}

TEST_CASE("an outage is forgiven once it has left the window") {
  ratio_budget b({.ratio = 0.1, .min_retries_per_second = 0, .window = 10s, .window_buckets = 10});
  // Steady traffic, 100 requests a second, then retries use the whole share.
  for (int s = 0; s < 10; ++s)
    for (int i = 0; i < 100; ++i)
      b.on_request(std::chrono::seconds(s));
  CHECK(grant_all(b, 9s, 1000) == 100);
  CHECK_FALSE(b.try_retry(9s));
  // One second on, bucket 0 (100 requests) has left the window, but no retry of the 9 s bucket
  // has: 900 requests allow 90, and 100 are already counted.
  CHECK_FALSE(b.try_retry(10s));
  // Once the retries' bucket has left the window too, the share is back.
  for (int i = 0; i < 100; ++i)
    b.on_request(19s);
  CHECK(b.requests(19s) == 100);
  CHECK(b.retries(19s) == 0);
  CHECK(grant_all(b, 19s, 1000) == 10);
}

TEST_CASE("the ratio budget holds at the exact boundary of its share") {
  ratio_budget b({.ratio = 0.25, .min_retries_per_second = 0, .window = 4s, .window_buckets = 4});
  for (int i = 0; i < 8; ++i)
    b.on_request(0s);
  CHECK(b.try_retry(0s));       // 1 <= 2
  CHECK(b.try_retry(0s));       // 2 <= 2
  CHECK_FALSE(b.try_retry(0s)); // 3 > 2
  CHECK(b.retries(0s) == 2);
  CHECK(b.retries(3999ms) == 2);
  CHECK(b.retries(4s) == 0);
}

TEST_CASE("the ratio budget works with times before the clock's epoch") {
  ratio_budget b({.ratio = 1, .min_retries_per_second = 0, .window = 2s, .window_buckets = 2});
  b.on_request(-1500ms); // bucket -2
  b.on_request(-1ns);    // bucket -1
  CHECK(b.requests(0s) == 1);
  CHECK(b.requests(-1ns) == 2);
  CHECK(b.try_retry(-1ns));
  CHECK(b.try_retry(-1ns));
  CHECK_FALSE(b.try_retry(-1ns));
}

TEST_CASE("bad ratio budget options name the field and its value") {
  CHECK(rejection({.ratio = -1}) ==
        "coretry::ratio_budget: ratio = -1.000000 (must be in [0, 100])");
  CHECK(rejection({.min_retries_per_second = -0.5}).find("min_retries_per_second = -0.5") !=
        std::string::npos);
  CHECK(rejection({.window = 0s}).find("window (ns) = 0") != std::string::npos);
  CHECK(rejection({.window_buckets = 0}).find("buckets = 0") != std::string::npos);
  CHECK(rejection({.window = 5ns, .window_buckets = 10}).find("buckets = 10") != std::string::npos);
  CHECK(rejection({}) == "valid");
}

TEST_CASE("two threads sharing one ratio budget never exceed its share") {
  ratio_budget b({.ratio = 0.5, .min_retries_per_second = 0, .window = 10s, .window_buckets = 10});
  for (int i = 0; i < 1000; ++i)
    b.on_request(1s);
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        b.on_request(std::chrono::seconds(1) + std::chrono::milliseconds(t)); // 1000 more
        if (b.try_retry(1s))
          granted.fetch_add(1);
        if (b.try_retry(1s))
          granted.fetch_add(1);
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(b.requests(1s) == 3000);
  CHECK(granted.load() <= 1500);
  CHECK(granted.load() > 1000); // refusals from races are rare, not the rule
  CHECK(b.retries(1s) == static_cast<std::uint64_t>(granted.load()));
  CHECK(b.granted() + b.refused() == 4000);
}

TEST_CASE("a window left alone for 2^31 or 2^32 buckets does not read its old counts as new") {
  for (const std::int64_t idle : {std::int64_t{1} << 31, std::int64_t{1} << 32}) {
    // 1 ms buckets: 25 and 50 days of uptime.
    ratio_budget b({.ratio = 1, .min_retries_per_second = 0, .window = 10ms, .window_buckets = 10});
    for (int i = 0; i < 5; ++i)
      b.on_request(0ms);
    CHECK(b.requests(0ms) == 5);
    const auto later = std::chrono::milliseconds(idle);
    CHECK(b.requests(later) == 0);
    CHECK_FALSE(b.try_retry(later)); // no request in this window: no retry
    b.on_request(later);             // a new event in the slot is counted, not dropped
    CHECK(b.requests(later) == 1);
  }
}

TEST_CASE("a retry granted and not sent is refunded to the ratio budget") {
  ratio_budget b({.ratio = 0, .min_retries_per_second = 0.2, .window = 10s}); // 2 per window
  CHECK(b.try_retry(1s));
  CHECK(b.try_retry(1s));
  CHECK_FALSE(b.try_retry(1s));
  b.refund(1s);
  CHECK(b.retries(1s) == 1);
  CHECK(b.try_retry(2s));
}
