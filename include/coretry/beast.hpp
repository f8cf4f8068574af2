// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Retrying a Boost.Beast HTTP/1.1 request with coretry: `coretry::beast::async_exchange` (one
/// attempt: resolve, connect, write, read on a connection of its own) and `coretry::beast::retry`
/// (the retry loop around it, with the HTTP rules of `<coretry/http.hpp>`: status, `Retry-After`,
/// idempotency). Header-only; only with coretry built against Boost.Asio (`-DCORETRY_ASIO=boost`),
/// the Asio Beast is written for. docs/beast.md has the walk-through.

#include <coretry/detail/asio.hpp>

#if !CORETRY_ASIO_BOOST
#error                                                                                             \
    "<coretry/beast.hpp> needs coretry built with Boost.Asio (-DCORETRY_ASIO=boost): Boost.Beast runs on Boost.Asio only"
#endif

#include <coretry/attempt.hpp>
#include <coretry/detail/loaded_rule.hpp>
#include <coretry/detail/refuse.hpp>
#include <coretry/http.hpp>
#include <coretry/policy.hpp>
#include <coretry/retry.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <typeinfo>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <boost/asio/compose.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <netdb.h>

namespace coretry::beast {

/// Boost.Beast's HTTP namespace, `boost::beast::http`.
namespace http = ::boost::beast::http;

/// Where a request goes: a host name or address and a port number or service name, both as
/// `asio::ip::tcp::resolver::async_resolve` takes them. Resolved again for every attempt, so an
/// attempt after a failure may reach another address of the same name.
struct endpoint {
  std::string host;           ///< "example.com", "127.0.0.1", "::1"
  std::string service = "80"; ///< "8080", "http"
};

// g++ 12 miscompiles an aggregate temporary written inside a `co_await` expression (the
// temporary is copied bitwise into the coroutine frame and both copies are destroyed: free():
// invalid pointer), as in `co_await retry(ex, {"example.com", "80"}, req, policy)`. No callee can
// repair an argument that arrives that way, so on g++ 12 the front ends take the endpoint and the
// rules only as objects (a braced list cannot deduce them) and their policy with no default type,
// and a braced list selects an overload that fails to compile, saying what to write; as
// `coretry::retry_async` refuses a braced policy (<coretry/detail/braced_policy.hpp>). g++ 13 and
// later, and clang, take the braced lists.
#if CORETRY_REFUSE_BRACED_POLICY
/// The endpoint parameter of the front ends: an `endpoint` object (named or not) on g++ 12, where
/// a braced endpoint is refused.
#define CORETRY_BEAST_ENDPOINT ::coretry::detail::converts_to<::coretry::beast::endpoint> auto
/// The rules parameter of the front ends: a `coretry::http::retry_rules` object on g++ 12, where
/// braced rules are refused.
#define CORETRY_BEAST_RULES const ::coretry::detail::converts_to<::coretry::http::retry_rules> auto&
#else
/// The endpoint parameter of the front ends: an `endpoint`.
#define CORETRY_BEAST_ENDPOINT ::coretry::beast::endpoint
/// The rules parameter of the front ends: a `const coretry::http::retry_rules&`.
#define CORETRY_BEAST_RULES const ::coretry::http::retry_rules&
#endif

namespace detail {

/// The most bytes an exchange buffers at once: a status line and fields (Beast's parser stops at
/// 8 KiB of them), a chunk header with its extensions, or a trailer. Beast 1.81 bounds neither
/// chunk extensions nor trailers itself: a server sending an endless one meets this bound
/// (`http::error::buffer_overflow`) instead of growing the client's memory.
inline constexpr std::size_t exchange_buffer_limit = 64 * 1024;

/// The most interim (1xx but 101) responses an exchange reads before the final one; one more
/// ends the exchange with `http::error::header_limit`.
inline constexpr unsigned max_interim_responses = 8;

/// What one exchange owns, at a stable address: Beast's reads and writes keep references to the
/// buffer and the parser while they run.
template <class ResponseBody> struct exchange_state {
  explicit exchange_state(const asio::any_io_executor& ex) : resolver(ex), stream(ex) {}

  asio::ip::tcp::resolver resolver;
  ::boost::beast::tcp_stream stream;
  ::boost::beast::flat_buffer buffer{exchange_buffer_limit};
  /// The response being read: a fresh parser for each response (an interim one is dropped),
  /// which Beast cannot move, hence emplaced here.
  std::optional<http::response_parser<ResponseBody>> parser;
};

using coretry::http::is_token;
using coretry::http::detail::escaped;

[[noreturn]] inline void bad_request(const char* where, const std::string& field,
                                     const std::string& value, const std::string& rule) {
  coretry::detail::refuse(where, ("request." + field).c_str(), value, rule.c_str());
}

/// Refuses a request Beast would write as something else: Beast 1.81 writes the method, the
/// target and the fields as they are, so a CR or LF in one of them ends the line early and what
/// follows is read by the server as more fields or a second request. The method and each field
/// name must be tokens, the target must hold no control character, space or DEL, and each field
/// value no CR, LF or NUL. Fields are named by their place in the request (`fields[2]`). The
/// target is shown without its query, which may hold a credential.
template <class RequestBody, class Fields>
void validate_request(const http::request<RequestBody, Fields>& req, const char* where) {
  const auto method = req.method_string();
  if (!is_token(std::string_view(method.data(), method.size())))
    bad_request(where, "method", escaped(std::string_view(method.data(), method.size())),
                "must be a non-empty HTTP token");
  const auto t = req.target();
  const std::string_view target(t.data(), t.size());
  for (std::size_t i = 0; i < target.size(); ++i) {
    const auto c = static_cast<unsigned char>(target[i]);
    if (c <= 0x20 || c == 0x7f) {
      const auto query = target.find_first_of("?#");
      const std::string shown =
          query < i ? escaped(target.substr(0, query)) + " (query not shown)" : escaped(target);
      bad_request(where, "target", shown,
                  "must not contain control characters, spaces or DEL: " +
                      escaped(target.substr(i, 1)) + " at offset " + std::to_string(i));
    }
  }
  std::size_t index = 0;
  for (const auto& f : req) {
    const std::string field = "fields[" + std::to_string(index++) + "]";
    const auto n = f.name_string();
    const std::string_view name(n.data(), n.size());
    if (!is_token(name))
      bad_request(where, field + ".name", escaped(name), "must be a non-empty HTTP token");
    const auto v = f.value();
    const std::string_view value(v.data(), v.size());
    if (value.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos)
      bad_request(where, field + ".value", escaped(value), "must not contain CR, LF or NUL");
  }
}

/// Installed in the exchange's cancellation slot while one of its steps is pending: cancels the
/// resolver and closes the socket, so the pending step completes with `operation_aborted`
/// whichever it is. (Asio's resolver installs nothing in a slot of its own, and a closed socket
/// leaves no half-read response behind to be mistaken for the next one.)
template <class ResponseBody> struct close_on_cancel {
  exchange_state<ResponseBody>* st;
  void operator()(asio::cancellation_type_t) const {
    st->resolver.cancel();
    ::boost::system::error_code ignored;
    st->stream.socket().close(ignored);
  }
};

/// The exchange's state machine (for `asio::async_compose`): one completion per step, told apart
/// by its arguments (resolve: results; connect: the endpoint; write and read: a byte count).
template <class RequestBody, class Fields, class ResponseBody> class exchange_op {
public:
  using request_type = http::request<RequestBody, Fields>;
  using response_type = http::response<ResponseBody>;

  exchange_op(const asio::any_io_executor& ex, const endpoint& where, const request_type& req)
      : st_(std::make_unique<exchange_state<ResponseBody>>(ex)), where_(&where), req_(&req),
        head_(req.method() == http::verb::head) {}

  template <class Self> void operator()(Self& self) {
    auto& st = *st_;
    arm(self);
    st.resolver.async_resolve(where_->host, where_->service, unbound(std::move(self)));
  }

  template <class Self>
  void operator()(Self& self, ::boost::system::error_code ec,
                  asio::ip::tcp::resolver::results_type results) {
    if (stopped(self, ec))
      return;
    auto& st = *st_;
    arm(self);
    st.stream.async_connect(results, unbound(std::move(self)));
  }

  template <class Self>
  void operator()(Self& self, ::boost::system::error_code ec, asio::ip::tcp::endpoint) {
    if (stopped(self, ec))
      return;
    auto& st = *st_;
    writing_ = true;
    arm(self);
    http::async_write(st.stream, *req_, unbound(std::move(self)));
  }

  template <class Self> void operator()(Self& self, ::boost::system::error_code ec, std::size_t) {
    if (stopped(self, ec))
      return;
    if (writing_) {
      writing_ = false;
      read(self);
      return;
    }
    // An interim response (103 Early Hints, a 100 Continue nobody asked for) is not the answer:
    // the final one follows on the same connection. 101 ends the exchange as any final status.
    const unsigned status = st_->parser->get().result_int();
    if (status >= 100 && status < 200 && status != 101) {
      if (++interim_ > max_interim_responses) {
        finish(self, http::error::header_limit);
        return;
      }
      read(self);
      return;
    }
    finish(self, {});
  }

private:
  // Reads one response with a parser of its own, into the buffer the previous one may have left
  // bytes in. The response to a HEAD has fields that describe a body it does not carry (RFC 9110
  // 9.3.2): its parser is told to expect none.
  template <class Self> void read(Self& self) {
    auto& st = *st_;
    st.parser.emplace();
    if (head_)
      st.parser->skip(true);
    arm(self);
    http::async_read(st.stream, st.buffer, *st.parser, unbound(std::move(self)));
  }

  // The slot is the composed operation's own (Asio clears it on every step): refilled before each
  // step starts, and the step itself gets no slot, so nothing replaces the handler.
  template <class Self> void arm(Self& self) {
    auto slot = self.get_cancellation_state().slot();
    if (slot.is_connected())
      slot.template emplace<close_on_cancel<ResponseBody>>(
          close_on_cancel<ResponseBody>{st_.get()});
  }

  template <class Self> static auto unbound(Self&& self) {
    return asio::bind_cancellation_slot(asio::cancellation_slot(), std::forward<Self>(self));
  }

  // A step that failed, or any step after a cancellation (a step may have completed before the
  // socket was closed), ends the exchange.
  template <class Self> bool stopped(Self& self, ::boost::system::error_code ec) {
    if (self.get_cancellation_state().cancelled() != asio::cancellation_type::none)
      ec = asio::error::operation_aborted;
    if (!ec)
      return false;
    finish(self, ec);
    return true;
  }

  // Nothing is pending here: the connection is released before the handler runs, so the next
  // attempt it may start never overlaps this one's socket.
  template <class Self> void finish(Self& self, ::boost::system::error_code ec) {
    response_type res = ec ? response_type{} : st_->parser->release();
    ::boost::system::error_code ignored;
    st_->stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    st_.reset();
    self.complete(ec, std::move(res));
  }

  std::unique_ptr<exchange_state<ResponseBody>> st_;
  const endpoint* where_;
  const request_type* req_;
  bool head_;
  bool writing_ = false;
  unsigned interim_ = 0;
};

/// `async_exchange` without the check of the request: `retry`'s attempts, whose request was
/// checked once at the call.
template <class ResponseBody, class RequestBody, class Fields, class CompletionToken>
auto async_exchange_checked(const asio::any_io_executor& ex, const endpoint& where,
                            const http::request<RequestBody, Fields>& req,
                            CompletionToken&& token) {
  return asio::async_compose<CompletionToken,
                             void(::boost::system::error_code, http::response<ResponseBody>)>(
      exchange_op<RequestBody, Fields, ResponseBody>(ex, where, req), token, ex);
}

} // namespace detail

/// Sends `req` to `where` and reads the response: resolves `where`, connects to the first address
/// that accepts, writes the request and reads one response, on a connection of its own that is
/// closed before the handler runs. One exchange is one coretry attempt (see `retry`).
///
/// `where` and `req` must stay valid until the handler is called. The response is read with
/// Beast's default parser limits (8 KiB of status line and fields, 8 MiB of body) and at most
/// 64 KiB buffered at once (a chunk header with its extensions, a trailer); the response to a
/// HEAD request is read without a body. Interim responses (1xx but 101: 103 Early Hints, 100
/// Continue) are read and dropped, up to 8; the final response is the one delivered. No timeout
/// of its own: a retry loop times the attempt (`retry_policy::attempt_timeout`) through the
/// cancellation slot.
///
/// \throws std::invalid_argument at the call, naming the field and its value, for a request
/// Beast would not write as it is meant: a method or a field name that is not an HTTP token, a
/// target with a control character, a space or DEL, a field value with CR, LF or NUL.
///
/// @par Completion Signature
/// `void(boost::system::error_code, http::response<ResponseBody>)`: resolver, socket and Beast
/// errors as Beast reports them (`http::error::end_of_stream` when the server closed without
/// answering; `http::error::buffer_overflow`, `header_limit` or `body_limit` past a limit, and
/// `header_limit` after a ninth interim response), `asio::error::operation_aborted` when
/// cancelled; the response is empty with an error. An HTTP error status is a response, not an
/// error.
///
/// @par Per-Operation Cancellation
/// Terminal cancellation through the handler's associated slot, in any step: the resolver is
/// cancelled and the socket closed, and the handler gets `operation_aborted`. A name lookup
/// already inside `getaddrinfo` (Asio runs it on a private thread) is not interrupted: the handler
/// runs when it returns. Partial and total cancellation are not supported (a half-written
/// request cannot be taken back).
template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class CompletionToken>
auto async_exchange(const asio::any_io_executor& ex, const CORETRY_BEAST_ENDPOINT& where,
                    const http::request<RequestBody, Fields>& req, CompletionToken&& token) {
  detail::validate_request(req, "coretry::beast::async_exchange");
  return detail::async_exchange_checked<ResponseBody>(ex, where, req,
                                                      std::forward<CompletionToken>(token));
}

namespace detail {

/// Whether a transport error of an exchange (a `boost::system::error_code` as `std::error_code`,
/// or coretry's `errc::attempt_timeout`) is worth another attempt, and which of
/// `coretry::http::retry_rules`' counts it spends: `connect` when the request never left (refused,
/// unreachable, a name that did not resolve when `retry_dns_failures` is set), `read` when it may
/// have reached the server (reset, closed without a reply, a response cut short, an attempt timed
/// out). Anything else (a malformed response, a response past a limit of the exchange, a name
/// that does not resolve by default) is final.
inline std::optional<coretry::http::failure_kind>
transport_failure(const std::error_code& ec, const coretry::http::retry_rules& rules) {
  using kind = coretry::http::failure_kind;
  namespace aerr = asio::error;
  auto is = [&ec](auto e) { return ec == std::error_code(::boost::system::error_code(e)); };
  // A response too large for the exchange's buffer or the parser's limits would be as large
  // again: final, never a read failure.
  if (is(http::error::buffer_overflow) || is(http::error::header_limit) ||
      is(http::error::body_limit))
    return std::nullopt;
  if (ec == std::errc::connection_refused || ec == std::errc::network_unreachable ||
      ec == std::errc::host_unreachable)
    return kind::connect;
  if (is(aerr::host_not_found) || is(aerr::host_not_found_try_again) || is(aerr::no_data))
    return rules.retry_dns_failures ? std::optional(kind::connect) : std::nullopt;
  if (ec == coretry::errc::attempt_timeout || ec == std::errc::timed_out ||
      ec == std::errc::connection_reset || ec == std::errc::connection_aborted ||
      ec == std::errc::broken_pipe || is(aerr::eof) || is(http::error::end_of_stream) ||
      is(http::error::partial_message))
    return kind::read;
  return std::nullopt;
}

/// What one `retry` operation's attempts and its policy's hooks share.
template <class RequestBody, class Fields> struct retry_state {
  retry_state(endpoint w, http::request<RequestBody, Fields> r, coretry::http::retry_rules ru)
      : where(std::move(w)), req(std::move(r)), rules(std::move(ru)), method(req.method_string()) {}

  endpoint where;
  http::request<RequestBody, Fields> req;
  coretry::http::retry_rules rules;
  /// The request's method, for the attempt attribute `http::attribute::request_method`, a view
  /// that must outlive each attempt's end: this state does.
  std::string method;
  coretry::http::failure_counts counts{};
  unsigned last_status = 0; ///< the last attempt's status, 0 after a transport error

  /// Counts the transport failure of an attempt that completed, once, where it completes (the
  /// loop may ask its predicates more than once). An attempt cut by the attempt timer or
  /// cancelled completes with `operation_aborted` and is not counted: the loop decides on it.
  void record(const ::boost::system::error_code& ec) {
    if (ec)
      if (auto kind = transport_failure(ec, rules))
        counts.record(*kind, rules);
  }
};

/// One attempt of `retry`: an exchange on a connection of its own, whose response tells the loop
/// the server's `Retry-After` (for the statuses `retry_rules::retry_after_status_codes` names)
/// and the status for observers. A token operation: the loop calls it once per attempt with its
/// own handler, bound to the slot through which an attempt timeout or a cancellation closes the
/// connection.
template <class ResponseBody, class RequestBody, class Fields> struct http_attempt {
  using response_type = http::response<ResponseBody>;

  std::shared_ptr<retry_state<RequestBody, Fields>> st;
  asio::any_io_executor ex;

  template <class CompletionToken>
  auto operator()(attempt_context& ctx, CompletionToken&& token) const {
    return asio::async_compose<CompletionToken, void(::boost::system::error_code, response_type)>(
        [st = st, ex = ex, ctx = &ctx, started = false](
            auto& self, ::boost::system::error_code ec = {}, response_type r = {}) mutable {
          if (!started) {
            started = true;
            async_exchange_checked<ResponseBody>(ex, st->where, st->req, std::move(self));
            return;
          }
          st->last_status = ec ? 0u : r.result_int();
          st->record(ec);
          ctx->set_attribute(coretry::http::attribute::request_method, st->method);
          if (!ec)
            ctx->set_attribute(coretry::http::attribute::response_status_code,
                               std::int64_t{st->last_status});
          // The status, for a breaker's health classification, as coretry::curl sets it: a
          // rejected response reaches the loop as `result_rejected`, which says neither 503 (a
          // failure) nor 404 (the request's fault) nor 429 (a push-back) nor "202 pending" (an
          // answer).
          if (st->last_status >= 100)
            ctx->health_code(coretry::http::make_status_error(st->last_status));
          if (!ec && coretry::http::honours_retry_after(st->last_status, st->rules)) {
            const auto field = r.find(http::field::retry_after);
            if (field != r.end())
              if (auto hint = coretry::http::parse_retry_after(
                      std::string_view(field->value().data(), field->value().size())))
                ctx->retry_after(*hint);
          }
          self.complete(ec, std::move(r));
        },
        token, ex);
  }
};

/// The port `service` names, or 0 when it names none: a decimal number (leading zeros allowed),
/// or a TCP service name of the system's services database ("http", "https", "http-alt").
inline unsigned service_port(const std::string& service) {
  if (!service.empty() && service.find_first_not_of("0123456789") == std::string::npos) {
    unsigned port = 0;
    for (const char c : service) {
      port = port * 10 + static_cast<unsigned>(c - '0');
      if (port > 65535)
        return 0;
    }
    return port;
  }
  if (service == "http")
    return 80;
  if (service == "https") // known without /etc/services, which a minimal system may lack
    return 443;
  servent entry{};
  servent* found = nullptr;
  char buffer[1024];
  if (::getservbyname_r(service.c_str(), "tcp", &entry, buffer, sizeof buffer, &found) != 0 ||
      found == nullptr)
    return 0;
  return ntohs(static_cast<std::uint16_t>(found->s_port));
}

/// `host` as a URI writes it: an IPv6 address in brackets and without its zone (`fe80::1%eth0`
/// is `[fe80::1]`: a zone means nothing outside this machine).
inline std::string uri_host(const std::string& host) {
  if (host.find(':') == std::string::npos)
    return host;
  std::string bare =
      host.starts_with('[') && host.ends_with(']') ? host.substr(1, host.size() - 2) : host;
  return "[" + bare.substr(0, bare.find('%')) + "]";
}

/// The policy of one `retry` operation: `policy` with the HTTP rules wired in, as
/// `coretry::curl::retry` does it. A request that may not be sent twice gets one attempt;
/// the rules are set as the policy's `classify` (transport errors through `transport_failure`,
/// responses through the status rules; 429 a push-back, 429 and 503 slowing an adaptive
/// sending rate) unless it has a `classify` of its own, or one of the deprecated 0.2 predicates
/// (then wired in as in 0.2); the rules' per-kind limits hold either way.
template <class ResponseBody, class RequestBody, class Fields>
coretry::retry_policy make_policy(coretry::retry_policy p,
                                  const std::shared_ptr<retry_state<RequestBody, Fields>>& st) {
  if (!coretry::http::may_retry(st->method, st->req.count("Idempotency-Key") != 0, st->rules))
    p.max_attempts = 1;
  // As coretry::curl labels its operations: the origin, never the target (it may hold secrets).
  if (p.observer && p.label.empty())
    p.label =
        "http://" + uri_host(st->where.host) + ":" +
        (service_port(st->where.service) != 0 ? std::to_string(service_port(st->where.service))
                                              : st->where.service);
  // The caller's on_retry sees a rejected response as its status, as coretry::curl reports it.
  if (p.on_retry)
    p.on_retry = [user = std::move(p.on_retry), st](const coretry::retry_event& e) {
      if (e.error != coretry::errc::result_rejected || st->last_status == 0)
        return user(e);
      coretry::retry_event with_status = e;
      with_status.error = coretry::http::make_status_error(st->last_status);
      user(with_status);
    };
  using response_type = http::response<ResponseBody>;
  // Without the caller's own judge, the rules decide through `classify`: a transport error of
  // a kind they retry, a status they retry (429 a push-back, 429 and 503 slowing the sending
  // rate), under their limits below. Only a caller's 0.2 predicate (deprecated) keeps the 0.2
  // path further down, where the rules are wired into its predicates.
  // A policy read by coretry::config carries its rule in both spellings: the one that does not
  // decide goes first.
  coretry::detail::settle_loaded_rule(p);
  bool deprecated_predicates = false;
  CORETRY_ALLOW_DEPRECATED_BEGIN
  deprecated_predicates =
      p.retry_if || p.pushback_if || p.throttle_if || p.result_filter || p.retry_if_exception;
  CORETRY_ALLOW_DEPRECATED_END
  const auto rules_decision = [st](const coretry::attempt_result& r) {
    coretry::attempt_decision d;
    if (r.error()) {
      d.retry = transport_failure(r.error(), st->rules).has_value();
      d.throttle = coretry::default_throttle_if(r.error());
    } else if (const response_type* res = r.template value<response_type>()) {
      // The status rules, as coretry::curl applies them: one function for both.
      const auto field = res->find(http::field::retry_after);
      d = coretry::http::classify_response(
          res->result_int(),
          field == res->end() ? std::string_view{}
                              : std::string_view(field->value().data(), field->value().size()),
          st->rules);
    }
    return d;
  };
  if (!p.classify && !deprecated_predicates)
    p.classify = rules_decision;
  if (p.classify) {
    // The caller's classifier decides, and the rules fill the fields it leaves open (a loaded
    // policy's leaves responses to the status rules); the rules' limits per kind of failure
    // hold all the same, counted once per attempt it retries, as below.
    p.classify = [user = std::move(p.classify), rules_decision,
                  st](const coretry::attempt_result& r) {
      coretry::attempt_decision d = user(r);
      if (!d.gives(coretry::decision_fields::all))
        d = coretry::complete(d, rules_decision(r));
      if (!d.retry)
        return d;
      if (r.error()) {
        const auto kind = transport_failure(r.error(), st->rules);
        if (kind && st->counts.exhausted(*kind, st->rules))
          d.retry = false;
      } else if (const response_type* res = r.template value<response_type>()) {
        if (coretry::http::is_retryable_status(res->result_int(), st->rules) &&
            !st->counts.record(coretry::http::failure_kind::status, st->rules))
          d.retry = false;
      }
      return d;
    };
    return p;
  }
  // The 0.2 path, for a caller's deprecated predicates: as in 0.2, for one minor release.
  CORETRY_ALLOW_DEPRECATED_BEGIN
  // A kind of transport failure past its limit (`retry_rules::connect_retries`, `read_retries`)
  // is final, whatever decides the rest.
  p.retry_if = [user = std::move(p.retry_if), st](const std::error_code& ec) {
    const auto kind = transport_failure(ec, st->rules);
    if (kind && st->counts.exhausted(*kind, st->rules))
      return false;
    return user ? user(ec) : kind.has_value();
  };
  p.throttle_if = [user = std::move(p.throttle_if), st](const std::error_code& ec) {
    if (ec == coretry::errc::result_rejected)
      return coretry::http::slows_sending_rate(st->last_status);
    return user ? user(ec) : coretry::default_throttle_if(ec);
  };
  p.pushback_if = [user = std::move(p.pushback_if), st](const std::error_code& ec) {
    if (ec == coretry::errc::result_rejected && coretry::http::is_pushback_status(st->last_status))
      return true;
    return user && user(ec);
  };
  if (!p.result_filter)
    p = std::move(p).template retry_if_result<response_type>([st](const response_type& r) {
      return coretry::http::is_retryable_status(r.result_int(), st->rules);
    });
  // A retryable status past `retry_rules::status_retries` is a final answer, as one outside the
  // list is, whichever filter rejected it. The filter runs once per response: each rejected
  // status counts once. Only a status the rules retry counts, as coretry::curl (and urllib3)
  // count: a response the caller's own filter rejects (a 404 "not yet", a 200 "pending") is not
  // limited by status_retries. (A filter on another type is refused at the call by the loop.)
  if (*p.result_filter->type == typeid(response_type)) {
    p.result_filter =
        std::make_shared<const coretry::detail::result_predicate>(coretry::detail::result_predicate{
            p.result_filter->type, [filter = p.result_filter, st](const void* v) {
              if (!filter->call(v))
                return false;
              const auto& r = *static_cast<const response_type*>(v);
              if (!coretry::http::is_retryable_status(r.result_int(), st->rules))
                return true;
              return st->counts.record(coretry::http::failure_kind::status, st->rules);
            }});
  }
  CORETRY_ALLOW_DEPRECATED_END
  return p;
}

/// The `Host` field `retry` gives a request that has none (every HTTP/1.1 request carries one,
/// RFC 9112 section 3.2): the endpoint's host, an IPv6 address in brackets and without its zone
/// (`fe80::1%eth0` is `[fe80::1]`: a zone means nothing to the server), then ":" and the port
/// the service names (a number or a service name such as "https") when it is not 80.
inline std::string default_host(const endpoint& where) {
  std::string out = uri_host(where.host);
  const unsigned port = service_port(where.service);
  if (port != 0 && port != 80)
    out += ":" + std::to_string(port);
  return out;
}

template <class ResponseBody, class RequestBody, class Fields>
auto prepare(const asio::any_io_executor& ex, endpoint where,
             http::request<RequestBody, Fields> req, coretry::retry_policy policy,
             const coretry::http::retry_rules& rules) {
  rules.validate();
  validate_request(req, "coretry::beast::retry");
  if (where.host.empty())
    throw std::invalid_argument("coretry::beast::retry: endpoint.host is empty");
  if (where.service.empty())
    throw std::invalid_argument("coretry::beast::retry: endpoint.service is empty (host " +
                                escaped(where.host) + ")");
  // The host may become the request's Host field: nothing in it may end that line early.
  for (const char ch : where.host) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7f)
      throw std::invalid_argument("coretry::beast::retry: endpoint.host = " + escaped(where.host) +
                                  " (must not contain control characters, spaces or DEL)");
  }
  if (req.find(http::field::host) == req.end())
    req.set(http::field::host, default_host(where));
  // Each attempt has a connection of its own: the server may close it after the response.
  req.keep_alive(false);
  req.prepare_payload();
  auto st =
      std::make_shared<retry_state<RequestBody, Fields>>(std::move(where), std::move(req), rules);
  auto p = make_policy<ResponseBody>(std::move(policy), st);
  return std::pair{http_attempt<ResponseBody, RequestBody, Fields>{st, ex}, std::move(p)};
}

