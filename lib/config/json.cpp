// SPDX-License-Identifier: BSL-1.0
// coretry::config: gRPC service configs (gRFC A6) and coretry's own JSON form, read with
// nlohmann::json into retry_policy, hedge_options and the overload controls.
//
// Every refusal is std::invalid_argument("<path>: <value> <rule>"), the path in the
// `methodConfig[0].retryPolicy.maxAttempts` spelling ("$" for the document itself, `["..."]`
// for a key that is not an identifier). test/fuzz/config_fuzz.cpp checks that shape.
#include <coretry/breaker.hpp>
#include <coretry/budget.hpp>
#include <coretry/config/json.hpp>
#include <coretry/detail/loaded_rule.hpp>
#include <coretry/detail/refuse.hpp>
#include <coretry/presets.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace coretry::config {
namespace {

using json = nlohmann::json;
using std::chrono::nanoseconds;

constexpr std::array<std::string_view, 17> grpc_codes = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

// ---- paths and messages -------------------------------------------------------------------

bool is_identifier(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

// A JSON string literal for `s`, at most about `limit` bytes of it.
std::string literal(std::string_view s, std::size_t limit = 60) {
  std::string text(s.substr(0, limit));
  std::string out = json(text).dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > limit)
    out.insert(out.size() - 1, "...");
  return out;
}

std::string member(const std::string& parent, std::string_view key) {
  std::string k = is_identifier(key) ? std::string(key) : "[" + literal(key) + "]";
  if (parent.empty())
    return k;
  return is_identifier(key) ? parent + "." + k : parent + k;
}

std::string element(const std::string& parent, std::size_t i) {
  return (parent.empty() ? std::string("$") : parent) + "[" + std::to_string(i) + "]";
}

// What a message shows of a value: scalars as JSON, containers by their kind (a deeply nested
// value is never printed).
std::string show(const json& v) {
  switch (v.type()) {
  case json::value_t::object:
    return "an object";
  case json::value_t::array:
    return "an array";
  case json::value_t::string:
    return literal(v.get_ref<const std::string&>());
  case json::value_t::discarded:
    return "nothing";
  default:
    return v.dump(-1, ' ', true, json::error_handler_t::replace);
  }
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument((path.empty() ? std::string("$") : path) + ": " + what);
}

// ---- objects and their fields -------------------------------------------------------------

enum class naming : std::uint8_t {
  exact, // coretry's form: keys as documented; any other key is an error
  grpc,  // gRPC's: case and '_' ignored (grpc-go, protobuf names); other keys ignored
};

std::string fold(std::string_view key) {
  std::string out;
  for (char c : key)
    if (c != '_')
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

class fields {
public:
  fields(const json& v, std::string path, naming mode,
         std::initializer_list<std::string_view> known)
      : path_(std::move(path)), known_(known), found_(known.size()) {
    if (!v.is_object())
      fail(path_, show(v) + " is not an object");
    for (const auto& [key, value] : v.items()) {
      std::size_t i = 0;
      for (; i < known_.size(); ++i)
        if (mode == naming::exact ? key == known_[i] : fold(key) == fold(known_[i]))
          break;
      if (i == known_.size()) {
        if (mode == naming::exact)
          fail(member(path_, key), "unknown field");
        continue;
      }
      if (found_[i].value != nullptr)
        fail(member(path_, key), "repeats " + member(path_, found_[i].key));
      if (mode == naming::grpc && value.is_null())
        continue; // protobuf JSON: null is the default
      found_[i] = {key, &value};
    }
  }

  const json* get(std::string_view name) const { return found_[index(name)].value; }
  const json& need(std::string_view name) const {
    const json* v = get(name);
    if (v == nullptr)
      fail(member(path_, name), "missing (required)");
    return *v;
  }
  std::string path(std::string_view name) const {
    const auto& f = found_[index(name)];
    return member(path_, f.value != nullptr ? std::string_view(f.key) : name);
  }
  const std::string& path() const { return path_; }
  bool has(std::string_view name) const { return get(name) != nullptr; }
  // `name`, or `old` (its deprecated 0.2 spelling) when that is the one given; both given is
  // refused, naming both.
  std::string_view either(std::string_view name, std::string_view old) const {
    if (has(name) && has(old))
      fail(path(name), "given with " + path(old) + ", its deprecated name (give one)");
    if (!has(old))
      return name;
    aliases_.emplace_back(name, old);
    return old;
  }
  // The key given for `name`: `name`, or the deprecated spelling `either` found instead.
  std::string_view given(std::string_view name) const {
    for (const auto& [current, old] : aliases_)
      if (current == name)
        return old;
    return name;
  }

private:
  std::size_t index(std::string_view name) const {
    for (std::size_t i = 0; i < known_.size(); ++i)
      if (known_[i] == name)
        return i;
    throw std::logic_error("coretry::config: field not declared"); // a bug of this file
  }
  struct entry {
    std::string key;
    const json* value = nullptr;
  };
  std::string path_;
  std::vector<std::string_view> known_;
  std::vector<entry> found_;
  mutable std::vector<std::pair<std::string_view, std::string_view>> aliases_;
};

// ---- scalars ------------------------------------------------------------------------------

double number(const json& v, const std::string& path) {
  if (!v.is_number())
    fail(path, show(v) + " is not a number");
  return v.get<double>();
}

// A whole number in [min, max]; `max` may be clamped to by the caller instead of refused.
std::uint64_t whole(const json& v, const std::string& path, std::uint64_t min, std::uint64_t max) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u < min)
      fail(path, show(v) + " is below " + std::to_string(min));
    if (u > max)
      fail(path, show(v) + " is above " + std::to_string(max));
    return u;
  }
  if (v.is_number_integer()) { // signed: negative, or a "-0"
    const auto i = v.get<std::int64_t>();
    if (i < 0 || static_cast<std::uint64_t>(i) < min)
      fail(path, show(v) + " is below " + std::to_string(min));
    if (static_cast<std::uint64_t>(i) > max)
      fail(path, show(v) + " is above " + std::to_string(max));
    return static_cast<std::uint64_t>(i);
  }
  const double d = number(v, path);
  if (std::floor(d) != d)
    fail(path, show(v) + " is not a whole number");
  if (d < static_cast<double>(min))
    fail(path, show(v) + " is below " + std::to_string(min));
  // 2^64 and above fit no std::uint64_t, and `max` as a double may round up to 2^64: compare
  // in the integer only once the conversion is defined.
  if (d > static_cast<double>(max) || d >= 18446744073709551616.0 ||
      static_cast<std::uint64_t>(d) > max)
    fail(path, show(v) + " is above " + std::to_string(max));
  return static_cast<std::uint64_t>(d);
}

