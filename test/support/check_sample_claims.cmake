# SPDX-License-Identifier: BSL-1.0
# Asserts the samples' qualitative claims from the CSV files they wrote, so that ctest checks
# their machine-readable output rather than their own opinion of it.
#
#   cmake -DSAMPLE=retry_storm -DCSV=<out>/summary.csv -P check_sample_claims.cmake
#   cmake -DSAMPLE=retry_storm_budget -DCSV=<out>/summary.csv -P check_sample_claims.cmake
#   cmake -DSAMPLE=jitter_contention -DCSV=<out>/jitter_contention.csv -DCLIENTS=100 -P ...
#
# retry_storm: `fixed` never recovers; the recommended policy (`safe`) recovers within 5 s of
#   the thaw (model seconds), and its attempts per success over the outage and the watch after it
#   are at most a fifth of `fixed`'s (a `fixed` run without a single success in that window counts
#   as infinitely many). When the run has the waiting variant (`wait`, a 60 s deadline per
#   request): not one of its requests failed, it recovered within 2 s of the thaw, and neither
#   its nor `safe`'s peak server concurrency passed twice the breakers' in-flight limit (100).
# retry_storm_budget: while the server fails, `full` (no budget) sends at least twice as many
#   attempts as requests; `budget` retries at most 10 % of the requests its 10 s window can hold
#   (those of the failure and of the 10 s before it) plus its reserve of 1 a second over the
#   failure and one window (the budget's settings in samples/retry_storm/swarm.cpp), give or take
#   one second of traffic: the CSV's one-second bins do not line up with the budget's buckets.
# jitter_contention: at CLIENTS clients, full jitter needs fewer writes than no backoff and than
#   exponential backoff without jitter.
# CMake's math is integer-only: ratios are compared by cross-multiplying, means by integer part.

if(NOT EXISTS "${CSV}")
  message(FATAL_ERROR "${CSV} was not written")
endif()
file(STRINGS "${CSV}" lines)
list(POP_FRONT lines header)
string(REPLACE "," ";" header "${header}")

# csv_row(<key column> <key value> <prefix>): sets <prefix>_<column> for the first matching row.
macro(csv_row key_column key prefix)
  list(FIND header ${key_column} _key_index)
  set(_found FALSE)
  foreach(line IN LISTS lines)
    string(REPLACE "," ";" cells "${line}")
    list(GET cells ${_key_index} _value)
    if(_value STREQUAL "${key}" AND NOT _found)
      set(_found TRUE)
      set(_i 0)
      foreach(column IN LISTS header)
        list(GET cells ${_i} ${prefix}_${column})
        math(EXPR _i "${_i} + 1")
      endforeach()
    endif()
  endforeach()
  if(NOT _found)
    message(FATAL_ERROR "${CSV}: no row with ${key_column} = ${key}")
  endif()
endmacro()

