// strata/config.hpp — the one configuration header: version and the few STRATA_* switches.
//
// Macros (each documented once, here):
//   STRATA_VERSION_MAJOR/MINOR/PATCH  the library version, also strata::kVersion and
//                     strata::version(). The one place it is written: CMake, the Conan recipe
//                     and the vcpkg port read it from here or are checked against it
//                     (tests/packaging/version_test.cmake).
//   STRATA_HAS_CUDA   1 when the CUDA runtime is available to the including target (set by the
//                     CMake target when CUDA is found and STRATA_ENABLE_CUDA is ON); 0 otherwise.
//   STRATA_HAS_NCCL   1 when NCCL is available (same rule, STRATA_ENABLE_NCCL); 0 otherwise.
//                     Only transport/nccl/ includes <nccl.h>, and only behind this switch.
//   STRATA_SEPARATE_COMPILATION
//                     defined by the user (the strata::compiled CMake target defines it): strata's
//                     non-template parts (TCP communicator, cluster resolution, reduction
//                     kernels) are compiled once, by the one translation unit that includes
//                     <strata/impl/src.hpp> (the strata::compiled library is that unit), and
//                     every other unit only declares them. Undefined: header-only, the default.
//   STRATA_HEADER_ONLY  1 unless STRATA_SEPARATE_COMPILATION is defined (set here, not by users).
//   STRATA_DECL       how the non-template parts are declared: `inline` header-only; in the
//                     compiled mode an ABI tag, so that a program mixing the two modes links two
//                     distinct sets of symbols instead of breaking the one-definition rule.
#pragma once

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 1
#define STRATA_VERSION_PATCH 0

#ifndef STRATA_HAS_CUDA
#define STRATA_HAS_CUDA 0
#endif

#ifndef STRATA_HAS_NCCL
#define STRATA_HAS_NCCL 0
#endif

#if defined(STRATA_SEPARATE_COMPILATION)
#define STRATA_HEADER_ONLY 0
#define STRATA_DECL [[gnu::abi_tag("strata_compiled")]]
#else
#define STRATA_HEADER_ONLY 1
#define STRATA_DECL inline
#endif

#if STRATA_HAS_NCCL && !STRATA_HAS_CUDA
#error "STRATA_HAS_NCCL requires STRATA_HAS_CUDA: NCCL moves device memory through the CUDA runtime"
#endif

namespace strata {

/// The library version as numbers, for run-time checks and logs.
struct Version {
  int major;
  int minor;
  int patch;

  friend constexpr bool operator==(const Version&, const Version&) = default;
};

inline constexpr Version kVersion{STRATA_VERSION_MAJOR, STRATA_VERSION_MINOR, STRATA_VERSION_PATCH};

/// The version of the strata headers this unit was compiled with (kVersion, as a call).
[[nodiscard]] constexpr Version version() noexcept {
  return kVersion;
}

}  // namespace strata