unsigned whole_unsigned(const json& v, const std::string& path, unsigned min = 0) {
  return static_cast<unsigned>(whole(v, path, min, std::numeric_limits<unsigned>::max()));
}

const std::string& text(const json& v, const std::string& path) {
  if (!v.is_string())
    fail(path, show(v) + " is not a string");
  return v.get_ref<const std::string&>();
}

bool boolean(const json& v, const std::string& path) {
  if (!v.is_boolean())
    fail(path, show(v) + " is not true or false");
  return v.get<bool>();
}

// A duration: digits, an optional fraction of up to 9 digits, a unit. gRPC's form (protobuf's
// Duration in JSON) has only "s" ("0.1s", ".5s", "2s"); coretry's also "ns", "us", "ms", "m",
// "h". Refused: a sign, no digit, an unknown unit, more than fits in int64 nanoseconds.
nanoseconds duration(const json& v, const std::string& path, naming mode) {
  const std::string& s = text(v, path);
  const char* const form = mode == naming::grpc
                               ? " is not a duration (such as \"0.1s\")"
                               : " is not a duration (such as \"100ms\", \"1.5s\")";
  if (!s.empty() && s[0] == '-')
    fail(path, literal(s) + " is negative");
  std::size_t i = 0;
  std::uint64_t whole_part = 0;
  bool digits = false;
  bool too_long = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    digits = true;
    if (whole_part > (std::numeric_limits<std::uint64_t>::max() - 9) / 10)
      too_long = true;
    else
      whole_part = whole_part * 10 + static_cast<unsigned>(s[i] - '0');
  }
  std::uint64_t fraction = 0; // in units of 1e-9
  if (i < s.size() && s[i] == '.') {
    ++i;
    std::uint64_t scale = 100'000'000;
    std::size_t n = 0;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++n) {
      digits = true;
      if (n == 9)
        fail(path, literal(s) + " has more than 9 decimals");
      fraction += static_cast<unsigned>(s[i] - '0') * scale;
      scale /= 10;
    }
  }
  const std::string_view unit = std::string_view(s).substr(i);
  std::uint64_t unit_ns = 0;
  if (unit == "s")
    unit_ns = 1'000'000'000;
  else if (mode == naming::exact && unit == "ms")
    unit_ns = 1'000'000;
  else if (mode == naming::exact && unit == "us")
    unit_ns = 1'000;
  else if (mode == naming::exact && unit == "ns")
    unit_ns = 1;
  else if (mode == naming::exact && unit == "m")
    unit_ns = 60'000'000'000;
  else if (mode == naming::exact && unit == "h")
    unit_ns = 3'600'000'000'000;
  if (!digits || unit_ns == 0)
    fail(path, literal(s) + form);
  constexpr auto limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  const std::uint64_t frac_ns = unit_ns >= 1'000'000'000 ? fraction * (unit_ns / 1'000'000'000)
                                                         : fraction * unit_ns / 1'000'000'000;
  if (too_long || whole_part > (limit - frac_ns) / unit_ns)
    fail(path, literal(s) + " is too long (at most 9223372036s)");
  return nanoseconds(static_cast<std::int64_t>(whole_part * unit_ns + frac_ns));
}

