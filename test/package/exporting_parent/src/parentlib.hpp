// SPDX-License-Identifier: BSL-1.0
#pragma once
#include <string>

// The parent project's own library; its implementation uses coretry.
std::string describe_backoff();
