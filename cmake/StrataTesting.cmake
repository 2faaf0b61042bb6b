# StrataTesting.cmake — functions behind tests/CMakeLists.txt.
#
#   strata_test_override(<test> [TIMEOUT <s>] [STRATA_TIMEOUT <value>] [LABELS <l>...]
#                        [PROPERTIES <prop> <value>...])
#   strata_add_doctest(<source relative to tests/>)
#   strata_add_compile_fail_test(NAME <name> SOURCE <file> EXPECTED_REGEX <regex>)
#   strata_add_variant_target(<name> INCLUDE_DIRS <dir>... [NO_GPU])
include_guard(GLOBAL)
include(StrataHelpers)

set(STRATA_TEST_TIMEOUT
    300
    CACHE STRING "Default ctest TIMEOUT (seconds) of each strata test executable")
set(STRATA_TEST_STRATA_TIMEOUT
    "30s"
    CACHE STRING "Default STRATA_TIMEOUT environment value (the deadline of blocking operations)")

# strata_test_override(<test> ...)
#   Per-test settings, to be called before the tests are added. <test> is the ctest name
#   (core_reduce_test) or the path under tests/ (core/reduce_test.cpp, core/reduce_test).
#     TIMEOUT         ctest TIMEOUT in seconds instead of STRATA_TEST_TIMEOUT
#     STRATA_TIMEOUT  value of the STRATA_TIMEOUT environment variable instead of the default
#     LABELS          labels added to the layer label
#     PROPERTIES      further test properties, passed to set_tests_properties (RUN_SERIAL ON, ...)
function(strata_test_override test)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TIMEOUT;STRATA_TIMEOUT" "LABELS;PROPERTIES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "strata_test_override(${test}): unknown arguments "
                        "${arg_UNPARSED_ARGUMENTS}")
  endif()
  strata_name_from_path(name "${test}")
  foreach(key TIMEOUT STRATA_TIMEOUT LABELS PROPERTIES)
    if(DEFINED arg_${key})
      set_property(GLOBAL PROPERTY STRATA_TEST_OVERRIDE_${name}_${key} "${arg_${key}}")
    endif()
  endforeach()
  set_property(GLOBAL APPEND PROPERTY STRATA_TEST_OVERRIDES ${name})
endfunction()

# strata_add_doctest(<source relative to tests/>)
#   One executable and one ctest per tests/<layer>/.../<stem>_test.cpp, named after the path
#   (core/reduce_test.cpp -> core_reduce_test), labelled with the layer (the first directory).
#   Links STRATA_TEST_LIBRARY (strata::strata, or the single-header variant, and strata_gpu: the
#   GPU path when the build has it), doctest, the
#   shared main (strata_doctest_main) and the warnings target; tests/support/ is on the path.
function(strata_add_doctest source)
  strata_name_from_path(name "${source}")
  add_executable(${name} "${source}")
  target_link_libraries(${name} PRIVATE ${STRATA_TEST_LIBRARY} strata_test_support
                                        strata_doctest_main)

  if(source MATCHES "^([^/]+)/")
    set(labels "${CMAKE_MATCH_1}")
  else()
    set(labels "misc")
  endif()
  set(timeout "${STRATA_TEST_TIMEOUT}")
  set(strata_timeout "${STRATA_TEST_STRATA_TIMEOUT}")
  get_property(has_timeout GLOBAL PROPERTY STRATA_TEST_OVERRIDE_${name}_TIMEOUT SET)
  if(has_timeout)
    get_property(timeout GLOBAL PROPERTY STRATA_TEST_OVERRIDE_${name}_TIMEOUT)
  endif()
  get_property(has_strata_timeout GLOBAL PROPERTY STRATA_TEST_OVERRIDE_${name}_STRATA_TIMEOUT SET)
  if(has_strata_timeout)
    get_property(strata_timeout GLOBAL PROPERTY STRATA_TEST_OVERRIDE_${name}_STRATA_TIMEOUT)
  endif()
  get_property(extra_labels GLOBAL PROPERTY STRATA_TEST_OVERRIDE_${name}_LABELS)
  get_property(extra_properties GLOBAL PROPERTY STRATA_TEST_OVERRIDE_${name}_PROPERTIES)

  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(
    ${name} PROPERTIES TIMEOUT "${timeout}" LABELS "${labels};${extra_labels}"
                       ENVIRONMENT "STRATA_TIMEOUT=${strata_timeout}" ${extra_properties})
  set_property(GLOBAL APPEND PROPERTY STRATA_TESTS_ADDED ${name})
endfunction()

# strata_check_test_overrides()
#   Warns about overrides that name no test (a typo, or a test that was renamed).
function(strata_check_test_overrides)
  get_property(overrides GLOBAL PROPERTY STRATA_TEST_OVERRIDES)
  get_property(added GLOBAL PROPERTY STRATA_TESTS_ADDED)
  foreach(name IN LISTS overrides)
    if(NOT name IN_LIST added)
      message(WARNING "strata_test_override(${name}): no such test (tests/**/*_test.cpp)")
    endif()
  endforeach()
endfunction()