nanoseconds positive_duration(const json& v, const std::string& path, naming mode) {
  const nanoseconds d = duration(v, path, mode);
  if (d <= nanoseconds::zero())
    fail(path, show(v) + " is not positive");
  return d;
}

// "unlimited" or a positive duration.
nanoseconds limit_duration(const json& v, const std::string& path) {
  if (v.is_string() && v.get_ref<const std::string&>() == "unlimited")
    return unlimited;
  return positive_duration(v, path, naming::exact);
}

// ---- status codes -------------------------------------------------------------------------

std::vector<std::error_code> status_codes(const json& v, const std::string& path,
                                          const status_lookup& statuses) {
  if (!v.is_array())
    fail(path, show(v) + " is not an array");
  std::vector<std::error_code> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& item = v[i];
    const std::string at = element(path, i);
    std::string name;
    if (item.is_string()) {
      name = item.get<std::string>();
    } else if (item.is_number()) {
      const double d = item.get<double>();
      if (std::floor(d) != d || d < 0 || d > 16)
        fail(at, show(item) + " is not a gRPC status code (0 to 16)");
      name = std::string(grpc_codes[static_cast<std::size_t>(d)]);
    } else {
      fail(at, show(item) + " is not a status code name or number");
    }
    if (!statuses)
      fail(at, show(item) + " needs a status table (none was given)");
    const std::optional<std::error_code> ec = statuses(name);
    if (!ec)
      fail(at, show(item) + " is not in the status table");
    if (!*ec)
      fail(at, show(item) + " maps to success in the status table");
    if (std::find(out.begin(), out.end(), *ec) == out.end())
      out.push_back(*ec);
  }
  return out;
}

// The loaded policy's retryable codes, as a `classify` that gives `retry` for an error and
// leaves every other field (and every value and exception) to the default it is completed
// with: the loop's `default_classify`, or the status rules of `coretry::curl::retry` and
// `coretry::beast::retry`. The same list is written into the deprecated `retry_if` too, for
// 0.2 code that reads or wraps it: the two are one rule (detail/loaded_rule.hpp), so a
// caller's own `classify` replaces it with nothing to clear, and a 0.2 predicate added to the
// loaded policy makes it decide as in 0.2, with `validate()` content either way.
void set_retry_on(retry_policy& p, std::vector<std::error_code> codes) {
  const auto shared = std::make_shared<const std::vector<std::error_code>>(std::move(codes));
  p.classify = coretry::detail::loaded_classify{shared};
  CORETRY_ALLOW_DEPRECATED_BEGIN
  p.retry_if = coretry::detail::loaded_retry_if{shared};
  CORETRY_ALLOW_DEPRECATED_END
}

// Runs `make`, turning a refusal of coretry's own types ("coretry::x: field = value (rule)")
// into one naming the JSON path: the field's own when the message names a field of `f`.
template <class Make>
auto build(const fields& f, std::initializer_list<std::string_view> names, Make make) {
  try {
    return make();
  } catch (const std::invalid_argument& e) {
    const std::string_view what = e.what();
    for (std::string_view name : names) {
      const std::string pattern = ": " + std::string(name) + " = ";
      const std::string_view key = f.given(name);
      if (f.has(key) && what.find(pattern) != std::string_view::npos)
        fail(f.path(key), show(*f.get(key)) + " is out of range (" + std::string(what) + ")");
    }
    fail(f.path(), std::string(what));
  }
}

// ---- gRPC's service config ----------------------------------------------------------------

// maxAttempts: a whole number of at least 2; above the client's limit (A6: 5) it is the limit,
// however large ("1e300" included).
unsigned attempts(const fields& f, const grpc_options& options) {
  const std::string p = f.path("maxAttempts");
  const json& v = f.need("maxAttempts");
  const unsigned limit = options.max_attempts_limit;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::floor(d) != d)
      fail(p, show(v) + " is not a whole number");
    if (d < 2)
      fail(p, show(v) + " is below 2");
    return d >= limit ? limit : static_cast<unsigned>(d);
  }
  const std::uint64_t n = whole(v, p, 2, std::numeric_limits<std::uint64_t>::max());
  return static_cast<unsigned>(std::min<std::uint64_t>(n, limit));
}

