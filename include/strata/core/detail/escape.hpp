// strata/core/detail/escape.hpp — text from outside (TF_CONFIG, a peer's abort reason) made safe
// to put in a message.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace strata::detail {

/// `text` for a message: bytes outside printable ASCII become \xNN (the text may be anything a
/// user, a fuzzer or a hostile peer wrote: no control characters or invalid UTF-8 reach a log),
/// and only the first `max_shown` bytes are kept, followed by "..." when cut.
inline std::string escaped(std::string_view text, std::size_t max_shown) {
  std::string out;
  const std::size_t shown = text.size() <= max_shown ? text.size() : max_shown;
  for (std::size_t i = 0; i < shown; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 || byte >= 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += static_cast<char>(byte);
    }
  }
  if (shown < text.size()) out += "...";
  return out;
}

}  // namespace strata::detail
