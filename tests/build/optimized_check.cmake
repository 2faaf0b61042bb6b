# Compiles optimized_user.cpp with one compiler at -O3 -Wall -Wextra -Wpedantic -Werror against
# include/: the headers must compile clean where users compile them. The single header is the same
# code (build_single_header_diff), so compiling it too would only double this test's minutes.
# Run as: cmake -DCONFIG=<generated config> -P optimized_check.cmake
include("${CONFIG}")
foreach(variant include)
  set(include_dir "${SOURCE_DIR}/${variant}")
  if(NOT EXISTS "${include_dir}/strata/strata.hpp")
    message(FATAL_ERROR "${include_dir}/strata/strata.hpp is missing (run tools/amalgamate)")
  endif()
  execute_process(
    COMMAND "${COMPILER}" -std=c++20 -O3 -Wall -Wextra -Wpedantic -Werror -fno-diagnostics-color
            -fmessage-length=0 -I${include_dir} ${FLAGS} -I${SOURCE_DIR}/examples -c
            "${SOURCE_DIR}/tests/build/optimized_user.cpp" -o "${OUTPUT_DIR}/${variant}.o"
    RESULT_VARIABLE status
    OUTPUT_VARIABLE output
    ERROR_VARIABLE output)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${COMPILER} -O3 -Werror against ${variant}/ failed:\n${output}")
  endif()
  message(STATUS "${COMPILER} -O3 -Werror against ${variant}/: clean")
endforeach()
