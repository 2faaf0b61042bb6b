# StrataPkgConfig.cmake — pkg-config files for builds without CMake.
#
#   strata_install_pkg_config(COMPONENT <component>)
#     Installs strata.pc (header-only: `pkg-config --cflags --libs strata`) and
#     strata-compiled.pc (the compiled mode: STRATA_SEPARATE_COMPILATION and -lstrata) into
#     STRATA_INSTALL_PKGCONFIGDIR. The files are relocatable: the prefix is found from the .pc
#     file's own directory. fmt, nlohmann_json and libcrypto have pkg-config files of their own
#     (Requires); asio ships none, so its include directory and definitions are written out, as
#     are strata's. The GPU path (strata::cuda, strata::nccl) is CMake's only.
include_guard(GLOBAL)

function(strata_install_pkg_config)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "COMPONENT" "")

  # ${pcfiledir} is where pkg-config found the file; the prefix is relative to it.
  set(pc_dir "${CMAKE_INSTALL_PREFIX}/${STRATA_INSTALL_PKGCONFIGDIR}")
  cmake_path(RELATIVE_PATH CMAKE_INSTALL_PREFIX BASE_DIRECTORY "${pc_dir}" OUTPUT_VARIABLE
             up_to_prefix)
  string(REGEX REPLACE "/$" "" up_to_prefix "${up_to_prefix}")
  set(prefix "\${pcfiledir}/${up_to_prefix}")

  # asio's include directory, unless the compiler searches it anyway.
  set(asio_cflags "-DASIO_STANDALONE -DASIO_NO_DEPRECATED")
  if(Asio_INCLUDE_DIR AND NOT Asio_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    string(PREPEND asio_cflags "-I${Asio_INCLUDE_DIR} ")
  endif()

  set(common "prefix=${prefix}
includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}
libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}
")
  set(strata_pc "${common}
Name: strata
Description: ${PROJECT_DESCRIPTION} (compile as C++20)
Version: ${PROJECT_VERSION}
Requires: fmt nlohmann_json libcrypto
Cflags: -I\${includedir} ${asio_cflags} -pthread
Libs: -pthread
")
  set(compiled_pc "${common}
Name: strata-compiled
Description: strata's non-template parts compiled once (STRATA_SEPARATE_COMPILATION)
Version: ${PROJECT_VERSION}
Requires: strata = ${PROJECT_VERSION}
Cflags: -DSTRATA_SEPARATE_COMPILATION
Libs: -L\${libdir} -lstrata
")
  # @ONLY: ${pcfiledir}, ${prefix}... are pkg-config's variables, not CMake's.
  file(CONFIGURE OUTPUT "${PROJECT_BINARY_DIR}/pkgconfig/strata.pc" CONTENT "${strata_pc}" @ONLY)
  file(CONFIGURE OUTPUT "${PROJECT_BINARY_DIR}/pkgconfig/strata-compiled.pc"
       CONTENT "${compiled_pc}" @ONLY)
  install(FILES "${PROJECT_BINARY_DIR}/pkgconfig/strata.pc"
                "${PROJECT_BINARY_DIR}/pkgconfig/strata-compiled.pc"
          DESTINATION "${STRATA_INSTALL_PKGCONFIGDIR}" COMPONENT ${arg_COMPONENT})
endfunction()
