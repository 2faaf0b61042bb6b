// strata/checkpoint/checkpoint.hpp — what a training run saves and restores: variables with their
// optimizer state, counters, the data sampler's position, extra tensors and user metadata, in
// one safetensors file written atomically.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <ranges>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/safetensors.hpp>
#include <strata/config.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/detail/little_endian.hpp>
#include <strata/core/error.hpp>
#include <strata/data/sampler.hpp>
#include <strata/optim/optimizer.hpp>

namespace strata::checkpoint {

/// V models CheckpointVariable if it is a variable a checkpoint can save and restore: `size()`
/// elements of a floating-point type that `read()` gives (outside `Strategy::run`: the value
/// every replica agrees on, as a span or, for device memory, a host copy) and `assign(values)`
/// sets everywhere. Every strategy's variables model it: `placement::Variable` (mirrored,
/// central storage, one device), `placement::DeviceVariable` (GPUs) and
/// `placement::ShardedVariable` (parameter servers: read pulls every shard, assign pushes them,
/// so a checkpoint restores under any number of shards or ps tasks).
template <class V>
concept CheckpointVariable = requires(V& v, const V& cv) {
  { cv.size() } -> std::convertible_to<std::size_t>;
  requires std::ranges::contiguous_range<decltype(cv.read())>;
  requires std::floating_point<std::ranges::range_value_t<decltype(cv.read())>>;
  v.assign(std::span<const std::ranges::range_value_t<decltype(cv.read())>>());
};

namespace detail {

template <class V>
using variable_element_t = std::ranges::range_value_t<decltype(std::declval<const V&>().read())>;

// A variable whose optimizer state lives with its copies in host memory (placement::Variable):
// saved from where it is, without a copy.
template <class V, class T = variable_element_t<V>>
concept WithOptimizerState = requires(V& v, const V& cv, std::size_t i) {
  { cv.optimizer_state(i) } -> std::same_as<const optim::OptimizerState<T>*>;
  { cv.optimizer_slots_per_element(i) } -> std::convertible_to<std::size_t>;
  v.restore_optimizer_state(cv.optimizer_state(i), i);
};

// A variable whose optimizer state lives elsewhere (placement::ShardedVariable: on the parameter
// servers; placement::DeviceVariable: in GPU memory): gathered into host memory for a save,
// given back on restore.
template <class V, class T = variable_element_t<V>>
concept WithGatheredOptimizerState = requires(V& v, const V& cv, optim::OptimizerState<T>& state,
                                              std::size_t k, std::int64_t step) {
  { cv.read_optimizer_state(state) } -> std::same_as<std::optional<std::size_t>>;
  { cv.accepts_optimizer_state(k, step) } -> std::convertible_to<bool>;
  v.restore_optimizer_state(&state, k);
};

template <class V>
concept WithAnyOptimizerState = WithOptimizerState<V> || WithGatheredOptimizerState<V>;

// A variable whose copies can be written in place (placement::Variable): restoring reads the
// file straight into copy 0 instead of through a temporary.
template <class V, class T = variable_element_t<V>>
concept WithCopies = requires(V& v, std::size_t i) {
  { v.num_copies() } -> std::convertible_to<std::size_t>;
  { v.copy(i) } -> std::same_as<std::span<T>>;
};

}  // namespace detail

/// The suffixes of the tensors that hold a variable's optimizer state: its slots (shape
/// `[slots, ...the variable's shape]`) and its step (an I64 scalar).
inline constexpr std::string_view kSlotsSuffix = "/.optimizer/slots";
inline constexpr std::string_view kStepSuffix = "/.optimizer/step";

/// The state of a training run that a checkpoint holds, by name: like `tf.train.Checkpoint`,
/// it refers to the caller's objects, which must outlive it, and `save` and `restore` read and
/// write them in place.
///
///     strata::checkpoint::Checkpoint checkpoint;
///     checkpoint.track("dense/kernel", kernel);         // a variable and its optimizer state
///     checkpoint.track("global_step", global_step);      // std::int64_t
///     checkpoint.track("sampler", sampler, position);    // where the input schedule stands
///     checkpoint.save("run/ckpt-100.safetensors");       // atomic
///     checkpoint.restore("run/ckpt-100.safetensors");    // everything checked, then read
///
/// The file is safetensors: each variable is a tensor of its full shape, its optimizer state
/// two more (`name` + kSlotsSuffix, kStepSuffix), counters I64 scalars; the sampler's position
/// and options and the user metadata are strings in `__metadata__`. Tensors are laid out by
/// element size, largest first, so that each starts aligned to its element.
///
/// Restoring checks the whole file against everything tracked before it changes anything: a
/// tracked name the file lacks, another shape or element type, or another sampler is a
/// CheckpointError naming it. Tensors in the file that nothing tracks are ignored.
/// Not thread-safe: save and restore while no replica updates the tracked objects.
class Checkpoint {
 public:
  /// `rank` names this task in error messages (-1: none).
  explicit Checkpoint(int rank = -1) : rank_(rank) {}

