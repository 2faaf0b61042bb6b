# strata_compile_fail.cmake — ctest driver of strata_add_compile_fail_test (cmake -P).
#   cmake -DCONFIG=<generated .cmake setting COMPILER, FLAGS, SOURCE, EXPECTED_REGEX> -P <this>
# Passes when compiling SOURCE fails and the compiler output matches EXPECTED_REGEX.
cmake_minimum_required(VERSION 3.25)
include("${CONFIG}")

execute_process(
  COMMAND "${COMPILER}" ${FLAGS} "${SOURCE}"
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)
string(REPLACE ";" " " command_line "${COMPILER};${FLAGS};${SOURCE}")

if(result EQUAL 0)
  message(FATAL_ERROR "compile-fail test: ${SOURCE} compiled, but must not.\n"
                      "command: ${command_line}")
endif()
if(NOT output MATCHES "${EXPECTED_REGEX}")
  message(FATAL_ERROR "compile-fail test: ${SOURCE} failed to compile, but its diagnostics do "
                      "not match the expected regex\n  ${EXPECTED_REGEX}\n"
                      "command: ${command_line}\n--- compiler output ---\n${output}")
endif()
message(STATUS "compile-fail test: ${SOURCE} failed as expected (matched '${EXPECTED_REGEX}')")
