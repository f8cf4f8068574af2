#pragma once
/// \file
/// coretry's version, as `project()` in CMakeLists.txt states it.

#define CORETRY_VERSION_MAJOR 0
#define CORETRY_VERSION_MINOR 2
#define CORETRY_VERSION_PATCH 0
