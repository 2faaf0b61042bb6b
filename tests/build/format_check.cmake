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

# One clang-format for every file: a process per file took 45 s (and past the test's timeout
# beside the packaging tests' builds), one takes 2 s. It names every place that differs.
execute_process(
  COMMAND "${CLANG_FORMAT}" --dry-run --Werror "--style=file" ${files}
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE result
  OUTPUT_QUIET
  ERROR_VARIABLE complaints)
set(bad)
if(NOT result EQUAL 0)
  string(REGEX MATCHALL "[^\n]+:[0-9]+:[0-9]+: error" places "${complaints}")
  foreach(place IN LISTS places)
    string(REGEX REPLACE ":[0-9]+:[0-9]+: error$" "" file "${place}")
    file(RELATIVE_PATH rel "${SOURCE_DIR}" "${file}")
    list(APPEND bad "${rel}")
  endforeach()
  list(REMOVE_DUPLICATES bad)
  if(NOT bad)  # clang-format failed without naming a file: say what it said
    message(FATAL_ERROR "clang-format failed (exit ${result}):\n${complaints}")
  endif()
endif()

list(LENGTH files checked)
if(bad)
  list(JOIN bad "\n  " bad_lines)
  list(JOIN bad " " bad_args)
  message(FATAL_ERROR "not clang-format clean (${checked} files checked):\n  ${bad_lines}\n"
                      "fix with: clang-format -i ${bad_args}")
endif()
message(STATUS "${checked} files are clang-format clean")
