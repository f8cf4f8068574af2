// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `coretry::curl::client`: HTTP transfers on a libcurl multi handle driven by Asio.

#include <coretry/config.hpp>
#include <coretry/curl/error.hpp>
#include <coretry/curl/request.hpp>
#include <coretry/detail/asio.hpp>
#include <coretry/export.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace coretry {
class endpoint_registry; // coretry/registry.hpp: only who builds one needs it
} // namespace coretry

namespace coretry::curl {

/// The HTTP versions a client offers (`CURLOPT_HTTP_VERSION`). The version each response came
/// over is `response::version`.
enum class http_version_option : std::uint8_t {
  /// HTTP/1.1 only, also over TLS.
  http1_1,
  /// HTTP/2 over TLS when the server agrees through ALPN, else HTTP/1.1; plain http:// URLs
  /// use HTTP/1.1. libcurl's default, and the client's.
  http2_tls,
  /// As `http2_tls`, and over plain http:// an `Upgrade: h2c` request (HTTP/1.1 when refused).
  http2,
  /// HTTP/2 from the first byte over plain http:// too, without asking (h2c prior knowledge;
  /// the server must speak HTTP/2 there); ALPN over TLS.
  http2_prior_knowledge,
};

/// Limits, HTTP version and TLS settings of a `client`. Every field has a default; `client`'s
/// constructor calls `validate()`.
struct CORETRY_CURL_API client_options {
  /// Connections open at once, over all hosts (`CURLMOPT_MAX_TOTAL_CONNECTIONS`); 0 = unlimited.
  /// An HTTP/2 connection counts once, however many requests it carries
  /// (`max_streams_per_connection`).
  long max_total_connections = 64;
  /// Connections open at once to one host (`CURLMOPT_MAX_HOST_CONNECTIONS`); 0 = unlimited.
  /// Beware: transfers to one host beyond this limit wait inside libcurl, where the wait counts
  /// in `request::timeout`. For a single HTTP/1.1 host, set `max_concurrent_requests` to this
  /// value too.
  long max_host_connections = 0;
  /// Transfers handed to libcurl at once; the rest wait, in order, in the client's own queue.
  ///
  /// 0 (the default) admits by connections instead: as many HTTP/1.1 transfers as
  /// `max_total_connections`, and on top, for a host already seen to answer over HTTP/2, up to
  /// `max_streams_per_connection` transfers per connection (each such transfer takes that
  /// fraction of a connection). So libcurl never queues a transfer internally, and
  /// `request::timeout` measures time on the network, not time in a queue, while an HTTP/2
  /// host still gets all its streams. Unlimited when `max_total_connections` is 0.
  std::size_t max_concurrent_requests = 0;
  /// Idle easy handles kept for reuse (reset with `curl_easy_reset` between transfers).
  std::size_t pool_size = 64;
  /// Idle connections kept in libcurl's cache (`CURLMOPT_MAXCONNECTS`);
  /// 0 = `max_total_connections`, or 64 when that is 0.
  long max_idle_connections = 0;
  /// The HTTP versions offered; default HTTP/2 over TLS, HTTP/1.1 otherwise (`http2_tls`).
  /// Whenever HTTP/2 may be used, transfers are handed over with `CURLOPT_PIPEWAIT`: a request
  /// to a host whose first connection is still being set up waits for it and then shares it,
  /// instead of opening a connection of its own.
  http_version_option http_version = http_version_option::http2_tls;
  /// Concurrent requests (streams) on one HTTP/2 connection
  /// (`CURLMOPT_MAX_CONCURRENT_STREAMS`); 0 = libcurl's default, 100. A server may allow fewer
  /// (nginx: `http2_max_concurrent_streams`, 128 by default); libcurl opens another connection,
  /// within `max_total_connections`, when one is full.
  long max_streams_per_connection = 0;
  /// Trust and client certificate for https:// URLs; verification on (see `tls_options`).
  /// `request::tls` replaces it for one request.
  tls_options tls{};
  /// The largest response body accepted, in bytes (after decoding chunked transfer encoding);
  /// 0 = no limit. A body announced larger (Content-Length) fails before any of it is stored, one
  /// growing past it fails as soon as it does: `errc::filesize_exceeded`, never retried. The
  /// whole body is held in memory (`response::body`), so the default, 64 MiB, keeps an endless
  /// or hostile body from taking all of it.
  std::size_t max_response_body = std::size_t{64} << 20;
  /// The most header bytes accepted in one transfer, every line counted as received (status
  /// lines, fields, the blank lines, interim 1xx and redirect hops, trailers); default 256 KiB,
  /// at least 1. Beyond it: `errc::filesize_exceeded`, never retried. libcurl 7.88 has limits of
  /// its own (100 KiB for one line, 300 KiB for a block): passing those gives the same error.
  std::size_t max_response_headers = std::size_t{256} << 10;
  /// A transfer moving fewer than `stall_min_bytes_per_second` bytes a second, on average over
  /// `stall_timeout`, is aborted with `errc::operation_timedout` (`CURLOPT_LOW_SPEED_LIMIT` and
  /// `CURLOPT_LOW_SPEED_TIME`; libcurl checks once a second, so whole seconds). A slow-loris
  /// server then cannot hold a request without an overall `request::timeout` forever. Default
  /// 60 s under 1 byte/s, that is a minute of silence; 0 s turns the check off. Not negative.
  /// libcurl checks no stall before the request is sent, so this also bounds connection set-up
  /// (TCP, proxy `CONNECT`, TLS handshake) of a request without a `request::connect_timeout`.
  std::chrono::seconds stall_timeout{60};
  long stall_min_bytes_per_second = 1; ///< at least 1
  /// `Expect: 100-continue`. 0 (the default): never sent, a body goes out at once with its
  /// headers (libcurl would otherwise send it for bodies over 1 MiB and wait up to 1 s for a
  /// `100 Continue` many servers never send). Positive: sent for bodies over 1 MiB, waiting at
  /// most this long for the server's go-ahead or early refusal
  /// (`CURLOPT_EXPECT_100_TIMEOUT_MS`). A request's own `Expect` header wins. Not negative.
  std::chrono::milliseconds expect_continue_timeout{0};
  /// The proxy for every request (`CURLOPT_PROXY`), e.g. "http://proxy.example:3128" or
  /// "socks5h://127.0.0.1:1080"; it must name its scheme. Empty (the default): no proxy,
  /// unless `proxy_from_environment`. An "https://" proxy is verified with `tls` (its CA
  /// settings, client certificate, minimum version). A proxy that refuses the tunnel fails the
  /// request with `errc::proxy_refused`, never retried.
  std::string proxy{};
  /// Hosts reached without the proxy (`CURLOPT_NOPROXY`: comma-separated names, domains,
  /// addresses, "*" for all). Set even when empty: the environment's `no_proxy` / `NO_PROXY`
  /// then do not apply (unless `proxy_from_environment` and no `proxy`).
  std::string no_proxy{};
  /// Whether the environment may choose a proxy when `proxy` is empty: `http_proxy`,
  /// `https_proxy`, `all_proxy` and `no_proxy` (libcurl's reading of them). Default false: the
  /// environment is ignored and every request goes direct, so a variable set for other tools
  /// does not silently reroute the client's traffic.
  bool proxy_from_environment = false;
  /// Sends `Accept-Encoding` with every encoding this libcurl decodes (gzip, deflate, br, zstd,
  /// as built) and decodes the body (`CURLOPT_ACCEPT_ENCODING` ""). `max_response_body` counts
  /// the decoded bytes, so a compression bomb stops at the limit. Default false: no
  /// `Accept-Encoding` is sent and the body is returned as received. With it, a body is not
  /// refused for its announced Content-Length, which counts encoded bytes.
  bool decompress = false;
  /// Per-endpoint breakers, budgets and sending rates for `retry`, `async_retry`, `hedge` and
  /// `async_hedge` on this client: each request's entry is the registry's entry for the origin
  /// of `request::url` (scheme and host lowercased, the default port filled in), and fills the
  /// fields of the policy that the caller left empty (a policy's own breaker wins). Across
  /// redirects (`request::follow_redirects`) the original origin's entry counts every outcome.
  /// Null (the default): the policy alone decides. `async_perform` does not use it.
  std::shared_ptr<coretry::endpoint_registry> resilience{};
  /// What `retry`, `async_retry`, `hedge` and `async_hedge` on this client retry, for every
  /// request without `request::retry_rules` of its own: the retryable statuses, the methods
  /// that may be sent again, whether DNS failures are retried, limits per kind of failure and
  /// the statuses whose `Retry-After` is honoured (see `coretry::http::retry_rules`; the
  /// default is what `retry` has always done). Each operation copies the rules it uses and
  /// counts its own failures.
  coretry::http::retry_rules retry_rules{};