void read_retry_policy(const json& v, const std::string& path, const status_lookup& statuses,
                       const grpc_options& options, method_config& out) {
  const fields f(v, path, naming::grpc,
                 {"maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier",
                  "retryableStatusCodes", "perAttemptRecvTimeout"});
  out.policy.max_attempts = attempts(f, options);
  const nanoseconds initial =
      positive_duration(f.need("initialBackoff"), f.path("initialBackoff"), naming::grpc);
  const nanoseconds max =
      positive_duration(f.need("maxBackoff"), f.path("maxBackoff"), naming::grpc);
  const json& m = f.need("backoffMultiplier");
  const double multiplier = number(m, f.path("backoffMultiplier"));
  if (!(multiplier > 0))
    fail(f.path("backoffMultiplier"), show(m) + " is not positive");
  if (multiplier < 1)
    fail(f.path("backoffMultiplier"),
         show(m) + " is below 1 (coretry's exponential backoff does not shrink)");
  if (multiplier > 1000)
    fail(f.path("backoffMultiplier"), show(m) + " is above 1000");
  std::vector<std::error_code> codes;
  if (const json* c = f.get("retryableStatusCodes"))
    codes = status_codes(*c, f.path("retryableStatusCodes"), statuses);
  if (const json* t = f.get("perAttemptRecvTimeout")) {
    out.policy.attempt_timeout =
        positive_duration(*t, f.path("perAttemptRecvTimeout"), naming::grpc);
    codes.push_back(make_error_code(errc::attempt_timeout));
  } else if (codes.empty()) {
    if (!f.has("retryableStatusCodes"))
      fail(f.path("retryableStatusCodes"), "missing (required)");
    fail(f.path("retryableStatusCodes"), "an empty array (at least one code is required)");
  }
  // A6: random(0, min(initial * multiplier^(n-1), max)). An initial backoff above the cap gives
  // the cap on every retry, which exponential(max, ...) gives too.
  out.policy.backoff = build(f, {}, [&] {
    return backoff::exponential(std::min(initial, max), multiplier, max)
        .with_jitter(jitter::full());
  });
  set_retry_on(out.policy, std::move(codes));
  out.kind = method_kind::retry;
}

void read_hedging_policy(const json& v, const std::string& path, const status_lookup& statuses,
                         const grpc_options& options, method_config& out) {
  const fields f(v, path, naming::grpc, {"maxAttempts", "hedgingDelay", "nonFatalStatusCodes"});
  const unsigned n = attempts(f, options);
  out.policy.max_attempts = n;
  out.hedge.max_copies = n;
  out.hedge.delay = nanoseconds::zero();
  if (const json* d = f.get("hedgingDelay"))
    out.hedge.delay = duration(*d, f.path("hedgingDelay"), naming::grpc);
  std::vector<std::error_code> codes;
  if (const json* c = f.get("nonFatalStatusCodes"))
    codes = status_codes(*c, f.path("nonFatalStatusCodes"), statuses);
  set_retry_on(out.policy, std::move(codes)); // none listed: every failure is fatal
  out.kind = method_kind::hedge;
}

method_config read_method_config(const json& v, const std::string& path,
                                 const status_lookup& statuses, const grpc_options& options) {
  const fields f(v, path, naming::grpc, {"name", "timeout", "retryPolicy", "hedgingPolicy"});
  method_config out;
  if (const json* names = f.get("name")) {
    const std::string np = f.path("name");
    if (!names->is_array())
      fail(np, show(*names) + " is not an array");
    for (std::size_t i = 0; i < names->size(); ++i) {
      const fields n((*names)[i], element(np, i), naming::grpc, {"service", "method"});
      method_name name;
      if (const json* s = n.get("service"))
        name.service = text(*s, n.path("service"));
      if (const json* m = n.get("method"))
        name.method = text(*m, n.path("method"));
      if (name.service.empty() && !name.method.empty())
        fail(n.path("method"), literal(name.method) + " names a method without a service");
      out.names.push_back(std::move(name));
    }
  }
  if (f.has("retryPolicy") && f.has("hedgingPolicy"))
    fail(path, "has both retryPolicy and hedgingPolicy (at most one is allowed)");
  if (const json* r = f.get("retryPolicy"))
    read_retry_policy(*r, f.path("retryPolicy"), statuses, options, out);
  if (const json* h = f.get("hedgingPolicy"))
    read_hedging_policy(*h, f.path("hedgingPolicy"), statuses, options, out);
  if (const json* t = f.get("timeout"))
    out.policy.deadline = positive_duration(*t, f.path("timeout"), naming::grpc);
  return out;
}

std::shared_ptr<token_bucket_budget> read_throttling(const json& v, const std::string& path) {
  const fields f(v, path, naming::grpc, {"maxTokens", "tokenRatio"});
  const json& mt = f.need("maxTokens");
  const double max_tokens = number(mt, f.path("maxTokens"));
  if (!(max_tokens > 0))
    fail(f.path("maxTokens"), show(mt) + " is not positive");
  if (max_tokens > 1000)
    fail(f.path("maxTokens"), show(mt) + " is above 1000");
  // The bucket keeps thousandths of a token, as A6 keeps three decimals of the ratio.
  if (std::round(max_tokens * 1000) <= 0)
    fail(f.path("maxTokens"), show(mt) + " is below 0.001 once rounded to three decimals");
  const json& tr = f.need("tokenRatio");
  const double ratio = number(tr, f.path("tokenRatio"));
  if (!(ratio > 0))
    fail(f.path("tokenRatio"), show(tr) + " is not positive");
  // A6 keeps three decimals of the ratio: 0.0004 would add nothing.
  const double kept = std::round(std::min(ratio, 1e6) * 1000) / 1000;
  if (kept <= 0)
    fail(f.path("tokenRatio"), show(tr) + " is below 0.001 once rounded to three decimals");
  // A success never fills the bucket past maxTokens, so a larger ratio acts as maxTokens.
  return build(f, {"maxTokens", "tokenRatio"}, [&] {
    return std::make_shared<token_bucket_budget>(max_tokens, std::min(kept, max_tokens));
  });
}