/// The body of every `retry` overload: the checks and the request prepared at the call
/// (`prepare`), then the retry loop, filling `*stats` when there is one.
template <class ResponseBody, class RequestBody, class Fields>
asio::awaitable<http::response<ResponseBody>>
start_retry(const asio::any_io_executor& ex, endpoint where, http::request<RequestBody, Fields> req,
            coretry::retry_policy policy, const coretry::http::retry_rules& rules,
            coretry::retry_stats* stats) {
  auto [attempt, p] =
      prepare<ResponseBody>(ex, std::move(where), std::move(req), std::move(policy), rules);
  if (stats != nullptr)
    return coretry::retry_async(std::move(attempt), std::move(p), *stats);
  return coretry::retry_async(std::move(attempt), std::move(p));
}

} // namespace detail

/// Sends `req` to `where` until an attempt is accepted, under `policy` and the HTTP rules of
/// `rules` (the ones `coretry::curl::retry` applies, `<coretry/http.hpp>`):
/// - each attempt is one `async_exchange` on a new connection (a retry follows a failure, and a
///   failed or cut exchange leaves its connection in a state nobody knows: a request half
///   written, a response half read); the request is sent with `Connection: close` and its
///   payload prepared (`Content-Length`), and a request without a `Host` field gets the
///   endpoint's (`host`, `host:port` for a port other than 80, `[::1]:8080` for IPv6);
/// - a request whose method `rules.allowed_methods` lacks (POST, PATCH) and that carries no
///   `Idempotency-Key` header is sent once;
/// - transport errors are retried as `rules` says (refused and unreachable connections; resets,
///   a server closing without a reply, a response cut short and attempts cut by
///   `policy.attempt_timeout`; names that do not resolve only with `retry_dns_failures`; never a
///   response past a limit of `async_exchange`), within
///   `rules.connect_retries` and `rules.read_retries`; a `policy.classify` (or the deprecated
///   `policy.retry_if`) replaces which errors are retried, and the limits still hold (the
///   fields a classifier's decision leaves open, `attempt_decision::given`, are the rules':
///   a policy read by `coretry::config` leaves responses to the status rules);
/// - responses with a status of `rules.status_forcelist` are retried, within
///   `rules.status_retries`; a `policy.classify` (or the deprecated `policy.retry_if_result`
///   on `http::response<ResponseBody>`) replaces which are retried, and the limit still holds
///   for the statuses the rules retry (a response only the policy's classifier rejects is not
///   counted, as in `coretry::curl::retry`).
///   When the attempts run out on such a status, that response is returned;
/// - a `Retry-After` on a status of `rules.retry_after_status_codes` (429, 503) is the least wait
///   before the next attempt (`attempt_context::retry_after`: `policy.max_retry_after` and the
///   deadline bound it); 429 is a push-back for a breaker, 429 and 503 slow an adaptive rate;
/// - with an observer and no `policy.label`, the operation is labelled `http://host:service`.
///
/// \returns the accepted response, or the last one when the policy gave up on statuses.
/// \throws std::invalid_argument at the call for an invalid policy or `rules`, an empty host
/// or service, a host with a control character, space or DEL, or a request `async_exchange`
/// refuses (a method or field name that is not a token, CR, LF or NUL in a field value, a
/// control character, space or DEL in the target), naming the field and its value;
/// `std::system_error` with the last transport error when the policy gave up (see
/// `retry_policy::final_error`), or with `asio::error::operation_aborted` when cancelled.
///
/// @par Per-Operation Cancellation
/// As `coretry::retry_async`: terminal cancellation of the awaiting coroutine stops the
/// operation in an attempt (its connection is closed) or in a sleep.
template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class Policy CORETRY_DEFAULT_POLICY>
requires coretry::detail::policy_value<Policy> asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor& ex, CORETRY_BEAST_ENDPOINT where,
      http::request<RequestBody, Fields> req, Policy&& policy, CORETRY_BEAST_RULES rules) {
  return detail::start_retry<ResponseBody>(
      ex, std::move(where), std::move(req),
      coretry::detail::policy_copy(std::forward<Policy>(policy)), rules, nullptr);
}

