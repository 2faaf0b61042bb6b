// strata/checkpoint/impl/checkpoint.ipp — Checkpoint's save and restore, and its JSON metadata
// over nlohmann::json. Included at the end of checkpoint/checkpoint.hpp (header-only) or by
// impl/src.hpp after it (compiled), never on its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/impl/json.ipp>
#include <strata/checkpoint/impl/safetensors.ipp>  // not_safetensors, whichever .ipp comes first
#include <strata/checkpoint/safetensors.hpp>
#include <strata/config.hpp>
#include <strata/core/detail/little_endian.hpp>
#include <strata/core/error.hpp>

namespace strata::checkpoint {

namespace detail::checkpoint_file {

// Opens `path` and reads its header, checking the length prefix before allocating for it.
inline std::pair<File, Header> open(const std::filesystem::path& path, FileContext context) {
  File file = File::open_for_reading(path, context);
  const std::uint64_t size = file.size();
  const auto damaged = [&](std::string_view what) {
    return detail::safetensors::not_safetensors(context.rank, context.operation, path.string(),
                                                what);
  };
  if (size < 8)
    throw damaged(fmt::format("it has {} bytes, fewer than the 8 of its header length", size));
  std::byte prefix[8];
  file.read_at(prefix, 0);
  const auto length = strata::detail::load_le<std::uint64_t>(prefix);
  if (length > kMaxHeaderBytes || length > size - 8)
    throw damaged(
        fmt::format("its header length is {} bytes, but the file has {} after it (and "
                    "headers are at most {})",
                    length, size - 8, kMaxHeaderBytes));
  std::string json(static_cast<std::size_t>(length), '\0');
  file.read_at(std::as_writable_bytes(std::span(json)), 8);
  Header header = parse_header(json, size - 8 - length, path.string());
  return {std::move(file), std::move(header)};
}

}  // namespace detail::checkpoint_file

STRATA_DECL void Checkpoint::save(const std::filesystem::path& file) const {
  Contents contents;
  for (const auto& item : items_)
    item.collect(contents);
  contents.metadata[std::string(kFormatKey)] = kFormat;
  if (!user_metadata_.empty()) contents.metadata[std::string(kUserKey)] = user_metadata_;
  // Largest elements first: every tensor then starts aligned to its element size.
  std::stable_sort(
      contents.tensors.begin(), contents.tensors.end(),
      [](const Piece& a, const Piece& b) { return size_of(a.dtype) > size_of(b.dtype); });
  std::vector<TensorInfo> tensors;
  tensors.reserve(contents.tensors.size());
  std::uint64_t offset = 0;
  for (const auto& piece : contents.tensors) {
    tensors.push_back(
        TensorInfo{piece.name, piece.dtype, piece.shape, offset, offset + piece.bytes.size()});
    offset += piece.bytes.size();
  }
  const std::string header = encode_header(tensors, contents.metadata);
  write_atomically(file, FileContext{rank_, "Checkpoint::save"}, [&](File& out) {
    out.write_all(std::as_bytes(std::span(header)));
    for (const auto& piece : contents.tensors)
      out.write_all(piece.bytes);
  });
}

STRATA_DECL void Checkpoint::restore(const std::filesystem::path& file) {
  auto [in, header] =
      detail::checkpoint_file::open(file, FileContext{rank_, "Checkpoint::restore"});
  Plan plan;
  plan.source = file.string();
  plan.file = &in;
  plan.data_start = header.data_start;
  const auto format = header.metadata.find(std::string(kFormatKey));
  if (format != header.metadata.end() && format->second != kFormat)
    throw restore_error(plan,
                        fmt::format("its format is '{}', which this strata ({}) does not read",
                                    format->second, kFormat),
                        "restore it with the strata version that wrote it");
  for (const auto& item : items_)
    item.plan(*this, header, plan);
  for (const auto& read : plan.reads)
    read(in, header.data_start);
  const auto user = header.metadata.find(std::string(kUserKey));
  user_metadata_ = user != header.metadata.end() ? user->second : std::string();
}

STRATA_DECL Header Checkpoint::read_header(const std::filesystem::path& file, int rank) {
  return detail::checkpoint_file::open(file, FileContext{rank, "Checkpoint::read_header"}).second;
}

STRATA_DECL std::string Checkpoint::encode_sampler(const data::EpochSamplerOptions& options,
                                                   data::SamplerPosition position) {
  return nlohmann::ordered_json{{"epoch", position.epoch},
                                {"step", position.step},
                                {"num_examples", options.num_examples},
                                {"global_batch", options.global_batch},
                                {"seed", options.seed},
                                {"shuffle", options.shuffle},
                                {"drop_remainder", options.drop_remainder}}
      .dump();
}

STRATA_DECL std::pair<data::EpochSamplerOptions, data::SamplerPosition> Checkpoint::decode_sampler(
    std::string_view json, std::string_view source, std::string_view name, int rank) {
  const nlohmann::json entry = detail::parse_json(json).value;
  const auto number = [&](const char* key) -> std::uint64_t {
    if (!entry.is_object() || !entry.contains(key) || !entry[key].is_number_unsigned())
      throw CheckpointError(rank, "Checkpoint::restore",
                            fmt::format("{}: the entry of sampler '{}' has no non-negative "
                                        "integer '{}'",
                                        source, name, key),
                            "restore from another checkpoint; this one is damaged");
    return entry[key].get<std::uint64_t>();
  };
  const auto flag = [&](const char* key) -> bool {
    if (!entry.is_object() || !entry.contains(key) || !entry[key].is_boolean())
      throw CheckpointError(
          rank, "Checkpoint::restore",
          fmt::format("{}: the entry of sampler '{}' has no boolean '{}'", source, name, key),
          "restore from another checkpoint; this one is damaged");
    return entry[key].get<bool>();
  };
  data::EpochSamplerOptions options;
  options.num_examples = static_cast<std::size_t>(number("num_examples"));
  options.global_batch = static_cast<std::size_t>(number("global_batch"));
  options.seed = number("seed");
  options.shuffle = flag("shuffle");
  options.drop_remainder = flag("drop_remainder");
  data::SamplerPosition position;
  position.epoch = number("epoch");
  position.step = static_cast<std::size_t>(number("step"));
  return {options, position};
}

STRATA_DECL std::string Checkpoint::describe_difference(const data::EpochSamplerOptions& saved,
                                                        const data::EpochSamplerOptions& now) {
  std::string differences;  // joined by hand, as describe_shape says why
  const auto compare = [&](std::string_view field, auto a, auto b) {
    if (a == b) return;
    if (!differences.empty()) differences += ", ";
    differences += fmt::format("{} {} (this run: {})", field, a, b);
  };
  compare("num_examples", saved.num_examples, now.num_examples);
  compare("global_batch", saved.global_batch, now.global_batch);
  compare("seed", saved.seed, now.seed);
  compare("shuffle", saved.shuffle, now.shuffle);
  compare("drop_remainder", saved.drop_remainder, now.drop_remainder);
  return differences;
}

STRATA_DECL bool Checkpoint::is_json(std::string_view text) {
  return nlohmann::json::accept(text);
}

}  // namespace strata::checkpoint