// ---- coretry's own form -------------------------------------------------------------------

jitter read_jitter(const json& v, const std::string& path) {
  if (v.is_string()) {
    const std::string& name = v.get_ref<const std::string&>();
    if (name == "normal")
      return jitter::normal();
    if (name == "additive")
      return jitter::additive();
    const std::optional<jitter_kind> kind = parse_jitter_kind(name);
    if (!kind)
      fail(path,
           literal(name) + " is not a jitter (none, full, equal, decorrelated, normal, additive)");
    return jitter{*kind};
  }
  const fields f(v, path, naming::exact, {"kind", "relative_stddev", "max_extra", "truncated"});
  const std::string& kind = text(f.need("kind"), f.path("kind"));
  if (kind == "normal") {
    if (f.has("max_extra") || f.has("truncated"))
      fail(f.path(f.has("max_extra") ? "max_extra" : "truncated"), "is for additive jitter only");
    double sd = 0.1;
    if (const json* s = f.get("relative_stddev"))
      sd = number(*s, f.path("relative_stddev"));
    return build(f, {"relative_stddev"}, [&] { return jitter::normal(sd); });
  }
  if (kind == "additive") {
    if (f.has("relative_stddev"))
      fail(f.path("relative_stddev"), "is for normal jitter only");
    nanoseconds extra = std::chrono::seconds(1);
    if (const json* e = f.get("max_extra"))
      extra = duration(*e, f.path("max_extra"), naming::exact);
    bool truncated = false;
    if (const json* t = f.get("truncated"))
      truncated = boolean(*t, f.path("truncated"));
    return truncated ? jitter::additive_truncated(extra) : jitter::additive(extra);
  }
  if (f.has("relative_stddev") || f.has("max_extra") || f.has("truncated"))
    fail(path, literal(kind) + " jitter takes no parameters");
  const std::optional<jitter_kind> k = parse_jitter_kind(kind);
  if (!k)
    fail(f.path("kind"),
         literal(kind) + " is not a jitter (none, full, equal, decorrelated, normal, additive)");
  return jitter{*k};
}

backoff read_backoff(const json& v, const std::string& path) {
  const fields f(v, path, naming::exact,
                 {"kind", "delay", "initial", "step", "multiplier", "max", "jitter"});
  const std::string& kind = text(f.need("kind"), f.path("kind"));
  auto only = [&](std::initializer_list<std::string_view> allowed) {
    for (std::string_view name : {"delay", "initial", "step", "multiplier", "max"})
      if (f.has(name) && std::find(allowed.begin(), allowed.end(), name) == allowed.end())
        fail(f.path(name), "is not a parameter of a " + kind + " backoff");
  };
  auto dur = [&](std::string_view name, nanoseconds fallback) {
    const json* d = f.get(name);
    return d != nullptr ? duration(*d, f.path(name), naming::exact) : fallback;
  };
  backoff b = retry_policy{}.backoff;
  if (kind == "fixed") {
    only({"delay"});
    const nanoseconds delay = duration(f.need("delay"), f.path("delay"), naming::exact);
    b = build(f, {"delay"}, [&] { return backoff::fixed(delay); });
  } else if (kind == "linear") {
    only({"initial", "step", "max"});
    const nanoseconds initial = duration(f.need("initial"), f.path("initial"), naming::exact);
    const nanoseconds step = duration(f.need("step"), f.path("step"), naming::exact);
    const nanoseconds max = duration(f.need("max"), f.path("max"), naming::exact);
    b = build(f, {"initial", "step", "max"}, [&] { return backoff::linear(initial, step, max); });
  } else if (kind == "exponential") {
    only({"initial", "multiplier", "max"});
    const nanoseconds initial = duration(f.need("initial"), f.path("initial"), naming::exact);
    double multiplier = 2.0;
    if (const json* m = f.get("multiplier"))
      multiplier = number(*m, f.path("multiplier"));
    const nanoseconds max = dur("max", std::chrono::seconds(32));
    b = build(f, {"initial", "multiplier", "max"},
              [&] { return backoff::exponential(initial, multiplier, max); });
  } else {
    fail(f.path("kind"), literal(kind) + " is not a backoff (fixed, linear, exponential)");
  }
  // Without "jitter", full jitter: retry_policy's default, and what A6 uses.
  jitter j = jitter::full();
  if (const json* jv = f.get("jitter"))
    j = read_jitter(*jv, f.path("jitter"));
  return build(f, {"initial", "jitter"}, [&] { return b.with_jitter(j); });
}