/// As above, and fills `stats` as the operation goes. `stats` must outlive the operation.
///
/// @par Per-Operation Cancellation
/// As above.
template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class Policy CORETRY_DEFAULT_POLICY>
requires coretry::detail::policy_value<Policy> asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor& ex, CORETRY_BEAST_ENDPOINT where,
      http::request<RequestBody, Fields> req, Policy&& policy, CORETRY_BEAST_RULES rules,
      coretry::retry_stats& stats) {
  return detail::start_retry<ResponseBody>(
      ex, std::move(where), std::move(req),
      coretry::detail::policy_copy(std::forward<Policy>(policy)), rules, &stats);
}

/// As above, with the default `coretry::http::retry_rules` (those of `coretry::curl::retry`).
///
/// @par Per-Operation Cancellation
/// As above.
template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class Policy CORETRY_DEFAULT_POLICY>
requires coretry::detail::policy_value<Policy> asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor& ex, CORETRY_BEAST_ENDPOINT where,
      http::request<RequestBody, Fields> req, Policy&& policy) {
  // The rules are made here, never as a default argument: g++ 12 miscompiles a temporary with
  // default member initializers inside the caller's co_await expression.
  const coretry::http::retry_rules rules;
  return detail::start_retry<ResponseBody>(
      ex, std::move(where), std::move(req),
      coretry::detail::policy_copy(std::forward<Policy>(policy)), rules, nullptr);
}

