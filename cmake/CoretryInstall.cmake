# SPDX-License-Identifier: BSL-1.0
# Install rules, the CMake config package and the pkg-config files.
#  - find_package(coretry CONFIG [COMPONENTS curl prometheus config]) gives coretry::coretry and,
#    when they were built, coretry::curl (component "curl"), coretry::prometheus ("prometheus")
#    and coretry::config ("config");
#  - pkg-config coretry / coretry-curl / coretry-prometheus / coretry-config-json give the same
#    compile and link lines (coretry::config's file is coretry-config-json.pc: a
#    coretry-config.pc would read as the pkg-config twin of CMake's coretry-config.cmake).
# Included when CORETRY_INSTALL is ON, as a subproject too: a parent project that installs and
# exports its own targets linking coretry::coretry needs coretry's targets in an export set.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CORETRY_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/coretry")
set(_coretry_targets coretry)
if(CORETRY_BUILD_CURL)
  list(APPEND _coretry_targets coretry_curl)
endif()
if(CORETRY_WITH_PROMETHEUS)
  list(APPEND _coretry_targets coretry_prometheus)
endif()
if(CORETRY_WITH_CONFIG)
  list(APPEND _coretry_targets coretry_config)
endif()

install(TARGETS ${_coretry_targets} EXPORT coretry-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/coretry" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES "${PROJECT_BINARY_DIR}/include/coretry/detail/asio_config.hpp"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/coretry/detail)
install(EXPORT coretry-targets NAMESPACE coretry:: DESTINATION ${CORETRY_INSTALL_CMAKEDIR})

set(CORETRY_WITH_CURL ${CORETRY_BUILD_CURL})
_coretry_asio_version_string(CORETRY_ASIO_VERSION_STRING ${CORETRY_ASIO_CONFIGURED_VERSION})
configure_package_config_file(cmake/coretry-config.cmake.in
  "${PROJECT_BINARY_DIR}/coretry-config.cmake" INSTALL_DESTINATION ${CORETRY_INSTALL_CMAKEDIR})
# Not write_basic_package_version_file: none of its rules accepts the previous minor release
# (this one keeps its spellings compiling), so the file is ours.
configure_file(cmake/coretry-config-version.cmake.in
  "${PROJECT_BINARY_DIR}/coretry-config-version.cmake" @ONLY)
install(FILES
  "${PROJECT_BINARY_DIR}/coretry-config.cmake"
  "${PROJECT_BINARY_DIR}/coretry-config-version.cmake"
  DESTINATION ${CORETRY_INSTALL_CMAKEDIR})
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE_1_0.txt" "${PROJECT_SOURCE_DIR}/CHANGELOG.md"
  DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/coretry)

# pkg-config: the same interface as the CMake targets (include directories, the one definition
# config.hpp checks, -pthread, the libraries). A static coretry_curl needs libcurl on the link
# line of every consumer, so libcurl is then Required, not Required.private.
# Relocatable: the prefix is found from the .pc file's own place (pcfiledir).
file(RELATIVE_PATH CORETRY_PC_TO_PREFIX "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
# (RELATIVE_PATH may end in "/": libdir would then read ".../lib/pkgconfig/../..//lib".)
string(REGEX REPLACE "/+$" "" CORETRY_PC_TO_PREFIX "${CORETRY_PC_TO_PREFIX}")
get_target_property(_asio_include ${CORETRY_ASIO_TARGET} INTERFACE_INCLUDE_DIRECTORIES)
if(CORETRY_ASIO_BOOST)
  set(CORETRY_PC_CFLAGS "") # Boost.Asio makes the aligned-allocation choice alike in every unit
else()
  set(CORETRY_PC_CFLAGS "-DASIO_HAS_STD_ALIGNED_ALLOC=1")
endif()
foreach(_dir IN LISTS _asio_include)
  if(NOT _dir STREQUAL "/usr/include")
    string(APPEND CORETRY_PC_CFLAGS " -I${_dir}")
  endif()
endforeach()
if(BUILD_SHARED_LIBS)
  set(CORETRY_PC_CURL_REQUIRES "coretry")
  set(CORETRY_PC_CURL_PRIVATE "libcurl")
else()
  set(CORETRY_PC_CURL_REQUIRES "coretry, libcurl")
  set(CORETRY_PC_CURL_PRIVATE "")
endif()
configure_file(cmake/coretry.pc.in "${PROJECT_BINARY_DIR}/pkgconfig/coretry.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/pkgconfig/coretry.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(CORETRY_WITH_PROMETHEUS)
  configure_file(cmake/coretry-prometheus.pc.in "${PROJECT_BINARY_DIR}/pkgconfig/coretry-prometheus.pc"
    @ONLY)
  install(FILES "${PROJECT_BINARY_DIR}/pkgconfig/coretry-prometheus.pc"
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
if(CORETRY_WITH_CONFIG)
  configure_file(cmake/coretry-config-json.pc.in
    "${PROJECT_BINARY_DIR}/pkgconfig/coretry-config-json.pc" @ONLY)
  install(FILES "${PROJECT_BINARY_DIR}/pkgconfig/coretry-config-json.pc"
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
if(CORETRY_BUILD_CURL)
  configure_file(cmake/coretry-curl.pc.in "${PROJECT_BINARY_DIR}/pkgconfig/coretry-curl.pc" @ONLY)
  install(FILES "${PROJECT_BINARY_DIR}/pkgconfig/coretry-curl.pc"
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
