# FindAsio.cmake — locate standalone asio (Debian: libasio-dev), which ships no CMake package.
#
# Result variables:
#   Asio_FOUND, Asio_INCLUDE_DIR, Asio_VERSION
# Imported target (created once; an existing asio::asio, e.g. from a package manager, is kept):
#   asio::asio   INTERFACE IMPORTED: the include dir, ASIO_STANDALONE, ASIO_NO_DEPRECATED,
#                Threads::Threads.
#
# Installed next to strataConfig.cmake, so consumers of an installed strata get the same target.
include(FindPackageHandleStandardArgs)

find_path(
  Asio_INCLUDE_DIR
  NAMES asio.hpp
  HINTS ${ASIO_ROOT} ENV ASIO_ROOT
  PATH_SUFFIXES include asio/include
  DOC "Directory holding the standalone asio.hpp")
mark_as_advanced(Asio_INCLUDE_DIR)

if(Asio_INCLUDE_DIR AND EXISTS "${Asio_INCLUDE_DIR}/asio/version.hpp")
  file(STRINGS "${Asio_INCLUDE_DIR}/asio/version.hpp" _asio_version_line
       REGEX "^#define ASIO_VERSION [0-9]+")
  if(_asio_version_line MATCHES "ASIO_VERSION ([0-9]+)")
    math(EXPR _asio_major "${CMAKE_MATCH_1} / 100000")
    math(EXPR _asio_minor "${CMAKE_MATCH_1} / 100 % 1000")
    math(EXPR _asio_patch "${CMAKE_MATCH_1} % 100")
    set(Asio_VERSION "${_asio_major}.${_asio_minor}.${_asio_patch}")
  endif()
  unset(_asio_version_line)
endif()

find_package_handle_standard_args(
  Asio
  REQUIRED_VARS Asio_INCLUDE_DIR
  VERSION_VAR Asio_VERSION)

if(Asio_FOUND AND NOT TARGET asio::asio)
  if(NOT TARGET Threads::Threads)
    set(THREADS_PREFER_PTHREAD_FLAG ON)
    find_package(Threads REQUIRED)
  endif()
  add_library(asio::asio INTERFACE IMPORTED)
  set_target_properties(
    asio::asio
    PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${Asio_INCLUDE_DIR}"
               INTERFACE_COMPILE_DEFINITIONS "ASIO_STANDALONE;ASIO_NO_DEPRECATED"
               INTERFACE_LINK_LIBRARIES Threads::Threads)
endif()
