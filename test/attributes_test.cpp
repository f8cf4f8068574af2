// SPDX-License-Identifier: BSL-1.0
// Attempt attributes (attempt.hpp): what an attempt sets on its context reaches the observer's
// attempt_finished event, on the retry loop (coroutine and token front ends) and on the hedge,
// each attempt with its own; and the set's rules: the last write of a key wins, a new key past
// the capacity is dropped and counted.

#include <coretry/attempt.hpp>
#include <coretry/hedge.hpp>
#include <coretry/observer.hpp>
#include <coretry/retry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>
#include <support/asio.hpp>
#include <support/run_on_manual_clock.hpp>
#include <support/test_ops.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

using namespace std::chrono_literals;
using namespace coretry::test;
using namespace coretry::testing;

static_assert(std::is_trivially_copyable_v<coretry::attempt_attribute>);
static_assert(std::is_trivially_copyable_v<coretry::attempt_attributes>);
static_assert(std::is_nothrow_copy_constructible_v<coretry::attempt_finished_event>);

namespace {

/// `key=value` for each attribute, in order, then `dropped=n` when some were.
std::string text(const coretry::attempt_attributes& attrs) {
  std::string out;
  for (const coretry::attempt_attribute& a : attrs) {
    if (!out.empty())
      out += ' ';
    out += std::string(a.key()) + "=" +
           (a.is_text() ? "'" + std::string(a.text()) + "'" : std::to_string(a.integer()));
  }
  if (attrs.dropped() > 0)
    out += " dropped=" + std::to_string(attrs.dropped());
  return out;
}

/// Writes each attempt's number and attributes, as the event carries them.
struct attribute_log : coretry::retry_observer {
  std::mutex m;
  std::vector<std::string> lines;
  void on_attempt_finished(const coretry::attempt_finished_event& e) override {
    const std::lock_guard lock(m);
    lines.push_back(std::to_string(e.attempt) + ": " + text(e.attributes));
  }
};

coretry::retry_policy observed(std::shared_ptr<coretry::retry_observer> o) {
  return {.max_attempts = 3,
          .backoff = coretry::backoff::fixed(100ms),
          .observer = std::move(o),
          .label = "svc"};
}

/// Static storage: a text value must outlive the attempt's end event.
constexpr std::string_view phases[] = {"zero", "first", "second", "third"};

} // namespace

TEST_CASE("attempt attributes: set, find, and the last write of a key wins") {
  coretry::attempt_attributes a;
  CHECK(a.empty());
  CHECK(a.find("k") == nullptr);
  a.set("http.request.method", "GET");
  a.set("http.response.status_code", 503);
  a.set("http.request.method", "PUT"); // replaced in place, its position kept
  CHECK(a.size() == 2);
  CHECK(text(a) == "http.request.method='PUT' http.response.status_code=503");
  // A key is found by its characters, not by the address of the literal that set it.
  const std::string key = "http.response.status_code";
  REQUIRE(a.find(key) != nullptr);
  CHECK(a.find(key)->integer() == 503);
  CHECK(a.find(key)->text().empty());
  CHECK_FALSE(a.find(key)->is_text());
  // A write changes the type too.
  a.set("http.response.status_code", "none");
  CHECK(a.find(key)->is_text());
  CHECK(a.find(key)->integer() == 0);
  CHECK(a.find(key)->text() == "none");
  // An empty text stays a text, even from a default (null) view.
  a.set("note", std::string_view());
  REQUIRE(a.find("note") != nullptr);
  CHECK(a.find("note")->is_text());
  CHECK(a.find("note")->text().empty());
  CHECK(a.dropped() == 0);
}

TEST_CASE("attempt attributes: past the capacity a new key is dropped and counted") {
  static_assert(coretry::attempt_attributes::capacity == 4);
  coretry::attempt_attributes a;
  a.set("a", 1);
  a.set("b", 2);
  a.set("c", 3);
  a.set("d", 4);
  a.set("e", 5); // full: dropped
  a.set("f", "x");
  CHECK(a.size() == 4);
  CHECK(a.find("e") == nullptr);
  CHECK(a.dropped() == 2);
  // Full, a key already there is still written.
  a.set("b", 20);
  CHECK(a.find("b")->integer() == 20);
  CHECK(a.dropped() == 2);
  // An empty key is never stored.
  a.set("", 1);
  CHECK(a.dropped() == 3);
  CHECK(text(a) == "a=1 b=20 c=3 d=4 dropped=3");
  // The context's setters are the set's.
  coretry::attempt_context ctx(1);
  ctx.set_attribute("", 1);
  ctx.set_attribute("n", std::int64_t{1} << 40);
  CHECK(text(ctx.attributes()) == "n=1099511627776 dropped=1");
}

