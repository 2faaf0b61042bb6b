# FindNCCL.cmake — locate NVIDIA NCCL (header nccl.h, library libnccl).
#
# Looks next to the CUDA Toolkit first (CUDAToolkit_INCLUDE_DIRS / CUDAToolkit_LIBRARY_DIR when
# find_package(CUDAToolkit) ran), then NCCL_ROOT, CUDA_HOME, CUDA_PATH and /usr/local/cuda.
#
# Result variables:
#   NCCL_FOUND, NCCL_INCLUDE_DIR, NCCL_LIBRARY, NCCL_VERSION
# Imported target:
#   NCCL::nccl   UNKNOWN IMPORTED library; links CUDA::cudart when that target exists.
include(FindPackageHandleStandardArgs)

set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda)

find_path(
  NCCL_INCLUDE_DIR
  NAMES nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_nccl_hints}
  PATH_SUFFIXES include
  DOC "Directory holding nccl.h")
find_library(
  NCCL_LIBRARY
  NAMES nccl
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${_nccl_hints}
  PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu
  DOC "The NCCL shared library")
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
unset(_nccl_hints)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) [0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_part} ([0-9]+)" _unused "${_nccl_version_lines}")
    set(_nccl_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  if(NOT _nccl_MAJOR STREQUAL "")
    set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
  endif()
  unset(_nccl_version_lines)
  unset(_nccl_MAJOR)
  unset(_nccl_MINOR)
  unset(_nccl_PATCH)
endif()

find_package_handle_standard_args(
  NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  if(TARGET CUDA::cudart)
    set_property(TARGET NCCL::nccl APPEND PROPERTY INTERFACE_LINK_LIBRARIES CUDA::cudart)
  endif()
endif()