/// As above, and fills `stats` as the operation goes. `stats` must outlive the operation.
///
/// @par Per-Operation Cancellation
/// As above.
template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class Policy CORETRY_DEFAULT_POLICY>
requires coretry::detail::policy_value<Policy> asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor& ex, CORETRY_BEAST_ENDPOINT where,
      http::request<RequestBody, Fields> req, Policy&& policy, coretry::retry_stats& stats) {
  const coretry::http::retry_rules rules;
  return detail::start_retry<ResponseBody>(
      ex, std::move(where), std::move(req),
      coretry::detail::policy_copy(std::forward<Policy>(policy)), rules, &stats);
}

/// `retry` with a completion token: callbacks, `use_future`, `as_tuple(use_awaitable)`, ...
/// The operation runs on `ex`.
///
/// @par Completion Signature
/// `void(boost::system::error_code, http::response<ResponseBody>)`: as `coretry::async_retry`,
/// the error is empty when a response is delivered (accepted, or the last one when the policy
/// gave up on statuses).
///
/// @par Per-Operation Cancellation
/// As `coretry::async_retry`: terminal, partial or total cancellation through the handler's slot
/// stops the operation; the handler gets `operation_aborted`, once.
template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class CompletionToken>
auto async_retry(const asio::any_io_executor& ex, CORETRY_BEAST_ENDPOINT where,
                 http::request<RequestBody, Fields> req, coretry::retry_policy policy,
                 CORETRY_BEAST_RULES rules, CompletionToken&& token) {
  auto [attempt, p] =
      detail::prepare<ResponseBody>(ex, std::move(where), std::move(req), std::move(policy), rules);
  return coretry::async_retry(ex, std::move(attempt), std::move(p),
                              std::forward<CompletionToken>(token));
}

