// SPDX-License-Identifier: BSL-1.0
// beast_get: one HTTP/1.1 GET with Boost.Beast, retried by coretry, every retry printed.
//
//   beast_get [--attempts N] [--timeout MS] [--max-retry-after S] http://HOST[:PORT][/TARGET]
//
// --attempts         attempts, the first included (default 4)
// --timeout          limit per attempt in milliseconds: resolve, connect, write and read
//                    (default 5000)
// --max-retry-after  the longest Retry-After the server may ask for, in seconds (default 10)
//
// Each attempt resolves the host, connects, writes the request and reads the response on a
// connection of its own; a 503 or 429 with Retry-After waits at least that long. Prints one
// line per retry, then "status N", "attempts N", "slept MS", "server hint MS" and the body.
// Exits with 0 on a 2xx status, 1 otherwise, 2 on bad usage. Needs coretry built with
// Boost.Asio (samples/beast/CMakeLists.txt).

#include <coretry/beast.hpp>
#include <coretry/coretry.hpp>

#include "support/cli.hpp"

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

namespace net = boost::asio;
namespace http = boost::beast::http;
using namespace std::chrono_literals;

namespace {

struct options {
  unsigned attempts = 4;
  std::chrono::milliseconds timeout{5000};
  std::chrono::seconds max_retry_after{10};
  std::string url;
};

void usage(std::FILE* out) {
  std::fprintf(out, "usage: beast_get [--attempts N] [--timeout MS] [--max-retry-after S] "
                    "http://HOST[:PORT][/TARGET]\n"
                    "  one GET with Boost.Beast, retried by coretry, every retry printed\n");
}

// "http://host[:port][/target]": enough for a sample (no userinfo, no IPv6 literal, no https).
struct url_parts {
  coretry::beast::endpoint where;
  std::string target = "/";
};

url_parts parse_url(const std::string& url) {
  constexpr std::string_view scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0)
    sample_support::cli::fail("the URL must start with http:// (got '" + url + "')");
  std::string rest = url.substr(scheme.size());
  url_parts out;
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    out.target = rest.substr(slash);
    rest.resize(slash);
  }
  if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    out.where.service = rest.substr(colon + 1);
    rest.resize(colon);
  }
  out.where.host = rest;
  if (out.where.host.empty() || out.where.service.empty())
    sample_support::cli::fail("no host or port in '" + url + "'");
  return out;
}

double ms(std::chrono::nanoseconds d) {
  return static_cast<double>(d.count()) / 1e6;
}

http::request<http::empty_body> make_request(const url_parts& url) {
  http::request<http::empty_body> req(http::verb::get, url.target, 11);
  req.set(http::field::host, url.where.host);
  req.set(http::field::user_agent, "coretry beast_get");
  return req;
}

// The sample's policy; the server's Retry-After hints are added up in `hint` (the sum of
// `retry_event::server_hint`).
coretry::retry_policy make_policy(const options& opt, std::chrono::nanoseconds& hint) {
  coretry::retry_policy policy;
  policy.max_attempts = opt.attempts;
  policy.attempt_timeout = opt.timeout;
  policy.max_retry_after = opt.max_retry_after;
  policy.backoff =
      coretry::backoff::exponential(100ms, 2.0, 2s).with_jitter(coretry::jitter::full());
  policy.on_retry = [&hint](const coretry::retry_event& e) {
    hint += e.server_hint;
    std::printf("attempt %u failed: %s; next in %.0f ms (server asked %.0f ms)\n", e.attempt,
                e.error.message().c_str(), ms(e.delay), ms(e.server_hint));
  };
  return policy;
}

void report(int status, const std::string& what, const coretry::retry_stats& stats,
            std::chrono::nanoseconds hint) {
  if (status != 0)
    std::printf("status %d\n", status);
  else
    std::printf("failed: %s\n", what.c_str());
  std::printf("attempts %u\nslept %.0f ms\nserver hint %.0f ms\n%s", stats.attempts,
              ms(stats.slept), ms(hint), status != 0 ? what.c_str() : "");
}

net::awaitable<int> get(const options& opt) {
  const url_parts url = parse_url(opt.url);
  std::chrono::nanoseconds hint{0};
  coretry::retry_stats stats;
  const auto ex = co_await net::this_coro::executor;
  int status = 0;
  std::string what;
  try {
    auto res = co_await coretry::beast::retry(ex, url.where, make_request(url),
                                              make_policy(opt, hint), stats);
    status = static_cast<int>(res.result_int());
    what = std::move(res.body());
  } catch (const std::system_error& e) {
    what = e.code().message();
  }
  report(status, what, stats, hint);
  co_return status >= 200 && status < 300 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  std::vector<std::string> positional;
  sample_support::cli::parse(
      "beast_get", argc, argv, 1,
      {{"attempts", true}, {"timeout", true}, {"max-retry-after", true}}, usage,
      [&](std::string_view name, const std::string& value) {
        if (name == "attempts")
          opt.attempts = static_cast<unsigned>(sample_support::cli::whole(name, value, 1, 100));
        else if (name == "timeout")
          opt.timeout =
              std::chrono::milliseconds(sample_support::cli::whole(name, value, 1, 3'600'000));
        else
          opt.max_retry_after =
              std::chrono::seconds(sample_support::cli::whole(name, value, 1, 3600));
      },
      &positional);
  if (positional.size() != 1)
    sample_support::cli::fail(positional.empty() ? "no URL given" : "one URL only");
  opt.url = positional.front();

  net::io_context io;
  int rc = 1;
  net::co_spawn(io, get(opt), [&rc](std::exception_ptr e, int r) {
    if (e)
      std::rethrow_exception(e);
    rc = r;
  });
  io.run();
  return rc;
}
