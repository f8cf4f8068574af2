// SPDX-License-Identifier: BSL-1.0
#include <cstdio>

#include "parentlib.hpp"

int main() {
  auto d = describe_backoff();
  std::printf("exporting_parent: %s\n", d.c_str());
  return d.empty() ? 1 : 0;
}
