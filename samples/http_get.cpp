// SPDX-License-Identifier: BSL-1.0
// http_get: fetch URLs concurrently with retries, printing every attempt.
//
//   http_get [--attempts N] [--timeout MS] [--jitter KIND] [--cacert FILE] [--insecure]
//            [--http1.1] URL...
//
// --attempts  attempts per URL, the first included (default 4)
// --timeout   limit per attempt in milliseconds, on the network (default 10000)
// --jitter    none, full, equal, decorrelated, normal or additive (default full)
// --cacert    trust the CA certificates of this PEM file instead of the system's
// --insecure  do not verify the server's certificate at all (prints a warning)
// --http1.1   offer HTTP/1.1 only (default: HTTP/2 over TLS when the server agrees)
//
// Exits with 0 when every URL answered with a 2xx or 3xx status, 1 otherwise, 2 on bad usage.

#include <coretry/coretry.hpp>
#include <coretry/curl/curl.hpp>

#include "support/cli.hpp"

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

using namespace std::chrono_literals;

namespace {

struct options {
  unsigned attempts = 4;
  std::chrono::milliseconds timeout{10000};
  coretry::jitter_kind jitter = coretry::jitter_kind::full;
  coretry::curl::client_options client;
  std::vector<std::string> urls;
};

void usage(std::FILE* out) {
  std::fprintf(out, "usage: http_get [--attempts N] [--timeout MS] [--jitter KIND] "
                    "[--cacert FILE] [--insecure] [--http1.1] URL...\n"
                    "  fetches each URL with retries, every attempt printed\n"
                    "  KIND: none, full, equal, decorrelated, normal, additive\n");
}

coretry::jitter make_jitter(coretry::jitter_kind kind) {
  switch (kind) {
  case coretry::jitter_kind::normal:
    return coretry::jitter::normal(0.1);
  case coretry::jitter_kind::additive:
    return coretry::jitter::additive(100ms);
  default:
    return coretry::jitter{kind};
  }
}

double ms(std::chrono::nanoseconds d) {
  return static_cast<double>(d.count()) / 1e6;
}

struct outcome {
  std::string url;
  long status = 0;
  std::size_t bytes = 0;
  coretry::curl::http_version version = coretry::curl::http_version::unknown;
  std::error_code error;
  coretry::retry_stats stats;
  bool done = false;
};

asio::awaitable<void> fetch(coretry::curl::client& c, const options& opt, outcome& out) {
  coretry::curl::request req;
  req.url = out.url;
  req.timeout = opt.timeout;
  req.connect_timeout = std::min(opt.timeout, std::chrono::milliseconds(5000));
  req.follow_redirects = true;

  coretry::retry_policy policy;
  policy.max_attempts = opt.attempts;
  policy.backoff =
      coretry::backoff::exponential(100ms, 2.0, 5s).with_jitter(make_jitter(opt.jitter));
  const std::string* url = &out.url;
  policy.on_retry = [url](const coretry::retry_event& e) {
    std::printf("%s: attempt %u: %s; retrying in %.1f ms%s\n", url->c_str(), e.attempt,
                e.error.message().c_str(), ms(e.delay),
                e.server_hint.count() > 0 ? " (Retry-After)" : "");
    std::fflush(stdout);
  };
  try {
    auto r = co_await coretry::curl::retry(c, std::move(req), std::move(policy), out.stats);
    out.status = r.status;
    out.bytes = r.body.size();
    out.version = r.version;
  } catch (const std::system_error& e) {
    out.error = e.code();
  }
  out.done = true;
  if (out.error)
    std::printf("%s: attempt %u: %s; giving up\n", out.url.c_str(), out.stats.attempts,
                out.error.message().c_str());
  else
    std::printf("%s: attempt %u: HTTP %ld, %zu bytes, %s\n", out.url.c_str(), out.stats.attempts,
                out.status, out.bytes, coretry::curl::to_string(out.version));
}

} // namespace

int main(int argc, char** argv) {
  namespace cli = sample_support::cli;
  options opt;
  cli::parse(
      "http_get", argc, argv, 1,
      {{"attempts", true},
       {"timeout", true},
       {"jitter", true},
       {"cacert", true},
       {"insecure"},
       {"http1.1"}},
      usage,
      [&](std::string_view a, const std::string& v) {
        if (a == "attempts") {
          opt.attempts = static_cast<unsigned>(cli::whole(a, v, 1, 1000000));
        } else if (a == "timeout") {
          opt.timeout = std::chrono::milliseconds(cli::whole(a, v, 1, 86400000));
        } else if (a == "jitter") {
          auto kind = coretry::parse_jitter_kind(v);
          if (!kind)
            cli::fail("--jitter: unknown kind '" + v + "'");
          opt.jitter = *kind;
        } else if (a == "cacert") {
          if (v.empty())
            cli::fail("--cacert: needs a PEM file");
          opt.client.tls.ca_file = v;
        } else if (a == "insecure") {
          opt.client.tls.insecure_skip_verify = true;
        } else if (a == "http1.1") {
          opt.client.http_version = coretry::curl::http_version_option::http1_1;
        }
      },
      &opt.urls);
  if (opt.urls.empty())
    cli::fail("no URL given");

  if (opt.client.tls.insecure_skip_verify)
    std::fprintf(stderr, "http_get: WARNING: --insecure: server certificates are not verified; "
                         "anyone on the path can read and change this traffic\n");
  asio::io_context io;
  std::optional<coretry::curl::client> maybe_client;
  try {
    maybe_client.emplace(io.get_executor(), opt.client);
  } catch (const std::invalid_argument& e) {
    cli::fail(e.what()); // e.g. a --cacert file that does not exist
  }
  auto& client = *maybe_client;
  std::vector<outcome> outcomes(opt.urls.size());
  for (std::size_t i = 0; i < opt.urls.size(); ++i) {
    outcomes[i].url = opt.urls[i];
    asio::co_spawn(io, fetch(client, opt, outcomes[i]), [](std::exception_ptr e) {
      if (e)
        std::rethrow_exception(e);
    });
  }
  const auto start = std::chrono::steady_clock::now();
  io.run();
  const auto wall = std::chrono::steady_clock::now() - start;

  int failed = 0;
  std::printf("\nsummary (%zu URLs, %.1f ms):\n", outcomes.size(), ms(wall));
  for (const auto& o : outcomes) {
    const bool ok = o.done && !o.error && o.status >= 200 && o.status < 400;
    failed += ok ? 0 : 1;
    const char* plural = o.stats.attempts == 1 ? "" : "s";
    if (o.error)
      std::printf("  FAIL %s: %s after %u attempt%s, %.1f ms\n", o.url.c_str(),
                  o.error.message().c_str(), o.stats.attempts, plural, ms(o.stats.elapsed));
    else
      std::printf("  %s %s: HTTP %ld, %zu bytes after %u attempt%s (slept %.1f ms), %.1f ms\n",
                  ok ? "ok  " : "FAIL", o.url.c_str(), o.status, o.bytes, o.stats.attempts, plural,
                  ms(o.stats.slept), ms(o.stats.elapsed));
  }
  const auto s = client.stats();
  std::printf("peak open connections %zu, peak waiting retries %zu\n", s.peak_open_connections,
              s.peak_waiting_retries);
  return failed == 0 ? 0 : 1;
}
