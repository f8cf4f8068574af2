// SPDX-License-Identifier: BSL-1.0
#pragma once
// The rule the config loader (coretry/config) writes for a document's list of retryable codes,
// in its two spellings, and how the loop and the adapters tell them from a caller's own.
// Private: the loader, the loop (retry_loop.hpp), `retry_policy::validate` and the curl and
// Beast adapters use it.
//
// The loader sets both `retry_policy::classify` (a `loaded_classify`: `retry` for an error, by
// the list; every other field, and every value and exception, left open) and the deprecated
// `retry_if` (a `loaded_retry_if`: the same list), so that 0.2 code that reads or wraps the
// loaded `retry_if` keeps working. They are one rule, so:
// - while the policy carries no 0.2 predicate but the loader's `retry_if`, `classify` decides
//   (the loader's, completed with the loop's or the adapter's default; or a caller's own that
//   replaced it, beside which the loader's `retry_if` is inert);
// - once 0.2 code adds a predicate of its own (`throttle_if`, `retry_if_exception`, its own
//   `retry_if`, ...), the policy decides as in 0.2 and the loader's `classify` is inert: the 0.2
//   predicates give the fields that classifier leaves open, and the loader's `retry_if` (or the
//   caller's in its place) the one it gives. A caller's own `classify` beside a predicate of
//   the caller's own is refused by `validate()`, as before.

#include <coretry/classify.hpp>
#include <coretry/policy.hpp>

#include <algorithm>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

namespace coretry::detail {

/// The error codes a loaded document retries, shared by the loader's two spellings.
using loaded_codes = std::shared_ptr<const std::vector<std::error_code>>;

/// Whether `codes` lists `ec`.
inline bool loaded_lists(const loaded_codes& codes, const std::error_code& ec) noexcept {
  return codes && std::find(codes->begin(), codes->end(), ec) != codes->end();
}

/// The loader's `classify`: `retry` for an error, by the list; nothing else.
struct loaded_classify {
  loaded_codes codes; ///< the document's retryable codes
  /// `only_retry(listed)` for an error, `no_opinion()` for a value, a success or an exception.
  attempt_decision operator()(const attempt_result& r) const noexcept {
    return r.error() ? attempt_decision::only_retry(loaded_lists(codes, r.error()))
                     : attempt_decision::no_opinion();
  }
};

/// The loader's `retry_if`, for 0.2 code that reads it: the same list.
struct loaded_retry_if {
  loaded_codes codes; ///< the document's retryable codes
  /// Whether the list holds `ec`.
  bool operator()(const std::error_code& ec) const noexcept { return loaded_lists(codes, ec); }
};

CORETRY_ALLOW_DEPRECATED_BEGIN // the 0.2 predicates beside the loader's rule
/// Whether `p` carries a 0.2 predicate other than the loader's `retry_if`.
inline bool carries_own_predicates(const retry_policy& p) noexcept {
  return p.pushback_if || p.throttle_if || p.result_filter || p.retry_if_exception ||
         (p.retry_if && p.retry_if.target<loaded_retry_if>() == nullptr);
}

/// Whether `p.classify` is the loader's.
inline bool has_loaded_classify(const retry_policy& p) noexcept {
  return p.classify.target<loaded_classify>() != nullptr;
}

/// Whether `p.classify` decides (else the 0.2 predicates do, as `default_classify` when they
/// are empty): it is set, and the policy carries no 0.2 predicate of the caller's own. (A
/// caller's own `classify` beside one is refused by `validate()`.)
inline bool classify_decides(const retry_policy& p) noexcept {
  return p.classify && !carries_own_predicates(p);
}

/// `p` with whichever spelling of the loader's rule does not decide removed, for an adapter
/// that wires its rules into the one that does: the loader's `retry_if` when `classify`
/// decides, the loader's `classify` when the 0.2 predicates do.
inline void settle_loaded_rule(retry_policy& p) noexcept {
  if (classify_decides(p)) {
    if (p.retry_if.target<loaded_retry_if>() != nullptr)
      p.retry_if = nullptr;
  } else if (has_loaded_classify(p)) {
    p.classify = nullptr;
  }
}
CORETRY_ALLOW_DEPRECATED_END

} // namespace coretry::detail
