// strata/core/reduce.hpp — the element-wise reduction kernels inside every collective.
//
// Computes:    reduce_n:   out[i] = inputs[0][i] op inputs[1][i] op ... op inputs[k-1][i]
//              accumulate: inout[i] = inout[i] op in[i]
//              divide:     data[i] /= divisor (the last step of a mean)
//              with the semantics of `ReduceOp` (core/reduce_op.hpp): integers wrap around,
//              16-bit floats are combined in float, min/max are exact.
// Requires:    every input holds as many elements as the output; the output may be exactly
//              one or more of the inputs (in-place) but must not otherwise overlap them.
// Determinism: inputs are combined strictly in the order given, inputs[0] first, one element
//              at a time: no reassociation, so the bits do not depend on the count, alignment,
//              block size or instruction set. Every rank reducing the same inputs in the same
//              order gets the same bits. The one exception is IEEE 754's: where two NaNs meet,
//              which payload the NaN result carries may differ between instruction sets.
// Cost:        one read of each input and one write of the output, processed in blocks of
//              1024 elements whose accumulator stays in L1; the inner loops are branch-free
//              and vectorize at -O2 and -O3 without -march flags. On x86-64 (GCC, Clang) they
//              are also compiled for AVX2 and AVX-512 and the widest set the CPU has runs, with
//              the same bits. Integers, float and double run at memory speed for large counts
//              (two-input sum: about memcpy's bytes/s; benchmarks/core/reduce_bench.cpp).
//              float16 and bfloat16 convert a block at a time (F16C for float16), with the
//              same bits as the portable conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include <strata/config.hpp>
#include <strata/core/bfloat16.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/detail/reduce_dispatch.hpp>
#include <strata/core/detail/reduce_isa.hpp>
#include <strata/core/error.hpp>
#include <strata/core/float16.hpp>
#include <strata/core/reduce_kernels.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata {

/// Reduces `inputs.size()` arrays element-wise into `out`:
/// `out[i] = inputs[0][i] op inputs[1][i] op ... op inputs[k-1][i]` for `i < out.size()`;
/// `mean` is the sum divided by `inputs.size()` (integers: truncation toward zero). float16
/// and bfloat16 are combined in float and rounded once, at the end. One input is a copy.
///
/// Call it with the element type spelled out so that containers convert to the spans:
///
///     std::vector<float> mine(n), theirs(n);
///     const float* const inputs[] = {mine.data(), theirs.data()};
///     strata::reduce_n<float>(mine, inputs, strata::ReduceOp::sum);  // mine += theirs
///
/// @param out     the result; `out.data()` may equal any `inputs[j]` (in-place), but must not
///                otherwise overlap an input.
/// @param inputs  pointers to `out.size()` elements each, combined in this order. The same
///                pointer may appear more than once.
/// @throws UsageError (operation "reduce_n") when `inputs` is empty, `op` is not a `ReduceOp`,
///         or, for a non-empty `out`, an input is null or partially overlaps `out`.
template <Element T>
void reduce_n(std::span<T> out, std::span<const T* const> inputs, ReduceOp op);

/// `inout[i] = inout[i] op in[i]`: the two-operand step of a collective that receives data
/// piece by piece. `mean` acts as `sum` here; finish it with `divide()`. float16 and bfloat16
/// round to their type on every call (there is nowhere else to keep the float).
///
/// @throws UsageError (operation "accumulate") when the sizes differ, `op` is not a
///         `ReduceOp`, or the spans partially overlap (exactly equal spans are accepted).
template <Element T>
void accumulate(std::span<T> inout, std::span<const T> in, ReduceOp op);

/// `data[i] /= divisor`, finishing a mean. Integers truncate toward zero; 16-bit floats divide
/// in float and round once.
///
/// @throws UsageError (operation "divide") when `divisor` is 0.
template <Element T>
void divide(std::span<T> data, std::size_t divisor);

}  // namespace strata

namespace strata {

template <Element T>
void reduce_n(std::span<T> out, std::span<const T* const> inputs, ReduceOp op) {
  detail::reduce_n_on<T>(detail::best_isa(), out, inputs, op);
}

template <Element T>
void accumulate(std::span<T> inout, std::span<const T> in, ReduceOp op) {
  detail::accumulate_on<T>(detail::best_isa(), inout, in, op);
}

template <Element T>
void divide(std::span<T> data, std::size_t divisor) {
  detail::divide_on<T>(detail::best_isa(), data, divisor);
}

template <Element T>
void detail::divide_erased(void* data, std::size_t count, std::size_t divisor) {
  divide<T>(std::span<T>(static_cast<T*>(data), count), divisor);
}

template <Element T>
void detail::reduce_n_erased(void* out, const void* const* inputs, std::size_t num_inputs,
                             std::size_t count, ReduceOp op) {
  if (num_inputs > 0 && inputs == nullptr) {
    throw UsageError(-1, "reduce_n", "the array of input pointers is null",
                     "pass num_inputs pointers to count elements each");
  }
  if (count > 0 && out == nullptr) {
    throw UsageError(-1, "reduce_n", "out is null", "pass an output of count elements");
  }
  // Typed copies of the pointers: reading a `const void*` object as a `const T*` would break
  // aliasing rules.
  constexpr std::size_t kOnStack = 16;
  const T* on_stack[kOnStack];
  std::vector<const T*> on_heap;
  const T** typed = on_stack;
  if (num_inputs > kOnStack) {
    on_heap.resize(num_inputs);
    typed = on_heap.data();
  }
  for (std::size_t j = 0; j < num_inputs; ++j)
    typed[j] = static_cast<const T*>(inputs[j]);
  reduce_n<T>(std::span<T>(static_cast<T*>(out), count),
              std::span<const T* const>(typed, num_inputs), op);
}

}  // namespace strata

// Declares (extern) or defines the kernels of element type T, for every entry of the list.
#define STRATA_REDUCE_KERNELS(prefix, T)                                               \
  prefix template void reduce_n<T>(std::span<T>, std::span<const T* const>, ReduceOp); \
  prefix template void accumulate<T>(std::span<T>, std::span<const T>, ReduceOp);      \
  prefix template void divide<T>(std::span<T>, std::size_t);

#if STRATA_HEADER_ONLY
#include <strata/core/impl/reduce.ipp>
#else
namespace strata {
// Compiled once, in the library: a unit that reduces does not instantiate the kernels for every
// element type and instruction set again.
STRATA_FOR_EVERY_ELEMENT(STRATA_REDUCE_KERNELS, extern)
}  // namespace strata
#endif