/// As above, with the default `coretry::http::retry_rules`.
///
/// @par Completion Signature
/// As above.
///
/// @par Per-Operation Cancellation
/// As above.
template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class CompletionToken>
auto async_retry(const asio::any_io_executor& ex, CORETRY_BEAST_ENDPOINT where,
                 http::request<RequestBody, Fields> req, coretry::retry_policy policy,
                 CompletionToken&& token) {
  const coretry::http::retry_rules rules;
  auto [attempt, p] =
      detail::prepare<ResponseBody>(ex, std::move(where), std::move(req), std::move(policy), rules);
  return coretry::async_retry(ex, std::move(attempt), std::move(p),
                              std::forward<CompletionToken>(token));
}

#if CORETRY_REFUSE_BRACED_POLICY
// g++ 12: a braced endpoint, rules or policy lands in one of these and fails to compile, saying
// what to write (see CORETRY_BEAST_ENDPOINT above).
namespace detail {

/// `endpoint`'s members, in its order: what a braced `{"host", "80"}` argument initialises on
/// g++ 12, only to be refused. Keep in step with `endpoint`.
struct braced_endpoint {
  std::string host;
  std::string service = "80";
};

/// `coretry::http::retry_rules`' members, in its order: what braced rules initialise on g++ 12,
/// only to be refused. Keep in step with `retry_rules` (a member missing here makes the braced
/// form fail with a plainer message, never run).
struct braced_rules {
  std::vector<int> status_forcelist{};
  std::vector<std::string> allowed_methods{};
  std::vector<int> retry_after_status_codes{};
  bool retry_dns_failures = false;
  std::optional<unsigned> connect_retries{};
  std::optional<unsigned> read_retries{};
  std::optional<unsigned> status_retries{};
};

} // namespace detail

