# Finds standalone Asio (Debian: libasio-dev) and provides the imported target Asio::Asio.
find_path(Asio_INCLUDE_DIR NAMES asio.hpp HINTS ${CORETRY_ASIO_INCLUDE_DIR})
if(Asio_INCLUDE_DIR AND EXISTS "${Asio_INCLUDE_DIR}/asio/version.hpp")
  file(STRINGS "${Asio_INCLUDE_DIR}/asio/version.hpp" _asio_version_line REGEX "#define ASIO_VERSION ")
  string(REGEX MATCH "[0-9]+" _asio_version "${_asio_version_line}")
  math(EXPR _major "${_asio_version} / 100000")
  math(EXPR _minor "${_asio_version} / 100 % 1000")
  math(EXPR _patch "${_asio_version} % 100")
  set(Asio_VERSION "${_major}.${_minor}.${_patch}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Asio REQUIRED_VARS Asio_INCLUDE_DIR VERSION_VAR Asio_VERSION)
if(Asio_FOUND AND NOT TARGET Asio::Asio)
  find_package(Threads REQUIRED)
  add_library(Asio::Asio INTERFACE IMPORTED)
  set_target_properties(Asio::Asio PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${Asio_INCLUDE_DIR}")
  # ASIO_DISABLE_STD_ALIGNED_ALLOC: Asio 1.22 picks std::aligned_alloc only when libstdc++'s
  # _GLIBCXX_HAVE_ALIGNED_ALLOC is already defined, i.e. when a standard header was included
  # before Asio's. Two translation units could then allocate and free the same frames with
  # different functions (ASan: alloc-dealloc-mismatch). One choice for every unit ends that.
  target_compile_definitions(Asio::Asio INTERFACE ASIO_NO_DEPRECATED ASIO_DISABLE_STD_ALIGNED_ALLOC)
  target_link_libraries(Asio::Asio INTERFACE Threads::Threads)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    # clang 14 with libstdc++: Asio does not detect coroutine support on its own.
    target_compile_definitions(Asio::Asio INTERFACE ASIO_HAS_CO_AWAIT=1 ASIO_HAS_STD_COROUTINE=1)
  endif()
endif()
mark_as_advanced(Asio_INCLUDE_DIR)
