# Lists the reduction kernels kernel_instantiations.cpp's object defines (nm) and fails on any
# element type other than the allowed ones: a typed call must compile its own type's kernels only.
# Run as: cmake -DNM=<nm> -DOBJECT=<object file> -P kernel_instantiations.cmake
cmake_minimum_required(VERSION 3.20)
execute_process(COMMAND "${NM}" -C "${OBJECT}" RESULT_VARIABLE status OUTPUT_VARIABLE symbols
                ERROR_VARIABLE error)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${NM} -C ${OBJECT} failed: ${error}")
endif()
string(REGEX MATCHALL "reduce_n_erased<[^>]+>" kernels "${symbols}")
list(REMOVE_DUPLICATES kernels)
set(allowed "reduce_n_erased<float>" "reduce_n_erased<strata::bfloat16>"
            "reduce_n_erased<strata::float16>")
if(NOT "reduce_n_erased<float>" IN_LIST kernels)
  message(FATAL_ERROR "the float kernels are missing from ${OBJECT}: found ${kernels}")
endif()
set(extra ${kernels})
list(REMOVE_ITEM extra ${allowed})
if(extra)
  message(FATAL_ERROR "kernels of element types the unit never reduces were compiled: ${extra} "
                      "(a call that moves data without reducing it, or a run-time type tag, "
                      "instantiates them)")
endif()
message(STATUS "reduction kernels compiled: ${kernels}")
