// SPDX-License-Identifier: BSL-1.0
#include <coretry/curl/error.hpp>
#include <coretry/curl/request.hpp>
#include <coretry/error.hpp>
#include <coretry/http.hpp>

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
static_assert(static_cast<int>(errc::write_error) == CURLE_WRITE_ERROR);
static_assert(static_cast<int>(errc::filesize_exceeded) == CURLE_FILESIZE_EXCEEDED);
static_assert(static_cast<int>(errc::operation_timedout) == CURLE_OPERATION_TIMEDOUT);
static_assert(static_cast<int>(errc::too_many_redirects) == CURLE_TOO_MANY_REDIRECTS);
static_assert(static_cast<int>(errc::got_nothing) == CURLE_GOT_NOTHING);
static_assert(static_cast<int>(errc::send_error) == CURLE_SEND_ERROR);
static_assert(static_cast<int>(errc::recv_error) == CURLE_RECV_ERROR);
static_assert(static_cast<int>(errc::http2) == CURLE_HTTP2);
static_assert(static_cast<int>(errc::http2_stream) == CURLE_HTTP2_STREAM);
static_assert(static_cast<int>(errc::proxy_refused) == CURLE_PROXY);
static_assert(static_cast<int>(errc::ssl_connect_error) == CURLE_SSL_CONNECT_ERROR);
static_assert(static_cast<int>(errc::ssl_certproblem) == CURLE_SSL_CERTPROBLEM);
static_assert(static_cast<int>(errc::peer_failed_verification) == CURLE_PEER_FAILED_VERIFICATION);
static_assert(static_cast<int>(errc::ssl_cacert_badfile) == CURLE_SSL_CACERT_BADFILE);

namespace {
class category final : public std::error_category {
public:
  const char* name() const noexcept override { return "curl"; }
  std::string message(int value) const override {
    // libcurl's texts for TLS failures do not say which side or what ("SSL peer certificate or
    // SSH remote key was not OK"); these do. response::error_detail has libcurl's specifics.
    switch (value) {
    case CURLE_PEER_FAILED_VERIFICATION:
      return "TLS: the server's certificate was not verified (unknown or untrusted issuer, "
             "self-signed, expired, or not for this host name)";
    case CURLE_SSL_CONNECT_ERROR:
      return "TLS: the handshake failed (no common protocol version or cipher, or the server "
             "rejected the client certificate)";
    case CURLE_SSL_CERTPROBLEM:
      return "TLS: the client certificate or its key could not be used";
    case CURLE_SSL_CACERT_BADFILE:
      return "TLS: the CA certificates could not be loaded (file, directory or blob)";
    case CURLE_SSL_CIPHER:
      return "TLS: the requested cipher could not be used";
    case CURLE_SSL_ISSUER_ERROR:
      return "TLS: the server's certificate issuer check failed";
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
      return "TLS: the server's public key does not match the pinned one";
    case CURLE_SSL_INVALIDCERTSTATUS:
      return "TLS: the server's certificate status (OCSP) is invalid";
    case CURLE_SSL_CLIENTCERT:
      return "TLS: the server requires a client certificate";
    case CURLE_FILESIZE_EXCEEDED:
      return "response larger than the client accepts (body or header block)";
    case CURLE_PROXY:
      return "the proxy refused the connection to the server (CONNECT not answered 2xx, or a "
             "SOCKS handshake failed)";
    default:
      return curl_easy_strerror(static_cast<CURLcode>(value));
    }
  }
  // The client's own fault, not the upstream's: the default health classification
  // (coretry::default_health) does not count it against the upstream.
  bool equivalent(int value, const std::error_condition& cond) const noexcept override {
    if (cond == coretry::condition::client_error) {
      switch (value) {
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
      case CURLE_FILESIZE_EXCEEDED:
      case CURLE_SSL_CERTPROBLEM:
      case CURLE_SSL_CACERT_BADFILE:
        return true;
      default:
        return false;
      }
    }
    return std::error_category::equivalent(value, cond);
  }
};
} // namespace

// The core library's category (coretry::http::status_category), under curl's older name.
const std::error_category& http_status_category() noexcept {
  return coretry::http::status_category();
}

const std::error_category& curl_category() noexcept {
  static const category instance;
  return instance;
}

bool is_tls_error(const std::error_code& ec) noexcept {
  if (ec.category() != curl_category())
    return false;
  switch (ec.value()) {
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_SSL_ENGINE_NOTFOUND:
  case CURLE_SSL_ENGINE_SETFAILED:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_ENGINE_INITFAILED:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case CURLE_SSL_INVALIDCERTSTATUS:
  case CURLE_SSL_CLIENTCERT:
    return true;
  default:
    return false;
  }
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
