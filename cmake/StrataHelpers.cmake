# StrataHelpers.cmake — small functions shared by strata's CMake files.
include_guard(GLOBAL)

# strata_read_version(<header> <out-var>)
#   Reads STRATA_VERSION_MAJOR/MINOR/PATCH from <header> (include/strata/config.hpp, the one
#   source of truth) and sets <out-var> to "MAJOR.MINOR.PATCH".
function(strata_read_version header out_var)
  file(STRINGS "${header}" lines REGEX "^#define STRATA_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(part MAJOR MINOR PATCH)
    if(NOT lines MATCHES "STRATA_VERSION_${part} +([0-9]+)")
      message(FATAL_ERROR "strata: STRATA_VERSION_${part} not found in ${header}")
    endif()
    set(${part} "${CMAKE_MATCH_1}")
  endforeach()
  set(${out_var} "${MAJOR}.${MINOR}.${PATCH}" PARENT_SCOPE)
endfunction()

# strata_name_from_path(<out-var> <relative-path> [PREFIX <p>])
#   tests/core/reduce_test.cpp relative to tests/ -> core_reduce_test (PREFIX prepended).
function(strata_name_from_path out_var rel_path)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "PREFIX" "")
  string(REGEX REPLACE "\\.[^./]+$" "" stem "${rel_path}")
  string(REGEX REPLACE "[^A-Za-z0-9_]" "_" name "${stem}")
  set(${out_var} "${arg_PREFIX}${name}" PARENT_SCOPE)
endfunction()

# strata_link_dependencies(<target> <INTERFACE|PUBLIC|PRIVATE>)
#   What every way of consuming strata needs besides its include directory: C++20 and the
#   third-party targets. Used by the strata target and by the test-only variants (single header,
#   headers checked with CUDA/NCCL off), so they cannot drift. The GPU path is not here: it is
#   strata::cuda and strata::nccl, linked beside (CMakeLists.txt).
function(strata_link_dependencies target scope)
  target_compile_features(${target} ${scope} cxx_std_20)
  target_link_libraries(${target} ${scope} fmt::fmt Threads::Threads asio::asio
                                           nlohmann_json::nlohmann_json OpenSSL::Crypto)
endfunction()

# strata_mark_system(<imported-target>...)
#   Third-party headers are included as -isystem so their warnings never fail our -Werror build.
function(strata_mark_system)
  foreach(target IN LISTS ARGN)
    if(TARGET ${target})
      get_target_property(aliased ${target} ALIASED_TARGET)
      if(aliased)
        set(target ${aliased})
      endif()
      set_property(TARGET ${target} PROPERTY SYSTEM TRUE)
    endif()
  endforeach()
endfunction()
