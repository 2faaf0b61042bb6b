# StrataRunCommand.cmake — for the test scripts run with cmake -P (tests/install, tests/fuzz).
#
#   strata_run(<what> <command> <args>...)
#     Runs the command, echoing it; on failure prints its output as it came (FATAL_ERROR would
#     rewrap it: libFuzzer's report, compiler errors) and fails the script. Sets run_output.
include_guard(GLOBAL)

function(strata_run what)
  string(REPLACE ";" " " line "${ARGN}")
  message(STATUS "${what}: ${line}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output
                  ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(NOTICE "${output}")
    message(FATAL_ERROR "${what} failed (exit ${result}): ${line}")
  endif()
  set(run_output "${output}" PARENT_SCOPE)
endfunction()
