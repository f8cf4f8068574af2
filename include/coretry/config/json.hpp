// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// coretry::config (optional component, library `coretry_config`): policies read from JSON
/// text, in two forms.
///
/// - **gRPC's service config** (gRFC A6, "gRPC Retry Design"): `methodConfig[].name[]`,
///   `retryPolicy`, `hedgingPolicy`, `timeout` and `retryThrottling`, read by
///   `read_service_config` into one `retry_policy` (and `hedge_options`) per method config and
///   one shared `token_bucket_budget`.
/// - **coretry's own form**, for everything else a policy holds (breaker, ratio budget,
///   deadline, attempt timeout, jitter, presets by name), read by `read_policy`.
///
/// Both take the JSON as text; the parser is a private detail of the library. Every document
/// they refuse throws `std::invalid_argument` whose message starts with the JSON path of the
/// offending value (`$` for the document itself), then `: `, the value and the rule, e.g.
/// `methodConfig[0].retryPolicy.maxAttempts: 1 is below 2`. docs/config.md describes both
/// schemas.

#include <coretry/hedge.hpp>
#include <coretry/policy.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace coretry::config {

/// Maps a gRPC status name ("UNAVAILABLE", "RESOURCE_EXHAUSTED", ...) to the `std::error_code`
/// an attempt fails with; `std::nullopt` for a name it does not know. A number in a document
/// (14) is first turned into its canonical name (gRPC's codes 0 to 16), then looked up.
using status_lookup = std::function<std::optional<std::error_code>(std::string_view name)>;

/// The same as a table.
using status_table = std::map<std::string, std::error_code>;

/// A `status_lookup` reading `table` (which must outlive it).
CORETRY_API status_lookup lookup_in(const status_table& table);

/// The canonical name of gRPC status code `code` (0 "OK" to 16 "UNAUTHENTICATED"), or an empty
/// view for any other number.
CORETRY_API std::string_view grpc_status_name(std::int64_t code) noexcept;

/// One entry of a method config's `name` list. An empty `method` names every method of the
/// service; both empty name every method of every service (the default entry).
struct method_name {
  std::string service; ///< e.g. "grpc.examples.echo.Echo"
  std::string method;  ///< e.g. "UnaryEcho"; empty: the whole service.
  /// Equal when both the service and the method are.
  friend bool operator==(const method_name&, const method_name&) = default;
};

/// What a method config asks for.
enum class method_kind : std::uint8_t {
  single, ///< neither `retryPolicy` nor `hedgingPolicy`: one attempt (A6: no retries)
  retry,  ///< `retryPolicy`: `retry_async(op, policy)`
  hedge,  ///< `hedgingPolicy`: `hedge_async(op, policy, hedge)`
};

/// One `methodConfig[]` entry, mapped onto coretry's types.
struct method_config {
  /// The `name[]` entries, as written.
  std::vector<method_name> names;
  /// Which policy the entry has.
  method_kind kind = method_kind::single;
  /// The policy. `retry`: `max_attempts` (capped, see `grpc_options`), an exponential backoff
  /// from `initialBackoff` by `backoffMultiplier` up to `maxBackoff` with full jitter (A6's
  /// `random(0, min(initial * multiplier^(n-1), max))`), a `classify` retrying the errors of
  /// `retryableStatusCodes` (and `errc::attempt_timeout` when `perAttemptRecvTimeout` sets
  /// `attempt_timeout`). `hedge`: `max_attempts` and a `classify` retrying the errors of
  /// `nonFatalStatusCodes`. That `classify` gives only `retry`, for errors, and leaves the rest
  /// to the default it is completed with (`attempt_decision::given`); the same list is in the
  /// deprecated `retry_if`, for 0.2 code (see `read_policy`). Both: `deadline` from `timeout` when given, and `budget` the
  /// service config's `throttling` when it has one. `single`: one attempt, `deadline` from
  /// `timeout`.
  retry_policy policy{.max_attempts = 1};
  /// `hedge` only: `delay` is `hedgingDelay` (0 when absent), `max_copies` is `maxAttempts`
  /// (every attempt may be outstanding, as in A6).
  hedge_options hedge{};
};