#define CORETRY_BEAST_REFUSE_BRACED(G)                                                             \
  static_assert(::coretry::detail::braced_policy_refused<G>,                                       \
                "g++ 12 miscompiles a braced endpoint or retry_rules inside co_await (the "        \
                "temporary is copied bitwise and destroyed twice: free(): invalid pointer). Name " \
                "them first: const coretry::beast::endpoint api{\"example.com\", \"80\"}; "        \
                "const coretry::http::retry_rules rules{.status_retries = 2}; "                    \
                "co_await coretry::beast::retry(ex, api, std::move(req), policy, rules);")

template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class CompletionToken>
auto async_exchange(const asio::any_io_executor& ex, const detail::braced_endpoint&,
                    const http::request<RequestBody, Fields>& req, CompletionToken&& token) {
  CORETRY_BEAST_REFUSE_BRACED(ResponseBody);
  // The real return type, so that the refusal is the only error a co_await of it reports.
  static const endpoint none;
  return detail::async_exchange_checked<ResponseBody>(ex, none, req,
                                                      std::forward<CompletionToken>(token));
}

// A braced endpoint (the policy and the rules as they come).
template <class ResponseBody = http::string_body, class RequestBody, class Fields>
asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor&, detail::braced_endpoint, http::request<RequestBody, Fields>,
      coretry::retry_policy) {
  CORETRY_BEAST_REFUSE_BRACED(ResponseBody);
  return {};
}
template <class ResponseBody = http::string_body, class RequestBody, class Fields>
asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor&, detail::braced_endpoint, http::request<RequestBody, Fields>,
      coretry::retry_policy, coretry::retry_stats&) {
  CORETRY_BEAST_REFUSE_BRACED(ResponseBody);
  return {};
}
template <class ResponseBody = http::string_body, class RequestBody, class Fields>
asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor&, detail::braced_endpoint, http::request<RequestBody, Fields>,
      coretry::retry_policy, const coretry::http::retry_rules&) {
  CORETRY_BEAST_REFUSE_BRACED(ResponseBody);
  return {};
}
template <class ResponseBody = http::string_body, class RequestBody, class Fields>
asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor&, detail::braced_endpoint, http::request<RequestBody, Fields>,
      coretry::retry_policy, const coretry::http::retry_rules&, coretry::retry_stats&) {
  CORETRY_BEAST_REFUSE_BRACED(ResponseBody);
  return {};
}

