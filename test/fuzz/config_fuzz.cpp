// SPDX-License-Identifier: BSL-1.0
// Fuzz target: coretry::config's JSON readers. Every input is read both as a gRPC service config
// (read_service_config) and as coretry's own form (read_policy).
//
// Properties: nothing but std::invalid_argument is thrown; its message starts with a JSON path
// (`$`, or `key`, `key.key`, `key[3]`, `["odd key"]` ...) followed by ": ", and is one line of
// printable ASCII under 1000 bytes; an accepted service config has policies that validate, at most 5 attempts
// (A6's limit) and at least 2 for a retry or hedge, one attempt otherwise, a throttling bucket
// within (0, 1000] tokens shared by every retrying entry, and a lookup that finds each entry by
// each of its names (or an entry with the same name listed earlier); an accepted own-form
// policy validates, and so do its hedge options.

#include <coretry/config/json.hpp>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

// Whether `m` starts with a JSON path in the library's spelling, then ": ".
bool starts_with_path(std::string_view m) {
  std::size_t i = 0;
  auto ident = [&] {
    const std::size_t start = i;
    while (i < m.size() && (std::isalnum(static_cast<unsigned char>(m[i])) != 0 || m[i] == '_'))
      ++i;
    return i > start;
  };
  auto bracket = [&] { // at '['
    ++i;
    if (i < m.size() && m[i] == '"') {
      ++i;
      while (i < m.size() && m[i] != '"')
        i += m[i] == '\\' ? 2 : 1;
      if (i >= m.size())
        return false;
      ++i;
    } else {
      const std::size_t start = i;
      while (i < m.size() && m[i] >= '0' && m[i] <= '9')
        ++i;
      if (i == start)
        return false;
    }
    if (i >= m.size() || m[i] != ']')
      return false;
    ++i;
    return true;
  };
  if (m.empty())
    return false;
  if (m[0] == '$')
    ++i;
  else if (m[0] == '[' ? !bracket() : !ident())
    return false;
  while (i < m.size()) {
    if (m[i] == '.') {
      ++i;
      if (!ident())
        return false;
    } else if (m[i] == '[') {
      if (!bracket())
        return false;
    } else {
      break;
    }
  }
  return m.substr(i, 2) == ": ";
}

void check_message(const std::invalid_argument& e) {
  const std::string_view what = e.what();
  if (!starts_with_path(what)) {
    std::fprintf(stderr, "message: %s\n", e.what());
    check(false, "message does not start with a JSON path and \": \"");
  }
  for (char c : what)
    check(c >= 0x20 && c < 0x7f, "message is not one line of printable ASCII");
  check(what.size() < 1000, "message of 1000 bytes or more");
}

const coretry::config::status_table& table() {
  static const coretry::config::status_table t = [] {
    coretry::config::status_table out;
    for (int i = 0; i <= 16; ++i) // OK maps to success, which the readers refuse
      out.emplace(std::string(coretry::config::grpc_status_name(i)),
                  i == 0 ? std::error_code() : std::error_code(i, std::generic_category()));
    return out;
  }();
  return t;
}

void check_service_config(const coretry::config::service_config& sc) {
  using coretry::config::method_kind;
  if (sc.throttling)
    check(sc.throttling->tokens() > 0 && sc.throttling->tokens() <= 1000, "bucket out of range");
  for (const auto& m : sc.methods) {
    m.policy.validate();
    check(m.policy.max_attempts <= 5, "more than 5 attempts");
    if (m.kind == method_kind::single) {
      check(m.policy.max_attempts == 1, "no policy but retries");
      check(m.policy.budget == nullptr, "no policy but a budget");
    } else {
      check(m.policy.max_attempts >= 2, "a policy of fewer than 2 attempts");
      check(m.policy.budget == sc.throttling, "throttling not shared");
      CORETRY_ALLOW_DEPRECATED_BEGIN // the loader sets 0.2's retry_if (lib/config/json.cpp)
      check(static_cast<bool>(m.policy.retry_if), "no retry predicate");
      (void)m.policy.retry_if(std::error_code(14, std::generic_category()));
      CORETRY_ALLOW_DEPRECATED_END
      check(m.policy.backoff.base_delay(3) <= m.policy.backoff.max_delay(), "backoff past cap");
    }
    if (m.kind == method_kind::hedge) {
      m.hedge.validate();
      check(m.hedge.max_copies == m.policy.max_attempts, "hedge in flight != attempts");
    }
    for (const auto& n : m.names) {
      const auto* found = sc.find(n.service, n.method);
      check(found != nullptr, "a named entry is not found");
      (void)sc.policy_for(n.service, n.method);
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check_service_config(coretry::config::read_service_config(text, table()));
  } catch (const std::invalid_argument& e) {
    check_message(e);
  }
  try {
    const auto pc = coretry::config::read_policy(text, table());
    pc.policy.validate();
    if (pc.hedge)
      pc.hedge->validate();
  } catch (const std::invalid_argument& e) {
    check_message(e);
  }
  return 0;
}
