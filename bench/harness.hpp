// SPDX-License-Identifier: BSL-1.0
#pragma once
// Small helpers shared by the benchmark programs: command-line options, /proc readings, and the
// one output format `.ci/bench` reads.
//
// Every measurement is printed as one line
//     sample <metric> <variant> <value>
// and `.ci/bench` turns the samples of each (metric, variant) into a median and a min–max, then
// divides coretry's median by its baseline's. Programs print nothing else on stdout but
// `#`-comments.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coretry::bench {

using steady = std::chrono::steady_clock;

inline double seconds_since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

/// `--name=value` from argv, or `fallback`.
inline std::string option(int argc, char** argv, std::string_view name, std::string fallback) {
  const std::string prefix = "--" + std::string(name) + "=";
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).starts_with(prefix))
      return argv[i] + prefix.size();
  return fallback;
}

/// A positive count option; anything else is a `std::invalid_argument` naming it.
inline long count_option(int argc, char** argv, std::string_view name, long fallback) {
  const std::string s = option(argc, argv, name, std::to_string(fallback));
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v <= 0)
    throw std::invalid_argument("--" + std::string(name) + " must be a positive count, not '" + s +
                                "'");
  return v;
}

/// A field of /proc/self/status in bytes (`VmRSS`, `VmHWM`) or as a number (`Threads`).
inline long proc_status(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') {
      const long v = std::atol(line.c_str() + n + 1);
      return line.find("kB") != std::string::npos ? v * 1024 : v;
    }
  return -1;
}

/// Descriptors of this process that are TCP/IP sockets (libcurl's wake-up socket pairs, which
/// hold no connection, are not counted).
/// IP sockets the process holds open: distinct sockets, not descriptors (a socket watched
/// through a dup() of its descriptor is one socket).
inline long open_ip_sockets() {
  std::set<ino_t> sockets;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      const long fd = std::strtol(e->d_name, &end, 10);
      int domain = 0;
      socklen_t len = sizeof domain;
      struct stat st {};
      if (*end == '\0' && end != e->d_name &&
          getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
          (domain == AF_INET || domain == AF_INET6) && fstat(static_cast<int>(fd), &st) == 0)
        sockets.insert(st.st_ino);
    }
    closedir(d);
  }
  return static_cast<long>(sockets.size());
}

inline void sample(const char* metric, std::string_view variant, double value) {
  std::printf("sample %s %.*s %.6g\n", metric, static_cast<int>(variant.size()), variant.data(),
              value);
  std::fflush(stdout);
}

} // namespace coretry::bench
