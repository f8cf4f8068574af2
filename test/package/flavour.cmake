# SPDX-License-Identifier: BSL-1.0
# package.flavour: an application written for the Asio this build uses (Boost.Asio, or the
# standalone Asio CORETRY_ASIO_INCLUDE_DIR names), built against the install tree of
# package.install and run. Meant for builds with another Asio than the system's.
add_test(NAME package.flavour
  COMMAND ${CMAKE_CTEST_COMMAND}
    --build-and-test "${CMAKE_CURRENT_SOURCE_DIR}/flavour" "${CMAKE_CURRENT_BINARY_DIR}/flavour"
    --build-generator "${CMAKE_GENERATOR}"
    --build-options "-DCMAKE_PREFIX_PATH=${_prefix}" "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}"
      "-DCMAKE_CXX_FLAGS=${CMAKE_CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${CMAKE_EXE_LINKER_FLAGS}"
      "-DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}" "-DCORETRY_ASIO_INCLUDE_DIR=${CORETRY_ASIO_INCLUDE_DIR}"
    --test-command flavour_consumer)
set_tests_properties(package.flavour PROPERTIES FIXTURES_REQUIRED coretry_installed TIMEOUT 300)
