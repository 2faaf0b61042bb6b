# run_consumer_test.cmake — one route of the consumer matrix (cmake -P): get strata the way a
# user would, build test_package/test_package.cpp (two ranks all-reduce over TCP) and run it.
#   MODE=find_package      cmake --install BUILD_DIR into WORK_DIR/prefix, check the installed
#                          files, then find_package(strata [COMPONENTS]) and link LINKS
#   MODE=fresh_install     configure SOURCE_DIR afresh (tests, benchmarks, examples, tools off)
#                          and cmake --install it unbuilt, then find_package and link LINKS
#   MODE=add_subdirectory | fetchcontent | single_header
#                          the consumer takes strata from SOURCE_DIR
#   MODE=pkg_config        install, then compile with `pkg-config --cflags --libs PC_MODULE`
#   MODE=conan             `conan create` on a copy of the recipe with a generated profile (the
#                          client: CONAN, else conan on the PATH)
#   MODE=vcpkg             examples/vcpkg in manifest mode with the overlay port (the client:
#                          VCPKG_ROOT/vcpkg, VCPKG_ROOT from the variable or the environment)
# Other inputs: SOURCE_DIR BUILD_DIR WORK_DIR GENERATOR [MAKE_PROGRAM] CXX_COMPILER [CXX_FLAGS]
#   [CONFIG] EXPECTED_VERSION [COMPONENTS] [EXPECT_GPU=1] [PLATFORM_REQUIRES] [CHECK_VERSION_RULE]
#   [CUDA_LIBRARY_DIR]
# A route whose tool is missing prints "strata-packaging-skipped: <why>" (the test's skip regex).
cmake_minimum_required(VERSION 3.25)

include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/StrataRunCommand.cmake")

if(NOT CONFIG)
  set(CONFIG Release)
endif()
if(NOT EXPECT_GPU)
  set(EXPECT_GPU 0)
endif()
# Consumers build unoptimized (the route is under test, not the optimizer: a third of the time),
# unless CXX_FLAGS names an optimization level.
set(consumer_config Debug)
set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(skip why)
  message(STATUS "strata-packaging-skipped: ${why}")
endfunction()