  /// Tracks a variable of any strategy and its optimizer state (next to its copies, on the GPUs,
  /// or on the parameter servers). `shape` is its logical shape (default: `{size()}`), saved so
  /// that another partitioning can restore it; its product must be `size()`.
  /// @throws UsageError if the name is taken or the shape does not fit.
  template <CheckpointVariable V>
  void track(std::string name, V& variable, std::vector<std::uint64_t> shape = {}) {
    using T = detail::variable_element_t<V>;
    shape = checked_shape("track", name, std::move(shape), variable.size());
    claim(name);
    claim(name + std::string(kSlotsSuffix));
    claim(name + std::string(kStepSuffix));
    items_.push_back(Item{
        [name, shape, &variable](Contents& contents) {
          auto value = variable.read();
          std::span<const T> bytes(value);
          if constexpr (!std::is_same_v<decltype(value), std::span<const T>>) {
            // A host copy (device memory): moved, and kept alive until the file is written.
            auto owned = std::make_shared<decltype(value)>(std::move(value));
            bytes = std::span<const T>(*owned);
            contents.owned.push_back(std::move(owned));
          }
          contents.tensors.push_back(Piece{name, data_type_of<T>, shape, std::as_bytes(bytes)});
          const optim::OptimizerState<T>* state = nullptr;
          std::size_t slots_per_element = 0;
          if constexpr (detail::WithOptimizerState<V>) {
            state = variable.optimizer_state(0);
            if (state != nullptr) slots_per_element = variable.optimizer_slots_per_element(0);
          } else if constexpr (detail::WithGatheredOptimizerState<V>) {
            auto gathered = std::make_shared<optim::OptimizerState<T>>();
            if (const auto k = variable.read_optimizer_state(*gathered)) {
              state = gathered.get();
              slots_per_element = *k;
              contents.owned.push_back(std::move(gathered));
            }
          }
          if (state != nullptr) {
            std::vector<std::uint64_t> slots_shape{slots_per_element};
            slots_shape.insert(slots_shape.end(), shape.begin(), shape.end());
            contents.tensors.push_back(Piece{name + std::string(kSlotsSuffix), data_type_of<T>,
                                             std::move(slots_shape),
                                             std::as_bytes(std::span(state->slots))});
            contents.tensors.push_back(Piece{name + std::string(kStepSuffix),
                                             DataType::int64,
                                             {},
                                             std::as_bytes(std::span(&state->step, 1))});
          }
        },
        [name, shape, &variable](const Checkpoint& self, const Header& header, Plan& plan) {
          const TensorInfo& value = self.find(header, plan, name, "variable");
          self.check_tensor(plan, value, "variable", data_type_of<T>, shape);
          if constexpr (detail::WithCopies<V>) {
            plan.reads.push_back([&variable, value](const File& file, std::uint64_t start) {
              std::span<T> primary = variable.copy(0);
              file.read_at(std::as_writable_bytes(primary), start + value.begin);
              for (std::size_t i = 1; i < variable.num_copies(); ++i)
                std::copy(primary.begin(), primary.end(), variable.copy(i).begin());
            });
          } else {
            plan.reads.push_back([&variable, value](const File& file, std::uint64_t start) {
              std::vector<T> values(variable.size());
              file.read_at(std::as_writable_bytes(std::span(values)), start + value.begin);
              variable.assign(std::span<const T>(values));
            });
          }
          if constexpr (detail::WithAnyOptimizerState<V>)
            self.plan_optimizer_state<T>(header, plan, name, shape, variable);
        }});
  }

