// SPDX-License-Identifier: BSL-1.0
#pragma once
// The samples' command lines, one parser for all: GNU getopt_long underneath, with the
// conventions of common tools. `--help` (or `-h`) prints the usage on stdout and exits 0; an
// unknown option, a missing or bad value, or an unexpected argument prints one line naming it,
// and a hint, on stderr and exits 2. Part of the samples' support library.

#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace sample_support::cli {

/// One long option: its name without the leading "--", and whether it takes a value.
struct option {
  const char* name;
  bool takes_value = false;
};

/// Called for each option in command-line order; `value` is empty for a flag.
using handler = std::function<void(std::string_view name, const std::string& value)>;

/// Parses `argv[first..argc)`. `usage(out)` prints the whole usage to `out`. Arguments that are
/// not options go to `positional`, or are refused when it is null.
void parse(const char* program, int argc, char** argv, int first,
           std::initializer_list<option> options, void (*usage)(std::FILE* out), const handler& on,
           std::vector<std::string>* positional = nullptr);

/// Prints "<program>: <message>" and the hint on stderr, and exits 2.
[[noreturn]] void fail(const std::string& message);

/// `value` as a finite number at least `min`, or `fail` naming `flag` and `value`.
double number(std::string_view flag, const std::string& value, double min = 0);
/// `value` as a whole number in [min, max], or `fail` naming `flag` and `value`.
std::uint64_t whole(std::string_view flag, const std::string& value, std::uint64_t min = 0,
                    std::uint64_t max = UINT64_MAX);
/// The non-empty items of a comma-separated list.
std::vector<std::string> list(const std::string& value);

} // namespace sample_support::cli