std::shared_ptr<circuit_breaker> read_breaker(const json& v, const std::string& path) {
  if (v.is_string()) {
    if (v.get_ref<const std::string&>() != "overload_safe")
      fail(path, show(v) + " is not a breaker preset (overload_safe) or an object");
    return std::make_shared<circuit_breaker>(presets::overload_safe_breaker());
  }
  const fields f(v, path, naming::exact,
                 {"preset", "consecutive_failures", "failure_ratio", "minimum_throughput", "window",
                  "window_buckets", "window_type", "window_calls", "slow_call_duration",
                  "slow_call_ratio", "break_duration", "break_jitter", "half_open_probes", "ramp",
                  "retry_interval", "max_concurrent_calls", "max_in_flight", "seed"});
  circuit_breaker_options o;
  if (const json* p = f.get("preset")) {
    if (!p->is_string() || p->get_ref<const std::string&>() != "overload_safe")
      fail(f.path("preset"), show(*p) + " is not a breaker preset (overload_safe)");
    o = presets::overload_safe_breaker();
  }
  auto u = [&](std::string_view name, unsigned& field) {
    if (const json* x = f.get(name))
      field = whole_unsigned(*x, f.path(name));
  };
  auto d = [&](std::string_view name, nanoseconds& field) {
    if (const json* x = f.get(name))
      field = duration(*x, f.path(name), naming::exact);
  };
  auto n = [&](std::string_view name, double& field) {
    if (const json* x = f.get(name))
      field = number(*x, f.path(name));
  };
  u("consecutive_failures", o.consecutive_failures);
  n("failure_ratio", o.failure_ratio);
  u("minimum_throughput", o.minimum_throughput);
  d("window", o.window);
  u("window_buckets", o.window_buckets);
  if (const json* t = f.get("window_type")) {
    const std::string& type = text(*t, f.path("window_type"));
    if (type == "time_based")
      o.window_type = sliding_window::time_based;
    else if (type == "count_based")
      o.window_type = sliding_window::count_based;
    else
      fail(f.path("window_type"),
           literal(type) + " is not a window type (time_based, count_based)");
  }
  u("window_calls", o.window_calls);
  d("slow_call_duration", o.slow_call_duration);
  n("slow_call_ratio", o.slow_call_ratio);
  d("break_duration", o.break_duration);
  n("break_jitter", o.break_jitter);
  u("half_open_probes", o.half_open_probes);
  d("ramp", o.ramp);
  d("retry_interval", o.retry_interval);
  u(f.either("max_concurrent_calls", "max_in_flight"), o.max_concurrent_calls);
  if (const json* s = f.get("seed"))
    o.seed = whole(*s, f.path("seed"), 0, std::numeric_limits<std::uint64_t>::max());
  return build(f,
               {"consecutive_failures", "failure_ratio", "minimum_throughput", "window",
                "window_buckets", "window_calls", "slow_call_duration", "slow_call_ratio",
                "break_duration", "break_jitter", "half_open_probes", "ramp", "retry_interval",
                "max_concurrent_calls"},
               [&] { return std::make_shared<circuit_breaker>(o); });
}

std::shared_ptr<retry_budget> read_budget(const json& v, const std::string& path) {
  if (v.is_string()) {
    if (v.get_ref<const std::string&>() != "overload_safe")
      fail(path, show(v) + " is not a budget preset (overload_safe) or an object");
    return std::make_shared<ratio_budget>(presets::overload_safe_budget());
  }
  if (!v.is_object())
    fail(path, show(v) + " is not an object");
  const auto kind_it = v.find("kind");
  if (kind_it == v.end())
    fail(member(path, "kind"), "missing (required: ratio or token_bucket)");
  const std::string& kind = text(*kind_it, member(path, "kind"));
  if (kind == "token_bucket") {
    const fields f(v, path, naming::exact, {"kind", "max_tokens", "token_ratio"});
    double max_tokens = 10;
    double ratio = 0.1;
    if (const json* m = f.get("max_tokens"))
      max_tokens = number(*m, f.path("max_tokens"));
    if (const json* r = f.get("token_ratio"))
      ratio = number(*r, f.path("token_ratio"));
    return build(f, {"max_tokens", "token_ratio"},
                 [&] { return std::make_shared<token_bucket_budget>(max_tokens, ratio); });
  }
  if (kind != "ratio")
    fail(member(path, "kind"), literal(kind) + " is not a budget (ratio, token_bucket)");
  const fields f(v, path, naming::exact,
                 {"kind", "ratio", "min_retries_per_second", "window", "window_buckets", "buckets",
                  "limit_scheduled_retries"});
  ratio_budget_options o;
  if (const json* r = f.get("ratio"))
    o.ratio = number(*r, f.path("ratio"));
  if (const json* m = f.get("min_retries_per_second"))
    o.min_retries_per_second = number(*m, f.path("min_retries_per_second"));
  if (const json* w = f.get("window"))
    o.window = duration(*w, f.path("window"), naming::exact);
  if (const std::string_view key = f.either("window_buckets", "buckets"); f.has(key))
    o.window_buckets = whole_unsigned(*f.get(key), f.path(key));
  if (const json* s = f.get("limit_scheduled_retries"))
    o.limit_scheduled_retries = boolean(*s, f.path("limit_scheduled_retries"));
  return build(f, {"ratio", "min_retries_per_second", "window", "window_buckets"},
               [&] { return std::make_shared<ratio_budget>(o); });
}

