# run_fuzzers.cmake — build and run the libFuzzer targets of tests/fuzz (cmake -P); the fuzz_*
# ctests (tests/fuzz/fuzz_tests.cmake).
#   MODE=build          configure tests/fuzz with CXX_COMPILER in WORK_DIR/build and build it
#   MODE=run NAME=<n>   run strata_fuzz_<n> for RUNS inputs (MAX_TIME seconds at most) over a
#                       fresh copy of tests/fuzz/corpus/<n> in WORK_DIR/corpus/<n>: libFuzzer
#                       adds the inputs it finds to its corpus directory, and the source tree
#                       stays untouched. Crash inputs go to WORK_DIR/artifacts/.
# Other inputs: SOURCE_DIR WORK_DIR; for build: GENERATOR [MAKE_PROGRAM] CXX_COMPILER.
cmake_minimum_required(VERSION 3.25)

include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/StrataRunCommand.cmake")

set(build_dir "${WORK_DIR}/build")
# The build directory is kept between runs, so that a rerun rebuilds only what changed.
if(MODE STREQUAL "build")
  set(configure_args
      -S "${SOURCE_DIR}/tests/fuzz" -B "${build_dir}" -G "${GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  if(MAKE_PROGRAM)
    list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  endif()
  strata_run("configure fuzzers" "${CMAKE_COMMAND}" ${configure_args})
  strata_run("build fuzzers" "${CMAKE_COMMAND}" --build "${build_dir}" --config RelWithDebInfo)
elseif(MODE STREQUAL "run")
  set(fuzzer "${build_dir}/strata_fuzz_${NAME}")
  if(NOT EXISTS "${fuzzer}")
    set(fuzzer "${build_dir}/RelWithDebInfo/strata_fuzz_${NAME}") # multi-config generators
  endif()
  if(NOT EXISTS "${fuzzer}")
    message(FATAL_ERROR "strata_fuzz_${NAME} is not built in ${build_dir} (run the fuzz_build "
                        "test first: ctest -R fuzz_ runs it)")
  endif()
  set(corpus "${WORK_DIR}/corpus/${NAME}")
  set(artifacts "${WORK_DIR}/artifacts")
  file(REMOVE_RECURSE "${corpus}")
  file(MAKE_DIRECTORY "${WORK_DIR}/corpus" "${artifacts}")
  file(COPY "${SOURCE_DIR}/tests/fuzz/corpus/${NAME}" DESTINATION "${WORK_DIR}/corpus")
  # A stack trace for UB reports, which end the run (-fno-sanitize-recover).
  set(ENV{UBSAN_OPTIONS} "print_stacktrace=1")
  strata_run("fuzz ${NAME}" "${fuzzer}" "-runs=${RUNS}" "-max_total_time=${MAX_TIME}" -timeout=10
      "-artifact_prefix=${artifacts}/${NAME}-" -print_final_stats=1 "${corpus}")
  string(REGEX MATCH "Done [0-9]+ runs in [0-9]+ second" done "${run_output}")
  message(STATUS "fuzz ${NAME}: ${done}(s)")
else()
  message(FATAL_ERROR "MODE must be build or run, not '${MODE}'")
endif()
