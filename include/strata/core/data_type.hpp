// strata/core/data_type.hpp — the element types collectives move and reduce.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include <strata/core/bfloat16.hpp>
#include <strata/core/enum_names.hpp>
#include <strata/core/float16.hpp>

namespace strata {

/// Run-time tag of an element type; carried in every collective's descriptor so that ranks
/// calling with different types get a `MismatchError` instead of reinterpreted bytes.
enum class DataType : std::uint8_t {
  int8,
  uint8,
  int32,
  int64,
  float16,
  bfloat16,
  float32,
  float64
};

}  // namespace strata

/// nccl-tests' names of the types.
template <>
struct strata::EnumNames<strata::DataType> {
  static constexpr std::array<std::string_view, 8> kNames{"int8", "uint8",    "int32", "int64",
                                                          "half", "bfloat16", "float", "double"};
};

namespace strata {

/// A compile-time list of types (used to sweep element types in tests and benchmarks).
template <class... Ts>
struct TypeList {
  static constexpr std::size_t size = sizeof...(Ts);
};

/// Every element type strata supports, in `DataType` order.
using ElementTypes = TypeList<std::int8_t, std::uint8_t, std::int32_t, std::int64_t, float16,
                              bfloat16, float, double>;

namespace detail {
template <class T, class List>
struct IsOneOf;
template <class T, class... Ts>
struct IsOneOf<T, TypeList<Ts...>> : std::bool_constant<(std::same_as<T, Ts> || ...)> {};
}  // namespace detail

/// T models Element if it is one of `ElementTypes` (cv-unqualified). The set is closed because
/// every type needs reduction kernels and a wire tag; NCCL and MPI make the same choice.
template <class T>
concept Element = detail::IsOneOf<T, ElementTypes>::value;

/// The `DataType` tag of an element type.
template <Element T>
inline constexpr DataType data_type_of = [] {
  if constexpr (std::same_as<T, std::int8_t>)
    return DataType::int8;
  else if constexpr (std::same_as<T, std::uint8_t>)
    return DataType::uint8;
  else if constexpr (std::same_as<T, std::int32_t>)
    return DataType::int32;
  else if constexpr (std::same_as<T, std::int64_t>)
    return DataType::int64;
  else if constexpr (std::same_as<T, float16>)
    return DataType::float16;
  else if constexpr (std::same_as<T, bfloat16>)
    return DataType::bfloat16;
  else if constexpr (std::same_as<T, float>)
    return DataType::float32;
  else
    return DataType::float64;
}();

/// True for the 16-bit floating-point storage types, which reduce in float.
template <class T>
inline constexpr bool is_half_precision_v = std::same_as<T, float16> || std::same_as<T, bfloat16>;

/// Bytes per element of `type`.
constexpr std::size_t size_of(DataType type) noexcept {
  switch (type) {
    case DataType::int8:
    case DataType::uint8:
      return 1;
    case DataType::float16:
    case DataType::bfloat16:
      return 2;
    case DataType::int32:
    case DataType::float32:
      return 4;
    case DataType::int64:
    case DataType::float64:
      return 8;
  }
  return 0;
}

/// Calls `f(std::type_identity<T>{})` with the element type named by `type` and returns its
/// result: the one place where a run-time tag becomes a static type.
template <class F>
constexpr decltype(auto) visit_data_type(DataType type, F&& f) {
  switch (type) {
    case DataType::int8:
      return std::forward<F>(f)(std::type_identity<std::int8_t>{});
    case DataType::uint8:
      return std::forward<F>(f)(std::type_identity<std::uint8_t>{});
    case DataType::int32:
      return std::forward<F>(f)(std::type_identity<std::int32_t>{});
    case DataType::int64:
      return std::forward<F>(f)(std::type_identity<std::int64_t>{});
    case DataType::float16:
      return std::forward<F>(f)(std::type_identity<float16>{});
    case DataType::bfloat16:
      return std::forward<F>(f)(std::type_identity<bfloat16>{});
    case DataType::float32:
      return std::forward<F>(f)(std::type_identity<float>{});
    case DataType::float64:
      break;
  }
  return std::forward<F>(f)(std::type_identity<double>{});
}

}  // namespace strata
