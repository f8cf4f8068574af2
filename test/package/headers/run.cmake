# SPDX-License-Identifier: BSL-1.0
# package.headers: configures this folder's project against an installed coretry and builds it
# on JOBS jobs (ctest --build-and-test would build on one).
#   cmake -DSOURCE_DIR=... -DBUILD_DIR=... -DINCLUDE_DIR=<prefix>/include -DWITH_CURL=ON|OFF
#         -DWITH_PROMETHEUS=ON|OFF -DCXX=... [-DASIO_INCLUDE_DIR=...] [-DJOBS=2] -P run.cmake
if(NOT JOBS)
  set(JOBS 2)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${BUILD_DIR}"
    "-DCMAKE_CXX_COMPILER=${CXX}" "-DCORETRY_INCLUDE_DIR=${INCLUDE_DIR}"
    "-DCORETRY_WITH_CURL=${WITH_CURL}" "-DCORETRY_WITH_PROMETHEUS=${WITH_PROMETHEUS}"
    "-DCORETRY_ASIO_INCLUDE_DIR=${ASIO_INCLUDE_DIR}"
  COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build "${BUILD_DIR}" -j ${JOBS} -- -k
  COMMAND_ERROR_IS_FATAL ANY)
