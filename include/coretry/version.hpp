// SPDX-License-Identifier: BSL-1.0
#pragma once
/// \file
/// coretry's version, as `project()` in CMakeLists.txt states it.

/// Major version: 0 until the API is stable.
#define CORETRY_VERSION_MAJOR 0
/// Minor version: before 1.0 a new one may change the API and the ABI (see CHANGELOG.md).
#define CORETRY_VERSION_MINOR 3
/// Patch version: fixes only.
#define CORETRY_VERSION_PATCH 0
