// strata/checkpoint/impl/safetensors.ipp — the safetensors header's writer and checking reader,
// over nlohmann::json. Included at the end of checkpoint/safetensors.hpp (header-only) or by
// impl/src.hpp after it (compiled), never on its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <strata/checkpoint/impl/json.ipp>
#include <strata/core/data_type.hpp>
#include <strata/core/detail/little_endian.hpp>
#include <strata/core/error.hpp>

namespace strata::checkpoint {

namespace detail::safetensors {

inline constexpr std::string_view kMetadataKey = "__metadata__";

// The product of `shape` times `element_bytes`, or nothing when it overflows 64 bits.
inline std::optional<std::uint64_t> bytes_of(std::span<const std::uint64_t> shape,
                                             std::uint64_t element_bytes) {
  std::uint64_t bytes = element_bytes;
  for (const std::uint64_t extent : shape) {
    if (extent != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / extent)
      return std::nullopt;
    bytes *= extent;
  }
  return bytes;
}

// A name as messages quote it: printable ASCII as is, anything else escaped, at most 80 bytes.
inline std::string quoted(std::string_view name) {
  std::string out = "'";
  for (std::size_t i = 0; i < name.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7F && c != '\'')
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out + (name.size() > 80 ? "...'" : "'");
}

// The error for a file that breaks the format: truncated, damaged, or not safetensors at all.
inline CheckpointError not_safetensors(int rank, std::string_view operation,
                                       std::string_view source, std::string_view what_happened) {
  return CheckpointError(
      rank, operation, fmt::format("{} is not a valid safetensors file: {}", source, what_happened),
      "restore from another checkpoint (CheckpointManager::checkpoints() lists "
      "them); this one is damaged or was not written by safetensors");
}

}  // namespace detail::safetensors

STRATA_DECL std::string encode_header(std::span<const TensorInfo> tensors,
                                      const std::map<std::string, std::string>& metadata) {
  namespace st = detail::safetensors;
  constexpr std::string_view kOperation = "checkpoint::encode_header";
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(st::kMetadataKey)] = metadata;
  std::uint64_t offset = 0;
  std::set<std::string_view> names;
  for (const auto& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == st::kMetadataKey || !names.insert(tensor.name).second)
      throw UsageError(
          -1, kOperation,
          fmt::format("tensor name {} is empty, reserved or repeated", st::quoted(tensor.name)),
          "give every tensor its own non-empty name");
    const auto bytes = st::bytes_of(tensor.shape, size_of(tensor.dtype));
    if (tensor.begin != offset || tensor.end < tensor.begin || !bytes || *bytes != tensor.bytes())
      throw UsageError(-1, kOperation,
                       fmt::format("tensor {} has offsets [{}, {}) where [{}, {}) was expected",
                                   st::quoted(tensor.name), tensor.begin, tensor.end, offset,
                                   offset + bytes.value_or(0)),
                       "lay the tensors out back to back, each of shape x element size bytes");
    header[tensor.name] = {{"dtype", safetensors_dtype(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {tensor.begin, tensor.end}}};
    offset = tensor.end;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  strata::detail::store_le(reinterpret_cast<std::byte*>(out.data()),
                           static_cast<std::uint64_t>(json.size()));
  return out + json;
}

STRATA_DECL Header parse_header(std::string_view json, std::uint64_t data_bytes,
                                std::string_view source) {
  namespace st = detail::safetensors;
  const auto fail = [&](std::string_view what_happened) {
    return detail::safetensors::not_safetensors(-1, "checkpoint::read", source, what_happened);
  };
  if (json.empty() || json.front() != '{') throw fail("its header does not start with '{'");
  const auto parsed = detail::parse_json(json);
  if (parsed.too_deep)
    throw fail(fmt::format("its header nests deeper than {} levels", detail::kMaxJsonDepth));
  const nlohmann::json& header = parsed.value;
  if (header.is_discarded()) throw fail("its header is not JSON (or not UTF-8)");
  if (!header.is_object()) throw fail("its header is not a JSON object");

  Header result;
  result.data_start = 8 + json.size();
  for (const auto& item : header.items()) {
    const std::string& key = item.key();  // not a structured binding: lambdas capture it
    const auto& value = item.value();
    if (key == st::kMetadataKey) {
      if (!value.is_object()) throw fail("__metadata__ is not an object");
      for (const auto& [name, text] : value.items()) {
        if (!text.is_string())
          throw fail(fmt::format("__metadata__ entry {} is not a string", st::quoted(name)));
        result.metadata.emplace(name, text.get<std::string>());
      }
      continue;
    }
    const auto entry_fail = [&](std::string_view what) {
      return fail(fmt::format("tensor {}: {}", st::quoted(key), what));
    };
    if (!value.is_object()) throw entry_fail("its entry is not an object");
    const auto dtype = value.find("dtype");
    const auto shape = value.find("shape");
    const auto offsets = value.find("data_offsets");
    if (dtype == value.end() || !dtype->is_string()) throw entry_fail("no dtype string");
    if (shape == value.end() || !shape->is_array()) throw entry_fail("no shape array");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
      throw entry_fail("data_offsets is not a pair of non-negative integers");
    TensorInfo tensor;
    tensor.name = key;
    const auto type = data_type_from_safetensors(dtype->get<std::string>());
    if (!type)
      throw entry_fail(
          fmt::format("dtype {} is not one strata reads (I8, U8, I32, I64, F16, "
                      "BF16, F32, F64)",
                      st::quoted(dtype->get<std::string>())));
    tensor.dtype = *type;
    for (const auto& extent : *shape) {
      if (!extent.is_number_unsigned())
        throw entry_fail("a shape entry is not a non-negative integer");
      tensor.shape.push_back(extent.get<std::uint64_t>());
    }
    tensor.begin = (*offsets)[0].get<std::uint64_t>();
    tensor.end = (*offsets)[1].get<std::uint64_t>();
    if (tensor.begin > tensor.end || tensor.end > data_bytes)
      throw entry_fail(fmt::format("data_offsets [{}, {}) are not within the {} bytes of data",
                                   tensor.begin, tensor.end, data_bytes));
    const auto bytes = st::bytes_of(tensor.shape, size_of(tensor.dtype));
    if (!bytes || *bytes != tensor.bytes())
      throw entry_fail(
          fmt::format("data_offsets [{}, {}) hold {} bytes, but its shape and dtype "
                      "need {}",
                      tensor.begin, tensor.end, tensor.bytes(),
                      bytes ? fmt::format("{}", *bytes) : std::string("over 2^64")));
    result.tensors.push_back(std::move(tensor));
  }
  // The tensors must tile the data: no byte read twice (overlap) or never (a hole).
  std::sort(result.tensors.begin(), result.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  for (const auto& tensor : result.tensors) {
    if (tensor.begin != covered)
      throw fail(
          fmt::format("tensor {} starts at byte {} of the data, where {} were expected "
                      "(tensors overlap or leave a hole)",
                      st::quoted(tensor.name), tensor.begin, covered));
    covered = tensor.end;
  }
  if (covered != data_bytes)
    throw fail(fmt::format("its tensors cover {} bytes of the {} that follow the header", covered,
                           data_bytes));
  return result;
}

}  // namespace strata::checkpoint
