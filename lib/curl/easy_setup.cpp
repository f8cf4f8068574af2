// SPDX-License-Identifier: BSL-1.0
// Turns a `request` into a configured easy handle: options, headers, body, response callbacks.

#include <coretry/curl/classify.hpp>
#include <coretry/curl/error.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <new>
#include <string>
#include <string_view>

#include "header_lines.hpp"
#include "transfer.hpp"

namespace coretry::curl::detail {

namespace {

// The callbacks below run inside libcurl: no exception may leave them (it would unwind through
// C code and leave the multi handle "inside a callback" for good). Any failure, an exception or
// a size limit passed, is recorded on the transfer and reported to libcurl by returning a
// count other than the one given, which aborts this transfer alone (CURLE_WRITE_ERROR); the
// transfer then completes with the recorded error (client_impl::transfer_done).
void abort_with_exception(transfer& t, const char* where) noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    set_abort(t, make_error_code(errc::out_of_memory), where);
  } catch (...) {
    set_abort(t, make_error_code(errc::write_error), where);
  }
}

std::size_t write_body(char* data, std::size_t size, std::size_t count, void* userp) noexcept {
  auto* t = static_cast<transfer*>(userp);
  const std::size_t n = size * count;
  if (t->max_body > 0 && n > t->max_body - t->resp.body.size()) {
    set_abort(*t, make_error_code(errc::filesize_exceeded),
              "response body larger than client_options::max_response_body");
    return 0;
  }
  try {
    maybe_inject(fault_point::body);
    t->resp.body.append(data, n);
  } catch (...) {
    abort_with_exception(*t, "exception while storing the response body");
    return 0;
  }
  return n;
}

std::size_t write_header(char* data, std::size_t size, std::size_t count, void* userp) noexcept {
  auto* t = static_cast<transfer*>(userp);
  const std::size_t n = size * count;
  if (n > t->max_headers - std::min(t->header_bytes, t->max_headers)) {
    set_abort(*t, make_error_code(errc::filesize_exceeded),
              "response header block larger than client_options::max_response_headers");
    return 0;
  }
  t->header_bytes += n;
  try {
    maybe_inject(fault_point::header);
    t->headers.line(std::string_view(data, n));
  } catch (...) {
    abort_with_exception(*t, "exception while storing a response header");
    return 0;
  }
  return n;
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

long curl_http_version(http_version_option v) noexcept {
  switch (v) {
  case http_version_option::http1_1:
    return CURL_HTTP_VERSION_1_1;
  case http_version_option::http2:
    return CURL_HTTP_VERSION_2_0;
  case http_version_option::http2_prior_knowledge:
    return CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE;
  default:
    return CURL_HTTP_VERSION_2TLS;
  }
}

long curl_ssl_version(tls_version v) noexcept {
  switch (v) {
  case tls_version::tls1_0:
    return CURL_SSLVERSION_TLSv1_0;
  case tls_version::tls1_1:
    return CURL_SSLVERSION_TLSv1_1;
  case tls_version::tls1_3:
    return CURL_SSLVERSION_TLSv1_3;
  default:
    return CURL_SSLVERSION_TLSv1_2;
  }
}

// The options of one TLS handshake: the origin's (CURLOPT_CAINFO, ...) or an HTTPS proxy's
// (CURLOPT_PROXY_CAINFO, ...), which libcurl keeps apart and leaves at its defaults unless told.
struct tls_option_names {
  CURLoption cainfo, capath, cainfo_blob, sslcert, sslkey, sslversion, verifypeer, verifyhost;
};
constexpr tls_option_names origin_tls{
    CURLOPT_CAINFO, CURLOPT_CAPATH,     CURLOPT_CAINFO_BLOB,    CURLOPT_SSLCERT,
    CURLOPT_SSLKEY, CURLOPT_SSLVERSION, CURLOPT_SSL_VERIFYPEER, CURLOPT_SSL_VERIFYHOST};
constexpr tls_option_names proxy_tls{CURLOPT_PROXY_CAINFO,         CURLOPT_PROXY_CAPATH,
                                     CURLOPT_PROXY_CAINFO_BLOB,    CURLOPT_PROXY_SSLCERT,
                                     CURLOPT_PROXY_SSLKEY,         CURLOPT_PROXY_SSLVERSION,
                                     CURLOPT_PROXY_SSL_VERIFYPEER, CURLOPT_PROXY_SSL_VERIFYHOST};

// Trust and identity. Verification stays at libcurl's defaults (peer and host on) unless the
// caller chose the insecure option by name. The blob is copied: the handle may be reused from
// the pool after the request that held it is gone.
CURLcode configure_tls(CURL* e, const tls_options& tls, const tls_option_names& opt) {
  CURLcode rc = CURLE_OK;
  auto set = [&](CURLoption option, auto value) {
    if (rc == CURLE_OK)
      rc = curl_easy_setopt(e, option, value);
  };
  // A CA given by the caller replaces every built-in source: Debian's libcurl otherwise still
  // trusts its compiled-in bundle (CAINFO /etc/ssl/certs/ca-certificates.crt) and directory
  // (CAPATH /etc/ssl/certs) beside it. NULL disables a source; libcurl 7.88 built without
  // CURL_CA_FALLBACK (Debian's) then loads nothing else, not even OpenSSL's default paths.
  const bool pinned = !tls.ca_file.empty() || !tls.ca_path.empty() || !tls.ca_blob.empty();
  if (!tls.ca_file.empty())
    set(opt.cainfo, tls.ca_file.c_str());
  else if (pinned)
    set(opt.cainfo, static_cast<const char*>(nullptr));
  if (!tls.ca_path.empty())
    set(opt.capath, tls.ca_path.c_str());
  else if (pinned)
    set(opt.capath, static_cast<const char*>(nullptr));
  if (!tls.ca_blob.empty()) {
    curl_blob blob{const_cast<char*>(tls.ca_blob.data()), tls.ca_blob.size(), CURL_BLOB_COPY};
    set(opt.cainfo_blob, &blob);
  }
  if (!tls.client_cert.empty())
    set(opt.sslcert, tls.client_cert.c_str());
  if (!tls.client_key.empty())
    set(opt.sslkey, tls.client_key.c_str());
  set(opt.sslversion, curl_ssl_version(tls.min_version));
  if (tls.insecure_skip_verify) {
    set(opt.verifypeer, 0L);
    set(opt.verifyhost, 0L);
  }
  return rc;
}

// Appends to `list` the header lines of `r` under client options `o`: the request's own
// headers, then the removal of libcurl's default headers that the caller did not ask for;
// false when out of memory (what was appended stays in `list`, for the caller to free).
bool append_header_lines(curl_slist*& list, const request& r, const client_options* o) {
  auto append = [&](const std::string& line) {
    curl_slist* next = curl_slist_append(list, line.c_str());
    if (next)
      list = next;
    return next != nullptr;
  };
  for (const auto& [name, value] : r.headers) {
    std::string line = name;
    line += value.empty() ? ";" : ": "; // "Name;" sends an empty value in libcurl
    line += value;
    if (!append(line))
      return false;
  }
  // libcurl's default headers, which the caller did not ask for: "Name:" removes one.
  // Content-Type: libcurl labels every body application/x-www-form-urlencoded; a body is sent
  // as is, labelled only by the caller's own Content-Type.
  if (!r.header("Content-Type") && !append("Content-Type:"))
    return false;
  // Expect: 100-continue, for bodies over 1 MiB, only when asked (expect_continue_timeout).
  if (!r.header("Expect") && (!o || o->expect_continue_timeout.count() == 0) && !append("Expect:"))
    return false;
  return true;
}

} // namespace