  /// Tracks a tensor the caller owns (extra state of any element type), restored in place.
  /// `shape` as for variables.
  template <Element T>
  void track(std::string name, std::span<T> tensor, std::vector<std::uint64_t> shape = {}) {
    shape = checked_shape("track", name, std::move(shape), tensor.size());
    claim(name);
    items_.push_back(Item{
        [name, shape, tensor](Contents& contents) {
          contents.tensors.push_back(Piece{name, data_type_of<T>, shape, std::as_bytes(tensor)});
        },
        [name, shape, tensor](const Checkpoint& self, const Header& header, Plan& plan) {
          const TensorInfo& info = self.find(header, plan, name, "tensor");
          self.check_tensor(plan, info, "tensor", data_type_of<T>, shape);
          plan.reads.push_back([tensor, info](const File& file, std::uint64_t start) {
            file.read_at(std::as_writable_bytes(tensor), start + info.begin);
          });
        }});
  }

  /// Tracks a counter such as the global step, as an I64 scalar.
  void track(std::string name, std::int64_t& counter) {
    track(std::move(name), std::span<std::int64_t>(&counter, 1), std::vector<std::uint64_t>{});
  }

  /// Tracks where a training loop stands in `sampler`'s schedule. The sampler's options are saved
  /// with the position, and restoring under other options (another seed, dataset size or global
  /// batch) is a CheckpointError: the resumed run would not see the batches the interrupted one
  /// would have. The number of workers and replicas may change.
  void track(std::string name, const data::EpochSampler& sampler, data::SamplerPosition& position) {
    const std::string key = std::string(kSamplerKeyPrefix) + name;
    claim(key);
    items_.push_back(Item{
        [key, &sampler, &position](Contents& contents) {
          contents.metadata[key] = encode_sampler(sampler.options(), position);
        },
        [key, name, &sampler, &position](const Checkpoint& self, const Header& header, Plan& plan) {
          const auto found = header.metadata.find(key);
          if (found == header.metadata.end())
            throw self.restore_error(plan, fmt::format("it has no sampler '{}'", name),
                                     "track the same objects as the run that saved it");
          const auto saved = decode_sampler(found->second, plan.source, name, self.rank_);
          const std::string difference = describe_difference(saved.first, sampler.options());
          if (!difference.empty())
            throw self.restore_error(
                plan, fmt::format("sampler '{}' was saved with {}", name, difference),
                "resume with the sampler options of the run that saved it");
          plan.reads.push_back(
              [&position, saved](const File&, std::uint64_t) { position = saved.second; });
        }});
  }

  /// Metadata of the caller's, a JSON text saved in `__metadata__` under "strata.user".
  /// @throws UsageError if `json` is not JSON.
  void set_user_metadata(std::string json) {
    if (!is_json(json))
      throw UsageError(rank_, "Checkpoint::set_user_metadata", "the text is not valid JSON",
                       "pass a JSON text, e.g. {\"learning_rate\": 0.1}");
    user_metadata_ = std::move(json);
  }
  /// The user metadata set, or read by the last restore ("" when none).
  const std::string& user_metadata() const noexcept { return user_metadata_; }

  /// Writes everything tracked to `file` atomically (file.hpp's write_atomically): a reader sees
  /// the previous file or this one, never a part.
  /// @throws CheckpointError on I/O failure (the previous file is untouched).
  STRATA_DECL void save(const std::filesystem::path& file) const;

  /// Reads `file` back into everything tracked, after checking all of it.
  /// @throws CheckpointError if the file is damaged, or lacks or mismatches something tracked
  ///         (then nothing tracked has changed).
  STRATA_DECL void restore(const std::filesystem::path& file);