# strata_add_variant_target(<name> INCLUDE_DIRS <dir>... [NO_GPU])
#   A test-only INTERFACE target that consumes strata headers from other directories (the single
#   header, or the headers with the CUDA/NCCL switches off) with the same dependencies as
#   strata::strata, and the GPU path of the build unless NO_GPU.
function(strata_add_variant_target name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "NO_GPU" "" "INCLUDE_DIRS")
  add_library(${name} INTERFACE)
  target_include_directories(${name} INTERFACE ${arg_INCLUDE_DIRS})
  strata_link_dependencies(${name} INTERFACE)
  if(NOT arg_NO_GPU)
    target_link_libraries(${name} INTERFACE strata_gpu)
  endif()
endfunction()

# strata_compile_fail_flags(<out-var>)
#   -I/-D flags for compiling strata sources with the bare compiler: include/, tests/support/,
#   and the include directories and definitions of the third-party targets (those the compiler
#   searches anyway are left out: -isystem /usr/include would break #include_next).
function(strata_compile_fail_flags out_var)
  set(flags "-I${PROJECT_SOURCE_DIR}/include" "-I${PROJECT_SOURCE_DIR}/tests/support")
  foreach(target fmt::fmt asio::asio nlohmann_json::nlohmann_json)
    get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
    get_target_property(defs ${target} INTERFACE_COMPILE_DEFINITIONS)
    foreach(dir IN LISTS dirs)
      if(dir AND NOT dir MATCHES "\\$<" AND NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
        list(APPEND flags "-I${dir}")
      endif()
    endforeach()
    foreach(def IN LISTS defs)
      if(def AND NOT def MATCHES "\\$<")
        list(APPEND flags "-D${def}")
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES flags)
  set(${out_var} "${flags}" PARENT_SCOPE)
endfunction()

# strata_add_compile_fail_test(NAME <name> SOURCE <file> EXPECTED_REGEX <regex>)
# strata_add_compile_fail_test(<name> <file> <regex>)
#   Two ctests, both running the C++ compiler directly (-std=c++20 -fsyntax-only), never
#   `cmake --build`, so they are safe under ctest -j:
#     <name>          compiling SOURCE must fail, and the compiler output must match
#                     EXPECTED_REGEX (the static_assert sentence);
#     <name>_control  compiling SOURCE with -DSTRATA_COMPILE_FAIL_CONTROL must succeed, which
#                     proves the failure comes from the assertion and not from a typo.
#   SOURCE wraps its ill-formed line in #ifndef STRATA_COMPILE_FAIL_CONTROL.
function(strata_add_compile_fail_test)
  if(ARGV0 STREQUAL "NAME")
    cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;SOURCE;EXPECTED_REGEX" "")
  else()
    set(arg_NAME "${ARGV0}")
    set(arg_SOURCE "${ARGV1}")
    set(arg_EXPECTED_REGEX "${ARGV2}")
  endif()
  if(NOT arg_NAME OR NOT arg_SOURCE OR arg_EXPECTED_REGEX STREQUAL "")
    message(FATAL_ERROR "strata_add_compile_fail_test(NAME <name> SOURCE <file> "
                        "EXPECTED_REGEX <regex>): all three are required")
  endif()
  cmake_path(ABSOLUTE_PATH arg_SOURCE BASE_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT EXISTS "${arg_SOURCE}")
    message(FATAL_ERROR "strata_add_compile_fail_test(${arg_NAME}): ${arg_SOURCE} does not exist")
  endif()
  if(MSVC)
    message(STATUS "strata: compile-fail test ${arg_NAME} needs a GCC-style driver; skipped")
    return()
  endif()

  strata_compile_fail_flags(include_flags)
  # In the compiled mode the headers declare what the .ipp files define, so the compiler parses a
  # third of what header-only makes it parse; the static_asserts under test are templates, the
  # same in both modes.
  set(flags -std=c++20 -fsyntax-only -fno-diagnostics-color -fmessage-length=0
            -DSTRATA_SEPARATE_COMPILATION ${include_flags})

  # The regex travels in a generated file: no list or quoting rules apply to it on the way.
  set(config "${CMAKE_CURRENT_BINARY_DIR}/compile_fail/${arg_NAME}.cmake")
  set(content "set(COMPILER [==[${CMAKE_CXX_COMPILER}]==])\n")
  string(APPEND content "set(FLAGS [==[${flags}]==])\n")
  string(APPEND content "set(SOURCE [==[${arg_SOURCE}]==])\n")
  string(APPEND content "set(EXPECTED_REGEX [==[${arg_EXPECTED_REGEX}]==])\n")
  file(CONFIGURE OUTPUT "${config}" CONTENT "${content}" @ONLY)

  add_test(NAME ${arg_NAME} COMMAND "${CMAKE_COMMAND}" -DCONFIG=${config} -P
                                    "${PROJECT_SOURCE_DIR}/cmake/strata_compile_fail.cmake")
  add_test(NAME ${arg_NAME}_control COMMAND "${CMAKE_CXX_COMPILER}" ${flags}
                                            -DSTRATA_COMPILE_FAIL_CONTROL "${arg_SOURCE}")
  set_tests_properties(${arg_NAME} ${arg_NAME}_control PROPERTIES LABELS "compile_fail" TIMEOUT
                                                                  120)
endfunction()
