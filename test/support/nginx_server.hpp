// SPDX-License-Identifier: BSL-1.0
#pragma once
// nginx on loopback for integration tests: a configuration written into the build tree, a free
// port on 127.0.0.1, nginx run in the foreground as the current user (root or not) and stopped
// by the destructor; and test certificates made with the openssl command-line tool.

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include <sys/types.h>

namespace coretry::test {

/// The nginx executable: `$CORETRY_NGINX` when set (empty if that is not executable), else
/// `/usr/sbin/nginx` or one on `PATH`; empty when there is none.
std::string find_nginx();

/// A CA, a server certificate for 127.0.0.1 and localhost and a client certificate it signed,
/// made once per process with the openssl command-line tool under `<build tree>/nginx/certs`.
/// EC P-256 keys, valid two days.
struct test_certs {
  std::filesystem::path dir;
  std::filesystem::path ca;     ///< the CA certificate (PEM)
  std::filesystem::path ca_dir; ///< a directory holding only the CA, named by subject hash
  std::filesystem::path server_cert, server_key;
  std::filesystem::path client_cert, client_key;
  std::string ca_pem; ///< the contents of `ca`
};

/// Makes the certificates on first use; throws std::runtime_error with openssl's output when
/// that fails.
const test_certs& certs();

/// One nginx process serving `servers` (the text of one or more `server { }` blocks, in which
/// "@PORT@" stands for `port()` and "@CERTS@" for `certs().dir`) beside common settings: the
/// pid file, error log, access log and temporary directories in
/// `<build tree>/nginx/<name>-<instance number>`,
/// `daemon off`, `master_process off` (one process, which never changes its user), and an
/// access log of "<method> <uri> <status>" lines. The constructor returns once the port accepts
/// connections; it throws std::runtime_error with the error log when nginx does not start.
class nginx_server {
public:
  nginx_server(std::string name, std::string servers);
  ~nginx_server();
  nginx_server(const nginx_server&) = delete;
  nginx_server& operator=(const nginx_server&) = delete;

  unsigned short port() const noexcept { return port_; }
  /// "http://127.0.0.1:<port><path>", or https.
  std::string url(std::string_view path, bool https = false) const;
  /// Access log lines containing `needle` (e.g. "POST /bad_gateway 502").
  std::size_t requests(std::string_view needle) const;
  /// The error log's contents.
  std::string error_log() const;
  /// Stops nginx (SIGTERM, then SIGKILL after 5 s) and reaps it; idempotent.
  void stop() noexcept;

private:
  std::filesystem::path dir_;
  unsigned short port_ = 0;
  pid_t pid_ = -1;
};

} // namespace coretry::test
