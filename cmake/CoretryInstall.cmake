# Install rules and the CMake config package: find_package(coretry CONFIG) gives coretry::coretry
# and, when it was built, coretry::curl.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CORETRY_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/coretry")
set(_coretry_targets coretry)
if(CORETRY_BUILD_CURL)
  list(APPEND _coretry_targets coretry_curl)
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
configure_package_config_file(cmake/coretry-config.cmake.in
  "${PROJECT_BINARY_DIR}/coretry-config.cmake" INSTALL_DESTINATION ${CORETRY_INSTALL_CMAKEDIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/coretry-config-version.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/coretry-config.cmake"
  "${PROJECT_BINARY_DIR}/coretry-config-version.cmake"
  cmake/FindAsio.cmake
  DESTINATION ${CORETRY_INSTALL_CMAKEDIR})
