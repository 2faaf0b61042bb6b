# single_header_diff.cmake — single_include/strata/strata.hpp must be exactly what
# tools/amalgamate produces from include/ (cmake -P).
#   cmake -DPYTHON=<python3> -DSOURCE_DIR=<repo> -DOUTPUT=<scratch file> -P single_header_diff.cmake
cmake_minimum_required(VERSION 3.25)

set(committed "${SOURCE_DIR}/single_include/strata/strata.hpp")
execute_process(
  COMMAND "${PYTHON}" "${SOURCE_DIR}/tools/amalgamate" --output "${OUTPUT}"
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "tools/amalgamate failed (exit ${result}); see its message above")
endif()
if(NOT EXISTS "${committed}")
  message(FATAL_ERROR "single_include/strata/strata.hpp does not exist: run tools/amalgamate "
                      "and commit the result")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${OUTPUT}" "${committed}"
                RESULT_VARIABLE differs)
if(differs)
  # The tool's --check mode prints a summary of the difference.
  execute_process(COMMAND "${PYTHON}" "${SOURCE_DIR}/tools/amalgamate" --check
                  WORKING_DIRECTORY "${SOURCE_DIR}")
  message(FATAL_ERROR "single_include/strata/strata.hpp is out of date: run tools/amalgamate "
                      "and commit the result")
endif()
message(STATUS "single_include/strata/strata.hpp is up to date")
