// strata/ps/detail/shard.hpp — one shard on a parameter server: its values, its optimizer's
// slots, and the rule that decides when a push meets it (ps/protocol.hpp's SyncSpec).
//
// Only the server's thread touches a shard; this header knows nothing of connections: a push
// says which waiting callers it releases, and the server answers them.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include <strata/core/data_type.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce.hpp>
#include <strata/optim/adam.hpp>
#include <strata/optim/momentum.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/optim/sgd.hpp>
#include <strata/ps/protocol.hpp>

namespace strata::ps::detail {

template <std::floating_point T>
struct Values {
  std::vector<T> values;
  optim::OptimizerState<T> state;
  // Slots per element of `state`: unset until the first update (or assign_state) gives it one.
  std::optional<std::uint32_t> slots_per_element;
  std::vector<std::vector<T>> step_gradients;  // synchronous: by replica
};

/// A caller whose push is applied (or held) and whose reply waits.
struct Waiter {
  void* caller = nullptr;
  std::uint32_t replica = 0;
  std::uint64_t clock = 0;  // bounded staleness: the caller's pushes, this one included
};

/// How pushes meet the shard: set by the first push, the same for every later one.
struct SyncState {
  bool set = false;
  SyncSpec spec;                      // mode, aggregation, replicas, bound (step unused)
  std::vector<std::uint64_t> pushes;  // bounded staleness: pushes applied, by replica
  std::vector<int> owner;             // the worker (collective rank) of each replica; -1: none yet
  std::vector<bool> arrived;          // synchronous: whose gradient of this step is in
  std::vector<bool> done;             // synchronous: replicas whose worker has finished
  std::size_t arrivals = 0;
  OptimizerSpec optimizer;  // synchronous: the step's, for a step a `done` completes
  std::vector<Waiter> waiting;
};

struct Shard {
  std::string name;
  DataType type = DataType::float32;
  UpdateRule update = UpdateRule::optimizer;
  std::uint64_t elements = 0;
  std::uint64_t version = 0;  // updates applied
  std::uint64_t stale = 0;    // synchronous: gradients dropped for being computed on an old step
  std::variant<Values<float>, Values<double>> data;
  SyncState sync;
};

inline bool is_value_type(DataType type) noexcept {
  return type == DataType::float32 || type == DataType::float64;
}

static_assert(kMaxSlotsPerElement >=
                  std::max({optim::Sgd::kSlots, optim::Momentum::kSlots, optim::Adam::kSlots}),
              "a server's optimizer keeps more slots than the protocol carries");

inline std::uint32_t slots_of(OptimizerSpec::Kind kind) noexcept {
  switch (kind) {
    case OptimizerSpec::Kind::momentum:
    case OptimizerSpec::Kind::nesterov:
      return static_cast<std::uint32_t>(optim::Momentum::kSlots);
    case OptimizerSpec::Kind::adam:
      return static_cast<std::uint32_t>(optim::Adam::kSlots);
    default:
      return static_cast<std::uint32_t>(optim::Sgd::kSlots);
  }
}

/// Applies `gradient` to `shard` by its update rule; the reason when it cannot apply. A sum
/// also leaves the new values in `snapshot` when it is not empty (it may be `gradient`'s
/// storage): push_pull's reply, copied while each block is still in cache.
template <std::floating_point T>
std::string apply_push(Shard& shard, Values<T>& values, const OptimizerSpec& spec,
                       std::span<const T> gradient, std::span<T> snapshot = {}) {
  if (shard.update == UpdateRule::sum) {
    if (spec.kind != OptimizerSpec::Kind::none)
      return fmt::format("variable '{}' sums pushes (UpdateRule::sum) and takes no optimizer",
                         shard.name);
    // The collectives' kernels: vectorized for the widest instruction set the CPU has, where a
    // plain loop stays scalar at -O2.
    if (snapshot.empty()) {
      accumulate<T>(values.values, gradient, ReduceOp::sum);
      return {};
    }
    constexpr std::size_t kBlock = std::size_t{64} << 10 >> 2;  // 64 KiB of float
    for (std::size_t at = 0; at < values.values.size(); at += kBlock) {
      const std::size_t n = std::min(kBlock, values.values.size() - at);
      const auto block = std::span<T>(values.values).subspan(at, n);
      accumulate<T>(block, gradient.subspan(at, n), ReduceOp::sum);
      std::copy(block.begin(), block.end(), snapshot.begin() + static_cast<std::ptrdiff_t>(at));
    }
    return {};
  }
  if (spec.kind == OptimizerSpec::Kind::none)
    return fmt::format("variable '{}' is updated by an optimizer, and the push names none",
                       shard.name);
  if (values.slots_per_element && *values.slots_per_element != slots_of(spec.kind))
    return fmt::format(
        "variable '{}' has an optimizer state of {} slots per element, and the push's optimizer "
        "keeps {}: update each variable with one optimizer (the one its checkpoint was saved with)",
        shard.name, *values.slots_per_element, slots_of(spec.kind));
  auto run = [&](const auto& optimizer) -> std::string {
    try {
      if (!values.slots_per_element)
        values.state = optim::make_state<T>(optimizer, values.values.size());
      optimizer.apply(std::span<T>(values.values), gradient, values.state);
      values.slots_per_element = slots_of(spec.kind);
      return {};
    } catch (const Error& error) {
      return error.what();
    }
  };
  switch (spec.kind) {
    case OptimizerSpec::Kind::sgd:
      return run(optim::Sgd{spec.learning_rate});
    case OptimizerSpec::Kind::momentum:
    case OptimizerSpec::Kind::nesterov:
      return run(optim::Momentum{spec.learning_rate, spec.momentum,
                                 spec.kind == OptimizerSpec::Kind::nesterov});
    case OptimizerSpec::Kind::adam:
      return run(optim::Adam{spec.learning_rate, spec.beta1, spec.beta2, spec.epsilon});
    case OptimizerSpec::Kind::none:
      break;
  }
  return "unknown optimizer";
}

/// The shard's optimizer state as pull_state's reply describes it (its slots follow).
template <std::floating_point T>
StateSpec state_of(const Values<T>& values) noexcept {
  if (!values.slots_per_element) return {};
  return {true, *values.slots_per_element, values.state.step};
}

/// Replaces the shard's optimizer state by `spec` and `slots` (taken), as a checkpoint restores
/// it; the reason when the shard cannot take it. A state of another slot count than the shard's
/// pushes later name is refused by those pushes, as a change of optimizer is.
template <std::floating_point T>
std::string assign_state(Shard& shard, Values<T>& values, const StateSpec& spec,
                         std::vector<T>& slots) {
  if (spec.present && shard.update == UpdateRule::sum)
    return fmt::format(
        "variable '{}' sums pushes (UpdateRule::sum): its workers keep the optimizer state",
        shard.name);
  if (slots.size() != (spec.present ? spec.slots_per_element : 0) * values.values.size())
    return fmt::format("an optimizer state of {} values for variable '{}' of {} elements",
                       slots.size(), shard.name, values.values.size());
  if (!spec.present) {
    values.state = {};
    values.slots_per_element.reset();
    return {};
  }
  values.state.slots.swap(slots);
  values.state.step = spec.step;
  values.slots_per_element = spec.slots_per_element;
  return {};
}

/// What became of a push.
struct PushOutcome {
  enum class Kind : std::uint8_t { reply, wait, error } kind = Kind::reply;
  std::string why;              // for error
  std::vector<void*> released;  // other callers whose replies may go now
  bool snapshot = false;        // the gradient's buffer holds the shard's new values
};

namespace shard_detail {

inline std::uint64_t slowest(const SyncState& sync) noexcept {
  return *std::min_element(sync.pushes.begin(), sync.pushes.end());
}

// Bounded staleness: a caller whose push was its `clock`-th may go on once every replica has
// pushed at least clock − bound times (no replica more than `bound` steps behind it).
inline bool may_go(const SyncState& sync, std::uint64_t clock) noexcept {
  return clock - std::min(clock, slowest(sync)) <= sync.spec.bound;
}

// Synchronous: the gradients a step waits for: `bound` (the replicas to aggregate, fewer than
// the replicas with backups), but no more than the replicas whose worker has not finished.
inline std::size_t step_quorum(const SyncState& sync) noexcept {
  const auto finished =
      static_cast<std::size_t>(std::count(sync.done.begin(), sync.done.end(), true));
  const std::size_t active = sync.done.size() - std::min(sync.done.size(), finished);
  return std::max<std::size_t>(1, std::min<std::size_t>(sync.spec.bound, active));
}

// Synchronous: the step's gradients, added up in replica order (the same bits whatever order
// they arrived in) in the first arrived one's buffer, applied once; every waiter released.
template <std::floating_point T>
PushOutcome complete_step(Shard& shard, Values<T>& values) {
  SyncState& sync = shard.sync;
  PushOutcome outcome;
  std::vector<T>* total = nullptr;
  for (std::size_t r = 0; r < sync.arrived.size(); ++r) {
    if (!sync.arrived[r]) continue;
    auto& part = values.step_gradients[r];
    if (total == nullptr) {
      total = &part;
      continue;
    }
    accumulate<T>(*total, part, ReduceOp::sum);
  }
  if (sync.spec.aggregation == SyncSpec::Aggregation::mean) divide<T>(*total, sync.arrivals);
  std::fill(sync.arrived.begin(), sync.arrived.end(), false);
  sync.arrivals = 0;
  for (const Waiter& waiter : sync.waiting)
    outcome.released.push_back(waiter.caller);
  sync.waiting.clear();
  outcome.why = apply_push(shard, values, sync.optimizer, std::span<const T>(*total));
  if (!outcome.why.empty()) {
    outcome.kind = PushOutcome::Kind::error;  // the step is dropped; the others go on with it
    return outcome;
  }
  ++shard.version;
  return outcome;
}

inline std::vector<void*> release_ready(SyncState& sync) {
  std::vector<void*> released;
  std::erase_if(sync.waiting, [&](const Waiter& waiter) {
    if (!may_go(sync, waiter.clock)) return false;
    released.push_back(waiter.caller);
    return true;
  });
  return released;
}

}  // namespace shard_detail

/// The sync policy of the shard's first push, which every later push must name; the reason
/// when this one names another. Records `rank` as the replica's worker.
inline std::string meet_sync(Shard& shard, const SyncSpec& spec, int rank) {
  SyncState& sync = shard.sync;
  if (!sync.set) {
    sync.set = true;
    sync.spec = spec;
    sync.spec.replica = 0;
    sync.spec.step = 0;
    sync.pushes.assign(spec.replicas, 0);
    sync.owner.assign(spec.replicas, -1);
    sync.arrived.assign(spec.replicas, false);
    sync.done.assign(spec.replicas, false);
  } else if (sync.spec.mode != spec.mode || sync.spec.aggregation != spec.aggregation ||
             sync.spec.replicas != spec.replicas || sync.spec.bound != spec.bound) {
    return fmt::format(
        "workers disagree on how pushes meet variable '{}': mode {}, {} "
        "replicas, bound {} first; mode {}, {} replicas, bound {} now",
        shard.name, static_cast<int>(sync.spec.mode), sync.spec.replicas, sync.spec.bound,
        static_cast<int>(spec.mode), spec.replicas, spec.bound);
  }
  sync.owner[spec.replica] = rank;
  return {};
}

/// An asynchronous push (meet_sync passed), applied at once. With `pull`, a sum leaves the new
/// values in `gradient` (`snapshot`): where it lies, in the connection's staging buffer or in a
/// co-located worker's shared region, is where the reply is read from.
template <std::floating_point T>
PushOutcome push_asynchronous(Shard& shard, Values<T>& values, const OptimizerSpec& optimizer,
                              std::span<T> gradient, bool pull) {
  PushOutcome outcome;
  outcome.snapshot = pull && shard.update == UpdateRule::sum;
  outcome.why = apply_push(shard, values, optimizer, std::span<const T>(gradient),
                           outcome.snapshot ? gradient : std::span<T>());
  if (!outcome.why.empty()) return {PushOutcome::Kind::error, std::move(outcome.why), {}};
  ++shard.version;
  return outcome;
}

/// Applies, holds or drops a push of `caller` (worker `rank`) by the shard's sync policy.
/// On `reply` the caller answers at once; on `wait` its reply goes when a later push (or a
/// worker's `done`) releases it; `released` are the callers to answer now. A synchronous push
/// keeps its gradient until the step is applied: it takes `gradient`'s buffer and leaves one of
/// the shard's in its place, so no gradient is copied. With `pull`, an asynchronous sum leaves
/// the new values in `gradient` (`snapshot`).
template <std::floating_point T>
PushOutcome push(Shard& shard, Values<T>& values, const OptimizerSpec& optimizer,
                 const SyncSpec& spec, std::vector<T>& gradient, int rank, void* caller,
                 bool pull = false) {
  using Mode = SyncSpec::Mode;
  SyncState& sync = shard.sync;
  const auto fail = [](std::string why) {
    return PushOutcome{PushOutcome::Kind::error, std::move(why), {}};
  };
  if (std::string why = meet_sync(shard, spec, rank); !why.empty()) return fail(std::move(why));
  PushOutcome outcome;
  switch (spec.mode) {
    case Mode::asynchronous:
      return push_asynchronous(shard, values, optimizer, std::span<T>(gradient), pull);
    case Mode::bounded_staleness: {
      outcome.why = apply_push(shard, values, optimizer, std::span<const T>(gradient));
      if (!outcome.why.empty()) return fail(std::move(outcome.why));
      ++shard.version;
      const std::uint64_t clock = ++sync.pushes[spec.replica];
      outcome.released = shard_detail::release_ready(sync);
      if (!shard_detail::may_go(sync, clock)) {
        sync.waiting.push_back({caller, spec.replica, clock});
        outcome.kind = PushOutcome::Kind::wait;
      }
      return outcome;
    }
    case Mode::synchronous:
      break;
  }
  // Synchronous: a gradient of an older step is dropped (a backup replica came late); the rest
  // wait until the step's quorum of gradients is in (`bound`, fewer once workers finish), which
  // are then added up and applied once.
  if (spec.step < shard.version) {
    ++shard.stale;
    return outcome;
  }
  if (spec.step > shard.version)
    return fail(fmt::format("a gradient for step {} of variable '{}', which is at step {}",
                            spec.step, shard.name, shard.version));
  if (sync.arrived[spec.replica])
    return fail(fmt::format("replica {} pushed twice in step {} of variable '{}'", spec.replica,
                            shard.version, shard.name));
  values.step_gradients.resize(spec.replicas);
  std::swap(values.step_gradients[spec.replica], gradient);
  sync.arrived[spec.replica] = true;
  sync.optimizer = optimizer;
  if (++sync.arrivals < shard_detail::step_quorum(sync)) {
    sync.waiting.push_back({caller, spec.replica, 0});
    outcome.kind = PushOutcome::Kind::wait;
    return outcome;
  }
  return shard_detail::complete_step(shard, values);
}

/// Worker `rank` has finished: its replicas no longer hold anyone back, under bounded staleness
/// and in a synchronous step, which the gradients already in then complete. Returns the
/// callers to answer now.
inline std::vector<void*> finished(Shard& shard, int rank) {
  SyncState& sync = shard.sync;
  if (!sync.set) return {};
  switch (sync.spec.mode) {
    case SyncSpec::Mode::bounded_staleness:
      for (std::size_t r = 0; r < sync.owner.size(); ++r)
        if (sync.owner[r] == rank) sync.pushes[r] = std::numeric_limits<std::uint64_t>::max();
      return shard_detail::release_ready(sync);
    case SyncSpec::Mode::synchronous:
      for (std::size_t r = 0; r < sync.owner.size(); ++r)
        if (sync.owner[r] == rank) sync.done[r] = true;
      if (sync.arrivals == 0 || sync.arrivals < shard_detail::step_quorum(sync)) return {};
      return std::visit(
          [&](auto& values) { return shard_detail::complete_step(shard, values).released; },
          shard.data);
    case SyncSpec::Mode::asynchronous:
      break;
  }
  return {};
}

/// The replicas a waiting push of `caller` waits for, named with their workers ("replica 2
/// (worker 2)"); empty when `caller` does not wait on this shard.
inline std::string waited_for(const Shard& shard, const void* caller) {
  const SyncState& sync = shard.sync;
  const auto waiter = std::find_if(sync.waiting.begin(), sync.waiting.end(),
                                   [&](const Waiter& w) { return w.caller == caller; });
  if (waiter == sync.waiting.end()) return {};
  std::string names;
  for (std::size_t r = 0; r < sync.owner.size(); ++r) {
    const bool missing =
        sync.spec.mode == SyncSpec::Mode::synchronous
            ? !sync.arrived[r] && !sync.done[r]
            : waiter->clock - std::min(waiter->clock, sync.pushes[r]) > sync.spec.bound;
    if (!missing) continue;
    if (!names.empty()) names += ", ";
    names += sync.owner[r] < 0 ? fmt::format("replica {} (no push from it yet)", r)
                               : fmt::format("replica {} (worker {})", r, sync.owner[r]);
  }
  return names;
}

/// `caller` is gone: it waits for nothing any more.
inline void forget(Shard& shard, const void* caller) {
  std::erase_if(shard.sync.waiting, [&](const Waiter& waiter) { return waiter.caller == caller; });
}

}  // namespace strata::ps::detail
