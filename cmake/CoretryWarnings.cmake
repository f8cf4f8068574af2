# coretry_set_warnings(target): the project's warning set, PRIVATE to its own targets.
option(CORETRY_WERROR "Treat warnings as errors" OFF)
function(coretry_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # g++ 12 reports a false -Wmismatched-new-delete on Asio's coroutine frames (asio #1391).
    target_compile_options(${target} PRIVATE -Wno-mismatched-new-delete)
  endif()
  if(CORETRY_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
