// SPDX-License-Identifier: BSL-1.0
#include "nginx_server.hpp"

#include <support/asio.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CORETRY_TEST_BINARY_DIR
#error "CORETRY_TEST_BINARY_DIR must name the test's build directory"
#endif

extern char** environ;

namespace coretry::test {

namespace fs = std::filesystem;

namespace {

fs::path root() {
  // Emptied once per process: each build tree runs one instance of the test at a time.
  static const fs::path dir = [] {
    fs::path d = fs::path(CORETRY_TEST_BINARY_DIR) / "nginx";
    std::error_code ec;
    fs::remove_all(d, ec);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& p, std::string_view text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out)
    throw std::runtime_error("cannot write " + p.string());
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// Runs a shell command in `dir`, its output appended to dir/openssl.log; throws with that log
// when it fails.
void run(const fs::path& dir, const std::string& command) {
  const std::string full = "cd '" + dir.string() + "' && " + command + " >>openssl.log 2>&1";
  if (std::system(full.c_str()) != 0)
    throw std::runtime_error("failed: " + command + "\n" + read_file(dir / "openssl.log"));
}

// A port on 127.0.0.1 that was free a moment ago (bound, then closed).
unsigned short free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

bool accepts(unsigned short port) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  coretry::test::error_code ec;
  s.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
  return !ec;
}

// The temporary-file directives of the modules this nginx has: nginx creates each module's
// directory at start-up, by default under /var/lib/nginx, which a non-root user cannot write.
std::string temp_paths(const std::string& nginx, const fs::path& dir) {
  std::string configure;
  if (FILE* p = ::popen(("'" + nginx + "' -V 2>&1").c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
      configure.append(buf, n);
    ::pclose(p);
  }
  std::string out = "  client_body_temp_path " + (dir / "tmp/body").string() + ";\n";
  for (const char* m : {"proxy", "fastcgi", "uwsgi", "scgi"})
    if (configure.find(std::string("--without-http_") + m + "_module") == std::string::npos)
      out += std::string("  ") + m + "_temp_path " + (dir / "tmp" / m).string() + ";\n";
  return out;
}

} // namespace

std::string find_nginx() {
  if (const char* chosen = std::getenv("CORETRY_NGINX"))
    return ::access(chosen, X_OK) == 0 ? chosen : "";
  for (const char* candidate : {"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"})
    if (::access(candidate, X_OK) == 0)
      return candidate;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    std::string d;
    while (std::getline(dirs, d, ':'))
      if (!d.empty() && ::access((d + "/nginx").c_str(), X_OK) == 0)
        return d + "/nginx";
  }
  return {};
}

const test_certs& certs() {
  static std::mutex m;
  static test_certs made;
  std::lock_guard lock(m);
  if (!made.dir.empty())
    return made;
  const fs::path dir = root() / "certs";
  fs::create_directories(dir / "capath");
  const std::string ec_key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  run(dir, "openssl req -x509 -new " + ec_key +
               " -keyout ca.key -out ca.pem -days 2 -sha256 -subj '/CN=coretry test CA'"
               " -addext basicConstraints=critical,CA:TRUE"
               " -addext keyUsage=critical,keyCertSign,cRLSign");
  write_file(dir / "server.ext", "basicConstraints=CA:FALSE\n"
                                 "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                 "extendedKeyUsage=serverAuth\n");
  write_file(dir / "client.ext", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n");
  for (const char* who : {"server", "client"}) {
    const std::string w = who;
    run(dir, "openssl req -new " + ec_key + " -keyout " + w + ".key -out " + w +
                 ".csr -subj '/CN=" + (w == "server" ? "localhost" : "coretry test client") + "'");
    run(dir, "openssl x509 -req -in " + w + ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -out " +
                 w + ".pem -days 2 -sha256 -extfile " + w + ".ext");
  }
  fs::copy_file(dir / "ca.pem", dir / "capath" / "ca.pem");
  run(dir, "openssl rehash capath");
  made.ca = dir / "ca.pem";
  made.ca_dir = dir / "capath";
  made.server_cert = dir / "server.pem";
  made.server_key = dir / "server.key";
  made.client_cert = dir / "client.pem";
  made.client_key = dir / "client.key";
  made.ca_pem = read_file(made.ca);
  made.dir = dir;
  return made;
}

nginx_server::nginx_server(std::string name, std::string servers) {
  const std::string nginx = find_nginx();
  if (nginx.empty())
    throw std::runtime_error("nginx is not installed (Debian: apt-get install nginx-light)");
  static std::atomic<int> instances{0};
  dir_ = root() / (name + "-" + std::to_string(++instances));
  fs::create_directories(dir_ / "tmp");
  port_ = free_port();
  servers = replace_all(std::move(servers), "@PORT@", std::to_string(port_));
  if (servers.find("@CERTS@") != std::string::npos)
    servers = replace_all(std::move(servers), "@CERTS@", certs().dir.string());
  const std::string d = dir_.string();
  write_file(dir_ / "nginx.conf", "daemon off;\n"
                                  "master_process off;\n"
                                  "pid " +
                                      d +
                                      "/nginx.pid;\n"
                                      "error_log " +
                                      d +
                                      "/error.log info;\n"
                                      "events { worker_connections 1024; }\n"
                                      "http {\n"
                                      "  log_format coretry '$request_method $uri $status';\n"
                                      "  access_log " +
                                      d + "/access.log coretry;\n" + temp_paths(nginx, dir_) +
                                      "  default_type text/plain;\n"
                                      "  keepalive_requests 100000;\n" +
                                      servers + "\n}\n");

  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  const std::string out = d + "/stdout.log";
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  const std::string conf = d + "/nginx.conf", err = d + "/error.log";
  std::vector<std::string> args{nginx, "-p", d, "-c", conf, "-e", err};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, nginx.c_str(), &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) {
    pid_ = -1;
    throw std::runtime_error("cannot start " + nginx);
  }
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("nginx exited at start-up:\n" + read_file(out) + error_log());
    }
    if (accepts(port_))
      break;
    if (std::chrono::steady_clock::now() > limit) {
      stop();
      throw std::runtime_error("nginx did not accept on port " + std::to_string(port_) +
                               " within 10 s:\n" + error_log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

nginx_server::~nginx_server() {
  stop();
}

void nginx_server::stop() noexcept {
  if (pid_ <= 0)
    return;
  ::kill(pid_, SIGTERM);
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > limit) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
}

std::string nginx_server::url(std::string_view path, bool https) const {
  return std::string(https ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_) +
         std::string(path);
}

std::size_t nginx_server::requests(std::string_view needle) const {
  std::ifstream in(dir_ / "access.log");
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos)
      ++n;
  return n;
}

std::string nginx_server::error_log() const {
  return read_file(dir_ / "error.log");
}

} // namespace coretry::test