set(failures "")
if(SAMPLE STREQUAL "retry_storm")
  csv_row(strategy fixed fixed)
  csv_row(strategy safe safe)
  message(STATUS "outage ${safe_outage_s} s, backlog ${safe_backlog}, time scale ${safe_time_scale}")
  message(STATUS "fixed: recovery ${fixed_recovery_s}, outage+watch attempts/success "
                 "${fixed_window_attempts}/${fixed_window_successes}")
  message(STATUS "safe:  recovery ${safe_recovery_s}, outage+watch attempts/success "
                 "${safe_window_attempts}/${safe_window_successes}")
  if(NOT fixed_recovery_s STREQUAL "never")
    list(APPEND failures "fixed recovered (${fixed_recovery_s} s); the storm did not happen")
  endif()
  if(safe_recovery_s STREQUAL "never")
    list(APPEND failures "the recommended policy never recovered")
  elseif(safe_recovery_s GREATER 5)
    list(APPEND failures "the recommended policy took ${safe_recovery_s} s to recover (limit 5 s)")
  endif()
  # safe_a / safe_s * 5 <= fixed_a / fixed_s  <=>  safe_a * fixed_s * 5 <= fixed_a * safe_s
  math(EXPR lhs "${safe_window_attempts} * ${fixed_window_successes} * 5")
  math(EXPR rhs "${fixed_window_attempts} * ${safe_window_successes}")
  if(safe_window_successes EQUAL 0 OR lhs GREATER rhs)
    list(APPEND failures "the recommended policy's attempts per success are not far below fixed's")
  endif()
  if(lines MATCHES ",wait,")
    csv_row(strategy wait wait)
    message(STATUS "wait:  recovery ${wait_recovery_s}, failed requests ${wait_window_failed}, "
                   "peak concurrency ${wait_peak_concurrency} (safe ${safe_peak_concurrency})")
    if(NOT wait_window_failed EQUAL 0)
      list(APPEND failures "the waiting variant failed ${wait_window_failed} requests (none may)")
    endif()
    if(wait_recovery_s STREQUAL "never")
      list(APPEND failures "the waiting variant never recovered")
    elseif(wait_recovery_s GREATER 2)
      list(APPEND failures "the waiting variant took ${wait_recovery_s} s to recover (limit 2 s)")
    endif()
    # The breakers' in-flight limit (50) bounds what the frozen server finds at the thaw, for
    # the waiting variant as for `safe`: the limit, the steady traffic queued before the freeze
    # and a probe or two, well under twice the limit.
    foreach(s safe wait)
      if(${s}_peak_concurrency GREATER 100)
        list(APPEND failures "${s}'s peak server concurrency ${${s}_peak_concurrency} is above "
                             "twice the in-flight limit (100)")
      endif()
    endforeach()
  endif()
elseif(SAMPLE STREQUAL "retry_storm_budget")
  csv_row(strategy full full)
  csv_row(strategy budget budget)
  string(REGEX REPLACE "\\..*" "" failing_s "${budget_outage_s}")
  message(STATUS "failing for ${failing_s} s; without a budget: ${full_fault_requests} requests, "
                 "${full_fault_attempts} attempts")
  message(STATUS "with the budget: ${budget_fault_requests} requests (${budget_pre_fault_requests}"
                 " in the 10 s before), ${budget_fault_retries} retries")
  math(EXPR multiplied "${full_fault_requests} * 2")
  if(full_fault_attempts LESS multiplied)
    list(APPEND failures "without a budget, attempts did not multiply "
                         "(${full_fault_attempts} attempts for ${full_fault_requests} requests)")
  endif()
  # retries <= 0.1 * (requests in the failure and the 10 s before) + 1/s * (failure + 10 s),
  # plus one second of both (a tenth of the 10 s before): everything times 10.
  math(EXPR lhs "${budget_fault_retries} * 10")
  set(share "${budget_fault_requests} + ${budget_pre_fault_requests} * 11 / 10")
  math(EXPR rhs "${share} + 10 * (${failing_s} + 10) + 10")
  if(lhs GREATER rhs)
    list(APPEND failures "the budget let ${budget_fault_retries} retries through, more than its "
                         "share (${rhs} / 10)")
  endif()
elseif(SAMPLE STREQUAL "jitter_contention")
  # Rows are keyed by clients and strategy: keep the rows at CLIENTS, then key by strategy.
  list(FILTER lines INCLUDE REGEX "^${CLIENTS},")
  foreach(strategy none exponential full)
    csv_row(strategy ${strategy} ${strategy})
    string(REGEX REPLACE "\\..*" "" ${strategy}_calls "${${strategy}_calls}")
  endforeach()
  message(STATUS "${CLIENTS} clients: calls none ${none_calls}, exponential ${exponential_calls}, "
                 "full ${full_calls}")
  if(NOT full_calls LESS none_calls OR NOT full_calls LESS exponential_calls)
    list(APPEND failures "full jitter does not need fewer calls than none and exponential")
  endif()
else()
  message(FATAL_ERROR
          "SAMPLE must be retry_storm, retry_storm_budget or jitter_contention, not '${SAMPLE}'")
endif()

if(failures)
  string(REPLACE ";" "\n  " failures "${failures}")
  message(FATAL_ERROR "claims not shown by ${CSV}:\n  ${failures}")
endif()
message(STATUS "${SAMPLE}: claims hold")
