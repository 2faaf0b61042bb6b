// strata/data/sampler.hpp — which examples every replica of every worker reads at each step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <strata/core/error.hpp>
#include <strata/data/batch_split.hpp>
#include <strata/data/shuffle.hpp>

namespace strata::data {

/// What an `EpochSampler` samples. A plain struct; use designated initializers.
struct EpochSamplerOptions {
  std::size_t num_examples = 0;  ///< examples in the dataset, indexed 0 .. num_examples-1
  std::size_t global_batch = 0;  ///< examples per step over all replicas of all workers; >= 1
  std::uint64_t seed = 0;        ///< the shuffle seed; must be the same on every worker
  bool shuffle = true;           ///< reshuffle every epoch (`epoch_permutation`), else in order
  bool drop_remainder = false;   ///< drop the last, partial global batch of each epoch
};

/// Where a training loop stands in an `EpochSampler`'s schedule: the global batch it trains on
/// next. Checkpoints save it, so that a resumed run continues with the batches the interrupted
/// one would have seen.
struct SamplerPosition {
  std::uint64_t epoch = 0;
  std::size_t step = 0;
  friend bool operator==(const SamplerPosition&, const SamplerPosition&) = default;
};

/// The input schedule of synchronous data-parallel training, with tf.distribute's semantics:
/// every step, all replicas together consume exactly one *global batch*, and the sequence of
/// global batches is the same whatever the number of workers and replicas, so distributed
/// training sees the same batches as single-replica training.
///
/// - Epoch `e` visits the examples in the order `epoch_permutation(num_examples, seed, e)`
///   (or `0, 1, ...` without `shuffle`); every worker computes the same order from the seed,
///   nothing is communicated.
/// - Step `s` of an epoch is the global batch at positions `[s * global_batch, (s + 1) *
///   global_batch)` of that order. The last one is partial when `global_batch` does not
///   divide `num_examples`, unless `drop_remainder` drops it (and with it, for a shuffled
///   epoch, a different set of examples each epoch).
/// - A global batch is split over all `num_workers * num_replicas` replicas with
///   `split_batch`, in rank order worker-major: replica `r` of worker `w` is global replica
///   `w * num_replicas + r` (every worker must have the same number of replicas, as in
///   MultiWorkerMirroredStrategy). Concatenating the replicas' indices in that order gives
///   exactly the global batch, in order. A replica may get an empty part of a small last
///   batch; see `split_batch` for how to aggregate gradients over uneven parts.
///
/// Thread safety: all member functions are const and may be called concurrently (replicas on
/// different threads). The permutation of the most recently used epoch is cached, shared by
/// copies of the sampler and guarded by a mutex, so the O(num_examples) shuffle runs once per
/// epoch rather than once per call. Callers that work on different epochs at the same time
/// (asynchronous training) make it recompute; give each of them its own sampler.
///
/// Example:
///
///     const strata::data::EpochSampler sampler({.num_examples = n, .global_batch = 256,
///                                                .seed = 42});
///     for (std::uint64_t epoch = 0; epoch < epochs; ++epoch)
///       for (std::size_t step = 0; step < sampler.steps_per_epoch(); ++step)
///         train_on(sampler.replica_indices(epoch, step, worker, num_workers, replica,
///                                          num_replicas));
class EpochSampler {
 public:
  /// @throws UsageError ("data::EpochSampler") if `options.global_batch == 0`.
  explicit EpochSampler(const EpochSamplerOptions& options)
      : options_(options), cache_(std::make_shared<Cache>()) {
    if (options_.global_batch == 0)
      throw UsageError(-1, "data::EpochSampler", "global_batch is 0",
                       "set global_batch to the number of examples per step over all replicas, "
                       "at least 1");
  }

  const EpochSamplerOptions& options() const noexcept { return options_; }

  /// Global batches per epoch: `num_examples / global_batch`, rounded up unless
  /// `drop_remainder` (then 0 when `num_examples < global_batch`).
  std::size_t steps_per_epoch() const noexcept {
    const std::size_t full = options_.num_examples / options_.global_batch;
    const bool partial = options_.num_examples % options_.global_batch != 0;
    return full + (partial && !options_.drop_remainder ? 1 : 0);
  }

  /// The position after `position`: the next step, or step 0 of the next epoch after the last.
  SamplerPosition next(SamplerPosition position) const noexcept {
    if (position.step + 1 < steps_per_epoch()) return {position.epoch, position.step + 1};
    return {position.epoch + 1, 0};
  }

  /// Examples in global batch `step`: `global_batch`, except for a partial last batch.
  /// @throws UsageError ("data::EpochSampler::global_batch_size") if `step >=
  ///         steps_per_epoch()`.

  std::size_t global_batch_size(std::size_t step) const {
    return batch_positions("data::EpochSampler::global_batch_size", step).size;
  }

  /// The example indices of global batch `step` of epoch `epoch`, in order.
  /// @throws UsageError ("data::EpochSampler::global_batch_indices") if `step >=
  ///         steps_per_epoch()`.
  /// Cost: O(global_batch), plus O(num_examples) the first time an epoch is used.
  std::vector<std::size_t> global_batch_indices(std::uint64_t epoch, std::size_t step) const {
    return indices(epoch, batch_positions("data::EpochSampler::global_batch_indices", step));
  }

