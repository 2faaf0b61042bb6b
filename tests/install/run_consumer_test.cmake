# run_consumer_test.cmake — configure, build and run tests/install/consumer (cmake -P).
#   MODE=install           cmake --install BUILD_DIR into WORK_DIR/prefix, check the installed
#                          headers and package files, consumer uses find_package(strata)
#   MODE=add_subdirectory  consumer uses add_subdirectory(SOURCE_DIR)
#   LINKS                  the target the consumer links: strata::strata or strata::compiled
# Other inputs: SOURCE_DIR BUILD_DIR WORK_DIR GENERATOR [GENERATOR_PLATFORM] [GENERATOR_TOOLSET]
#               [MAKE_PROGRAM] CXX_COMPILER [CONFIG] EXPECTED_VERSION
cmake_minimum_required(VERSION 3.25)

include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/StrataRunCommand.cmake")

if(NOT CONFIG)
  set(CONFIG Release)
endif()
set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")

set(configure_args
    -S "${SOURCE_DIR}/tests/install/consumer" -B "${consumer_build}" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_BUILD_TYPE=${CONFIG}"
    "-DSTRATA_EXPECTED_VERSION=${EXPECTED_VERSION}" "-DSTRATA_CONSUMER_LINKS=${LINKS}")
if(GENERATOR_PLATFORM)
  list(APPEND configure_args -A "${GENERATOR_PLATFORM}")
endif()
if(GENERATOR_TOOLSET)
  list(APPEND configure_args -T "${GENERATOR_TOOLSET}")
endif()
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()

if(MODE STREQUAL "install")
  strata_run("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" --config
      "${CONFIG}")

  # Every public header, and the package files, must be in the prefix.
  file(GLOB_RECURSE headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/strata/*.hpp")
  set(missing)
  foreach(header IN LISTS headers)
    if(NOT EXISTS "${prefix}/include/${header}")
      list(APPEND missing "include/${header}")
    endif()
  endforeach()
  file(GLOB_RECURSE impl_files RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/strata/*.ipp")
  foreach(file IN LISTS impl_files)
    if(NOT EXISTS "${prefix}/include/${file}")
      list(APPEND missing "include/${file}")
    endif()
  endforeach()
  file(GLOB compiled_library "${prefix}/lib*/libstrata.a" "${prefix}/lib*/*/libstrata.a")
  if(NOT compiled_library)
    list(APPEND missing "lib/libstrata.a (strata::compiled)")
  endif()
  foreach(file strataConfig.cmake strataConfigVersion.cmake strataTargets.cmake FindAsio.cmake)
    if(NOT EXISTS "${prefix}/share/cmake/strata/${file}")
      list(APPEND missing "share/cmake/strata/${file}")
    endif()
  endforeach()
  if(missing)
    list(JOIN missing "\n  " missing)
    message(FATAL_ERROR "not installed into ${prefix}:\n  ${missing}\n"
                        "(a header added since the last configure? build first, then rerun)")
  endif()

  # Only the staging prefix may provide strata: no package registry, no other prefixes.
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${prefix}"
       -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
       "-DSTRATA_EXPECTED_DIR=${prefix}/share/cmake/strata")
elseif(MODE STREQUAL "add_subdirectory")
  list(APPEND configure_args "-DSTRATA_SOURCE_DIR=${SOURCE_DIR}")
else()
  message(FATAL_ERROR "MODE must be install or add_subdirectory, not '${MODE}'")
endif()

strata_run("configure consumer" "${CMAKE_COMMAND}" ${configure_args})
strata_run("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" --config "${CONFIG}")

set(exe "${consumer_build}/strata_consumer${CMAKE_EXECUTABLE_SUFFIX}")
if(NOT EXISTS "${exe}")
  set(exe "${consumer_build}/${CONFIG}/strata_consumer${CMAKE_EXECUTABLE_SUFFIX}")
endif()
strata_run("run consumer" "${exe}")
message(STATUS "consumer (${LINKS}) says: ${run_output}")
if(NOT run_output MATCHES "strata ${EXPECTED_VERSION}")
  message(FATAL_ERROR "the consumer did not print 'strata ${EXPECTED_VERSION}'")
endif()