# Installs BUILD_DIR into the prefix and checks that every header and package file is there.
function(install_and_check build_dir)
  strata_run("install" "${CMAKE_COMMAND}" --install "${build_dir}" --prefix "${prefix}" --config
             "${CONFIG}")
  file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/strata/*.hpp"
       "${SOURCE_DIR}/include/strata/*.ipp")
  set(missing)
  foreach(file IN LISTS files)
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
  file(GLOB pc_files "${prefix}/lib*/pkgconfig/strata.pc" "${prefix}/lib*/*/pkgconfig/strata.pc")
  if(NOT pc_files)
    list(APPEND missing "lib/pkgconfig/strata.pc")
  endif()
  if(NOT EXISTS "${prefix}/share/doc/strata/LICENSE")
    list(APPEND missing "share/doc/strata/LICENSE")
  endif()
  if(missing)
    list(JOIN missing "\n  " missing)
    message(FATAL_ERROR "not installed into ${prefix}:\n  ${missing}\n"
                        "(a header added since the last configure? build first, then rerun)")
  endif()
endfunction()

# Configures and builds tests/packaging/consumer with `mode` and the extra arguments.
function(build_consumer mode)
  set(arguments
      -S "${SOURCE_DIR}/tests/packaging/consumer" -B "${consumer_build}" -G "${GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_BUILD_TYPE=${consumer_config}"
      "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DSTRATA_CONSUMER_MODE=${mode}"
      "-DSTRATA_SOURCE_DIR=${SOURCE_DIR}" ${ARGN})
  if(MAKE_PROGRAM)
    list(APPEND arguments "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  endif()
  strata_run("configure consumer" "${CMAKE_COMMAND}" ${arguments})
  if(NOT EXPECT_GPU AND NOT run_output MATCHES "GPU targets found: none")
    message(FATAL_ERROR "a CPU-only consumer found GPU targets:\n${run_output}")
  elseif(EXPECT_GPU AND NOT run_output MATCHES "GPU targets found: CUDA::cudart NCCL::nccl")
    message(FATAL_ERROR "COMPONENTS nccl did not bring CUDA::cudart and NCCL::nccl:\n${run_output}")
  endif()
  strata_run("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" --config
             "${consumer_config}")
  set(program "${consumer_build}/strata_consumer")
  if(NOT EXISTS "${program}")
    set(program "${consumer_build}/${consumer_config}/strata_consumer")
  endif()
  set(program "${program}" PARENT_SCOPE)
endfunction()

# Runs the program and checks what it says, and that it links CUDA/NCCL only when expected.
function(check_program program)
  strata_run("run consumer" "${program}")
  set(expected "strata ${EXPECTED_VERSION} \\(cuda ${EXPECT_GPU}, nccl ${EXPECT_GPU}\\): "
               "all_reduce over 2 TCP ranks = 11 22 33")
  string(JOIN "" expected ${expected})
  if(NOT run_output MATCHES "${expected}")
    message(FATAL_ERROR "the consumer said:\n${run_output}\nexpected: ${expected}")
  endif()
  # A CPU-only program links neither library: not in its dynamic section, nor on its link line
  # (where the linker's --as-needed could hide one from the dynamic section).
  if(NOT EXPECT_GPU)
    find_program(READELF readelf)
    if(READELF)
      execute_process(COMMAND "${READELF}" -d "${program}" OUTPUT_VARIABLE dynamic)
      string(REGEX MATCHALL "\\[lib(cudart|nccl)[^]]*\\]" gpu_libraries "${dynamic}")
      if(gpu_libraries)
        message(FATAL_ERROR "the CPU-only consumer links ${gpu_libraries}")
      endif()
    endif()
    if(EXISTS "${consumer_build}/build.ninja")
      file(STRINGS "${consumer_build}/build.ninja" gpu_links REGEX "cudart|nccl")
      if(gpu_links)
        message(FATAL_ERROR "the CPU-only consumer's link line names CUDA or NCCL: ${gpu_links}")
      endif()
    endif()
  endif()
  message(STATUS "the consumer says: ${run_output}")
endfunction()

if(MODE STREQUAL "find_package" OR MODE STREQUAL "fresh_install")
  if(MODE STREQUAL "fresh_install")
    # Installing right after configuring: the install builds what it installs. Debug, so that
    # building libstrata.a takes a fraction of an optimized build's time.
    set(CONFIG Debug)
    set(BUILD_DIR "${WORK_DIR}/strata-build")
    strata_run("configure strata" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${BUILD_DIR}" -G
               "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_BUILD_TYPE=${CONFIG}"
               -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCHMARKS=OFF -DSTRATA_BUILD_EXAMPLES=OFF
               -DSTRATA_BUILD_TOOLS=OFF -DSTRATA_ENABLE_CUDA=OFF)
  endif()
  install_and_check("${BUILD_DIR}")
  # Only the staging prefix may provide strata: no package registry, no other prefixes. Lists
  # travel comma-separated (a ; would split the -D argument).
  string(REPLACE ";" "," LINKS "${LINKS}")
  string(REPLACE ";" "," COMPONENTS "${COMPONENTS}")
  set(find_arguments
      "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
      -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
      "-DSTRATA_EXPECTED_DIR=${prefix}/share/cmake/strata" "-DSTRATA_CONSUMER_LINKS=${LINKS}"
      "-DSTRATA_CONSUMER_COMPONENTS=${COMPONENTS}")
  build_consumer(find_package ${find_arguments})
  check_program("${program}")

  if(CHECK_VERSION_RULE)
    # strataConfigVersion.cmake: the same major.minor, at least the patch asked for.
    string(REGEX MATCH "^([0-9]+)\\.([0-9]+)\\.([0-9]+)" _ "${EXPECTED_VERSION}")
    set(major ${CMAKE_MATCH_1})
    set(minor ${CMAKE_MATCH_2})
    math(EXPR next_minor "${minor} + 1")
    math(EXPR next_major "${major} + 1")
    foreach(request "${major}.${minor}" "${major}.${minor}.0" "${major}.${next_minor}"
                    "${next_major}.0")
      file(REMOVE_RECURSE "${consumer_build}")
      execute_process(
        COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/packaging/consumer" -B
                "${consumer_build}" -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
                "-DSTRATA_SOURCE_DIR=${SOURCE_DIR}" ${find_arguments}
                "-DSTRATA_REQUEST_VERSION=${request}"
        RESULT_VARIABLE status OUTPUT_QUIET ERROR_VARIABLE errors)
      if(request MATCHES "^${major}\\.${minor}" AND NOT status EQUAL 0)
        message(FATAL_ERROR "find_package(strata ${request}) failed with strata "
                            "${EXPECTED_VERSION} installed:\n${errors}")
      elseif(NOT request MATCHES "^${major}\\.${minor}" AND status EQUAL 0)
        message(FATAL_ERROR "find_package(strata ${request}) accepted strata ${EXPECTED_VERSION}")
      endif()
    endforeach()
    message(STATUS "version rule: ${major}.${minor} and ${major}.${minor}.0 accepted, "
                   "${major}.${next_minor} and ${next_major}.0 refused")
  endif()

elseif(MODE MATCHES "^(add_subdirectory|fetchcontent|single_header)$")
  if(MODE STREQUAL "single_header" AND NOT EXISTS
                                       "${SOURCE_DIR}/single_include/strata/strata.hpp")
    message(FATAL_ERROR "single_include/strata/strata.hpp is missing (run tools/amalgamate)")
  endif()
  build_consumer(${MODE} "-DSTRATA_CONSUMER_LINKS=${LINKS}")
  check_program("${program}")

elseif(MODE STREQUAL "pkg_config")
  find_program(PKG_CONFIG NAMES pkg-config pkgconf)
  if(NOT PKG_CONFIG)
    skip("no pkg-config (install pkgconf)")
    return()
  endif()
  install_and_check("${BUILD_DIR}")
  file(GLOB pc_dir LIST_DIRECTORIES true "${prefix}/lib*/pkgconfig" "${prefix}/lib*/*/pkgconfig")
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  strata_run("pkg-config version" "${PKG_CONFIG}" --modversion ${PC_MODULE})
  string(STRIP "${run_output}" pc_version)
  if(NOT pc_version STREQUAL EXPECTED_VERSION)
    message(FATAL_ERROR "pkg-config says ${PC_MODULE} ${pc_version}, expected ${EXPECTED_VERSION}")
  endif()
  strata_run("pkg-config flags" "${PKG_CONFIG}" --cflags --libs ${PC_MODULE})
  separate_arguments(pc_flags UNIX_COMMAND "${run_output}")
  separate_arguments(cxx_flags UNIX_COMMAND "${CXX_FLAGS}")
  set(program "${WORK_DIR}/strata_consumer")
  strata_run("compile consumer" "${CXX_COMPILER}" -std=c++20 -O2 ${cxx_flags}
             "${SOURCE_DIR}/test_package/test_package.cpp" -o "${program}" ${pc_flags})
  check_program("${program}")

elseif(MODE STREQUAL "conan")
  if(NOT CONAN)
    find_program(CONAN conan)
  endif()
  if(NOT CONAN)
    skip("no Conan client (set CONAN, or put conan on the PATH; docs/packaging.md)")
    return()
  endif()
  # A copy of what the recipe exports, so that test_package/build lands in WORK_DIR.
  set(recipe "${WORK_DIR}/recipe")
  foreach(item conanfile.py LICENSE CMakeLists.txt include cmake test_package)
    file(COPY "${SOURCE_DIR}/${item}" DESTINATION "${recipe}")
  endforeach()
  file(REMOVE_RECURSE "${recipe}/test_package/build")
  execute_process(COMMAND "${CXX_COMPILER}" -dumpversion OUTPUT_VARIABLE compiler_version
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REGEX MATCH "^[0-9]+" compiler_major "${compiler_version}")
  if(CXX_COMPILER MATCHES "clang")
    set(compiler clang)
    set(c_compiler clang)
  else()
    set(compiler gcc)
    set(c_compiler gcc)
  endif()
  get_filename_component(compiler_dir "${CXX_COMPILER}" DIRECTORY)
  # EXPECT_GPU: the recipe's cuda and nccl options; the toolkit's libraries are the system's.
  set(gpu_conf "")
  set(gpu_options)
  if(EXPECT_GPU)
    set(gpu_conf "tools.build:exelinkflags=[\"-L${CUDA_LIBRARY_DIR}\"]")
    set(gpu_options -o "strata/*:cuda=True" -o "strata/*:nccl=True")
  endif()
  # The dependencies are Debian's: the profile declares them as provided by the platform.
  string(REPLACE ";" "\n" platform_requires "${PLATFORM_REQUIRES}")
  file(
    WRITE "${WORK_DIR}/home/profiles/default"
    "[settings]
os=Linux
arch=x86_64
compiler=${compiler}
compiler.version=${compiler_major}
compiler.libcxx=libstdc++11
compiler.cppstd=20
build_type=${CONFIG}
[conf]
tools.build:compiler_executables={\"c\": \"${compiler_dir}/${c_compiler}\", \"cpp\": \"${CXX_COMPILER}\"}
tools.cmake.cmaketoolchain:generator=${GENERATOR}
${gpu_conf}
[platform_requires]
${platform_requires}
")
  set(ENV{CONAN_HOME} "${WORK_DIR}/home")
  strata_run("conan create" "${CONAN}" create "${recipe}" -pr:a default ${gpu_options})
  string(REGEX MATCH "strata[^\n]*all_reduce over 2 TCP ranks[^\n]*" said "${run_output}")
  set(expected "strata ${EXPECTED_VERSION} (cuda ${EXPECT_GPU}, nccl ${EXPECT_GPU}): all_reduce "
               "over 2 TCP ranks = 11 22 33")
  string(JOIN "" expected ${expected})
  if(NOT said STREQUAL expected)
    message(FATAL_ERROR "conan's test_package said '${said}', expected '${expected}'")
  endif()
  message(STATUS "conan's test_package says: ${said}")

elseif(MODE STREQUAL "vcpkg")
  if(NOT VCPKG_ROOT)
    set(VCPKG_ROOT "$ENV{VCPKG_ROOT}")
  endif()
  if(NOT VCPKG_ROOT OR NOT EXISTS "${VCPKG_ROOT}/vcpkg")
    skip("no vcpkg client (set VCPKG_ROOT to a vcpkg root holding the vcpkg program; "
         "docs/packaging.md)")
    return()
  endif()
  # The example in place, in manifest mode: its vcpkg-configuration.json names strata's port;
  # Debian's packages stand in for the dependencies (vcpkg cannot download them here).
  file(CONFIGURE OUTPUT "${WORK_DIR}/toolchain.cmake"
       CONTENT "set(CMAKE_CXX_COMPILER \"${CXX_COMPILER}\")\n")
  set(ENV{VCPKG_ROOT} "${VCPKG_ROOT}")
  set(ENV{VCPKG_DISABLE_METRICS} 1)
  set(ENV{VCPKG_FORCE_SYSTEM_BINARIES} 1)
  # vcpkg's trees under WORK_DIR, no binary cache in the home directory. A list, so through an
  # initial-cache file rather than -D.
  file(WRITE "${WORK_DIR}/vcpkg-options.cmake"
       "set(VCPKG_INSTALL_OPTIONS \"--x-buildtrees-root=${WORK_DIR}/vcpkg/buildtrees;"
       "--x-packages-root=${WORK_DIR}/vcpkg/packages;--downloads-root=${WORK_DIR}/vcpkg/downloads;"
       "--binarysource=clear\" CACHE STRING \"\")\n")
  strata_run("configure example" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples/vcpkg" -B
             "${consumer_build}" -G "${GENERATOR}" "-DCMAKE_BUILD_TYPE=${CONFIG}"
             "-DCMAKE_TOOLCHAIN_FILE=${VCPKG_ROOT}/scripts/buildsystems/vcpkg.cmake"
             "-DVCPKG_CHAINLOAD_TOOLCHAIN_FILE=${WORK_DIR}/toolchain.cmake"
             "-DVCPKG_OVERLAY_PORTS=${SOURCE_DIR}/tests/packaging/vcpkg-system-ports"
             -C "${WORK_DIR}/vcpkg-options.cmake")
  strata_run("build example" "${CMAKE_COMMAND}" --build "${consumer_build}")
  check_program("${consumer_build}/strata_vcpkg_example")

else()
  message(FATAL_ERROR "MODE '${MODE}' is none of find_package, fresh_install, add_subdirectory, "
                      "fetchcontent, single_header, pkg_config, conan, vcpkg")
endif()