TEST_CASE("retry_async hands each attempt's own attributes to the observer") {
  manual_clock::reset();
  asio::io_context io;
  auto log = std::make_shared<attribute_log>();
  scripted_op script{{fail(refused, 10ms), fail(refused, 10ms), succeed(7, 10ms)}};
  // Attempt 1 sets two keys, attempt 2 one (a fresh context: attempt 1's "only.first" is gone),
  // attempt 3 writes "phase" twice.
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    ctx.set_attribute("attempt", ctx.number());
    ctx.set_attribute("phase", phases[ctx.number()]);
    if (ctx.number() == 1)
      ctx.set_attribute("only.first", 1);
    const int v = co_await script();
    ctx.set_attribute("phase", "done"); // after the wait: still this attempt's
    co_return v;
  };
  int completions = 0;
  int value = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<int> {
        co_return co_await coretry::retry_async<manual_timer>(op, observed(log));
      },
      [&](std::exception_ptr e, int v) {
        ++completions;
        CHECK_FALSE(e);
        value = v;
      });
  drive(io, [&] { return completions > 0; });
  REQUIRE(completions == 1);
  CHECK(value == 7);
  CHECK(log->lines == std::vector<std::string>{
                          "1: attempt=1 phase='first' only.first=1",
                          "2: attempt=2 phase='second'",
                          "3: attempt=3 phase='done'",
                      });
}

TEST_CASE("async_retry hands each attempt's own attributes to the observer") {
  manual_clock::reset();
  asio::io_context io;
  auto log = std::make_shared<attribute_log>();
  int calls = 0;
  int completions = 0;
  coretry::async_retry<manual_timer>(
      io.get_executor(),
      [&](coretry::attempt_context& ctx) -> asio::awaitable<std::tuple<std::error_code, int>> {
        ctx.set_attribute("attempt", ctx.number());
        if (++calls == 1) {
          ctx.set_attribute("phase", "refused");
          co_return std::tuple{refused, 0};
        }
        co_return std::tuple{std::error_code{}, 3};
      },
      observed(log),
      [&](std::error_code ec, int v) {
        ++completions;
        CHECK_FALSE(ec);
        CHECK(v == 3);
      });
  drive(io, [&] { return completions > 0; });
  REQUIRE(completions == 1);
  CHECK(log->lines == std::vector<std::string>{"1: attempt=1 phase='refused'", "2: attempt=2"});
}

TEST_CASE("each hedged copy reports its own attributes, the abandoned ones too") {
  manual_clock::reset();
  asio::io_context io;
  auto log = std::make_shared<attribute_log>();
  // Attempt 1 slow (500 ms), attempt 2 quick (150 ms), attempt 3 hangs: 2 wins at 250 ms, 1 and
  // 3 are abandoned. Each copy writes the same keys on its own context; none sees another's.
  scripted_op script{{succeed(1, 500ms), succeed(2, 150ms), hang()}};
  auto op = [&](coretry::attempt_context& ctx) -> asio::awaitable<int> {
    ctx.set_attribute("copy", ctx.number());
    ctx.set_attribute("phase", phases[ctx.number()]);
    const int v = co_await script();
    ctx.set_attribute("won", 1); // only the copy that returns a value gets here
    co_return v;
  };
  coretry::hedge_stats stats;
  const auto out = run_hedge(io, op, observed(log), {.delay = 100ms, .max_copies = 3}, stats);
  CHECK_FALSE(out.error);
  CHECK(out.value == 2);
  CHECK(log->lines == std::vector<std::string>{
                          "2: copy=2 phase='second' won=1",
                          "1: copy=1 phase='first'",
                          "3: copy=3 phase='third'",
                      });
}

TEST_CASE("an event's attributes are a copy: it outlives the context, and copies do not warn") {
  coretry::attempt_finished_event kept;
  {
    coretry::attempt_context ctx(2);
    ctx.set_attribute("http.request.method", "GET");
    kept.attributes = ctx.attributes();
  }
  const coretry::attempt_finished_event copy = kept; // the 0.2 fields copied without a warning
  coretry::attempt_finished_event moved = std::move(kept);
  moved = copy;
  REQUIRE(copy.attributes.find("http.request.method") != nullptr);
  CHECK(copy.attributes.find("http.request.method")->text() == "GET");
  CHECK(moved.attributes.size() == 1);
}
