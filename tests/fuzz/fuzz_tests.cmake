# fuzz_tests.cmake — the fuzz_* ctests (label build), included from tests/CMakeLists.txt.
# Whatever compiler this build uses, they build tests/fuzz as a project of its own with the
# clang++ in STRATA_FUZZ_CXX, in <build>/tests/fuzz_work/ (never `cmake --build` on this tree):
#   fuzz_build    configure and build the fuzzers (the fixture of the others)
#   fuzz_<name>   run strata_fuzz_<name> for STRATA_FUZZ_RUNS inputs over a copy of its corpus
# They are registered only when that clang++ links a libFuzzer program (Debian: clang and
# libclang-rt-14-dev, see scripts/install-deps); otherwise a STATUS line says why.
find_program(
  STRATA_FUZZ_CXX
  NAMES clang++ clang++-14
  DOC "clang++ that builds the libFuzzer targets for the fuzz_* tests")
set(STRATA_FUZZ_RUNS
    20000
    CACHE STRING "Inputs each fuzz_<name> test runs its fuzzer for (60 s at most)")

if(NOT STRATA_FUZZ_CXX)
  message(STATUS "strata: fuzz_* tests not registered: no clang++ found (install clang and "
                 "libclang-rt-14-dev, or set STRATA_FUZZ_CXX)")
  return()
endif()

# Does it link a fuzzer? A yes is cached per compiler; a no is asked again at the next
# configure, which then sees a runtime installed since.
if(NOT STRATA_FUZZ_CXX_CHECKED STREQUAL STRATA_FUZZ_CXX OR NOT STRATA_FUZZ_CXX_ERROR STREQUAL "")
  set(probe_dir "${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe")
  file(WRITE "${probe_dir}/probe.cpp"
       "#include <cstddef>\n#include <cstdint>\n"
       "extern \"C\" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }\n")
  execute_process(
    COMMAND "${STRATA_FUZZ_CXX}" -std=c++20 -fsanitize=fuzzer,address,undefined probe.cpp -o probe
    WORKING_DIRECTORY "${probe_dir}"
    RESULT_VARIABLE probe_result
    OUTPUT_VARIABLE probe_output
    ERROR_VARIABLE probe_output)
  if(probe_result EQUAL 0)
    set(probe_output "")
  else()
    string(REGEX MATCH "[^\n]*(error|Error|ERROR)[^\n]*" probe_output "${probe_output}")
    if(probe_output STREQUAL "")
      set(probe_output "exit ${probe_result}")
    endif()
  endif()
  set(STRATA_FUZZ_CXX_ERROR
      "${probe_output}"
      CACHE INTERNAL "why STRATA_FUZZ_CXX cannot link a fuzzer (empty: it can)")
  set(STRATA_FUZZ_CXX_CHECKED
      "${STRATA_FUZZ_CXX}"
      CACHE INTERNAL "the STRATA_FUZZ_CXX that STRATA_FUZZ_CXX_ERROR is about")
endif()
if(NOT STRATA_FUZZ_CXX_ERROR STREQUAL "")
  message(STATUS "strata: fuzz_* tests not registered: ${STRATA_FUZZ_CXX} cannot link "
                 "-fsanitize=fuzzer (install libclang-rt-14-dev): ${STRATA_FUZZ_CXX_ERROR}")
  return()
endif()

set(fuzz_work_dir "${CMAKE_CURRENT_BINARY_DIR}/fuzz_work")
set(fuzz_script "${CMAKE_CURRENT_LIST_DIR}/run_fuzzers.cmake")
add_test(
  NAME fuzz_build
  COMMAND
    "${CMAKE_COMMAND}" -DMODE=build "-DSOURCE_DIR=${PROJECT_SOURCE_DIR}"
    "-DWORK_DIR=${fuzz_work_dir}" "-DGENERATOR=${CMAKE_GENERATOR}"
    "-DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}" "-DCXX_COMPILER=${STRATA_FUZZ_CXX}" -P "${fuzz_script}")
# Two sanitized TUs: about 40 s on two busy cores.
set_tests_properties(fuzz_build PROPERTIES LABELS build TIMEOUT 300 PROCESSORS 2 FIXTURES_SETUP
                                           strata_fuzzers)

file(GLOB fuzz_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_LIST_DIR}/*_fuzz.cpp")
foreach(source IN LISTS fuzz_sources)
  cmake_path(GET source STEM stem)
  string(REGEX REPLACE "_fuzz$" "" fuzz_name "${stem}")
  add_test(NAME fuzz_${fuzz_name}
           COMMAND "${CMAKE_COMMAND}" -DMODE=run "-DNAME=${fuzz_name}"
                   "-DSOURCE_DIR=${PROJECT_SOURCE_DIR}" "-DWORK_DIR=${fuzz_work_dir}"
                   "-DRUNS=${STRATA_FUZZ_RUNS}" -DMAX_TIME=60 -P "${fuzz_script}")
  set_tests_properties(fuzz_${fuzz_name} PROPERTIES LABELS build TIMEOUT 120 FIXTURES_REQUIRED
                                                    strata_fuzzers)
endforeach()
