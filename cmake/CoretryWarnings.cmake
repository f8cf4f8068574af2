# SPDX-License-Identifier: BSL-1.0
# coretry_set_warnings(target): the project's warning set and its own Asio policy, PRIVATE to its
# own targets (a consumer's code is compiled as the consumer chose).
option(CORETRY_WERROR "Treat warnings as errors" OFF)
function(coretry_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  # coretry itself uses no deprecated Asio name; applications linking it still may.
  target_compile_definitions(${target} PRIVATE ASIO_NO_DEPRECATED)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # g++ 12 reports a false -Wmismatched-new-delete on Asio's coroutine frames (asio #1391).
    target_compile_options(${target} PRIVATE -Wno-mismatched-new-delete)
  endif()
  if(CORETRY_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# coretry_library_properties(target export-name): what coretry's libraries share. A shared build
# exports only what the headers mark CORETRY_API (include/coretry/export.hpp) and carries a
# versioned SONAME: before 1.0 a minor version may break the ABI, so it is part of the SONAME.
# Their sources are also kept free of shadowed names (-Wshadow), as the public headers are
# under users' strict flags (package.headers); the tests are not held to it.
function(coretry_library_properties target export_name)
  target_compile_options(${target} PRIVATE -Wshadow)
  set_target_properties(${target} PROPERTIES
    EXPORT_NAME ${export_name}
    POSITION_INDEPENDENT_CODE ON
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
endfunction()