// Braced rules (a named endpoint; a braced policy is refused below).
template <class ResponseBody = http::string_body, class RequestBody, class Fields, class Policy>
requires coretry::detail::policy_value<Policy> asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor&, CORETRY_BEAST_ENDPOINT, http::request<RequestBody, Fields>,
      Policy&&, detail::braced_rules) {
  CORETRY_BEAST_REFUSE_BRACED(ResponseBody);
  return {};
}
template <class ResponseBody = http::string_body, class RequestBody, class Fields, class Policy>
requires coretry::detail::policy_value<Policy> asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor&, CORETRY_BEAST_ENDPOINT, http::request<RequestBody, Fields>,
      Policy&&, detail::braced_rules, coretry::retry_stats&) {
  CORETRY_BEAST_REFUSE_BRACED(ResponseBody);
  return {};
}

// A braced policy (a named endpoint; the rules as they come), as coretry::retry_async refuses it.
template <class ResponseBody = http::string_body, class RequestBody, class Fields>
asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor&, CORETRY_BEAST_ENDPOINT, http::request<RequestBody, Fields>,
      coretry::detail::braced_policy) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(ResponseBody);
  return {};
}
template <class ResponseBody = http::string_body, class RequestBody, class Fields>
asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor&, CORETRY_BEAST_ENDPOINT, http::request<RequestBody, Fields>,
      coretry::detail::braced_policy, coretry::retry_stats&) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(ResponseBody);
  return {};
}
template <class ResponseBody = http::string_body, class RequestBody, class Fields>
asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor&, CORETRY_BEAST_ENDPOINT, http::request<RequestBody, Fields>,
      coretry::detail::braced_policy, const coretry::http::retry_rules&) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(ResponseBody);
  return {};
}
template <class ResponseBody = http::string_body, class RequestBody, class Fields>
asio::awaitable<http::response<ResponseBody>>
retry(const asio::any_io_executor&, CORETRY_BEAST_ENDPOINT, http::request<RequestBody, Fields>,
      coretry::detail::braced_policy, const coretry::http::retry_rules&, coretry::retry_stats&) {
  CORETRY_REFUSE_BRACED_POLICY_ASSERT(ResponseBody);
  return {};
}

// async_retry: a braced endpoint or braced rules (a braced policy is taken, as by
// coretry::async_retry: nothing is awaited with a callback).
template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class CompletionToken>
auto async_retry(const asio::any_io_executor&, detail::braced_endpoint,
                 http::request<RequestBody, Fields>, coretry::retry_policy,
                 const coretry::http::retry_rules&, CompletionToken&&) {
  CORETRY_BEAST_REFUSE_BRACED(CompletionToken);
}
template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class CompletionToken>
auto async_retry(const asio::any_io_executor&, detail::braced_endpoint,
                 http::request<RequestBody, Fields>, coretry::retry_policy, CompletionToken&&) {
  CORETRY_BEAST_REFUSE_BRACED(CompletionToken);
}
template <class ResponseBody = http::string_body, class RequestBody, class Fields,
          class CompletionToken>
auto async_retry(const asio::any_io_executor&, CORETRY_BEAST_ENDPOINT,
                 http::request<RequestBody, Fields>, coretry::retry_policy, detail::braced_rules,
                 CompletionToken&&) {
  CORETRY_BEAST_REFUSE_BRACED(CompletionToken);
}
#endif

} // namespace coretry::beast