  /// Which positions of global batch `step` replica `replica` of worker `worker` gets:
  /// `split_batch(global_batch_size(step), worker * num_replicas + replica,
  /// num_workers * num_replicas)`. The same in every epoch.
  /// @throws UsageError ("data::EpochSampler::replica_slice") as `replica_indices`.
  Slice replica_slice(std::size_t step, std::size_t worker, std::size_t num_workers,
                      std::size_t replica, std::size_t num_replicas) const {
    return replica_slice_impl("data::EpochSampler::replica_slice", step, worker, num_workers,
                              replica, num_replicas);
  }

  /// The example indices that replica `replica` of worker `worker` processes at step `step`
  /// of epoch `epoch`: its `replica_slice` of `global_batch_indices(epoch, step)`.
  ///
  /// @throws UsageError ("data::EpochSampler::replica_indices") if `step >=
  ///         steps_per_epoch()`, `num_workers` or `num_replicas` is 0, `worker >=
  ///         num_workers`, `replica >= num_replicas`, or their product overflows.
  /// Cost: O(size of the slice), plus O(num_examples) the first time an epoch is used.
  std::vector<std::size_t> replica_indices(std::uint64_t epoch, std::size_t step,
                                           std::size_t worker, std::size_t num_workers,
                                           std::size_t replica, std::size_t num_replicas) const {
    constexpr std::string_view kOperation = "data::EpochSampler::replica_indices";
    const Slice batch = batch_positions(kOperation, step);
    const Slice part =
        replica_slice_impl(kOperation, step, worker, num_workers, replica, num_replicas);
    return indices(epoch, Slice{batch.offset + part.offset, part.size});
  }

 private:
  struct Cache {
    std::mutex mutex;
    std::optional<std::uint64_t> epoch;
    std::shared_ptr<const std::vector<std::size_t>> order;
  };

  // Positions [offset, offset + size) of global batch `step` in the epoch's order.
  Slice batch_positions(std::string_view operation, std::size_t step) const {
    const std::size_t steps = steps_per_epoch();
    if (step >= steps)
      throw UsageError(
          -1, operation,
          fmt::format("step {} is out of range: an epoch of {} examples in global "
                      "batches of {}{} has {} steps",
                      step, options_.num_examples, options_.global_batch,
                      options_.drop_remainder ? " (dropping the remainder)" : "", steps),
          "pass a step in [0, steps_per_epoch())");
    const std::size_t offset = step * options_.global_batch;  // < num_examples: no overflow
    const std::size_t left = options_.num_examples - offset;
    return Slice{offset, left < options_.global_batch ? left : options_.global_batch};
  }

  Slice replica_slice_impl(std::string_view operation, std::size_t step, std::size_t worker,
                           std::size_t num_workers, std::size_t replica,
                           std::size_t num_replicas) const {
    if (num_workers == 0 || num_replicas == 0)
      throw UsageError(
          -1, operation,
          fmt::format("num_workers is {} and num_replicas is {}", num_workers, num_replicas),
          "pass at least one worker and one replica per worker");
    if (worker >= num_workers)
      throw UsageError(-1, operation,
                       fmt::format("worker {} is out of range for {} workers", worker, num_workers),
                       "pass a worker index in [0, num_workers)");
    if (replica >= num_replicas)
      throw UsageError(-1, operation,
                       fmt::format("replica {} is out of range for {} replicas per worker", replica,
                                   num_replicas),
                       "pass a replica index in [0, num_replicas)");
    if (num_workers > std::numeric_limits<std::size_t>::max() / num_replicas)
      throw UsageError(
          -1, operation,
          fmt::format("{} workers x {} replicas overflows std::size_t", num_workers, num_replicas),
          "pass the real numbers of workers and replicas");
    const std::size_t batch = batch_positions(operation, step).size;
    return detail::balanced_block(batch, worker * num_replicas + replica,
                                  num_workers * num_replicas);
  }

  // The example indices at positions [slice.offset, slice.end()) of epoch `epoch`'s order.
  std::vector<std::size_t> indices(std::uint64_t epoch, Slice slice) const {
    std::vector<std::size_t> result(slice.size);
    if (!options_.shuffle) {
      std::iota(result.begin(), result.end(), slice.offset);
      return result;
    }
    const std::shared_ptr<const std::vector<std::size_t>> order = epoch_order(epoch);
    const auto first = order->begin() + static_cast<std::ptrdiff_t>(slice.offset);
    std::copy(first, first + static_cast<std::ptrdiff_t>(slice.size), result.begin());
    return result;
  }

  std::shared_ptr<const std::vector<std::size_t>> epoch_order(std::uint64_t epoch) const {
    if (!cache_)  // a moved-from sampler: still correct, just uncached
      return std::make_shared<const std::vector<std::size_t>>(
          epoch_permutation(options_.num_examples, options_.seed, epoch));
    // The shuffle runs under the lock: replicas asking for the same new epoch wait for one
    // computation instead of each doing it.
    const std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->epoch != epoch) {
      cache_->order = std::make_shared<const std::vector<std::size_t>>(
          epoch_permutation(options_.num_examples, options_.seed, epoch));
      cache_->epoch = epoch;
    }
    return cache_->order;
  }

  EpochSamplerOptions options_;
  std::shared_ptr<Cache> cache_;
};

}  // namespace strata::data
