# format_check.cmake — C++ sources must be clang-format clean (cmake -P).
#   cmake -DCLANG_FORMAT=<clang-format 14> -DSOURCE_DIR=<repo> -P format_check.cmake
# Files are listed when the test runs, so new files are checked without reconfiguring.
# single_include/ is generated and not checked. To fix: clang-format -i <files>.
cmake_minimum_required(VERSION 3.25)

set(files)
foreach(dir include tests benchmarks examples tools)
  file(GLOB_RECURSE found "${SOURCE_DIR}/${dir}/*.hpp" "${SOURCE_DIR}/${dir}/*.cpp"
       "${SOURCE_DIR}/${dir}/*.h" "${SOURCE_DIR}/${dir}/*.cu" "${SOURCE_DIR}/${dir}/*.ipp")
  list(APPEND files ${found})
endforeach()
list(SORT files)

set(bad)
foreach(file IN LISTS files)
  execute_process(
    COMMAND "${CLANG_FORMAT}" --dry-run --Werror "--style=file" "${file}"
    WORKING_DIRECTORY "${SOURCE_DIR}"
    RESULT_VARIABLE result
    OUTPUT_QUIET ERROR_QUIET)
  if(NOT result EQUAL 0)
    file(RELATIVE_PATH rel "${SOURCE_DIR}" "${file}")
    list(APPEND bad "${rel}")
  endif()
endforeach()

list(LENGTH files checked)
if(bad)
  list(JOIN bad "\n  " bad_lines)
  list(JOIN bad " " bad_args)
  message(FATAL_ERROR "not clang-format clean (${checked} files checked):\n  ${bad_lines}\n"
                      "fix with: clang-format -i ${bad_args}")
endif()
message(STATUS "${checked} files are clang-format clean")
