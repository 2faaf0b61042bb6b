// strata/core/impl/reduce.ipp — the type-erased reduction, and in the compiled mode the kernels
// of every element type. Included at the end of core/reduce.hpp (header-only) or by
// impl/src.hpp after it (compiled), never on its own.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

namespace strata {

STRATA_DECL void reduce_n(DataType type, void* out, const void* const* inputs,
                          std::size_t num_inputs, std::size_t count, ReduceOp op) {
  if (static_cast<unsigned>(type) > static_cast<unsigned>(DataType::float64)) {
    throw UsageError(-1, "reduce_n",
                     fmt::format("{} is not a DataType value", static_cast<unsigned>(type)),
                     "pass a DataType such as data_type_of<float>");
  }
  if (num_inputs > 0 && inputs == nullptr) {
    throw UsageError(-1, "reduce_n", "the array of input pointers is null",
                     "pass num_inputs pointers to count elements each");
  }
  if (count > 0 && out == nullptr) {
    throw UsageError(-1, "reduce_n", "out is null", "pass an output of count elements");
  }
  visit_data_type(type, [&]<class T>(std::type_identity<T>) {
    // Typed copies of the pointers: reading a `const void*` object as a `const T*` would
    // break aliasing rules.
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
  });
}

#if !STRATA_HEADER_ONLY
STRATA_REDUCE_KERNELS_OF_EVERY_ELEMENT()
#endif

}  // namespace strata
