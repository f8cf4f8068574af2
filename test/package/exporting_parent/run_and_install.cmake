# SPDX-License-Identifier: BSL-1.0
# Runs the parent's program, then installs the parent (its export set refers to coretry's).
execute_process(COMMAND "${BUILD_DIR}/parent_app" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "parent_app failed: ${rc}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${BUILD_DIR}/install"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT EXISTS "${BUILD_DIR}/install/lib/cmake/coretry/coretry-targets.cmake")
  message(FATAL_ERROR "installing the parent failed (${rc}) or did not install coretry's targets")
endif()
