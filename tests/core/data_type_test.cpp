// Tests for strata/core/data_type.hpp and the ReduceOp vocabulary of strata/core/reduce_op.hpp.
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace {

using strata::DataType;
using strata::Element;
using strata::ReduceOp;

// The Element concept: exactly the eight supported types, cv-unqualified.
static_assert(Element<std::int8_t>);
static_assert(Element<std::uint8_t>);
static_assert(Element<std::int32_t>);
static_assert(Element<std::int64_t>);
static_assert(Element<strata::float16>);
static_assert(Element<strata::bfloat16>);
static_assert(Element<float>);
static_assert(Element<double>);
static_assert(!Element<std::int16_t>);
static_assert(!Element<std::uint16_t>);
static_assert(!Element<std::uint32_t>);
static_assert(!Element<std::uint64_t>);
static_assert(!Element<const float>);
static_assert(!Element<volatile double>);
static_assert(!Element<float&>);
static_assert(!Element<float*>);
static_assert(!Element<bool>);
static_assert(!Element<char>);  // a distinct type from both signed and unsigned char
static_assert(!Element<long double>);
static_assert(!Element<std::byte>);
static_assert(strata::ElementTypes::size == 8);

static_assert(strata::is_half_precision_v<strata::float16>);
static_assert(strata::is_half_precision_v<strata::bfloat16>);
static_assert(!strata::is_half_precision_v<float>);
static_assert(!strata::is_half_precision_v<std::int8_t>);

constexpr DataType kAllTypes[] = {DataType::int8,    DataType::uint8,   DataType::int32,
                                  DataType::int64,   DataType::float16, DataType::bfloat16,
                                  DataType::float32, DataType::float64};

template <class List>
struct AsTuple;
template <class... Ts>
struct AsTuple<strata::TypeList<Ts...>> {
  using type = std::tuple<Ts...>;
};

TEST_CASE("size_of gives the bytes of each element type") {
  CHECK(strata::size_of(DataType::int8) == 1);
  CHECK(strata::size_of(DataType::uint8) == 1);
  CHECK(strata::size_of(DataType::int32) == 4);
  CHECK(strata::size_of(DataType::int64) == 8);
  CHECK(strata::size_of(DataType::float16) == 2);
  CHECK(strata::size_of(DataType::bfloat16) == 2);
  CHECK(strata::size_of(DataType::float32) == 4);
  CHECK(strata::size_of(DataType::float64) == 8);
  CHECK(strata::size_of(static_cast<DataType>(200)) == 0);
  static_assert(strata::size_of(DataType::float64) == 8);  // usable at compile time
}

TEST_CASE("data_type_of names each element type, in ElementTypes order") {
  static_assert(strata::data_type_of<std::int8_t> == DataType::int8);
  static_assert(strata::data_type_of<std::uint8_t> == DataType::uint8);
  static_assert(strata::data_type_of<std::int32_t> == DataType::int32);
  static_assert(strata::data_type_of<std::int64_t> == DataType::int64);
  static_assert(strata::data_type_of<strata::float16> == DataType::float16);
  static_assert(strata::data_type_of<strata::bfloat16> == DataType::bfloat16);
  static_assert(strata::data_type_of<float> == DataType::float32);
  static_assert(strata::data_type_of<double> == DataType::float64);
  // ElementTypes lists the types in DataType order.
  const auto tags =
      std::apply([](auto... types) { return std::array{strata::data_type_of<decltype(types)>...}; },
                 AsTuple<strata::ElementTypes>::type{});
  for (std::size_t i = 0; i < tags.size(); ++i)
    CHECK(static_cast<std::size_t>(tags[i]) == i);
}

TEST_CASE("visit_data_type turns every tag back into its type") {
  for (const DataType type : kAllTypes) {
    CAPTURE(static_cast<int>(type));
    const DataType round_trip = strata::visit_data_type(
        type, []<class T>(std::type_identity<T>) { return strata::data_type_of<T>; });
    CHECK(round_trip == type);
    const std::size_t bytes =
        strata::visit_data_type(type, []<class T>(std::type_identity<T>) { return sizeof(T); });
    CHECK(bytes == strata::size_of(type));
  }
  // Usable in constant expressions, and the result type follows the callable.
  static_assert(strata::visit_data_type(DataType::bfloat16, []<class T>(std::type_identity<T>) {
    return std::is_same_v<T, strata::bfloat16>;
  }));
}

TEST_CASE("DataType and ReduceOp format with fmt") {
  CHECK(fmt::format("{}", DataType::int8) == "int8");
  CHECK(fmt::format("{}", DataType::uint8) == "uint8");
  CHECK(fmt::format("{}", DataType::int32) == "int32");
  CHECK(fmt::format("{}", DataType::int64) == "int64");
  CHECK(fmt::format("{}", DataType::float16) == "half");
  CHECK(fmt::format("{}", DataType::bfloat16) == "bfloat16");
  CHECK(fmt::format("{}", DataType::float32) == "float");
  CHECK(fmt::format("{}", DataType::float64) == "double");
  CHECK(fmt::format("{}", static_cast<DataType>(99)) == "invalid");
  CHECK(fmt::format("[{:>8}]", DataType::int8) == "[    int8]");  // format specs pass through

  CHECK(fmt::format("{}", ReduceOp::sum) == "sum");
  CHECK(fmt::format("{}", ReduceOp::product) == "product");
  CHECK(fmt::format("{}", ReduceOp::min) == "min");
  CHECK(fmt::format("{}", ReduceOp::max) == "max");
  CHECK(fmt::format("{}", ReduceOp::mean) == "mean");
  CHECK(fmt::format("{}", static_cast<ReduceOp>(99)) == "invalid");
  CHECK(fmt::format("[{:<5}]", ReduceOp::min) == "[min  ]");
  static_assert(strata::to_string(ReduceOp::mean) == "mean");
  static_assert(strata::to_string(DataType::float16) == "half");
}

TEST_CASE("kAllReduceOps lists every op once") {
  std::string names;
  for (const ReduceOp op : strata::kAllReduceOps)
    names += fmt::format("{} ", op);
  CHECK(names == "sum product min max mean ");
}

}  // namespace