  /// The header of `file`: its tensors and metadata, checked as `restore` checks them.
  STRATA_DECL static Header read_header(const std::filesystem::path& file, int rank = -1);

  /// The metadata keys strata writes: the format, and the sampler entries (+ name).
  static constexpr std::string_view kFormatKey = "strata.format";
  static constexpr std::string_view kFormat = "strata-checkpoint-1";
  static constexpr std::string_view kUserKey = "strata.user";
  static constexpr std::string_view kSamplerKeyPrefix = "strata.sampler/";

 private:
  // One tensor to write: its bytes stay valid while `save` runs.
  struct Piece {
    std::string name;
    DataType dtype;
    std::vector<std::uint64_t> shape;
    std::span<const std::byte> bytes;
  };
  struct Contents {
    std::vector<Piece> tensors;
    std::map<std::string, std::string> metadata;
    std::vector<std::shared_ptr<const void>> owned;  // host copies the pieces point into
  };
  // A restore, checked: the reads that apply it, in order.
  struct Plan {
    std::string source;
    const File* file = nullptr;  // for the few values a check needs
    std::uint64_t data_start = 0;
    std::vector<std::function<void(const File&, std::uint64_t data_start)>> reads;
  };
  struct Item {
    std::function<void(Contents&)> collect;
    // Gets the checkpoint as an argument, not as a captured `this`: a Checkpoint may be moved.
    std::function<void(const Checkpoint&, const Header&, Plan&)> plan;
  };

  void claim(const std::string& name) {
    if (name.empty() || !names_.insert(name).second)
      throw UsageError(rank_, "Checkpoint::track",
                       fmt::format("the name '{}' is empty or already tracked", name),
                       "give every tracked object its own name");
  }

  std::vector<std::uint64_t> checked_shape(std::string_view operation, const std::string& name,
                                           std::vector<std::uint64_t> shape,
                                           std::size_t size) const {
    if (shape.empty() && size != 1) return {static_cast<std::uint64_t>(size)};
    std::uint64_t product = 1;
    bool overflow = false;
    for (const auto extent : shape) {
      if (extent != 0 && product > UINT64_MAX / extent) overflow = true;
      product *= extent;
    }
    if (overflow || product != size)
      throw UsageError(
          rank_, fmt::format("Checkpoint::{}", operation),
          fmt::format("'{}' has {} elements, but its shape [{}] holds {}", name, size,
                      describe_shape(shape),
                      overflow ? std::string("more than 2^64") : fmt::format("{}", product)),
          "pass the shape of the tensor, or none for a flat one");
    return shape;
  }

  // "2, 3" for messages. By hand: fmt::join's formatter trips a false g++ 12 -O3 warning
  // (-Wstringop-overflow in fmt 9's fill_t), which users' -Werror builds would meet.
  static std::string describe_shape(const std::vector<std::uint64_t>& shape) {
    std::string out;
    for (std::size_t i = 0; i < shape.size(); ++i)
      out += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
    return out;
  }

  CheckpointError restore_error(const Plan& plan, std::string_view what,
                                std::string_view what_to_do) const {
    return CheckpointError(rank_, "Checkpoint::restore",
                           fmt::format("{} does not fit this run: {}", plan.source, what),
                           what_to_do);
  }

  const TensorInfo& find(const Header& header, Plan& plan, const std::string& name,
                         std::string_view kind) const {
    const TensorInfo* info = header.find(name);
    if (info == nullptr)
      throw restore_error(plan, fmt::format("it has no {} '{}'", kind, name),
                          "track the same objects under the same names as the run that saved it");
    return *info;
  }

  void check_tensor(const Plan& plan, const TensorInfo& info, std::string_view kind, DataType dtype,
                    const std::vector<std::uint64_t>& shape) const {
    if (info.dtype != dtype || info.shape != shape)
      throw restore_error(plan,
                          fmt::format("{} '{}' is {} [{}] here but {} [{}] in the file", kind,
                                      info.name, safetensors_dtype(dtype), describe_shape(shape),
                                      safetensors_dtype(info.dtype), describe_shape(info.shape)),
                          "restore into a variable of the saved shape and element type");
  }

