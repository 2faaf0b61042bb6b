// strata/checkpoint/manager.hpp — a directory of numbered checkpoints with an index that names
// the complete ones, as tf.train.CheckpointManager keeps them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <strata/checkpoint/checkpoint.hpp>
#include <strata/config.hpp>

namespace strata::checkpoint {

/// One checkpoint a CheckpointManager keeps.
struct CheckpointEntry {
  std::int64_t step = 0;
  std::filesystem::path path;
  friend bool operator==(const CheckpointEntry&, const CheckpointEntry&) = default;
};

/// Saves checkpoints as `<directory>/ckpt-<step>.safetensors` and lists the kept ones, oldest
/// first, in the index file `<directory>/checkpoint`.
///
/// Crash safety: `save` writes the checkpoint atomically, then the index atomically, and only
/// then removes what the index no longer names. Whenever a process dies, the index names
/// complete checkpoints only, and `latest()` is the newest of them.
///
/// Retention: the newest `max_to_keep` checkpoints, plus every checkpoint whose step is a
/// multiple of `keep_every_n` (0: none), which are never removed.
///
/// One process writes (under MultiWorkerMirrored the chief, see docs/checkpoints.md); any
/// number read: every call reads the index afresh, so a reader sees the writer's saves.
class CheckpointManager {
 public:
  /// `rank` names this task in messages (-1: none). Creates `directory` if missing.
  /// @throws UsageError if `max_to_keep` is 0 or `keep_every_n` negative; CheckpointError if
  ///         the directory cannot be created.
  STRATA_DECL explicit CheckpointManager(std::filesystem::path directory,
                                         std::size_t max_to_keep = 5, std::int64_t keep_every_n = 0,
                                         int rank = -1);

  const std::filesystem::path& directory() const noexcept { return directory_; }

  /// Saves `checkpoint` as step `step` (replacing a checkpoint of the same step), updates the
  /// index and removes the checkpoints it no longer keeps, with any left behind by a writer that
  /// died. Returns the checkpoint's path.
  /// @throws CheckpointError on I/O failure: the index and the kept checkpoints are as before.
  STRATA_DECL std::filesystem::path save(const Checkpoint& checkpoint, std::int64_t step);

  /// The checkpoints kept, oldest first (empty before the first save).
  /// @throws CheckpointError if the index is damaged.
  STRATA_DECL std::vector<CheckpointEntry> checkpoints() const;

  /// The newest checkpoint, or nothing before the first save.
  std::optional<CheckpointEntry> latest() const {
    auto all = checkpoints();
    if (all.empty()) return std::nullopt;
    return all.back();
  }

  /// Restores the newest checkpoint into `checkpoint` and returns its step; nothing (and no
  /// change) when there is none yet.
  std::optional<std::int64_t> restore_latest(Checkpoint& checkpoint) const {
    auto newest = latest();
    if (!newest) return std::nullopt;
    checkpoint.restore(newest->path);
    return newest->step;
  }

  /// The index file's name and format tag.
  static constexpr std::string_view kIndexName = "checkpoint";
  static constexpr std::string_view kIndexFormat = "strata-checkpoint-index-1";

 private:
  std::filesystem::path directory_;
  std::size_t max_to_keep_;
  std::int64_t keep_every_n_;
  int rank_;
};

}  // namespace strata::checkpoint

#if STRATA_HEADER_ONLY
#include <strata/checkpoint/impl/manager.ipp>
#endif
