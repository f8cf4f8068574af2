# SPDX-License-Identifier: BSL-1.0
# package.braced_beast_gcc12: compiles braced_beast.cpp (which must fail) and checks that every
# braced call in it was refused with the message saying what to write, and that no call failed
# another way (no overload taking it, two taking it).
#   -DCXX=<g++ 12> -DSOURCE=<braced_beast.cpp> -DINCLUDE=<coretry's include/>
#   -DCONFIG_INCLUDE=<the directory of a Boost <coretry/detail/asio_config.hpp>> -DEXPECTED=<count>
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} -I${CONFIG_INCLUDE} ${SOURCE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "braced_beast.cpp compiled: braced arguments were not refused")
endif()
string(REGEX MATCHALL "static assertion failed: g\\+\\+ 12 miscompiles a braced (endpoint or retry_rules|retry_policy)"
  refusals "${out}")
list(LENGTH refusals n)
if(out MATCHES "no matching function|is ambiguous|ambiguous overload")
  message(FATAL_ERROR "a braced call was not refused by its own overload:\n${out}")
endif()
if(NOT n EQUAL EXPECTED)
  message(FATAL_ERROR "${n} refusals, expected ${EXPECTED}:\n${out}")
endif()
if(NOT out MATCHES "Name them first: const coretry::beast::endpoint api")
  message(FATAL_ERROR "the refusal does not say what to write:\n${out}")
endif()
message(STATUS "${n} braced calls refused, each saying what to write")