/// A service config read into coretry's types.
struct CORETRY_API service_config {
  /// The `methodConfig[]` entries, in document order.
  std::vector<method_config> methods;
  /// `retryThrottling` as a `token_bucket_budget` (`maxTokens`, `tokenRatio`), shared by the
  /// policy of every entry with a retry or hedging policy; null when the document has none.
  std::shared_ptr<token_bucket_budget> throttling;

  /// The entry that governs `service`/`method`, as gRPC picks it: the one naming that exact
  /// method, else the one naming the whole service (no method), else the default one (an empty
  /// name), else null.
  const method_config* find(std::string_view service, std::string_view method) const noexcept;
  /// The policy of `find(service, method)`; for no entry, a single-attempt policy.
  retry_policy policy_for(std::string_view service, std::string_view method) const;
};

/// Client-side settings of the gRPC reader.
struct grpc_options {
  /// A6's client-side ceiling on `maxAttempts` (retry and hedging alike): a larger value is
  /// read as this one. At least 2.
  unsigned max_attempts_limit = 5;
};

/// Reads a gRPC service config (JSON text). Fields this reader does not use
/// (`loadBalancingConfig`, `waitForReady`, ...) are ignored, as gRPC's own readers do; field
/// names match as grpc-go's do, whatever their case and with or without `_` (so grpc-go's
/// `"MaxAttempts"` and protobuf's `"max_attempts"` read as `"maxAttempts"`). Status codes,
/// names or numbers, go through `statuses`.
///
/// \throws std::invalid_argument naming the JSON path and value of the first problem: malformed
/// JSON (with its line and column), a wrong type, a missing required field, a value A6 forbids
/// (`maxAttempts` below 2, a non-positive backoff or multiplier, an empty
/// `retryableStatusCodes`, both policies in one entry, `maxTokens` outside (0, 1000],
/// `tokenRatio` not positive), a status the table does not know, a name given twice, or a
/// value coretry cannot represent (a `backoffMultiplier` below 1 or above 1000).
CORETRY_API service_config read_service_config(std::string_view json, const status_lookup& statuses,
                                               grpc_options options = {});
/// As above, with a table.
CORETRY_API service_config read_service_config(std::string_view json, const status_table& statuses,
                                               grpc_options options = {});

/// A policy read from coretry's own form, and its hedging options when the document has a
/// `hedge` object.
struct policy_config {
  retry_policy policy;                ///< The policy.
  std::optional<hedge_options> hedge; ///< `hedge`, when given.
};

/// Reads coretry's own JSON form of a policy (docs/config.md). Unknown fields are errors: a
/// misspelt option would otherwise be silently ignored. `statuses` is needed only for
/// `retry_on`. The keys are the fields' names (`breaker.max_concurrent_calls`,
/// `budget.window_buckets`, `hedge.max_copies`); the 0.2 names of those three
/// (`breaker.max_in_flight`, `budget.buckets`, `hedge.max_in_flight`) are still read.
///
/// `retry_on` sets the policy's `classify`: `attempt_decision::only_retry` (listed or not) for
/// an error, `attempt_decision::no_opinion()` otherwise, so the loop completes it with
/// `default_classify` (time-outs slow the sending rate; values accepted; exceptions final) and
/// `coretry::curl::retry` and `coretry::beast::retry` with their rules (a response is judged
/// by the status rules). A `classify` of the caller's replaces it. For 0.2 code the list is
/// also in the deprecated `retry_if`; one of the 0.2 predicates added to the policy (its own
/// `retry_if`, `throttle_if`, `retry_if_exception`, ...) makes the policy decide as in 0.2,
/// the loader's `retry_if` judging errors unless replaced, and `validate()` accepts it.
///
/// \throws std::invalid_argument naming the JSON path and value of the first problem, including
/// every value the policy's own types refuse (`circuit_breaker_options`,
/// `ratio_budget_options`, `backoff`, `token_bucket_budget`), and a key given under both its
/// name and its 0.2 name (naming both).
CORETRY_API policy_config read_policy(std::string_view json, const status_lookup& statuses = {});
/// As above, with a table.
CORETRY_API policy_config read_policy(std::string_view json, const status_table& statuses);

} // namespace coretry::config
