// strata/fusion/gradient_ref.hpp — one of the trainer's gradient buffers, as the buckets take it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include <strata/config.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_kernels.hpp>
#include <strata/fusion/bucket_plan.hpp>

#if STRATA_HEADER_ONLY
// gradient(span) takes the address of its type's kernels, defined here.
#include <strata/core/reduce.hpp>
#endif

namespace strata::fusion {

/// One of the trainer's gradient buffers, type-erased: its type, its bytes, its element count,
/// and the reduction kernels of its type. Make it with `gradient(span)`.
struct GradientRef {
  DataType type = DataType::float32;
  std::byte* data = nullptr;
  std::size_t count = 0;
  /// `&reduce_kernels_of<T>` for the buffer's T: the buckets reduce through them, so that a
  /// trainer of float gradients compiles the float kernels only.
  const ReduceKernels* kernels = nullptr;
};

/// The GradientRef of `values`.
template <Element T>
GradientRef gradient(std::span<T> values) noexcept {
  return {data_type_of<T>, reinterpret_cast<std::byte*>(values.data()), values.size(),
          &reduce_kernels_of<T>};
}

/// Whether `gradients` have the types and counts of `specs`, in order.
inline bool same_gradients(std::span<const GradientSpec> specs,
                           std::span<const GradientRef> gradients) noexcept {
  return std::equal(specs.begin(), specs.end(), gradients.begin(), gradients.end(),
                    [](const GradientSpec& spec, const GradientRef& ref) {
                      return spec.type == ref.type && spec.count == ref.count;
                    });
}

}  // namespace strata::fusion
