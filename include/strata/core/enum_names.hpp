// strata/core/enum_names.hpp — one way to name strata's enums, in messages and with fmt.
//
// An enum opts in by specializing `EnumNames` with its names in the order of its values, which
// run from 0 without gaps; `to_string` and `fmt::formatter` then work for it, and a value
// outside the list reads "invalid" (as bytes off the wire may be).
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include <strata/core/detail/text_formatter.hpp>

namespace strata {

/// Specialize for an enum E: `static constexpr std::array<std::string_view, N> kNames`, the
/// name of value i at index i.
template <class E>
struct EnumNames;

/// E has names strata can print.
template <class E>
concept NamedEnum = std::is_enum_v<E> && requires {
  { EnumNames<E>::kNames.size() } -> std::convertible_to<std::size_t>;
};

/// The name of `value`, or "invalid" for a value without one.
template <NamedEnum E>
constexpr std::string_view to_string(E value) noexcept {
  const auto index = static_cast<std::size_t>(static_cast<std::underlying_type_t<E>>(value));
  constexpr auto& names = EnumNames<E>::kNames;
  return index < names.size() ? names[index] : std::string_view("invalid");
}

}  // namespace strata

template <strata::NamedEnum E>
struct fmt::formatter<E> : strata::detail::TextFormatter {
  template <class FormatContext>
  auto format(E value, FormatContext& ctx) const {
    return write(strata::to_string(value), ctx);
  }
};
