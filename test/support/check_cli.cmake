# SPDX-License-Identifier: BSL-1.0
# The samples' command-line conventions, for one program (ctest sample.cli.<name>):
#  - `--help` prints the usage on stdout (and nothing on stderr) and exits 0;
#  - an unknown option exits 2, naming it on stderr, stdout empty;
#  - a missing value exits 2, naming the option on stderr.
# Usage: cmake -DPROGRAM=path [-DVALUED=--flag] [-DSUB=subcommand] -P check_cli.cmake
function(run expect_rc out_var err_var)
  execute_process(COMMAND "${PROGRAM}" ${SUB} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
    ERROR_VARIABLE err TIMEOUT 20)
  if(NOT rc STREQUAL "${expect_rc}")
    message(FATAL_ERROR "${PROGRAM} ${SUB} ${ARGN}: exit ${rc}, expected ${expect_rc}\n"
                        "stdout: ${out}\nstderr: ${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${err_var} "${err}" PARENT_SCOPE)
endfunction()

run(0 out err --help)
if(NOT out MATCHES "usage:" OR NOT err STREQUAL "")
  message(FATAL_ERROR "--help: the usage belongs on stdout alone\nstdout: ${out}\nstderr: ${err}")
endif()
run(2 out err --no-such-flag)
if(NOT err MATCHES "--no-such-flag" OR NOT out STREQUAL "")
  message(FATAL_ERROR "an unknown flag must be named on stderr\nstdout: ${out}\nstderr: ${err}")
endif()
if(VALUED)
  run(2 out err ${VALUED})
  if(NOT err MATCHES "${VALUED}.*needs a value")
    message(FATAL_ERROR "a missing value must name ${VALUED}\nstderr: ${err}")
  endif()
  run(2 out err ${VALUED} not-a-number)
  if(NOT err MATCHES "${VALUED}: 'not-a-number'")
    message(FATAL_ERROR "a bad value must be named with its flag\nstderr: ${err}")
  endif()
endif()