hedge_options read_hedge(const json& v, const std::string& path) {
  const fields f(v, path, naming::exact, {"delay", "max_copies", "max_in_flight"});
  hedge_options h;
  if (const json* d = f.get("delay"))
    h.delay = (d->is_string() && d->get_ref<const std::string&>() == "unlimited")
                  ? unlimited
                  : duration(*d, f.path("delay"), naming::exact);
  if (const std::string_view key = f.either("max_copies", "max_in_flight"); f.has(key))
    h.max_copies = whole_unsigned(*f.get(key), f.path(key), 1);
  return h;
}

retry_policy preset(const json& v, const std::string& path) {
  const std::string& name = text(v, path);
  if (name == "default")
    return retry_policy{};
  if (name == "overload_safe")
    return presets::overload_safe();
  if (name == "overload_safe_per_endpoint")
    return presets::overload_safe_per_endpoint();
  if (name == "retry_forever")
    return presets::retry_forever(std::chrono::seconds(32));
  if (name == "cloud_storage")
    return presets::cloud_storage();
  fail(path, literal(name) + " is not a preset (default, overload_safe, "
                             "overload_safe_per_endpoint, retry_forever, cloud_storage)");
}

policy_config read_own(const json& doc, const status_lookup& statuses) {
  const fields f(doc, "", naming::exact,
                 {"preset", "max_attempts", "deadline", "attempt_timeout", "max_retry_after",
                  "backoff", "retry_on", "when_open", "report", "seed", "label", "breaker",
                  "budget", "hedge"});
  policy_config out;
  if (const json* p = f.get("preset"))
    out.policy = preset(*p, f.path("preset"));
  retry_policy& p = out.policy;
  if (const json* m = f.get("max_attempts"))
    p.max_attempts = (m->is_string() && m->get_ref<const std::string&>() == "unlimited")
                         ? unlimited_attempts
                         : whole_unsigned(*m, f.path("max_attempts"), 1);
  if (const json* d = f.get("deadline"))
    p.deadline = limit_duration(*d, f.path("deadline"));
  if (const json* t = f.get("attempt_timeout"))
    p.attempt_timeout = limit_duration(*t, f.path("attempt_timeout"));
  if (const json* r = f.get("max_retry_after"))
    p.max_retry_after = positive_duration(*r, f.path("max_retry_after"), naming::exact);
  if (const json* b = f.get("backoff"))
    p.backoff = read_backoff(*b, f.path("backoff"));
  if (const json* r = f.get("retry_on"))
    set_retry_on(p, status_codes(*r, f.path("retry_on"), statuses));
  if (const json* w = f.get("when_open")) {
    const std::string& s = text(*w, f.path("when_open"));
    if (s == "fail")
      p.when_open = on_open::fail;
    else if (s == "wait")
      p.when_open = on_open::wait;
    else
      fail(f.path("when_open"), literal(s) + " is not fail or wait");
  }
  if (const json* r = f.get("report")) {
    const std::string& s = text(*r, f.path("report"));
    if (s == "last_error")
      p.report = final_error::last_error;
    else if (s == "policy_reason")
      p.report = final_error::policy_reason;
    else
      fail(f.path("report"), literal(s) + " is not last_error or policy_reason");
  }
  if (const json* s = f.get("seed"))
    p.seed = jitter_seed(whole(*s, f.path("seed"), 0, std::numeric_limits<std::uint64_t>::max()));
  if (const json* l = f.get("label"))
    p.label = text(*l, f.path("label"));
  if (const json* b = f.get("breaker"))
    p.breaker = b->is_null() ? nullptr : read_breaker(*b, f.path("breaker"));
  if (const json* b = f.get("budget"))
    p.budget = b->is_null() ? nullptr : read_budget(*b, f.path("budget"));
  if (const json* h = f.get("hedge"); h != nullptr && !h->is_null())
    out.hedge = read_hedge(*h, f.path("hedge"));
  return out;
}

// ---- parsing ------------------------------------------------------------------------------

std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 200))
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  return out;
}