  /// Throws `std::invalid_argument` naming the field and its value when a `long` field is
  /// negative, `http_version` is out of range (or `http2_prior_knowledge` on libcurl before
  /// 8.0), `max_streams_per_connection` is above 2147483647, `max_response_headers` is 0,
  /// `stall_timeout` or `expect_continue_timeout` is negative, `stall_min_bytes_per_second` is
  /// below 1, `proxy` has no "scheme://" or a NUL, `no_proxy` has a NUL, or `tls` is invalid
  /// (`tls.ca_file`, ...; see `tls_options::validate`), or `retry_rules` is
  /// (`retry_rules.status_forcelist[0]`, ...; see `coretry::http::retry_rules::validate`).
  void validate() const;
};

/// A snapshot of a client's counters. Each `peak_` value is the largest seen since construction.
struct client_stats {
  std::size_t active_transfers = 0; ///< Transfers inside the libcurl multi handle.
  std::size_t queued_requests = 0;  ///< Requests waiting in the client's queue.
  std::size_t open_connections = 0; ///< Sockets the client opened for libcurl and not yet closed.
  /// Connections libcurl set up (TCP, and TLS for https) since construction, reused or not.
  std::size_t connects = 0;
  std::size_t waiting_retries = 0; ///< `coretry::curl::retry` operations sleeping between attempts.
  std::size_t pooled_handles = 0;  ///< Idle easy handles in the pool.
  /// The most transfers active in libcurl at once.
  std::size_t peak_active_transfers = 0;
  /// The most requests waiting in the client's queue at once.
  std::size_t peak_queued_requests = 0;
  /// The most connections open at once.
  std::size_t peak_open_connections = 0;
  /// The most `retry` operations sleeping between attempts at once.
  std::size_t peak_waiting_retries = 0;
};

class client;

namespace detail {

class CORETRY_CURL_API client_impl;
struct transfer;

/// The type-erased completion handler of one perform.
struct CORETRY_CURL_API perform_completion {
  virtual ~perform_completion() = default;
  /// Hands the result to the handler through its associated executor (never inline).
  virtual void complete(std::error_code ec, response r) = 0;
};

template <class Handler> class perform_op final : public perform_completion {
public:
  using executor_type = asio::associated_executor_t<Handler, asio::any_io_executor>;

  perform_op(Handler h, const asio::any_io_executor& fallback)
      : handler_(std::move(h)),
        work_(asio::make_work_guard(asio::get_associated_executor(handler_, fallback))) {}

  void complete(std::error_code ec, response r) override {
    asio::post(work_.get_executor(), [h = std::move(handler_), ec, r = std::move(r)]() mutable {
      auto slot = asio::get_associated_cancellation_slot(h);
      if (slot.is_connected())
        slot.clear();
      std::move(h)(coretry::detail::to_asio_error(ec), std::move(r));
    });
    work_.reset();
  }

private:
  Handler handler_;
  asio::executor_work_guard<executor_type> work_;
};

/// Installed in a perform's cancellation slot: asks the client to drop the transfer.
struct CORETRY_CURL_API cancel_hook {
  std::weak_ptr<transfer> target;
  void operator()(asio::cancellation_type type) const;
};

/// What `coretry::curl::retry` needs of a client: its shared state, which a sleeping retry
/// holds only weakly (see `retry`), and the waiting-retries counter.
struct CORETRY_CURL_API client_access {
  static std::weak_ptr<client_impl> state(const client& c) noexcept;
  /// Whether `impl` still takes transfers (its client has not been destroyed).
  static bool open(const client_impl& impl) noexcept;
  static void add_waiting(const std::shared_ptr<client_impl>& impl, std::ptrdiff_t delta) noexcept;
};

/// Creates a transfer (not started yet).
CORETRY_CURL_API std::shared_ptr<transfer>
make_transfer(const std::shared_ptr<client_impl>& impl, request req,
              std::unique_ptr<perform_completion> completion);
/// Hands it to the client (queued or started, on the client's executor, never inline).
CORETRY_CURL_API void submit(const std::shared_ptr<client_impl>& impl, std::shared_ptr<transfer> t);

/// `client::async_perform` on the client state `impl`; `fallback` is the executor of handlers
/// that have none associated.
template <class CompletionToken>
auto async_perform_on(std::shared_ptr<client_impl> impl, const asio::any_io_executor& fallback,
                      request req, CompletionToken&& token) {
  req.validate();
  return asio::async_initiate<CompletionToken, void(coretry::detail::asio_error_code, response)>(
      [](auto handler, std::shared_ptr<client_impl> state, asio::any_io_executor handler_ex,
         request r) {
        using handler_type = std::decay_t<decltype(handler)>;
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto t = make_transfer(
            state, std::move(r),
            std::make_unique<perform_op<handler_type>>(std::move(handler), handler_ex));
        if (slot.is_connected())
          slot.template emplace<cancel_hook>(cancel_hook{t});
        submit(state, std::move(t));
      },
      token, std::move(impl), fallback, std::move(req));
}

/// The coroutine of `client::perform` (`req` already validated).
CORETRY_CURL_API asio::awaitable<response>
perform_throwing(std::shared_ptr<client_impl> impl, asio::any_io_executor fallback, request req);

} // namespace detail

/// An HTTP client: one libcurl multi handle driven by an Asio executor.
///
/// No thread of its own, no polling: libcurl's sockets and timer are watched through Asio
/// (`CURLMOPT_SOCKETFUNCTION`/`CURLMOPT_TIMERFUNCTION` and `curl_multi_socket_action`). Every
/// libcurl call runs in a handler on the executor, under the client's own lock, so the
/// io_context may be run by several threads and `perform` may be called from any of them.
///
/// Connections are reused (HTTP/1.1 keep-alive; HTTP/2 carries many requests on one) and
/// bounded by `client_options`; easy handles are pooled.
///
/// Thread safety: distinct clients are independent; one client may be used from any thread.
/// It may be destroyed on any thread, also while other threads run its executor (the client's
/// handler running at that moment, if any, is waited for), but not concurrently with a call on
/// it, and before its execution context (the usual declaration order does this: io_context
/// first, client second). Destruction aborts the transfers in
/// flight (their handlers get `asio::error::operation_aborted`, posted to their executors),
/// closes every connection at once and releases libcurl's handles; a `coretry::curl::retry`
/// asleep at that moment holds no reference to the client and ends with `operation_aborted`
/// without another attempt (see `retry`).
class CORETRY_CURL_API client {
public:
  /// The executor the client runs libcurl on and completes operations on by default.
  using executor_type = asio::any_io_executor;

