// Turns a `request` into a configured easy handle: options, headers, body, response callbacks.

#include <coretry/curl/classify.hpp>

#include <string>
#include <string_view>

#include "header_lines.hpp"
#include "transfer.hpp"

namespace coretry::curl::detail {

namespace {

std::size_t write_body(char* data, std::size_t size, std::size_t count, void* userp) {
  auto* t = static_cast<transfer*>(userp);
  t->resp.body.append(data, size * count);
  return size * count;
}

std::size_t write_header(char* data, std::size_t size, std::size_t count, void* userp) {
  // A status line starts a new response (a redirect hop or an interim 1xx): only the last
  // one's fields are kept.
  add_header_line(static_cast<transfer*>(userp)->resp.headers,
                  std::string_view(data, size * count));
  return size * count;
}

// "scheme://" at the start (RFC 3986 scheme syntax). libcurl would guess a scheme for anything
// else ("example.com/x" becomes http, "ftp.example.com" ftp) and resolve it; a request's URL must
// be absolute, so a scheme-less one fails as malformed, at once and without a DNS lookup.
bool has_scheme(std::string_view url) noexcept {
  const auto end = url.find("://");
  if (end == std::string_view::npos || end == 0)
    return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(url[0]))
    return false;
  for (char c : url.substr(1, end - 1))
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.')
      return false;
  return true;
}

} // namespace

void free_headers(transfer& t) noexcept {
  if (t.header_list) {
    curl_slist_free_all(t.header_list);
    t.header_list = nullptr;
  }
}

CURLcode configure_easy(transfer& t) {
  CURL* e = t.easy;
  const request& r = t.req;
  if (!has_scheme(r.url))
    return CURLE_URL_MALFORMAT;
  CURLcode rc = CURLE_OK;
  auto set = [&](CURLoption opt, auto value) {
    if (rc == CURLE_OK)
      rc = curl_easy_setopt(e, opt, value);
  };
  set(CURLOPT_PRIVATE, static_cast<void*>(&t));
  set(CURLOPT_URL, r.url.c_str());
  set(CURLOPT_PROTOCOLS_STR, "http,https");
  set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  set(CURLOPT_NOSIGNAL, 1L);
  // Removing a handle whose threaded name lookup still runs would otherwise wait for the lookup
  // (Curl_resolver_kill joins the resolver thread in 7.88): with a DNS server that never
  // answers, the io thread stood still until the resolver gave up. With quick exit the thread
  // is detached instead; it frees its own data when getaddrinfo returns.
  set(CURLOPT_QUICK_EXIT, 1L);
  set(CURLOPT_WRITEFUNCTION, &write_body);
  set(CURLOPT_WRITEDATA, static_cast<void*>(&t));
  set(CURLOPT_HEADERFUNCTION, &write_header);
  set(CURLOPT_HEADERDATA, static_cast<void*>(&t));
  if (r.connect_timeout.count() > 0)
    set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(r.connect_timeout.count()));
  if (r.timeout.count() > 0)
    set(CURLOPT_TIMEOUT_MS, static_cast<long>(r.timeout.count()));
  // libcurl resends a request by itself, on a fresh connection, when a reused keep-alive
  // connection dies before any byte of reply, and it does so for a POST too (it rewinds the
  // body). The server may have acted on the first copy, so a request that must not be sent
  // twice (see may_retry) never starts on a reused connection: then there is nothing to resend.
  if (!may_retry(r))
    set(CURLOPT_FRESH_CONNECT, 1L);
  if (r.follow_redirects) {
    set(CURLOPT_FOLLOWLOCATION, 1L);
    set(CURLOPT_MAXREDIRS, r.max_redirects);
  }
  for (const auto& [name, value] : r.headers) {
    std::string line = name;
    line += value.empty() ? ";" : ": "; // "Name;" sends an empty value in libcurl
    line += value;
    curl_slist* next = curl_slist_append(t.header_list, line.c_str());
    if (!next)
      return CURLE_OUT_OF_MEMORY;
    t.header_list = next;
  }
  if (t.header_list)
    set(CURLOPT_HTTPHEADER, t.header_list);

  // CURLOPT_POSTFIELDS turns the request into a POST, so any other method with a body is
  // named explicitly: a GET with a body must still go out as GET. A HEAD never has a body
  // (request::validate).
  const bool has_body =
      !r.body.empty() || r.method == "POST" || r.method == "PUT" || r.method == "PATCH";
  if (has_body) {
    set(CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    set(CURLOPT_POSTFIELDS, r.body.data());
    if (r.method != "POST")
      set(CURLOPT_CUSTOMREQUEST, r.method.c_str());
  } else if (r.method == "GET") {
    set(CURLOPT_HTTPGET, 1L);
  } else if (r.method == "HEAD") {
    set(CURLOPT_NOBODY, 1L);
  } else {
    set(CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  return rc;
}

} // namespace coretry::curl::detail
