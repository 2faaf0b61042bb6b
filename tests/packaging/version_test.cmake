# version_test.cmake — strata's version is written once, in include/strata/config.hpp; everything
# else that states it must agree (cmake -P):
#   the CMake project (EXPECTED_VERSION, which CMakeLists.txt reads from config.hpp), the vcpkg
#   port and its example (ports/strata/vcpkg.json, examples/vcpkg/vcpkg.json), the newest
#   CHANGELOG.md entry, and the Conan recipe (it reads config.hpp in set_version(); with a
#   client, `conan inspect` must report the version).
# Inputs: SOURCE_DIR EXPECTED_VERSION [CONAN]
cmake_minimum_required(VERSION 3.25)

set(mismatches)
macro(expect what value)
  if(NOT "${value}" STREQUAL "${header_version}")
    list(APPEND mismatches "${what} says '${value}'")
  endif()
endmacro()

file(STRINGS "${SOURCE_DIR}/include/strata/config.hpp" lines
     REGEX "^#define STRATA_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+")
string(REGEX REPLACE "#define STRATA_VERSION_[A-Z]+ +" "" numbers "${lines}")
string(REPLACE ";" "." header_version "${numbers}")
if(NOT header_version MATCHES "^[0-9]+\\.[0-9]+\\.[0-9]+$")
  message(FATAL_ERROR "config.hpp's version macros read as '${header_version}'")
endif()

expect("the CMake project" "${EXPECTED_VERSION}")

foreach(manifest ports/strata/vcpkg.json examples/vcpkg/vcpkg.json)
  file(READ "${SOURCE_DIR}/${manifest}" json)
  string(JSON port_version ERROR_VARIABLE error GET "${json}" version)
  expect("${manifest}" "${port_version}")
endforeach()

file(STRINGS "${SOURCE_DIR}/CHANGELOG.md" entries REGEX "^## \\[?[0-9]+\\.[0-9]+\\.[0-9]+")
list(GET entries 0 newest)
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" changelog_version "${newest}")
expect("CHANGELOG.md's newest entry" "${changelog_version}")

file(READ "${SOURCE_DIR}/conanfile.py" recipe)
if(recipe MATCHES "\n    version = " OR NOT recipe MATCHES "def set_version\\(self\\):[^@]*config\\.hpp")
  list(APPEND mismatches "conanfile.py does not take its version from config.hpp in set_version()")
endif()
if(CONAN)
  set(ENV{CONAN_HOME} "${CMAKE_CURRENT_BINARY_DIR}/packaging_version_conan_home")
  execute_process(COMMAND "${CONAN}" inspect "${SOURCE_DIR}" --format=json
                  OUTPUT_VARIABLE inspected RESULT_VARIABLE status ERROR_VARIABLE errors)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "conan inspect failed:\n${errors}")
  endif()
  string(JSON conan_version GET "${inspected}" version)
  expect("conan inspect" "${conan_version}")
endif()

if(mismatches)
  list(JOIN mismatches "\n  " mismatches)
  message(FATAL_ERROR "config.hpp says ${header_version}, but\n  ${mismatches}\n"
                      "(change the version in include/strata/config.hpp and in these together)")
endif()
message(STATUS "strata ${header_version} everywhere (CMake, config.hpp, vcpkg port and example, "
               "CHANGELOG.md, conanfile.py)")
