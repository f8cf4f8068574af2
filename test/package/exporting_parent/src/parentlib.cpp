// SPDX-License-Identifier: BSL-1.0
#include "parentlib.hpp"

#include <coretry/coretry.hpp>

#include <chrono>

std::string describe_backoff() {
  using namespace std::chrono_literals;
  return coretry::backoff::exponential(100ms, 2.0, 5s).to_string();
}
