# SPDX-License-Identifier: BSL-1.0
# Runs the shared consumer and checks the libraries' SONAMEs (readelf).
execute_process(COMMAND "${BUILD_DIR}/shared_consumer" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "shared_consumer failed: ${rc}")
endif()
foreach(lib coretry/lib/libcoretry.so coretry/lib/curl/libcoretry_curl.so)
  execute_process(COMMAND readelf -d "${BUILD_DIR}/${lib}" OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT dyn MATCHES "SONAME[^\n]*\\.so\\.[0-9]+\\.[0-9]+\\]")
    message(FATAL_ERROR "${lib}: no versioned SONAME\n${dyn}")
  endif()
endforeach()
