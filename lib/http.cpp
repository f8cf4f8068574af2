// SPDX-License-Identifier: BSL-1.0
// coretry::http: the retry rules, and Retry-After (RFC 9110, section 10.2.3): delta-seconds or an HTTP-date (section 5.6.7), parsed
// by hand and strictly: curl_getdate accepts far more than HTTP-date (any zone, trailing words,
// missing fields), and a hint read from a malformed date would make the loop wait for nothing.

#include <coretry/detail/refuse.hpp>
#include <coretry/error.hpp>
#include <coretry/http.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace coretry::http {

namespace {

constexpr std::array<std::string_view, 7> day_names{"Mon", "Tue", "Wed", "Thu",
                                                    "Fri", "Sat", "Sun"};
constexpr std::array<std::string_view, 7> long_day_names{
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};
constexpr std::array<std::string_view, 12> month_names{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/// A cursor over the value; every step either consumes exactly what it expects or fails.
class cursor {
public:
  explicit cursor(std::string_view s) noexcept : s_(s) {}

  bool done() const noexcept { return s_.empty(); }

  bool literal(std::string_view lit) noexcept {
    if (!s_.starts_with(lit))
      return false;
    s_.remove_prefix(lit.size());
    return true;
  }

  /// Exactly `n` digits (1 to 4) into `out`.
  bool digits(std::size_t n, int& out) noexcept {
    if (s_.size() < n)
      return false;
    int v = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const char c = s_[i];
      if (c < '0' || c > '9')
        return false;
      v = v * 10 + (c - '0');
    }
    s_.remove_prefix(n);
    out = v;
    return true;
  }

  /// One of `names` (case-sensitive, as HTTP-date is), its index into `out`.
  template <std::size_t N>
  bool one_of(const std::array<std::string_view, N>& names, int& out) noexcept {
    for (std::size_t i = 0; i < N; ++i)
      if (literal(names[i])) {
        out = static_cast<int>(i);
        return true;
      }
    return false;
  }

  /// time-of-day: "HH:MM:SS", 00:00:00 to 23:59:60 (a leap second is allowed).
  bool time_of_day(int& h, int& m, int& s) noexcept {
    return digits(2, h) && literal(":") && digits(2, m) && literal(":") && digits(2, s) &&
           h <= 23 && m <= 59 && s <= 60;
  }

private:
  std::string_view s_;
};

bool leap(int y) noexcept {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

bool valid_day(int year, int month, int day) noexcept {
  constexpr std::array<int, 12> length{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const int last = length[static_cast<std::size_t>(month)] + (month == 1 && leap(year) ? 1 : 0);
  return day >= 1 && day <= last;
}

/// Days from 1970-01-01 to a proleptic Gregorian date (month from 0); H. Hinnant's algorithm.
std::int64_t days_from_civil(std::int64_t y, int month, int d) noexcept {
  const int m = month + 1;
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;
  const std::int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

std::int64_t epoch_seconds(int year, int month, int day, int h, int m, int s) noexcept {
  return days_from_civil(year, month, day) * 86400 + h * 3600 + m * 60 + s;
}

/// The year `now_year` makes of an RFC 850 two-digit year: the one of this century, unless
/// that is more than 50 years ahead, then the century before (RFC 9110, section 5.6.7).
int full_year(int yy, int now_year) noexcept {
  int y = now_year - now_year % 100 + yy;
  if (y > now_year + 50)
    y -= 100;
  return y;
}

int year_of(std::int64_t epoch_s) noexcept {
  // Any `now` is accepted: beyond +-10^13 s (about 317,000 years) it is clamped, which keeps
  // every step below, and the year, far from overflow.
  constexpr std::int64_t far = 10'000'000'000'000;
  epoch_s = epoch_s < -far ? -far : epoch_s > far ? far : epoch_s;
  // Civil year from days since the epoch (the inverse of days_from_civil, year only).
  const std::int64_t z = (epoch_s >= 0 ? epoch_s : epoch_s - 86399) / 86400 + 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const std::int64_t doe = z - era * 146097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  return static_cast<int>(yoe + era * 400 + (mp >= 10 ? 1 : 0));
}

} // namespace

std::optional<std::chrono::sys_seconds> parse_http_date(std::string_view value,
                                                        std::chrono::sys_seconds now) noexcept {
  using std::chrono::seconds;
  using std::chrono::sys_seconds;
  int day_name = 0;
  int day = 0;
  int month = 0;
  int year = 0;
  int h = 0;
  int m = 0;
  int s = 0;
  {
    // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
    cursor c(value);
    if (c.one_of(day_names, day_name) && c.literal(", ") && c.digits(2, day) && c.literal(" ") &&
        c.one_of(month_names, month) && c.literal(" ") && c.digits(4, year) && c.literal(" ") &&
        c.time_of_day(h, m, s) && c.literal(" GMT") && c.done())
      return valid_day(year, month, day)
                 ? std::optional(sys_seconds(seconds(epoch_seconds(year, month, day, h, m, s))))
                 : std::nullopt;
  }
  {
    // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
    cursor c(value);
    int yy = 0;
    if (c.one_of(long_day_names, day_name) && c.literal(", ") && c.digits(2, day) &&
        c.literal("-") && c.one_of(month_names, month) && c.literal("-") && c.digits(2, yy) &&
        c.literal(" ") && c.time_of_day(h, m, s) && c.literal(" GMT") && c.done()) {
      year = full_year(yy, year_of(now.time_since_epoch().count()));
      return valid_day(year, month, day)
                 ? std::optional(sys_seconds(seconds(epoch_seconds(year, month, day, h, m, s))))
                 : std::nullopt;
    }
  }
  {
    // asctime: "Sun Nov  6 08:49:37 1994" (the day as two digits or a space and one digit)
    cursor c(value);
    if (c.one_of(day_names, day_name) && c.literal(" ") && c.one_of(month_names, month) &&
        c.literal(" ") && (c.literal(" ") ? c.digits(1, day) : c.digits(2, day)) &&
        c.literal(" ") && c.time_of_day(h, m, s) && c.literal(" ") && c.digits(4, year) && c.done())
      return valid_day(year, month, day)
                 ? std::optional(sys_seconds(seconds(epoch_seconds(year, month, day, h, m, s))))
                 : std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::chrono::seconds> parse_retry_after(std::string_view value,
                                                      std::chrono::system_clock::time_point now) {
  auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!value.empty() && space(value.front()))
    value.remove_prefix(1);
  while (!value.empty() && space(value.back()))
    value.remove_suffix(1);
  if (value.empty())
    return std::nullopt;

  const std::int64_t cap = max_retry_after.count();
  if (value.front() >= '0' && value.front() <= '9') {
    std::int64_t n = 0;
    for (char c : value) {
      if (c < '0' || c > '9')
        return std::nullopt; // "1.5", "10s", "12 34": not delta-seconds
      if (n < cap)
        n = n * 10 + (c - '0'); // n < 2^31 before the step: no overflow in 64 bits
    }
    return std::chrono::seconds(n < cap ? n : cap);
  }

  // In seconds, to stay clear of system_clock's nanosecond range for far-away dates.
  const std::int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  const auto date = parse_http_date(value, std::chrono::sys_seconds(std::chrono::seconds(now_s)));
  if (!date)
    return std::nullopt;
  const std::int64_t then = date->time_since_epoch().count();
  if (then <= now_s)
    return std::chrono::seconds(0);
  // Years 0000-9999 and a clock within +-292 years of 1970: far from the int64 limits.
  const std::int64_t delta = then - now_s;
  return std::chrono::seconds(delta < cap ? delta : cap);
}

namespace {

constexpr std::array<int, 6> default_statuses{408, 429, 500, 502, 503, 504};

[[noreturn]] void refuse(const char* where, const std::string& field, const std::string& value,
                         const char* rule) {
  coretry::detail::refuse(where, field.c_str(), value, rule);
}

void check_statuses(const std::vector<int>& statuses, const char* where, const std::string& field) {
  for (std::size_t i = 0; i < statuses.size(); ++i)
    if (statuses[i] < 100 || statuses[i] > 599)
      refuse(where, field + "[" + std::to_string(i) + "]", std::to_string(statuses[i]),
             "must be an HTTP status, 100-599");
}

} // namespace

namespace detail {

std::string escaped(std::string_view v) {
  constexpr std::size_t limit = 64;
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (std::size_t i = 0; i < v.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(v[i]);
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += v.size() > limit ? "\"..." : "\"";
  return out;
}

void validate_rules(const retry_rules& rules, const char* where, const std::string& prefix) {
  check_statuses(rules.status_forcelist, where, prefix + "status_forcelist");
  check_statuses(rules.retry_after_status_codes, where, prefix + "retry_after_status_codes");
  for (std::size_t i = 0; i < rules.allowed_methods.size(); ++i) {
    const std::string& m = rules.allowed_methods[i];
    if (!is_token(m))
      refuse(where, prefix + "allowed_methods[" + std::to_string(i) + "]", escaped(m),
             "must be a non-empty HTTP token");
  }
}

} // namespace detail

namespace {

// Whether a Retry-After value is delta-seconds (after optional spaces): those need no clock.
bool starts_with_digit(std::string_view v) noexcept {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
    v.remove_prefix(1);
  return !v.empty() && v.front() >= '0' && v.front() <= '9';
}

// classify_response, reading the clock (`now` empty) only for an HTTP-date to parse.
attempt_decision decide_response(long status, std::string_view retry_after,
                                 const retry_rules& rules,
                                 std::optional<std::chrono::system_clock::time_point> now) {
  attempt_decision d;
  d.retry = is_retryable_status(status, rules);
  if (!d.retry)
    return d;
  d.pushback = is_pushback_status(status);
  d.throttle = slows_sending_rate(status);
  if (retry_after.empty() || !honours_retry_after(status, rules))
    return d;
  // Delta-seconds need no clock: it is read only for an HTTP-date (or a malformed value).
  std::chrono::system_clock::time_point at{};
  if (now)
    at = *now;
  else if (!starts_with_digit(retry_after))
    at = std::chrono::system_clock::now();
  if (auto hint = parse_retry_after(retry_after, at))
    d.retry_after = *hint;
  return d;
}

} // namespace

attempt_decision classify_response(long status, std::string_view retry_after,
                                   const retry_rules& rules) {
  return decide_response(status, retry_after, rules, std::nullopt);
}

attempt_decision classify_response(long status, std::string_view retry_after,
                                   const retry_rules& rules,
                                   std::chrono::system_clock::time_point now) {
  return decide_response(status, retry_after, rules, now);
}

void retry_rules::validate() const {
  detail::validate_rules(*this, "coretry::http::retry_rules", "");
}

namespace {

class status_category_impl final : public std::error_category {
public:
  const char* name() const noexcept override { return "http-status"; }
  std::string message(int value) const override {
    const char* reason = "";
    switch (value) {
    case 400:
      reason = " Bad Request";
      break;
    case 401:
      reason = " Unauthorized";
      break;
    case 403:
      reason = " Forbidden";
      break;
    case 404:
      reason = " Not Found";
      break;
    case 408:
      reason = " Request Timeout";
      break;
    case 429:
      reason = " Too Many Requests";
      break;
    case 500:
      reason = " Internal Server Error";
      break;
    case 502:
      reason = " Bad Gateway";
      break;
    case 503:
      reason = " Service Unavailable";
      break;
    case 504:
      reason = " Gateway Timeout";
      break;
    default:
      break;
    }
    return "HTTP " + std::to_string(value) + reason;
  }
  // What a status says of the upstream's health (coretry::default_health): 1xx to 3xx is an
  // answer, even one the policy rejects; 429 asks the client to slow down; 408 is a timeout;
  // any other 4xx blames the request; a 5xx is the upstream's failure (in no condition:
  // unhealthy).
  bool equivalent(int value, const std::error_condition& cond) const noexcept override {
    if (cond == coretry::condition::answered)
      return value >= 100 && value < 400;
    if (cond == coretry::condition::pushback)
      return value == 429;
    if (cond == coretry::condition::timed_out)
      return value == 408;
    if (cond == coretry::condition::client_error)
      return value >= 400 && value < 500 && value != 408 && value != 429;
    return std::error_category::equivalent(value, cond);
  }
};

} // namespace

const std::error_category& status_category() noexcept {
  static const status_category_impl instance;
  return instance;
}

bool is_retryable_status(long status, const retry_rules& rules) noexcept {
  return std::find(rules.status_forcelist.begin(), rules.status_forcelist.end(), status) !=
         rules.status_forcelist.end();
}

bool is_retryable_status(long status) noexcept {
  return std::find(default_statuses.begin(), default_statuses.end(), status) !=
         default_statuses.end();
}

bool is_token(std::string_view s) noexcept {
  if (s.empty())
    return false;
  for (const char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok)
      return false;
  }
  return true;
}

bool is_idempotent(std::string_view m) noexcept {
  return m == "GET" || m == "HEAD" || m == "OPTIONS" || m == "PUT" || m == "DELETE" || m == "TRACE";
}

bool is_allowed_method(std::string_view method, const retry_rules& rules) noexcept {
  return std::find(rules.allowed_methods.begin(), rules.allowed_methods.end(), method) !=
         rules.allowed_methods.end();
}

bool may_retry(std::string_view method, bool has_idempotency_key,
               const retry_rules& rules) noexcept {
  return has_idempotency_key || is_allowed_method(method, rules);
}

bool may_retry(std::string_view method, bool has_idempotency_key) noexcept {
  return has_idempotency_key || is_idempotent(method);
}

bool honours_retry_after(long status, const retry_rules& rules) noexcept {
  return std::find(rules.retry_after_status_codes.begin(), rules.retry_after_status_codes.end(),
                   status) != rules.retry_after_status_codes.end();
}

} // namespace coretry::http