std::string position(std::string_view text, std::size_t at) {
  std::size_t line = 1;
  std::size_t column = 1;
  for (std::size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + " (byte " +
         std::to_string(at) + ")";
}

json parse(std::string_view text) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // e.byte counts from 1 and points at the byte that broke the parse; the message gives its
    // offset from 0. nlohmann: "[json.exception.parse_error.101] parse error at line 1,
    // column 2: <reason>".
    const std::size_t at = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    std::string reason = e.what();
    if (const auto colon = reason.find(": "); colon != std::string::npos)
      reason = reason.substr(colon + 2);
    fail("$", "malformed JSON at " + position(text, at) + ": " + printable(reason));
  } catch (const json::exception& e) {
    // A number too large for a double ("1e400"): nlohmann reports
    // "[json.exception.out_of_range.406] number overflow parsing '1e400'", without a position;
    // the number's first occurrence in the text gives one.
    std::string reason = e.what();
    if (const auto bracket = reason.find("] "); bracket != std::string::npos)
      reason = reason.substr(bracket + 2);
    std::string where;
    if (const auto open = reason.find('\''), close = reason.rfind('\'');
        open != std::string::npos && close > open + 1) {
      const auto at = text.find(std::string_view(reason).substr(open + 1, close - open - 1));
      if (at != std::string_view::npos)
        where = " at " + position(text, at);
    }
    fail("$", "malformed JSON" + where + ": " + printable(reason));
  }
}

void check_unique_names(const service_config& sc, const std::string& path) {
  for (std::size_t i = 0; i < sc.methods.size(); ++i)
    for (std::size_t j = 0; j < sc.methods[i].names.size(); ++j)
      for (std::size_t k = 0; k <= i; ++k)
        for (std::size_t l = 0; l < (k == i ? j : sc.methods[k].names.size()); ++l)
          if (sc.methods[k].names[l] == sc.methods[i].names[j])
            fail(element(element(path, i) + ".name", j),
                 "names service " + literal(sc.methods[i].names[j].service) + ", method " +
                     literal(sc.methods[i].names[j].method) + " again (first at " +
                     element(element(path, k) + ".name", l) + ")");
}

} // namespace

status_lookup lookup_in(const status_table& table) {
  return [&table](std::string_view name) -> std::optional<std::error_code> {
    const auto it = table.find(std::string(name));
    if (it == table.end())
      return std::nullopt;
    return it->second;
  };
}

std::string_view grpc_status_name(std::int64_t code) noexcept {
  if (code < 0 || code >= static_cast<std::int64_t>(grpc_codes.size()))
    return {};
  return grpc_codes[static_cast<std::size_t>(code)];
}

const method_config* service_config::find(std::string_view service,
                                          std::string_view method) const noexcept {
  const method_config* whole_service = nullptr;
  const method_config* fallback = nullptr;
  for (const method_config& m : methods)
    for (const method_name& n : m.names) {
      if (n.service == service && n.method == method && !method.empty())
        return &m;
      if (n.service == service && n.method.empty() && !service.empty() && whole_service == nullptr)
        whole_service = &m;
      if (n.service.empty() && n.method.empty() && fallback == nullptr)
        fallback = &m;
    }
  return whole_service != nullptr ? whole_service : fallback;
}

retry_policy service_config::policy_for(std::string_view service, std::string_view method) const {
  if (const method_config* m = find(service, method))
    return m->policy;
  return retry_policy{.max_attempts = 1};
}

service_config read_service_config(std::string_view text, const status_lookup& statuses,
                                   grpc_options options) {
  if (options.max_attempts_limit < 2)
    coretry::detail::refuse("coretry::config::grpc_options", "max_attempts_limit",
                            std::to_string(options.max_attempts_limit), "must be at least 2");
  const json doc = parse(text);
  const fields f(doc, "", naming::grpc, {"methodConfig", "retryThrottling"});
  service_config out;
  if (const json* t = f.get("retryThrottling"))
    out.throttling = read_throttling(*t, f.path("retryThrottling"));
  const std::string path = f.path("methodConfig");
  if (const json* mc = f.get("methodConfig")) {
    if (!mc->is_array())
      fail(path, show(*mc) + " is not an array");
    for (std::size_t i = 0; i < mc->size(); ++i)
      out.methods.push_back(read_method_config((*mc)[i], element(path, i), statuses, options));
  }
  check_unique_names(out, path);
  for (method_config& m : out.methods)
    if (m.kind != method_kind::single)
      m.policy.budget = out.throttling;
  return out;
}

service_config read_service_config(std::string_view text, const status_table& statuses,
                                   grpc_options options) {
  return read_service_config(text, lookup_in(statuses), options);
}

policy_config read_policy(std::string_view text, const status_lookup& statuses) {
  const json doc = parse(text);
  policy_config out = read_own(doc, statuses);
  try {
    // overload_safe_per_endpoint's placeholder breaker is valid here: a registry replaces it
    // before the policy runs (and the front ends refuse it if none does).
    if (detail::is_registry_placeholder(out.policy.breaker.get())) {
      retry_policy check = out.policy;
      check.breaker.reset();
      check.validate();
    } else {
      out.policy.validate();
    }
    if (out.hedge)
      out.hedge->validate();
  } catch (const std::invalid_argument& e) {
    fail("$", e.what());
  }
  return out;
}

policy_config read_policy(std::string_view text, const status_table& statuses) {
  return read_policy(text, lookup_in(statuses));
}

} // namespace coretry::config
