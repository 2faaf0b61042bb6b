// strata/checkpoint/impl/json.ipp — how the checkpoint readers parse the JSON of a file (a
// safetensors header, a sampler's entry, the manager's index): without the parser's exceptions,
// whose messages quote the input, and with a depth cap, because nested brackets cost the parser
// memory per level (a 16 MB header of '[' took 11 GB) and a damaged file must not exhaust it.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace strata::checkpoint::detail {

/// The deepest nesting a checkpoint's JSON has is 3 (header, tensor, shape); this leaves room
/// for what other safetensors writers add.
inline constexpr int kMaxJsonDepth = 16;

struct ParsedJson {
  nlohmann::json value;  // discarded when the text is not JSON or nests too deep
  bool too_deep = false;
};

inline ParsedJson parse_json(std::string_view text) {
  struct TooDeep {};
  ParsedJson parsed;
  try {
    parsed.value = nlohmann::json::parse(
        text,
        [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
          if (depth > kMaxJsonDepth) throw TooDeep{};  // stops the parse, unlike returning false
          return true;
        },
        /*allow_exceptions=*/false);
  } catch (const TooDeep&) {
    parsed.value = nlohmann::json(nlohmann::json::value_t::discarded);
    parsed.too_deep = true;
  }
  return parsed;
}

}  // namespace strata::checkpoint::detail