  /// Throws `std::invalid_argument` when `options` is invalid (see `client_options::validate`),
  /// `std::system_error` if libcurl cannot create the multi handle.
  explicit client(executor_type executor, client_options options = {});
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// The executor given at construction.
  executor_type get_executor() const noexcept { return executor_; }
  /// The options given at construction.
  const client_options& options() const noexcept { return options_; }

  /// Performs `req` and reports the response. The handler is invoked exactly once, through its
  /// associated executor, never from inside this call.
  ///
  /// @par Completion Signature
  /// `void(std::error_code, response)` (`boost::system::error_code` with Boost.Asio). The error
  /// is empty for every complete HTTP response, whatever its status; otherwise it is a
  /// transport error in `curl_category()` (see `errc`; the response then carries
  /// `response::error_detail`) or `asio::error::operation_aborted`.
  ///
  /// @par Per-Operation Cancellation
  /// Terminal, partial and total cancellation through the handler's associated slot all abort
  /// the transfer: it is removed from the multi handle (its connection is closed
  /// if unfinished), its easy handle goes back to the pool, and the handler gets
  /// `operation_aborted`, unless the transfer completed first.
  ///
  /// Throws `std::invalid_argument` at the call, whatever the token, when `req.validate()` does;
  /// nothing is started then.
  ///
  /// Thread safety: may be called from any thread.
  /// Works with any completion token: callbacks, `use_awaitable`, `use_future`,
  /// `experimental::deferred`, `experimental::as_tuple(...)`.
  template <class CompletionToken> auto async_perform(request req, CompletionToken&& token) {
    return detail::async_perform_on(impl_, executor_, std::move(req),
                                    std::forward<CompletionToken>(token));
  }

  /// `co_await client.perform(req)`: as `async_perform`, throwing `std::system_error` on a
  /// transport error (its `what()` includes `response::error_detail`) or cancellation. A
  /// 4xx/5xx status is returned, not thrown. An invalid `req` throws `std::invalid_argument`
  /// from the call itself.
  ///
  /// @par Per-Operation Cancellation
  /// Terminal cancellation of the awaiting coroutine (what its filter lets through: terminal
  /// only, by default) aborts the transfer as `async_perform` does; the call then throws
  /// `std::system_error(asio::error::operation_aborted)`.
  asio::awaitable<response> perform(request req) {
    req.validate();
    return detail::perform_throwing(impl_, executor_, std::move(req));
  }

  /// The counters, read without locking (each value is exact; together they may be skewed).
  client_stats stats() const noexcept;

private:
  friend struct detail::client_access;
  executor_type executor_;
  client_options options_;
  std::shared_ptr<detail::client_impl> impl_;
};

} // namespace coretry::curl
