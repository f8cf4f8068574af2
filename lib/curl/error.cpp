#include <coretry/curl/error.hpp>
#include <coretry/curl/request.hpp>

#include <curl/curl.h>

#include <algorithm>
#include <string>

namespace coretry::curl {

static_assert(static_cast<int>(errc::unsupported_protocol) == CURLE_UNSUPPORTED_PROTOCOL);
static_assert(static_cast<int>(errc::failed_init) == CURLE_FAILED_INIT);
static_assert(static_cast<int>(errc::url_malformat) == CURLE_URL_MALFORMAT);
static_assert(static_cast<int>(errc::couldnt_resolve_host) == CURLE_COULDNT_RESOLVE_HOST);
static_assert(static_cast<int>(errc::couldnt_connect) == CURLE_COULDNT_CONNECT);
static_assert(static_cast<int>(errc::weird_server_reply) == CURLE_WEIRD_SERVER_REPLY);
static_assert(static_cast<int>(errc::partial_file) == CURLE_PARTIAL_FILE);
static_assert(static_cast<int>(errc::out_of_memory) == CURLE_OUT_OF_MEMORY);
static_assert(static_cast<int>(errc::operation_timedout) == CURLE_OPERATION_TIMEDOUT);
static_assert(static_cast<int>(errc::too_many_redirects) == CURLE_TOO_MANY_REDIRECTS);
static_assert(static_cast<int>(errc::got_nothing) == CURLE_GOT_NOTHING);
static_assert(static_cast<int>(errc::send_error) == CURLE_SEND_ERROR);
static_assert(static_cast<int>(errc::recv_error) == CURLE_RECV_ERROR);

namespace {
class category final : public std::error_category {
public:
  const char* name() const noexcept override { return "curl"; }
  std::string message(int value) const override {
    return curl_easy_strerror(static_cast<CURLcode>(value));
  }
};
class status_category final : public std::error_category {
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
};
} // namespace

const std::error_category& http_status_category() noexcept {
  static const status_category instance;
  return instance;
}

const std::error_category& curl_category() noexcept {
  static const category instance;
  return instance;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [&](char x, char y) { return lower(x) == lower(y); });
}

std::optional<std::string_view> find_header(const header_list& headers,
                                            std::string_view name) noexcept {
  for (const auto& [n, v] : headers)
    if (iequals(n, name))
      return std::string_view(v);
  return std::nullopt;
}

} // namespace coretry::curl
