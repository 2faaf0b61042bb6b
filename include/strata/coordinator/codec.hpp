// strata/coordinator/codec.hpp — the bytes of a scheduled function's arguments and result.
//
// C++ cannot ship closures, so the coordinator ships a function's name and its arguments'
// bytes, and the worker ships the result's bytes back. Numbers travel little-endian with fixed
// widths, so tasks on different machines agree; strings, vectors, arrays, pairs and tuples
// nest. Other types opt in by specializing Codec. Decoding checks every length against the
// bytes there are: malformed bytes raise MismatchError, never read past the end.
#pragma once

#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/core/detail/little_endian.hpp>
#include <strata/core/error.hpp>

namespace strata::coordinator {

/// Appends values' bytes.
class Writer {
 public:
  // resize and memcpy rather than insert: g++ 12 at -O3 flags a false -Warray-bounds in
  // vector::insert of a few bytes.
  void bytes(std::span<const std::byte> data) {
    if (data.empty()) {
      return;
    }
    const std::size_t at = out_.size();
    out_.resize(at + data.size());
    std::memcpy(out_.data() + at, data.data(), data.size());
  }
  template <std::unsigned_integral U>
  void le(U value) {
    std::array<std::byte, sizeof(U)> raw{};
    strata::detail::store_le(raw.data(), value);
    bytes(raw);
  }
  std::vector<std::byte> take() && { return std::move(out_); }
  const std::vector<std::byte>& view() const noexcept { return out_; }

 private:
  std::vector<std::byte> out_;
};

/// Reads values' bytes in order; every read checks that the bytes are there.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> data) noexcept : data_(data) {}
  std::span<const std::byte> bytes(std::size_t count) {
    if (count > data_.size())
      throw MismatchError(-1, "coordinator",
                          fmt::format("{} bytes needed where {} are left", count, data_.size()),
                          "every task must run the same program, whose functions take the same "
                          "argument types");
    const auto taken = data_.first(count);
    data_ = data_.subspan(count);
    return taken;
  }
  template <std::unsigned_integral U>
  U le() {
    return strata::detail::load_le<U>(bytes(sizeof(U)).data());
  }
  std::size_t left() const noexcept { return data_.size(); }

 private:
  std::span<const std::byte> data_;
};

/// How a T becomes bytes and back: `static void encode(Writer&, const T&)` and
/// `static T decode(Reader&)`. Specialize it for types of your own.
template <class T, class = void>
struct Codec;

/// A type the coordinator can ship.
template <class T>
concept Shippable = requires(Writer& writer, Reader& reader, const T& value) {
  Codec<T>::encode(writer, value);
  { Codec<T>::decode(reader) } -> std::same_as<T>;
};

namespace detail {
template <class T>
using unsigned_of = std::conditional_t<
    sizeof(T) == 1, std::uint8_t,
    std::conditional_t<sizeof(T) == 2, std::uint16_t,
                       std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;

inline std::size_t length(Reader& reader, std::size_t element_bytes) {
  const std::uint64_t count = reader.le<std::uint64_t>();
  // At least element_bytes per element must still be there: a hostile length allocates nothing.
  if (element_bytes > 0 && count > reader.left() / element_bytes)
    throw MismatchError(-1, "coordinator",
                        fmt::format("a length of {} where {} bytes are left", count, reader.left()),
                        "every task must run the same program, whose functions take the same "
                        "argument types");
  return static_cast<std::size_t>(count);
}
}  // namespace detail

/// Integers, floating point, enums and bool: fixed width, little-endian.
template <class T>
struct Codec<T, std::enable_if_t<std::is_arithmetic_v<T> || std::is_enum_v<T>>> {
  using Bits = detail::unsigned_of<T>;
  static_assert(sizeof(T) == sizeof(Bits), "an arithmetic type of 1, 2, 4 or 8 bytes");
  static void encode(Writer& writer, const T& value) {
    Bits bits{};
    std::memcpy(&bits, &value, sizeof(T));
    writer.le(bits);
  }
  static T decode(Reader& reader) {
    const Bits bits = reader.le<Bits>();
    if constexpr (std::is_same_v<T, bool>) {
      if (bits > 1)
        throw MismatchError(-1, "coordinator", fmt::format("{} is not a bool", bits),
                            "every task must run the same program");
    }
    T value{};
    std::memcpy(&value, &bits, sizeof(T));
    return value;
  }
};

template <>
struct Codec<std::string> {
  static void encode(Writer& writer, const std::string& value) {
    writer.le(static_cast<std::uint64_t>(value.size()));
    writer.bytes(std::as_bytes(std::span(value)));
  }
  static std::string decode(Reader& reader) {
    const auto raw = reader.bytes(detail::length(reader, 1));
    return {reinterpret_cast<const char*>(raw.data()), raw.size()};
  }
};

template <Shippable T>
struct Codec<std::vector<T>> {
  static void encode(Writer& writer, const std::vector<T>& value) {
    writer.le(static_cast<std::uint64_t>(value.size()));
    for (const auto& element : value)
      Codec<T>::encode(writer, element);
  }
  static std::vector<T> decode(Reader& reader) {
    const std::size_t count = detail::length(reader, 1);
    std::vector<T> value;
    value.reserve(count);
    for (std::size_t i = 0; i < count; ++i)
      value.push_back(Codec<T>::decode(reader));
    return value;
  }
};

template <Shippable T, std::size_t N>
struct Codec<std::array<T, N>> {
  static void encode(Writer& writer, const std::array<T, N>& value) {
    for (const auto& element : value)
      Codec<T>::encode(writer, element);
  }
  static std::array<T, N> decode(Reader& reader) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      // Braced initialization evaluates in order.
      return std::array<T, N>{((void)I, Codec<T>::decode(reader))...};
    }
    (std::make_index_sequence<N>{});
  }
};

template <Shippable... T>
struct Codec<std::tuple<T...>> {
  static void encode(Writer& writer, const std::tuple<T...>& value) {
    std::apply([&](const auto&... element) { (Codec<T>::encode(writer, element), ...); }, value);
  }
  static std::tuple<T...> decode(Reader& reader) {
    return std::tuple<T...>{Codec<T>::decode(reader)...};
  }
};

template <Shippable A, Shippable B>
struct Codec<std::pair<A, B>> {
  static void encode(Writer& writer, const std::pair<A, B>& value) {
    Codec<A>::encode(writer, value.first);
    Codec<B>::encode(writer, value.second);
  }
  static std::pair<A, B> decode(Reader& reader) {
    A first = Codec<A>::decode(reader);
    return {std::move(first), Codec<B>::decode(reader)};
  }
};

/// The bytes of `value`.
template <Shippable T>
std::vector<std::byte> to_bytes(const T& value) {
  Writer writer;
  Codec<T>::encode(writer, value);
  return std::move(writer).take();
}

/// The value of `bytes`, which must hold exactly one T.
/// @throws MismatchError for bytes that are not one T.
template <Shippable T>
T from_bytes(std::span<const std::byte> bytes) {
  Reader reader(bytes);
  T value = Codec<T>::decode(reader);
  if (reader.left() != 0)
    throw MismatchError(-1, "coordinator",
                        fmt::format("{} bytes left over after the value", reader.left()),
                        "every task must run the same program, whose functions take the same "
                        "argument types");
  return value;
}

}  // namespace strata::coordinator
