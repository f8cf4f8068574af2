// SPDX-License-Identifier: BSL-1.0
#include "support/cli.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include <getopt.h>

namespace sample_support::cli {
namespace {
std::string program_name = "sample";
} // namespace

void fail(const std::string& message) {
  std::fprintf(stderr, "%s: %s\nTry '%s --help' for more information.\n", program_name.c_str(),
               message.c_str(), program_name.c_str());
  std::exit(2);
}

void parse(const char* program, int argc, char** argv, int first,
           std::initializer_list<option> options, void (*usage)(std::FILE* out), const handler& on,
           std::vector<std::string>* positional) {
  program_name = program;
  std::vector<::option> longs;
  for (const auto& o : options)
    longs.push_back({o.name, o.takes_value ? required_argument : no_argument, nullptr, 0});
  longs.push_back({"help", no_argument, nullptr, 'h'});
  longs.push_back({nullptr, 0, nullptr, 0});
  // getopt_long sees argv[first - 1] as the program name; optind = 0 restarts its scan.
  const int n = argc - first + 1;
  char** args = argv + first - 1;
  opterr = 0; // errors are reported here, naming the option
  optind = 0;
  for (;;) {
    int index = -1;
    const int c = getopt_long(n, args, ":h", longs.data(), &index);
    if (c == -1)
      break;
    if (c == 'h') {
      usage(stdout);
      std::exit(0);
    }
    if (c == '?') {
      const std::string what =
          optopt ? std::string("-") + static_cast<char>(optopt) : std::string(args[optind - 1]);
      fail("unknown option '" + what + "'");
    }
    if (c == ':')
      fail("option '" + std::string(args[optind - 1]) + "' needs a value");
    on(longs[static_cast<std::size_t>(index)].name, optarg ? std::string(optarg) : std::string());
  }
  for (int i = optind; i < n; ++i) {
    if (!positional)
      fail("unexpected argument '" + std::string(args[i]) + "'");
    positional->push_back(args[i]);
  }
}

double number(std::string_view flag, const std::string& value, double min) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || errno != 0 || !std::isfinite(x) ||
      x < min) {
    std::ostringstream m;
    m << "--" << flag << ": '" << value << "' is not a number of at least " << min;
    fail(m.str());
  }
  return x;
}

std::uint64_t whole(std::string_view flag, const std::string& value, std::uint64_t min,
                    std::uint64_t max) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || value[0] == '-' || end != value.c_str() + value.size() || errno != 0 ||
      x < min || x > max) {
    std::ostringstream m;
    m << "--" << flag << ": '" << value << "' is not a whole number in [" << min << ", " << max
      << "]";
    fail(m.str());
  }
  return x;
}

std::vector<std::string> list(const std::string& value) {
  std::vector<std::string> out;
  std::stringstream in(value);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty())
      out.push_back(item);
  return out;
}

} // namespace sample_support::cli
