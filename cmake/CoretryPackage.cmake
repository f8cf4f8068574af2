# SPDX-License-Identifier: BSL-1.0
# CPack: `cpack -G DEB` (from the build directory) makes libcoretry-dev, the form in which a
# Debian user takes a library: headers, the libraries built (static by default), the CMake
# package and the pkg-config files under /usr, with its dependencies declared:
#  - the Asio coretry was built against, at the exact version (<coretry/detail/asio_config.hpp>
#    refuses any other): libasio-dev (= <version>) or libboost1.81-dev-style Boost headers;
#  - libcurl4-openssl-dev (or another libcurl-dev) when coretry::curl is built;
#  - prometheus-cpp-dev when coretry::prometheus is built.
# ctest package.deb builds it, installs it into an empty dpkg root, builds consumers against it
# and removes it (test/package/deb_check.sh).
set(CPACK_PACKAGE_NAME coretry)
set(CPACK_PACKAGE_VENDOR "coretry")
set(CPACK_PACKAGE_CONTACT "coretry maintainers <coretry@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "C++20 coroutine retries for Asio, with a libcurl adapter")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_RESOURCE_FILE_LICENSE "${PROJECT_SOURCE_DIR}/LICENSE_1_0.txt")
set(CPACK_DEBIAN_PACKAGE_NAME libcoretry-dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/coretry/coretry")

find_program(CORETRY_DPKG_QUERY dpkg-query)
function(_coretry_deb_version out package)
  set(${out} "" PARENT_SCOPE)
  if(CORETRY_DPKG_QUERY)
    execute_process(COMMAND ${CORETRY_DPKG_QUERY} -W "-f=\${Version}" ${package}
      OUTPUT_VARIABLE _v RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_rc EQUAL 0 AND _v)
      set(${out} "${_v}" PARENT_SCOPE)
    endif()
  endif()
endfunction()

set(_deps "")
if(CORETRY_ASIO_BOOST)
  list(APPEND _deps "libboost1.81-dev | libboost-dev (>= 1.81)")
else()
  get_target_property(_asio_inc Asio::Asio INTERFACE_INCLUDE_DIRECTORIES)
  if(_asio_inc STREQUAL "/usr/include")
    _coretry_deb_version(_asio_v libasio-dev)
    if(_asio_v)
      list(APPEND _deps "libasio-dev (= ${_asio_v})")
    else()
      list(APPEND _deps "libasio-dev")
    endif()
  else()
    message(STATUS "coretry: the Debian package declares no Asio package: coretry was built "
      "against the Asio in ${_asio_inc}, which no Debian package provides")
  endif()
endif()
if(CORETRY_BUILD_CURL)
  list(APPEND _deps "libcurl4-openssl-dev | libcurl-dev")
endif()
if(CORETRY_WITH_PROMETHEUS)
  list(APPEND _deps "prometheus-cpp-dev")
endif()
list(JOIN _deps ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
include(CPack)
