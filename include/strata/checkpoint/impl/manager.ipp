// strata/checkpoint/impl/manager.ipp — CheckpointManager's index (JSON, over nlohmann::json) and
// retention. Included at the end of checkpoint/manager.hpp (header-only) or by impl/src.hpp
// after it (compiled), never on its own.
#pragma once

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/impl/json.ipp>
#include <strata/core/error.hpp>

namespace strata::checkpoint {

namespace detail::manager {

inline std::string file_name(std::int64_t step) {
  return fmt::format("ckpt-{}.safetensors", step);
}

// The step of a checkpoint file's name ("ckpt-12.safetensors" → 12), or nothing.
inline std::optional<std::int64_t> step_of(std::string_view name) {
  constexpr std::string_view kPrefix = "ckpt-";
  constexpr std::string_view kSuffix = ".safetensors";
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix))
    return std::nullopt;
  const std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  std::int64_t step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size() || file_name(step) != name)
    return std::nullopt;
  return step;
}

// The pid in a temporary file's name (".strata-tmp.<name>.<pid>"), or nothing.
inline std::optional<pid_t> writer_of(std::string_view name) {
  if (!name.starts_with(kTemporaryPrefix)) return std::nullopt;
  const auto dot = name.rfind('.');
  pid_t pid = 0;
  const auto [end, error] = std::from_chars(name.data() + dot + 1, name.data() + name.size(), pid);
  if (error != std::errc() || end != name.data() + name.size() || pid <= 0) return std::nullopt;
  return pid;
}

}  // namespace detail::manager

STRATA_DECL CheckpointManager::CheckpointManager(std::filesystem::path directory,
                                                 std::size_t max_to_keep, std::int64_t keep_every_n,
                                                 int rank)
    : directory_(std::move(directory)),
      max_to_keep_(max_to_keep),
      keep_every_n_(keep_every_n),
      rank_(rank) {
  if (max_to_keep_ == 0 || keep_every_n_ < 0)
    throw UsageError(
        rank_, "CheckpointManager",
        fmt::format("max_to_keep is {} and keep_every_n {}", max_to_keep_, keep_every_n_),
        "keep at least one checkpoint, and pass keep_every_n >= 0 (0: none)");
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  if (error)
    throw file_error(FileContext{rank_, "CheckpointManager"}, "mkdir", directory_, error.value());
}

STRATA_DECL std::vector<CheckpointEntry> CheckpointManager::checkpoints() const {
  const FileContext context{rank_, "CheckpointManager::checkpoints"};
  const std::filesystem::path index_path = directory_ / kIndexName;
  std::error_code error;
  if (!std::filesystem::exists(index_path, error)) return {};
  File index = File::open_for_reading(index_path, context);
  const std::uint64_t size = index.size();
  const auto damaged = [&](std::string_view what) {
    return CheckpointError(rank_, context.operation,
                           fmt::format("the index {} is damaged: {}", index_path.string(), what),
                           "remove it to start over, or restore a checkpoint file by its path");
  };
  if (size > (std::uint64_t{16} << 20)) throw damaged(fmt::format("it has {} bytes", size));
  std::string text(static_cast<std::size_t>(size), '\0');
  index.read_at(std::as_writable_bytes(std::span(text)), 0);
  const auto parsed = detail::parse_json(text);
  const nlohmann::json& json = parsed.value;
  if (json.is_discarded() || !json.is_object() || json.value("format", "") != kIndexFormat ||
      !json.contains("checkpoints") || !json["checkpoints"].is_array())
    throw damaged(fmt::format("it is not a {} JSON object", kIndexFormat));
  std::vector<CheckpointEntry> entries;
  for (const auto& entry : json["checkpoints"]) {
    if (!entry.is_object() || !entry.contains("step") || !entry["step"].is_number_integer() ||
        !entry.contains("file") || !entry["file"].is_string())
      throw damaged("an entry lacks its integer step or file name");
    const std::int64_t step = entry["step"].get<std::int64_t>();
    const std::string name = entry["file"].get<std::string>();
    // Only names the manager writes: a damaged index must not point outside the directory.
    if (detail::manager::step_of(name) != step)
      throw damaged(fmt::format("entry {} names '{}', not ckpt-{}.safetensors", step, name, step));
    entries.push_back(CheckpointEntry{step, directory_ / name});
  }
  return entries;
}

STRATA_DECL std::filesystem::path CheckpointManager::save(const Checkpoint& checkpoint,
                                                          std::int64_t step) {
  const FileContext context{rank_, "CheckpointManager::save"};
  if (step < 0)
    throw UsageError(rank_, context.operation, fmt::format("step is {}", step),
                     "number checkpoints by a step >= 0 (the global step)");
  std::vector<CheckpointEntry> entries = checkpoints();
  const std::filesystem::path path = directory_ / detail::manager::file_name(step);
  checkpoint.save(path);

  std::erase_if(entries, [&](const CheckpointEntry& entry) { return entry.step == step; });
  entries.push_back(CheckpointEntry{step, path});
  std::vector<CheckpointEntry> kept;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const bool newest = entries.size() - i <= max_to_keep_;
    const bool milestone = keep_every_n_ > 0 && entries[i].step % keep_every_n_ == 0;
    if (newest || milestone) kept.push_back(entries[i]);
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& entry : kept)
    list.push_back({{"step", entry.step}, {"file", entry.path.filename().string()}});
  const std::string index =
      nlohmann::json{{"format", kIndexFormat}, {"checkpoints", std::move(list)}}.dump(1) + "\n";
  write_atomically(directory_ / kIndexName, context,
                   [&](File& out) { out.write_all(std::as_bytes(std::span(index))); });

  // What the index no longer names: dropped checkpoints, checkpoints a writer that died wrote
  // but never indexed, and temporary files of writers that died.
  std::set<std::filesystem::path> named;
  for (const auto& entry : kept)
    named.insert(entry.path.filename());
  std::error_code error;
  bool removed = false;
  for (std::filesystem::directory_iterator file(directory_, error), end; !error && file != end;
       file.increment(error)) {
    const std::string name = file->path().filename().string();
    const bool stale_checkpoint = detail::manager::step_of(name) && !named.contains(name);
    const auto writer = detail::manager::writer_of(name);
    const bool stale_temporary =
        writer && *writer != ::getpid() && ::kill(*writer, 0) != 0 && errno == ESRCH;
    if (stale_checkpoint || stale_temporary) removed |= ::unlink(file->path().c_str()) == 0;
  }
  if (removed) sync_directory(directory_, context);
  return path;
}

}  // namespace strata::checkpoint
