// strata/core/detail/join.hpp — "a, b, c" for messages.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace strata::detail {

/// The items of `range`, formatted with "{}" and separated by `separator`. Not fmt::join: its
/// formatter runs fmt 9's spec parser for the items, which trips a false g++ 12
/// -Wstringop-overflow at -O3.
template <class Range>
std::string join(const Range& range, std::string_view separator) {
  std::string text;
  bool first = true;
  for (const auto& item : range) {
    if (!first) text += separator;
    first = false;
    text += fmt::format("{}", item);
  }
  return text;
}

}  // namespace strata::detail
