// strata/core/detail/reduce_isa.hpp — the instruction sets the reduction kernels are compiled
// for, the CPU check, and the dispatch that runs a kernel compiled for one of them.
//
// The library is header-only and built without -march flags, so the kernels are compiled for
// AVX2 and AVX-512 through target attributes and the widest set the CPU runs is chosen at run
// time (x86-64 with GCC or Clang; the portable build elsewhere).
#pragma once

#include <string_view>
#include <type_traits>

// 1 where the kernels are also compiled for AVX2 and AVX-512 (x86-64, GCC or Clang), else 0.
#if defined(__x86_64__) && defined(__GNUC__)
#define STRATA_REDUCE_DISPATCH 1
#else
#define STRATA_REDUCE_DISPATCH 0
#endif

#if STRATA_REDUCE_DISPATCH
#include <cpuid.h>
#endif

namespace strata::detail {

/// The instruction sets the kernels are built for, narrowest first.
enum class Isa { baseline, avx2, avx512 };

inline constexpr Isa kAllIsas[] = {Isa::baseline, Isa::avx2, Isa::avx512};

inline constexpr std::string_view name_of(Isa isa) noexcept {
  switch (isa) {
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::baseline:
      break;
  }
  return "baseline";
}

template <Isa kIsa>
using IsaTag = std::integral_constant<Isa, kIsa>;

/// The widest instruction set this CPU (and its OS) runs; baseline off x86-64.
inline Isa best_isa() noexcept {
#if STRATA_REDUCE_DISPATCH
  static const Isa best = [] {
    __builtin_cpu_init();
    // Every CPU with AVX2 has F16C, but a hypervisor may hide it; the kernels need both.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    if (!f16c || !__builtin_cpu_supports("avx2")) return Isa::baseline;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
      return Isa::avx512;
    return Isa::avx2;
  }();
  return best;
#else
  return Isa::baseline;
#endif
}

#if STRATA_REDUCE_DISPATCH
// `flatten` (and, for compilers whose flatten is not recursive, `always_inline` on the block
// loops and the lambdas that reach them) inlines everything the kernel calls, so its loops are
// compiled, and vectorized, for the wrapper's instruction set whatever -march the program is built
// with. The set changes how wide the loops run, not what they compute: no FMA is enabled and each
// element is combined alone, so every set gives the same bits, except which NaN's payload a NaN
// result carries when two meet (tests/core/reduce_test.cpp checks).
template <class Kernel>
[[gnu::target("avx2,f16c"), gnu::flatten]] inline void run_avx2(const Kernel& kernel) {
  kernel(IsaTag<Isa::avx2>{});
}

template <class Kernel>
[[gnu::target("avx2,f16c,avx512f,avx512bw,avx512vl"), gnu::flatten]] inline void run_avx512(
    const Kernel& kernel) {
  kernel(IsaTag<Isa::avx512>{});
}
#endif

/// Runs `kernel(IsaTag<isa>{})` compiled for `isa`, which the CPU must support
/// (isa <= best_isa()).
template <class Kernel>
inline void run_on(Isa isa, const Kernel& kernel) {
#if STRATA_REDUCE_DISPATCH
  if (isa == Isa::avx512) return run_avx512(kernel);
  if (isa == Isa::avx2) return run_avx2(kernel);
#else
  (void)isa;
#endif
  kernel(IsaTag<Isa::baseline>{});
}

}  // namespace strata::detail
