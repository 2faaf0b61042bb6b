# benchmarks/perf/run_check.cmake — one strata-perf smoke run for ctest:
#   cmake -DSTRATA_PERF=<exe> "-DARGUMENTS=all_reduce -b 8 ..." -DEXPECTED_STATUS=0 \
#         [-DEXPECTED_REGEX=...] -P run_check.cmake
# Requires the exit status EXPECTED_STATUS and, for status 0, nccl-tests' footer
# "# Out of bounds values : 0 OK" (PASS_REGULAR_EXPRESSION alone would ignore the exit status),
# and output matching EXPECTED_REGEX when it is given.
separate_arguments(arguments UNIX_COMMAND "${ARGUMENTS}")
execute_process(
  COMMAND "${STRATA_PERF}" ${arguments}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 110)
message("$ strata-perf ${ARGUMENTS}\n${out}${err}")
if(NOT "${status}" STREQUAL "${EXPECTED_STATUS}")
  message(FATAL_ERROR "strata-perf exited with '${status}', expected ${EXPECTED_STATUS}")
endif()
if("${EXPECTED_STATUS}" STREQUAL "0" AND NOT out MATCHES "# Out of bounds values : 0 OK")
  message(FATAL_ERROR "strata-perf did not report '# Out of bounds values : 0 OK'")
endif()
if(NOT "${EXPECTED_REGEX}" STREQUAL "" AND NOT "${out}${err}" MATCHES "${EXPECTED_REGEX}")
  message(FATAL_ERROR "strata-perf's output does not match '${EXPECTED_REGEX}'")
endif()
