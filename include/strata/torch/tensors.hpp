// strata/torch/tensors.hpp — libtorch tensors as strata sees them: spans of their elements,
// tensors over spans, index tensors, and a replica's part of a global batch.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>
#include <torch/torch.h>

#include <strata/core/bfloat16.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/enum_names.hpp>
#include <strata/core/error.hpp>
#include <strata/core/float16.hpp>
#include <strata/data/batch_split.hpp>

namespace strata::torch {

/// The libtorch scalar type of strata element type T (float16 and bfloat16 share libtorch's
/// Half and BFloat16 bits).
template <Element T>
constexpr c10::ScalarType scalar_type_of() noexcept {
  if constexpr (std::same_as<T, float>)
    return c10::ScalarType::Float;
  else if constexpr (std::same_as<T, double>)
    return c10::ScalarType::Double;
  else if constexpr (std::same_as<T, std::int64_t>)
    return c10::ScalarType::Long;
  else if constexpr (std::same_as<T, std::int32_t>)
    return c10::ScalarType::Int;
  else if constexpr (std::same_as<T, std::int8_t>)
    return c10::ScalarType::Char;
  else if constexpr (std::same_as<T, std::uint8_t>)
    return c10::ScalarType::Byte;
  else if constexpr (std::same_as<T, float16>)
    return c10::ScalarType::Half;
  else
    return c10::ScalarType::BFloat16;
}

/// The elements of `tensor` as a span, without a copy: the tensor must be defined, on the CPU,
/// strided and contiguous, with elements of type T. `name` says which tensor in messages.
/// @throws UsageError naming what is wrong and how to fix it.
template <Element T>
std::span<T> as_span(const at::Tensor& tensor, std::string_view name = "tensor") {
  const auto fail = [&](std::string what, std::string_view fix) {
    throw UsageError(-1, "torch::as_span", fmt::format("{} {}", name, what), fix);
  };
  if (!tensor.defined())
    fail("is undefined", "pass a defined tensor (a parameter's .grad() exists after backward)");
  if (!tensor.device().is_cpu())
    fail(fmt::format("is on {}, not the CPU", tensor.device().str()),
         "strata's host communicators take CPU tensors: .to(torch::kCPU)");
  if (tensor.layout() != c10::kStrided)
    fail("is not strided (sparse?)", "pass a dense tensor (.to_dense())");
  if (tensor.scalar_type() != scalar_type_of<T>())
    fail(fmt::format("holds {}, not {}", c10::toString(tensor.scalar_type()),
                     c10::toString(scalar_type_of<T>())),
         "convert it (.to(...)) or view it with the matching element type");
  if (!tensor.is_contiguous())
    fail("is not contiguous", "pass .contiguous() (a copy) or a contiguous tensor");
  return {static_cast<T*>(tensor.data_ptr()), static_cast<std::size_t>(tensor.numel())};
}

/// A one-dimensional tensor over `values`, without a copy (torch::from_blob): the caller keeps
/// the values alive while the tensor is used.
template <Element T>
at::Tensor as_tensor(std::span<T> values) {
  return ::torch::from_blob(static_cast<void*>(values.data()),
                            {static_cast<std::int64_t>(values.size())},
                            at::TensorOptions().dtype(scalar_type_of<T>()));
}

/// A sampler's indices (data::Sampler, data::shard_indices) as the int64 tensor libtorch's
/// indexing takes (index_select, index), copied.
/// @throws UsageError for an index beyond int64's range.
inline at::Tensor to_index_tensor(std::span<const std::size_t> indices) {
  at::Tensor out = at::empty({static_cast<std::int64_t>(indices.size())}, at::kLong);
  auto* data = out.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()))
      throw UsageError(-1, "torch::to_index_tensor",
                       fmt::format("index {} ({}) does not fit int64", i, indices[i]),
                       "pass indices below 2^63");
    data[i] = static_cast<std::int64_t>(indices[i]);
  }
  return out;
}

/// Replica `replica`'s part of a global batch, along its first dimension (data::split_batch: a
/// balanced contiguous block), as a view: examples, labels, or an int64 tensor of indices.
/// @throws UsageError for a tensor without dimensions or a replica out of range.
inline at::Tensor split_batch(const at::Tensor& batch, int replica, int num_replicas) {
  if (!batch.defined() || batch.dim() == 0)
    throw UsageError(-1, "torch::split_batch", "the batch has no first dimension to split",
                     "pass a tensor whose first dimension is the global batch");
  if (replica < 0 || num_replicas <= 0)
    throw UsageError(-1, "torch::split_batch",
                     fmt::format("replica {} of {} replicas", replica, num_replicas),
                     "pass a replica in [0, num_replicas)");
  const data::Slice slice =
      data::split_batch(static_cast<std::size_t>(batch.size(0)), static_cast<std::size_t>(replica),
                        static_cast<std::size_t>(num_replicas));
  return batch.narrow(0, static_cast<std::int64_t>(slice.offset),
                      static_cast<std::int64_t>(slice.size));
}

/// The calling replica's part of a global batch (inside Strategy::run).
template <class Context>
requires requires(const Context& context) {
  context.num_replicas_in_sync();
}
at::Tensor split_batch(const at::Tensor& batch, const Context& context) {
  return split_batch(batch, context.replica_id_in_sync_group(), context.num_replicas_in_sync());
}

namespace detail {

// The strata element type of a libtorch scalar type, if strata has one.
inline std::optional<DataType> data_type_of(c10::ScalarType type) noexcept {
  for (std::size_t i = 0; i < EnumNames<DataType>::kNames.size(); ++i) {
    const auto candidate = static_cast<DataType>(i);
    const c10::ScalarType scalar = visit_data_type(
        candidate, [](auto tag) { return scalar_type_of<typename decltype(tag)::type>(); });
    if (scalar == type) return candidate;
  }
  return std::nullopt;
}

// Calls f(as_span<T>(tensor)) with T the tensor's element type.
template <class F>
void visit_elements(const at::Tensor& tensor, std::string_view name, F&& f) {
  const std::optional<DataType> type =
      tensor.defined() ? data_type_of(tensor.scalar_type()) : std::nullopt;
  if (!type)
    throw UsageError(
        -1, "torch",
        fmt::format("{} holds {}", name,
                    tensor.defined() ? c10::toString(tensor.scalar_type()) : "nothing (undefined)"),
        "strata's collectives take float, double, half, bfloat16, int8, uint8, "
        "int32 and int64 tensors");
  visit_data_type(*type, [&](auto tag) { f(as_span<typename decltype(tag)::type>(tensor, name)); });
}

}  // namespace detail

}  // namespace strata::torch
