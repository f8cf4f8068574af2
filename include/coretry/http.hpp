// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// `coretry::http`: which HTTP failures a retry loop retries, as a value (`retry_rules`), and
/// the free functions that read it. No libcurl: `coretry::curl` uses it, and so can a retry loop
/// around any other HTTP client (Boost.Beast, ...). Linked with `coretry::coretry` alone.

#include <coretry/classify.hpp>
#include <coretry/export.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace coretry::http {

/// Which HTTP failures a retry loop retries: the arguments of urllib3's `Retry(...)`, one field
/// each, defaults as `coretry::curl::retry` has always had them. A plain aggregate; build it with
/// designated initializers and copy it freely:
///
///     coretry::http::retry_rules rules{.status_forcelist = {429, 502, 503},
///                                      .retry_dns_failures = true,
///                                      .status_retries = 2};
///
/// It holds settings only, never counts: an operation counts its own failures
/// (`failure_counts`), so one value serves any number of operations at once, hedged copies
/// included. `validate()` checks it; `coretry::curl` calls that where it takes one.
struct retry_rules {
  /// The statuses retried (urllib3's `status_forcelist`); any other status is a final answer.
  /// Each in 100-599. Default 408, 429, 500, 502, 503, 504.
  std::vector<int> status_forcelist{408, 429, 500, 502, 503, 504};
  /// The methods that may be sent more than once (urllib3's `allowed_methods`), compared
  /// case-sensitively, as methods are. Each a non-empty HTTP token. Default the idempotent ones
  /// of RFC 9110: GET, HEAD, OPTIONS, PUT, DELETE, TRACE. A request carrying an
  /// `Idempotency-Key` header may be retried whatever its method (`may_retry`).
  std::vector<std::string> allowed_methods{"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"};
  /// The statuses whose `Retry-After` is honoured (urllib3's `RETRY_AFTER_STATUS_CODES`, and
  /// `respect_retry_after_header=False` is an empty list). Each in 100-599. Default 429 and 503
  /// (urllib3 also has 413).
  std::vector<int> retry_after_status_codes{429, 503};
  /// Whether a failed name resolution counts as a connect failure, and is retried as one
  /// (urllib3 does so: the request never left). Default false: a name that does not resolve is
  /// final, as a mistyped host name stays mistyped.
  bool retry_dns_failures = false;
  /// Retries after connect failures at most (urllib3's `connect`): the request never reached
  /// the server (refused, connect timeout, name resolution with `retry_dns_failures`). Unset:
  /// no limit of its own. The policy's `max_attempts` stays the limit on all attempts.
  std::optional<unsigned> connect_retries{};
  /// Retries after read failures at most (urllib3's `read`): the request may have reached the
  /// server (connection reset, timeout after sending, closed without a reply). Unset: no limit.
  std::optional<unsigned> read_retries{};
  /// Retries after a retryable status at most (urllib3's `status`). Unset: no limit. Past it,
  /// such a status is a final answer, as a status outside `status_forcelist` is.
  std::optional<unsigned> status_retries{};

  /// Throws `std::invalid_argument` naming the first bad field and its value: a status outside
  /// 100-599 (`status_forcelist[2] = 700`), an empty method or one that is not an HTTP token
  /// (`allowed_methods[0] = ""`).
  CORETRY_API void validate() const;
};

/// What kind of failure a retry answers, the three urllib3 counts separately.
enum class failure_kind : std::uint8_t {
  connect, ///< the request never reached the server: refused, connect timeout, DNS if enabled
  read,    ///< it may have: reset, timeout after sending, closed without a reply
  status,  ///< the server answered with a status of `retry_rules::status_forcelist`
};

/// One operation's failures of each kind, against the limits of a `retry_rules`
/// (`connect_retries`, `read_retries`, `status_retries`). Keep one per operation, never in
/// anything shared: hedged copies of one operation share it only if they run on one thread (or
/// strand). Not thread-safe.
class failure_counts {
public:
  /// Counts one failure of `kind`; whether `rules` still allow a retry after it (the count is
  /// within that kind's limit). With `status_retries = 1`, the first retryable status returns
  /// true and the second false.
  bool record(failure_kind kind, const retry_rules& rules) noexcept {
    unsigned& n = counts_[index(kind)];
    if (n != std::numeric_limits<unsigned>::max())
      ++n;
    return !exhausted(kind, rules);
  }

  /// Whether failures of `kind` are past their limit in `rules`: once true, it stays true.
  bool exhausted(failure_kind kind, const retry_rules& rules) const noexcept {
    const std::optional<unsigned>& limit = kind == failure_kind::connect ? rules.connect_retries
                                           : kind == failure_kind::read  ? rules.read_retries
                                                                         : rules.status_retries;
    return limit && counts_[index(kind)] > *limit;
  }