curl_slist* plain_header_lines(const client_options* o) {
  curl_slist* list = nullptr;
  if (!append_header_lines(list, request{}, o)) {
    curl_slist_free_all(list);
    return nullptr;
  }
  return list;
}

std::atomic<unsigned> armed_faults{0};

void maybe_inject(fault_point p) {
  const auto bit = static_cast<unsigned>(p);
  if ((armed_faults.load(std::memory_order_relaxed) & bit) != 0 &&
      (armed_faults.fetch_and(~bit, std::memory_order_relaxed) & bit) != 0)
    throw std::bad_alloc();
}

void set_abort(transfer& t, std::error_code ec, const char* what) noexcept {
  if (t.abort_error)
    return; // the first failure is the one reported
  t.abort_error = ec;
  std::snprintf(t.abort_detail, sizeof t.abort_detail, "coretry: %s", what);
}

void free_headers(transfer& t) noexcept {
  if (t.header_list) {
    curl_slist_free_all(t.header_list);
    t.header_list = nullptr;
  }
}

CURLcode configure_easy(transfer& t, const easy_defaults& defaults) {
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
  t.error_buffer[0] = '\0';
  set(CURLOPT_ERRORBUFFER, t.error_buffer);
  t.max_body = defaults.max_body;
  t.max_headers = defaults.max_headers;
  const client_options* o = defaults.options;
  // An announced Content-Length over the limit fails before any byte of body is stored. Not
  // when decoding: the Content-Length of an encoded body counts encoded bytes (incompressible
  // data grows under gzip), while the limit counts what the caller gets, the decoded bytes,
  // which write_body checks as they arrive.
  const bool decoding = o && o->decompress;
  if (t.max_body > 0 && t.max_body <= static_cast<std::size_t>(INT64_MAX) && !decoding)
    set(CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(t.max_body));
  set(CURLOPT_HTTP_VERSION, curl_http_version(defaults.http_version));
  // Without it, concurrent transfers to a host whose first connection is still being set up
  // each open their own (64 handshakes for 200 HTTP/2 requests under the default limit, seen
  // against nginx); with it they wait for that connection and share it when it speaks HTTP/2.
  if (t.pipewait)
    set(CURLOPT_PIPEWAIT, 1L);
  if (rc == CURLE_OK)
    rc = configure_tls(e, t.req.tls ? *t.req.tls : *defaults.tls, origin_tls);
  // An HTTPS proxy's handshake is verified with the client's settings (not a request's: those
  // are for its origin); libcurl would otherwise use its built-in CA bundle and no certificate.
  if (rc == CURLE_OK && o && (!o->proxy.empty() || o->proxy_from_environment))
    rc = configure_tls(e, *defaults.tls, proxy_tls);
  // Connection set-up (name lookup, TCP, proxy CONNECT, TLS handshake) moves no body bytes, and
  // libcurl's stall check (CURLOPT_LOW_SPEED_*) runs only once the request is sent: without a
  // bound of its own a handshake that never completes waited libcurl's default 300 s. Unless
  // the request sets its own, the set-up gets the client's stall_timeout: silence that long
  // ends it.
  if (r.connect_timeout.count() > 0)
    set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(r.connect_timeout.count()));
  else if (o && o->stall_timeout.count() > 0)
    set(CURLOPT_CONNECTTIMEOUT_MS,
        static_cast<long>(std::min<std::int64_t>(o->stall_timeout.count(), LONG_MAX / 1000) *
                          1000));
  if (r.timeout.count() > 0) {
    // What the earlier hops of a redirect the client follows itself left (at least 1 ms:
    // client_impl::redirect fails the request once nothing is left).
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(r.timeout - t.spent);
    set(CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<std::int64_t>(left.count(), 1)));
  }
  // libcurl resends a request by itself, on a fresh connection, when a reused keep-alive
  // connection dies before any byte of reply, and it does so for a POST too (it rewinds the
  // body). The server may have acted on the first copy, so a request that must not be sent
  // twice (see may_retry) never starts on a reused connection: then there is nothing to resend.
  // So does one asked for a new connection (request::fresh_connection: the retry after an
  // error that may have broken the connection it used). libcurl 7.88 honours
  // CURLOPT_FRESH_CONNECT for the first hop of a transfer only (url.c ignores it once it
  // follows a Location): that is one reason why libcurl never follows redirects here, the
  // client does (client_impl::redirect), each hop a transfer of its own, set up here.
  if (!may_retry(r) || r.fresh_connection)
    set(CURLOPT_FRESH_CONNECT, 1L);
  // A proxy's reply to CONNECT is not a response of the request's (header_lines.hpp).
  set(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
  // Header lines: a request without headers of its own shares the client's list (libcurl
  // keeps a pointer, no copy: it only has to outlive the transfer); any other gets its own.
  const curl_slist* lines = defaults.plain_headers;
  if (!r.headers.empty() || !lines) {
    if (!append_header_lines(t.header_list, r, o))
      return CURLE_OUT_OF_MEMORY;
    lines = t.header_list;
  }
  if (o) {
    if (o->expect_continue_timeout.count() > 0)
      set(CURLOPT_EXPECT_100_TIMEOUT_MS, static_cast<long>(o->expect_continue_timeout.count()));
    if (o->stall_timeout.count() > 0) {
      set(CURLOPT_LOW_SPEED_LIMIT, o->stall_min_bytes_per_second);
      set(CURLOPT_LOW_SPEED_TIME, static_cast<long>(o->stall_timeout.count()));
    }
    // An empty CURLOPT_PROXY disables every proxy, the environment's included.
    if (!o->proxy.empty())
      set(CURLOPT_PROXY, o->proxy.c_str());
    else if (!o->proxy_from_environment)
      set(CURLOPT_PROXY, "");
    // Set even when empty: libcurl reads no_proxy / NO_PROXY from the environment whenever
    // CURLOPT_NOPROXY is unset, and those would send traffic around an explicit proxy. Only
    // when the environment may choose the proxy may it also choose the exceptions.
    if (!o->no_proxy.empty() || !o->proxy_from_environment || !o->proxy.empty())
      set(CURLOPT_NOPROXY, o->no_proxy.c_str());
    if (o->decompress)
      set(CURLOPT_ACCEPT_ENCODING, "");
  }
  if (lines)
    set(CURLOPT_HTTPHEADER, lines);

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
