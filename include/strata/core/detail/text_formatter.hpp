// strata/core/detail/text_formatter.hpp — the fmt formatter base of strata's types that print as
// text (enum names, addresses, tasks).
#pragma once

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

namespace strata::detail {

/// Parses an empty format spec and writes text. Deliberately not fmt::formatter<string_view>:
/// fmt 9's spec parser, instantiated for a user type, trips a false g++ 12 -Wstringop-overflow
/// at -O3. For width or alignment, format `to_string(value)` instead.
struct TextFormatter {
  constexpr auto parse(fmt::format_parse_context& ctx) {
    auto it = ctx.begin();
    if (it != ctx.end() && *it != '}')
      throw fmt::format_error("strata types take no format spec; format to_string(value)");
    return it;
  }

  template <class FormatContext>
  auto write(std::string_view text, FormatContext& ctx) const {
    return std::copy(text.begin(), text.end(), ctx.out());
  }
};

}  // namespace strata::detail