  /// How many failures of `kind` were counted.
  unsigned count(failure_kind kind) const noexcept { return counts_[index(kind)]; }

private:
  static std::size_t index(failure_kind kind) noexcept { return static_cast<std::size_t>(kind); }
  std::array<unsigned, 3> counts_{};
};

/// Whether `status` is in `rules.status_forcelist`.
CORETRY_API bool is_retryable_status(long status, const retry_rules& rules) noexcept;
/// Whether `status` is retried by default: 408, 429, 500, 502, 503, 504. Allocates nothing.
CORETRY_API bool is_retryable_status(long status) noexcept;

/// Whether `s` is an HTTP token (RFC 9110, section 5.6.2): one or more of the letters, digits
/// and ``!#$%&'*+-.^_`|~``. A method and a field name are tokens; anything else written in their
/// place (a space, CR, LF, a colon) would change the request on the wire.
CORETRY_API bool is_token(std::string_view s) noexcept;

/// Whether `method` is idempotent (RFC 9110): GET, HEAD, OPTIONS, PUT, DELETE, TRACE.
/// Compared case-sensitively, as methods are.
CORETRY_API bool is_idempotent(std::string_view method) noexcept;

/// Whether `method` is in `rules.allowed_methods`.
CORETRY_API bool is_allowed_method(std::string_view method, const retry_rules& rules) noexcept;

/// Whether a request may be sent more than once under `rules`: its method is allowed
/// (`rules.allowed_methods`) or it carries an `Idempotency-Key` header
/// (`has_idempotency_key`). For Boost.Beast:
/// `may_retry(req.method_string(), req.count("Idempotency-Key") != 0, rules)`.
CORETRY_API bool may_retry(std::string_view method, bool has_idempotency_key,
                           const retry_rules& rules) noexcept;
/// As above with the default rules: an idempotent method or an `Idempotency-Key`.
CORETRY_API bool may_retry(std::string_view method, bool has_idempotency_key) noexcept;

/// Whether the `Retry-After` of a response with `status` is honoured under `rules`
/// (`rules.retry_after_status_codes`).
CORETRY_API bool honours_retry_after(long status, const retry_rules& rules) noexcept;
/// Whether `Retry-After` is honoured by default: 429 and 503.
inline bool honours_retry_after(long status) noexcept {
  return status == 429 || status == 503;
}

/// Whether `status` is the server pushing back rather than failing (429 Too Many Requests):
/// worth a retry, but no failure for a circuit breaker (`retry_policy::pushback_if`).
inline bool is_pushback_status(long status) noexcept {
  return status == 429;
}

/// Whether `status` asks the client to send more slowly (429, 503): an adaptive sending rate
/// slows down on it (`retry_policy::throttle_if`).
inline bool slows_sending_rate(long status) noexcept {
  return status == 429 || status == 503;
}

/// What a retry loop decides for one HTTP response under `rules`: the one place where the
/// status rules meet, for `coretry::curl::classify` (the default `classify` of
/// `coretry::curl::retry` and `hedge`) and for the default `classify` of `coretry::beast::retry`
/// alike, and for a retry loop around any other client.
///
/// - `retry`: the status is in `rules.status_forcelist` (`is_retryable_status`); any other status
///   is an accepted answer, and then nothing else below is set;
/// - `pushback`: a retried 429 (`is_pushback_status`);
/// - `throttle`: a retried 429 or 503 (`slows_sending_rate`);
/// - `retry_after`: `retry_after`, the response's `Retry-After` field value (empty: none),
///   parsed (`parse_retry_after`), when the response is retried and
///   `rules.retry_after_status_codes` holds its status (`honours_retry_after`); zero when it is
///   absent or malformed.
///
/// Whether the request may be sent again at all is not decided here: it is a property of the
/// request (`may_retry`), which both adapters settle before the first attempt by allowing one
/// attempt only. So a 503 to a POST is decided `retry` here, and the loop, out of attempts,
/// returns it as a retryable failure it gave up on (in its statistics and events), not as an
/// accepted answer. Nor are `rules`' per-kind limits (`status_retries`) applied: they count an
/// operation's failures (`failure_counts`), which a decision on one response cannot see.
///
/// ```
/// coretry::http::retry_rules rules{};
/// coretry::attempt_decision d = coretry::http::classify_response(503, "2", rules);
/// assert(d.retry && d.throttle && !d.pushback && d.retry_after == std::chrono::seconds(2));
/// assert(!coretry::http::classify_response(404, "2", rules).retry);
/// ```
///
/// Thread-safe; allocates nothing; reads the system clock only to parse an HTTP-date.
CORETRY_API attempt_decision classify_response(long status, std::string_view retry_after,
                                               const retry_rules& rules);
/// As above, with an HTTP-date in `retry_after` read relative to `now` (a test's fixed time).
CORETRY_API attempt_decision classify_response(long status, std::string_view retry_after,
                                               const retry_rules& rules,
                                               std::chrono::system_clock::time_point now);

