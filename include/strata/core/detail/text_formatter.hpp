// strata/core/detail/text_formatter.hpp — the fmt formatter base of strata's types that print as
// text (enum names, addresses, tasks).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

#include <fmt/format.h>

namespace strata::detail {

/// Writes text under a spec of fill, alignment and width (`{:>8}`, `{:*^12}`, `{:6}`), which it
/// parses itself: fmt 9's spec parser, instantiated for a user type, trips a false g++ 12
/// -Wstringop-overflow at -O2 and -O3.
struct TextFormatter {
  char fill = ' ';
  char align = '<';
  std::size_t width = 0;

  constexpr auto parse(fmt::format_parse_context& ctx) {
    auto it = ctx.begin();
    const auto end = ctx.end();
    const auto is_align = [](char c) { return c == '<' || c == '>' || c == '^'; };
    if (it != end && it + 1 != end && is_align(*(it + 1)) && *it != '}') {
      fill = *it;
      align = *(it + 1);
      it += 2;
    } else if (it != end && is_align(*it)) {
      align = *it++;
    }
    for (; it != end && *it >= '0' && *it <= '9'; ++it)
      width = width * 10 + static_cast<std::size_t>(*it - '0');
    if (it != end && *it != '}')
      throw fmt::format_error("strata types take only fill, alignment and width");
    return it;
  }

  template <class FormatContext>
  auto write(std::string_view text, FormatContext& ctx) const {
    const std::size_t pad = width > text.size() ? width - text.size() : 0;
    const std::size_t before = align == '>' ? pad : align == '^' ? pad / 2 : 0;
    auto out = std::fill_n(ctx.out(), before, fill);
    out = std::copy(text.begin(), text.end(), out);
    return std::fill_n(out, pad - before, fill);
  }
};

}  // namespace strata::detail