  template <class T, class V>
  void plan_optimizer_state(const Header& header, Plan& plan, const std::string& name,
                            const std::vector<std::uint64_t>& shape, V& variable) const {
    const std::string slots_name = name + std::string(kSlotsSuffix);
    const std::string step_name = name + std::string(kStepSuffix);
    const TensorInfo* slots = header.find(slots_name);
    const TensorInfo* step = header.find(step_name);
    if (slots == nullptr && step == nullptr) {  // saved before its first update
      plan.reads.push_back([&variable](const File&, std::uint64_t) {
        variable.restore_optimizer_state(nullptr, 0);
      });
      return;
    }
    if (slots == nullptr || step == nullptr)
      throw restore_error(plan, fmt::format("variable '{}' has half an optimizer state", name),
                          "restore from another checkpoint; this one is damaged");
    std::vector<std::uint64_t> slots_shape = shape;
    const std::uint64_t count = slots->shape.empty() ? 0 : slots->shape.front();
    slots_shape.insert(slots_shape.begin(), count);
    check_tensor(plan, *slots, "optimizer slots of", data_type_of<T>, slots_shape);
    check_tensor(plan, *step, "optimizer step of", DataType::int64, {});
    // The step is read now, not with the rest, so that a step no optimizer can continue from
    // (or a state the servers cannot keep) is refused before anything changes.
    std::int64_t saved_step = 0;
    plan.file->read_at(std::as_writable_bytes(std::span(&saved_step, 1)),
                       plan.data_start + step->begin);
    if (saved_step < 0 || saved_step == std::numeric_limits<std::int64_t>::max())
      throw restore_error(plan,
                          fmt::format("variable '{}' has optimizer step {}, which no optimizer "
                                      "counts to (steps are 0 or more, below 2^63 - 1)",
                                      name, saved_step),
                          "restore from another checkpoint; this one is damaged");
    if constexpr (detail::WithGatheredOptimizerState<V>) {
      if (!variable.accepts_optimizer_state(static_cast<std::size_t>(count), saved_step))
        throw restore_error(plan,
                            fmt::format("variable '{}' cannot take its saved optimizer state "
                                        "({} slots per element, step {}): parameter servers "
                                        "keep at most 2 (Sgd, Momentum, Adam), and no step is "
                                        "negative",
                                        name, count, saved_step),
                            "restore it into a variable whose optimizer state lives with its "
                            "copies (MirroredStrategy), or from a checkpoint of Sgd, Momentum or "
                            "Adam");
    }
    plan.reads.push_back(
        [&variable, slots = *slots, saved_step, count](const File& file, std::uint64_t start) {
          optim::OptimizerState<T> state;
          state.slots.resize(slots.bytes() / sizeof(T));
          file.read_at(std::as_writable_bytes(std::span(state.slots)), start + slots.begin);
          state.step = saved_step;
          variable.restore_optimizer_state(&state, static_cast<std::size_t>(count));
        });
  }

  // The sampler's options and position as the JSON text of its metadata entry, and back.
  STRATA_DECL static std::string encode_sampler(const data::EpochSamplerOptions& options,
                                                data::SamplerPosition position);
  STRATA_DECL static std::pair<data::EpochSamplerOptions, data::SamplerPosition> decode_sampler(
      std::string_view json, std::string_view source, std::string_view name, int rank);
  STRATA_DECL static std::string describe_difference(const data::EpochSamplerOptions& saved,
                                                     const data::EpochSamplerOptions& now);
  STRATA_DECL static bool is_json(std::string_view text);

  int rank_ = -1;
  std::set<std::string> names_;
  std::vector<Item> items_;
  std::string user_metadata_;
};

}  // namespace strata::checkpoint

#if STRATA_HEADER_ONLY
#include <strata/checkpoint/impl/checkpoint.ipp>
#endif