/// The category of HTTP statuses as `std::error_code` values ("HTTP 503 Service Unavailable");
/// its name is "http-status". A status is never a transport error: an HTTP client sets one as
/// an attempt's health code (`attempt_context::health_code`), so that a breaker or an adaptive
/// throttle hears what a rejected response says of the upstream, and may report one in retry
/// events. Its values fall in coretry's health conditions (`coretry::default_health`):
///
/// | status                  | condition                   | to a breaker |
/// |-------------------------|-----------------------------|--------------|
/// | 1xx to 3xx              | `condition::answered`       | not a failure, even when rejected (a "202 pending" polled again) |
/// | 429                     | `condition::pushback`       | a push-back, no failure |
/// | 408                     | `condition::timed_out`      | a failure |
/// | any other 4xx           | `condition::client_error`   | not a failure (the request's fault) |
/// | 5xx (and anything else) | none                        | a failure |
///
/// `coretry::curl::http_status_category()` is this category. Thread-safe.
CORETRY_API const std::error_category& status_category() noexcept;

/// `{status, status_category()}`: what `coretry::curl` and `coretry::beast` set as the health
/// code of every response.
inline std::error_code make_status_error(long status) noexcept {
  return {static_cast<int>(status), status_category()};
}

/// The keys of the attempt attributes (`attempt_context::set_attribute`) an HTTP attempt sets,
/// named as OpenTelemetry's HTTP semantic conventions name them. `coretry::curl` and
/// `coretry::beast` set both; an attempt of your own over another client sets them the same way,
/// and `prometheus_observer` counts it in `http_client_request_duration_seconds`.
namespace attribute {
/// The request's method, a text (`"GET"`), set on every attempt that sent a request.
inline constexpr std::string_view request_method = "http.request.method";
/// The response's status, an integer (`503`), set only when a response came (none after a
/// transport error).
inline constexpr std::string_view response_status_code = "http.response.status_code";
} // namespace attribute

/// The longest wait `parse_retry_after` reports (2^31 - 1 s, about 68 years): larger values
/// saturate here, so the result always converts to `std::chrono::nanoseconds` without overflow.
inline constexpr std::chrono::seconds max_retry_after{INT32_MAX};

/// Parses an HTTP-date (RFC 9110, section 5.6.7) in any of its three forms, exactly as the
/// grammar has them (case-sensitive, single spaces, no leading or trailing characters):
///
/// | form        | example                            |
/// |-------------|------------------------------------|
/// | IMF-fixdate | `Sun, 06 Nov 1994 08:49:37 GMT`    |
/// | RFC 850     | `Sunday, 06-Nov-94 08:49:37 GMT`   |
/// | asctime     | `Sun Nov  6 08:49:37 1994` (or `Nov 06`), read as GMT |
///
/// The zone must be `GMT` (asctime has none); hours 00-23, minutes 00-59, seconds 00-60 (a
/// leap second, counted as the next second); the day must exist in its month (29 Feb in leap
/// years only). The day name is checked against the list of names, not against the date. An
/// RFC 850 two-digit year is the one in the century of `now`, or the century before when that
/// would be more than 50 years after `now`. `std::nullopt` for anything else. Thread-safe,
/// never allocates.
CORETRY_API std::optional<std::chrono::sys_seconds>
parse_http_date(std::string_view value, std::chrono::sys_seconds now) noexcept;

/// Parses a `Retry-After` value: delta-seconds (`"120"`) or an HTTP-date (see
/// `parse_http_date`), relative to `now`.
///
/// \returns the wait, never negative: a date in the past gives zero; values beyond
/// `max_retry_after` saturate. `std::nullopt` for anything else: empty or garbage values, signs
/// (`"-5"`, `"+5"`), fractions, units (`"10s"`), a date in another zone (`"... PST"`, `"... +0000"`,
/// `"... UTC"`) or followed by anything but spaces and tabs. Leading and trailing spaces or tabs
/// are ignored. Thread-safe; never allocates.
CORETRY_API std::optional<std::chrono::seconds>
parse_retry_after(std::string_view value,
                  std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

namespace detail {
/// `v` as a bounded, one-line C-like string literal for an error message: quoted, CR and LF as
/// `\r` and `\n`, `"` and `\` escaped, any other control or non-ASCII byte as `\xNN`, cut after
/// 64 bytes (then followed by `...`). How the HTTP adapters (`coretry::curl`, `coretry::beast`)
/// and `retry_rules::validate` show a refused value.
CORETRY_API std::string escaped(std::string_view v);

/// `retry_rules::validate`, naming the fields "<prefix><field>" in "<where>: ..." (the curl
/// adapter checks `request::retry_rules` as "coretry::curl::request: retry_rules.<field>").
CORETRY_API void validate_rules(const retry_rules& rules, const char* where,
                                const std::string& prefix);
} // namespace detail

} // namespace coretry::http
