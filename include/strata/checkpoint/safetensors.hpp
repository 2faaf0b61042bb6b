// strata/checkpoint/safetensors.hpp — the safetensors layout: an 8-byte little-endian header
// length, a JSON header, then the tensors' bytes back to back.
//
// https://github.com/huggingface/safetensors: the header maps each tensor's name to its dtype,
// shape and [begin, end) offsets into the data that follows, plus an optional "__metadata__"
// map of strings. strata writes and reads exactly that, so other tools read its checkpoints and
// it reads theirs (in the element types strata has).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/config.hpp>
#include <strata/core/data_type.hpp>

namespace strata::checkpoint {

/// The safetensors names of strata's element types, in `DataType` order.
inline constexpr std::array<std::string_view, 8> kSafetensorsDtypes{"I8",  "U8",   "I32", "I64",
                                                                    "F16", "BF16", "F32", "F64"};

/// The safetensors name of `type` ("F32", "BF16", ...).
constexpr std::string_view safetensors_dtype(DataType type) noexcept {
  return kSafetensorsDtypes[static_cast<std::size_t>(type)];
}

/// The element type a safetensors dtype names; nothing for the dtypes strata has no type for
/// (BOOL, I16, U16, U32, U64, the 8-bit floats) and for names that are no dtype.
constexpr std::optional<DataType> data_type_from_safetensors(std::string_view dtype) noexcept {
  for (std::size_t i = 0; i < kSafetensorsDtypes.size(); ++i)
    if (kSafetensorsDtypes[i] == dtype) return static_cast<DataType>(i);
  return std::nullopt;
}

/// One tensor of a file: its name, element type, shape, and its bytes at [begin, end) of the
/// data that follows the header.
struct TensorInfo {
  std::string name;
  DataType dtype = DataType::float32;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  std::uint64_t bytes() const noexcept { return end - begin; }
  friend bool operator==(const TensorInfo&, const TensorInfo&) = default;
};

/// A parsed header: the tensors in the order of their offsets, the "__metadata__" strings, and
/// where the data starts in the file (8 + the header's length).
struct Header {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  std::uint64_t data_start = 0;

  /// The tensor named `name`, or nullptr.
  const TensorInfo* find(std::string_view name) const noexcept {
    for (const auto& tensor : tensors)
      if (tensor.name == name) return &tensor;
    return nullptr;
  }
};

/// The largest header strata reads, as the reference implementation limits it (100 MB): a
/// length beyond it is damage, and reading it would allocate that much first.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

/// The header for `tensors` (in this order; their offsets must be contiguous from 0) and
/// `metadata`, padded with spaces to a multiple of 8 bytes so that the data starts 8-aligned.
/// The result starts with its own 8-byte length prefix.
/// @throws UsageError ("checkpoint::encode_header") if the offsets are not contiguous, a size
///         does not match the shape and type, or a name is empty, repeated or "__metadata__".
STRATA_DECL std::string encode_header(std::span<const TensorInfo> tensors,
                                      const std::map<std::string, std::string>& metadata);

/// Parses the JSON header `json` of a file whose data (after the header) has `data_bytes` bytes
/// and checks it as the reference implementation does: every entry has a known dtype, a shape of
/// non-negative integers whose product times the element size is its size, and offsets within
/// the data; the tensors cover the data exactly, without overlaps or holes; "__metadata__", if
/// present, maps strings to strings. `source` names the file in messages.
/// @throws CheckpointError ("checkpoint::read") naming the file and the entry at fault.
STRATA_DECL Header parse_header(std::string_view json, std::uint64_t data_bytes,
                                std::string_view source);

}  // namespace strata::checkpoint

#if STRATA_HEADER_ONLY
#include <strata/checkpoint/impl/safetensors.ipp>
#endif
