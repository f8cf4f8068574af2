# SPDX-License-Identifier: BSL-1.0
# Chooses the Asio coretry is built against, with one option:
#   CORETRY_ASIO=standalone  standalone Asio 1.22.1 to 1.38.x (Debian 12: libasio-dev, 1.22.1);
#                            CORETRY_ASIO_INCLUDE_DIR names another copy (the directory that holds
#                            asio.hpp), otherwise the compiler's search path is used;
#   CORETRY_ASIO=boost       Boost.Asio from Boost 1.81 or later (Debian 12: libboost1.81-dev),
#                            found with find_package(Boost) (BOOST_ROOT/Boost_DIR pick another).
# Sets CORETRY_ASIO_TARGET (what coretry links) and writes <coretry/detail/asio_config.hpp>, which
# records the choice and the version for every unit that includes coretry's headers.
set(CORETRY_ASIO "standalone" CACHE STRING "Which Asio coretry uses: standalone or boost")
set_property(CACHE CORETRY_ASIO PROPERTY STRINGS standalone boost)
set(CORETRY_ASIO_INCLUDE_DIR "" CACHE PATH
  "Standalone Asio: the include directory holding asio.hpp (empty: search the usual places)")

# The supported range; <coretry/detail/asio.hpp> checks the same bounds at compile time.
set(_coretry_asio_min 102201)     # 1.22.1
set(_coretry_asio_max_minor 1038) # 1.38.x
set(_coretry_boost_min 108100)    # Boost 1.81 (Asio 1.26)

function(_coretry_asio_version_string out v)
  math(EXPR _major "${v} / 100000")
  math(EXPR _minor "${v} / 100 % 1000")
  math(EXPR _patch "${v} % 100")
  set(${out} "${_major}.${_minor}.${_patch}" PARENT_SCOPE)
endfunction()

if(CORETRY_ASIO STREQUAL "standalone")
  if(CORETRY_ASIO_INCLUDE_DIR)
    if(NOT EXISTS "${CORETRY_ASIO_INCLUDE_DIR}/asio/version.hpp")
      message(FATAL_ERROR "CORETRY_ASIO_INCLUDE_DIR=${CORETRY_ASIO_INCLUDE_DIR} holds no asio/version.hpp")
    endif()
    set(Asio_INCLUDE_DIR "${CORETRY_ASIO_INCLUDE_DIR}" CACHE PATH "" FORCE)
  endif()
  find_package(Asio REQUIRED)
  file(STRINGS "${Asio_INCLUDE_DIR}/asio/version.hpp" _line REGEX "#define ASIO_VERSION ")
  string(REGEX MATCH "[0-9]+" _v "${_line}")
  math(EXPR _v_minor "${_v} / 100")
  if(_v LESS _coretry_asio_min OR _v_minor GREATER _coretry_asio_max_minor)
    message(FATAL_ERROR "coretry supports standalone Asio 1.22.1 to 1.38.x; "
      "${Asio_INCLUDE_DIR} has Asio ${Asio_VERSION} (ASIO_VERSION ${_v})")
  endif()
  message(STATUS "coretry: standalone Asio ${Asio_VERSION} in ${Asio_INCLUDE_DIR}")
  set(CORETRY_ASIO_BOOST 0)
  set(CORETRY_ASIO_TARGET Asio::Asio)
elseif(CORETRY_ASIO STREQUAL "boost")
  find_package(Boost 1.81 REQUIRED)
  set(_boost_inc "${Boost_INCLUDE_DIRS}")
  list(GET _boost_inc 0 _boost_inc)
  file(STRINGS "${_boost_inc}/boost/asio/version.hpp" _line REGEX "#define BOOST_ASIO_VERSION ")
  string(REGEX MATCH "[0-9]+" _v "${_line}")
  file(STRINGS "${_boost_inc}/boost/version.hpp" _line REGEX "#define BOOST_VERSION ")
  string(REGEX MATCH "[0-9]+" _boost_v "${_line}")
  _coretry_asio_version_string(_asio_s ${_v})
  math(EXPR _v_minor "${_v} / 100")
  if(_boost_v LESS _coretry_boost_min OR _v_minor GREATER _coretry_asio_max_minor)
    message(FATAL_ERROR "coretry supports Boost.Asio from Boost 1.81 up to Asio 1.38; "
      "${_boost_inc} has Boost ${Boost_VERSION} (BOOST_VERSION ${_boost_v}, Asio ${_asio_s})")
  endif()
  message(STATUS "coretry: Boost.Asio ${_asio_s} from Boost ${Boost_VERSION} in ${_boost_inc}")
  # No aligned-allocation define: Boost.Asio's config includes Boost.Config, which includes a
  # standard header first, so every unit makes the same choice.
  set(CORETRY_ASIO_BOOST 1)
  set(CORETRY_ASIO_TARGET Boost::headers)
else()
  message(FATAL_ERROR "CORETRY_ASIO must be standalone or boost, not '${CORETRY_ASIO}'")
endif()
set(CORETRY_ASIO_CONFIGURED_VERSION ${_v})

configure_file("${CMAKE_CURRENT_LIST_DIR}/asio_config.hpp.in"
  "${PROJECT_BINARY_DIR}/include/coretry/detail/asio_config.hpp" @ONLY)
