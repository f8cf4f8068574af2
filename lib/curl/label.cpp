// SPDX-License-Identifier: BSL-1.0
#include <coretry/curl/retry.hpp>

#include <curl/curl.h>

#include <memory>
#include <string>

namespace coretry::curl::detail {

// libcurl's own URL parser, so that the label names the endpoint libcurl connects to: the
// scheme and host lowercased, the port made explicit (443 for https), the userinfo, path and
// query left out.
std::string endpoint_label(const std::string& url) {
  const std::unique_ptr<CURLU, void (*)(CURLU*)> u(curl_url(), &curl_url_cleanup);
  if (!u ||
      curl_url_set(u.get(), CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK)
    return url;
  auto part = [&](CURLUPart what, unsigned flags) {
    char* p = nullptr;
    std::string s;
    if (curl_url_get(u.get(), what, &p, flags) == CURLUE_OK && p)
      s = p;
    curl_free(p);
    return s;
  };
  std::string scheme = part(CURLUPART_SCHEME, 0);
  std::string host = part(CURLUPART_HOST, 0);
  const std::string port = part(CURLUPART_PORT, CURLU_DEFAULT_PORT);
  for (auto* s : {&scheme, &host})
    for (char& c : *s)
      if (c >= 'A' && c <= 'Z')
        c = static_cast<char>(c - 'A' + 'a');
  return scheme + "://" + host + (port.empty() ? "" : ":" + port);
}

} // namespace coretry::curl::detail
