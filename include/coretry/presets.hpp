// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// Named presets: the common policies as ordinary `retry_policy` values (and the options behind
/// them), which a caller can still adjust field by field.

#include <coretry/backoff.hpp>
#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/export.hpp>
#include <coretry/policy.hpp>
#include <coretry/registry.hpp>

#include <chrono>

namespace coretry::presets {

/// The breaker of the README's recommended policy: opens after 10 failures in a row or when half
/// of at least 20 outcomes in the last 10 s failed; a break of 1 s (±20 %), then one probe.
CORETRY_API circuit_breaker_options overload_safe_breaker();
/// The budget of the README's recommended policy: retries at most 10 % of the requests of the
/// last 10 s, plus 1 a second (retries a rate limiter invited with 429 and `Retry-After` aside).
CORETRY_API ratio_budget_options overload_safe_budget();

/// The README's overload-safe policy for one upstream. It fails fast on its own: `deadline`
/// (10 s) bounds the whole call and `attempt_timeout` (2 s) each attempt; no limit on the number
/// of attempts (the breaker, the budget and the deadline decide); an exponential backoff from
/// 100 ms doubling up to 1 s, the breaker's break, with full jitter, so that no sleep outlasts a
/// break; and a fresh `circuit_breaker` (`overload_safe_breaker()`) and `ratio_budget`
/// (`overload_safe_budget()`). Copies of the returned policy share that breaker and budget: make
/// one policy per upstream, and copy it for each call. Throws `std::invalid_argument` when
/// `attempt_timeout` or `deadline` is not positive.
CORETRY_API retry_policy overload_safe(nanoseconds attempt_timeout = std::chrono::seconds(2),
                                       nanoseconds deadline = std::chrono::seconds(10));

/// `overload_safe` for a client of many upstreams, whose `endpoint_registry` (built from
/// `overload_safe_registry()`) supplies each endpoint's own breaker and budget. Until a
/// registry has done so (`curl::client_options::resilience`, or `endpoint_registry::apply`), its
/// `breaker` is a placeholder, and an operation started with it is refused at the call with
/// `std::invalid_argument`: without a registry the preset would have neither breaker nor budget.
CORETRY_API retry_policy
overload_safe_per_endpoint(nanoseconds attempt_timeout = std::chrono::seconds(2),
                           nanoseconds deadline = std::chrono::seconds(10));

/// Registry options making `overload_safe_breaker()` and `overload_safe_budget()` per endpoint.
CORETRY_API endpoint_registry_options overload_safe_registry();

/// Retry forever with a capped delay: no limit on attempts (4,294,967,295) and no deadline, an
/// exponential backoff from `initial` doubling up to `cap` with full jitter. Throws
/// `std::invalid_argument` (from `backoff::exponential`) unless `0 < initial <= cap`. Set a
/// `cancellation` token or a `deadline` to stop it.
CORETRY_API retry_policy retry_forever(nanoseconds cap,
                                       nanoseconds initial = std::chrono::milliseconds(100));

/// The cloud providers' truncated exponential backoff: `min(2^n s + random_ms, max)`, that is
/// an exponential curve from `initial` (1 s) doubling up to `max` (32 s), plus a uniform
/// `U(0, max_extra)` (up to 1,000 ms), the sum capped at `max` (`jitter::additive_truncated`).
/// Throws `std::invalid_argument` as `backoff::exponential` and `jitter::additive_truncated` do.
CORETRY_API backoff truncated_exponential(nanoseconds initial = std::chrono::seconds(1),
                                          nanoseconds max = std::chrono::seconds(32),
                                          nanoseconds max_extra = std::chrono::seconds(1));

/// The cloud storage policy ("Retry strategy" of Google Cloud Storage, "Exponential backoff" of
/// Memorystore): `truncated_exponential(1s, max_backoff, 1s)` between attempts, which go on,
/// without a limit on their number, until `deadline` (10 minutes by default). Throws
/// `std::invalid_argument` when `max_backoff` is below 1 s or `deadline` is not positive.
CORETRY_API retry_policy cloud_storage(nanoseconds max_backoff = std::chrono::seconds(32),
                                       nanoseconds deadline = std::chrono::minutes(10));

} // namespace coretry::presets
