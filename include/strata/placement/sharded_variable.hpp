// strata/placement/sharded_variable.hpp — a variable that lives on parameter servers, split into
// shards, with a cached copy per local replica.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/core/data_type.hpp>
#include <strata/core/error.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/placement/variable.hpp>
#include <strata/ps/client.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/ps/session.hpp>

namespace strata::placement {

using ps::Client;
using ps::Operation;
using ps::OptimizerSpec;
using ps::ShardCall;
using ps::ShardLocation;
using ps::UpdateRule;

/// A variable of `size()` elements split into shards on the parameter servers
/// (tf.distribute's ShardedVariable), and a copy of it per local replica: what that replica
/// last pulled. A replica's update pushes its gradient and pulls the new values in the same
/// round trip; under UpdateRule::sum the replica applies its optimizer to its copy and pushes
/// the change instead.
///
/// Outside `Strategy::run`, `read()` pulls the servers' current values and `assign()` sets them.
/// Do not move a variable while `run` is in progress.
template <std::floating_point T>
class ShardedVariable {
 public:
  ShardedVariable(std::shared_ptr<Client> client, std::string name,
                  std::vector<ShardLocation> shards, std::span<const T> values, int copies,
                  VariableAggregation aggregation, UpdateRule rule)
      : client_(std::move(client)),
        name_(std::move(name)),
        shards_(std::move(shards)),
        copies_(static_cast<std::size_t>(copies), std::vector<T>(values.begin(), values.end())),
        versions_(static_cast<std::size_t>(copies)),
        states_(static_cast<std::size_t>(copies)),
        aggregation_(aggregation),
        rule_(rule) {}

  ShardedVariable(ShardedVariable&&) noexcept = default;
  ShardedVariable& operator=(ShardedVariable&&) noexcept = default;

  std::size_t size() const noexcept { return copies_.front().size(); }
  VariableAggregation aggregation() const noexcept { return aggregation_; }
  const std::string& name() const noexcept { return name_; }
  std::span<const ShardLocation> shards() const noexcept { return shards_; }
  UpdateRule update_rule() const noexcept { return rule_; }

  /// The servers' current values (pulled into copy 0).
  /// @throws the client's errors (a ps task that died or stopped answering).
  std::span<const T> read() const {
    pull(0);
    return copies_.front();
  }

  /// Sets the variable on the servers (and every local copy). @throws UsageError on a size
  /// mismatch; the client's errors.
  void assign(std::span<const T> values) {
    check_size("ShardedVariable::assign", values.size());
    store(0, values);
    for (auto& copy : copies_)
      std::copy(values.begin(), values.end(), copy.begin());
  }

  /// Replica `lane`'s copy.
  std::span<T> copy(std::size_t lane) noexcept { return copies_[lane]; }
  std::span<const T> copy(std::size_t lane) const noexcept { return copies_[lane]; }

  /// Replaces copy `lane` by the servers' values.
  void pull(int lane) const {
    const auto l = static_cast<std::size_t>(lane);
    auto& copy = copies_[l];
    std::vector<ShardCall> calls = make_calls(Operation::pull);
    for (std::size_t s = 0; s < shards_.size(); ++s)
      calls[s].result =
          std::as_writable_bytes(std::span(copy).subspan(shards_[s].offset, shards_[s].size));
    client_->call(lane, calls);
    remember_versions(l, calls);
  }

  /// Sets the servers' values from replica `lane`.
  void store(int lane, std::span<const T> values) {
    check_size("assign", values.size());
    std::vector<ShardCall> calls = make_calls(Operation::assign);
    for (std::size_t s = 0; s < shards_.size(); ++s)
      calls[s].values = std::as_bytes(values.subspan(shards_[s].offset, shards_[s].size));
    client_->call(lane, calls);
    auto& copy = copies_[static_cast<std::size_t>(lane)];
    std::copy(values.begin(), values.end(), copy.begin());
  }

  /// Replica `lane`'s update: pushes `gradient` (or, under UpdateRule::sum, the change its
  /// optimizer makes to its copy) and pulls the values after it into its copy, when `sync`
  /// (the sync policy's) lets the servers answer: at once, within its staleness bound, or once
  /// the step's gradients are aggregated.
  template <class O>
  requires optim::Optimizer<O, T>
  void push_pull(int lane, const O& optimizer, std::span<const T> gradient,
                 ps::SyncSpec sync = {}) {
    check_push(optimizer, gradient);
    if (with_backups(sync)) sync.step = oldest_version(lane);
    PreparedPush prepared = prepare_push_pull(lane, optimizer, gradient, sync);
    client_->call(lane, prepared.calls);
    remember_versions(static_cast<std::size_t>(lane), prepared.calls);
  }

  /// Replica `lane`'s updates of `variables[i]` by `gradients[i]` under `syncs[i]`, as push_pull
  /// does each, in one batch of requests: requests to different servers go out together, so a
  /// step costs a round trip per server and variable on it rather than one per variable.
  /// Every variable must come from the same session (one client); otherwise each is pushed on its
  /// own.
  /// @throws as push_pull, before anything is sent when a size or the optimizer does not fit.
  template <class O>
  requires optim::Optimizer<O, T>
  static void push_pull_all(int lane, const O& optimizer,
                            std::span<ShardedVariable* const> variables,
                            std::span<const std::span<const T>> gradients,
                            std::span<const ps::SyncSpec> syncs) {
    for (std::size_t i = 0; i < variables.size(); ++i)
      variables[i]->check_push(optimizer, gradients[i]);
    const bool one_client = std::all_of(
        variables.begin(), variables.end(),
        [&](const ShardedVariable* v) { return v->client_ == variables.front()->client_; });
    if (!one_client) {
      for (std::size_t i = 0; i < variables.size(); ++i)
        variables[i]->push_pull(lane, optimizer, gradients[i], syncs[i]);
      return;
    }
    // With backup replicas, the whole step names one step (the oldest of the shards' versions
    // the replica knows): shards already past it drop the gradient, the others count it.
    std::optional<std::uint64_t> step;
    for (std::size_t i = 0; i < variables.size(); ++i)
      if (with_backups(syncs[i]))
        step = std::min(step.value_or(std::numeric_limits<std::uint64_t>::max()),
                        variables[i]->oldest_version(lane));
    std::vector<PreparedPush> prepared;
    prepared.reserve(variables.size());
    std::vector<ShardCall> calls;
    for (std::size_t i = 0; i < variables.size(); ++i) {
      ps::SyncSpec sync = syncs[i];
      if (with_backups(sync)) sync.step = *step;
      prepared.push_back(variables[i]->prepare_push_pull(lane, optimizer, gradients[i], sync));
      calls.insert(calls.end(), prepared.back().calls.begin(), prepared.back().calls.end());
    }
    if (calls.empty()) return;
    variables.front()->client_->call(lane, calls);
    std::size_t at = 0;
    for (std::size_t i = 0; i < variables.size(); ++i) {
      const std::size_t count = prepared[i].calls.size();
      variables[i]->remember_versions(static_cast<std::size_t>(lane),
                                      std::span<const ShardCall>(calls).subspan(at, count));
      at += count;
    }
  }

  /// The variable's optimizer state, for a checkpoint: under UpdateRule::optimizer the servers',
  /// gathered from every shard into `slots_per_element` arrays of `size()` elements (slot by
  /// slot, as optim/ lays them out); under UpdateRule::sum the workers', whose replicas share
  /// only a step count (a stateless optimizer such as Sgd). Returns the slots per element, or
  /// nothing before the first update. Shards updated asynchronously may be an update apart: the
  /// step is the smallest of theirs.
  /// @throws UsageError under UpdateRule::sum with an optimizer that keeps slots: each replica
  ///   has its own, which no one task's checkpoint holds; the client's errors.
  std::optional<std::size_t> read_optimizer_state(optim::OptimizerState<T>& into) const {
    if (rule_ == UpdateRule::sum) return local_optimizer_state(into);
    std::vector<std::vector<std::byte>> replies(shards_.size());
    std::vector<ShardCall> calls = make_calls(Operation::pull_state);
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      replies[s].resize(ps::kStateSpecBytes +
                        ps::kMaxSlotsPerElement * shards_[s].size * sizeof(T));
      calls[s].result = replies[s];
    }
    client_->call(0, calls);
    std::optional<ps::StateSpec> merged;
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      const auto spec = ps::decode_state(replies[s]);
      if (!spec || calls[s].received != ps::kStateSpecBytes + std::size_t{spec->slots_per_element} *
                                                                  shards_[s].size * sizeof(T))
        throw PeerFailureError(client_->rank(), "read_optimizer_state",
                               fmt::format("{} sent a malformed optimizer state of variable '{}'",
                                           client_->describe_server(shards_[s].server), name_),
                               "check that every task runs the same strata version");
      if (!spec->present) continue;
      if (merged && merged->slots_per_element != spec->slots_per_element)
        throw UsageError(client_->rank(), "read_optimizer_state",
                         fmt::format("the shards of variable '{}' keep {} and {} optimizer slots "
                                     "per element",
                                     name_, merged->slots_per_element, spec->slots_per_element),
                         "update each variable with one optimizer");
      if (!merged || spec->step < merged->step) merged = *spec;
    }
    if (!merged) return std::nullopt;
    // A shard that no update reached yet (its slots are zeros, as a fresh state's are).
    const std::size_t k = merged->slots_per_element;
    into.slots.assign(k * size(), T(0));
    into.step = merged->step;
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      if (calls[s].received == ps::kStateSpecBytes) continue;
      const std::size_t slot_bytes = shards_[s].size * sizeof(T);
      if (slot_bytes == 0) continue;
      for (std::size_t j = 0; j < k; ++j)
        std::memcpy(into.slots.data() + j * size() + shards_[s].offset,
                    replies[s].data() + ps::kStateSpecBytes + j * slot_bytes, slot_bytes);
    }
    return k;
  }

  /// Whether `restore_optimizer_state` takes a state of `slots_per_element` and `step` (checked
  /// before a checkpoint changes anything).
  bool accepts_optimizer_state(std::size_t slots_per_element, std::int64_t step) const noexcept {
    return step >= 0 && slots_per_element <= ps::kMaxSlotsPerElement;
  }

  /// Gives the variable `state` (`slots_per_element` arrays of `size()` elements) or, for
  /// nullptr, no state: under UpdateRule::optimizer on the servers, each shard its slice; under
  /// UpdateRule::sum to every local replica, which then continue from it.
  /// @throws UsageError if the state's size is not `slots_per_element * size()` or the servers
  ///   cannot keep it; the client's errors.
  void restore_optimizer_state(const optim::OptimizerState<T>* state,
                               std::size_t slots_per_element) {
    const std::size_t k = state != nullptr ? slots_per_element : 0;
    if ((state != nullptr && state->slots.size() != k * size()) ||
        !accepts_optimizer_state(k, state != nullptr ? state->step : 0))
      throw UsageError(
          client_->rank(), "restore_optimizer_state",
          fmt::format("variable '{}' of {} elements cannot take an optimizer state "
                      "of {} slots per element in {} values",
                      name_, size(), slots_per_element, state != nullptr ? state->slots.size() : 0),
          "pass slots_per_element arrays of the variable's size (at most 2: the "
          "servers' optimizers are Sgd, Momentum and Adam)");
    if (rule_ == UpdateRule::sum) {
      for (auto& lane : states_)
        lane = state != nullptr ? std::optional(*state) : std::nullopt;
      return;
    }
    std::vector<std::vector<std::byte>> requests(shards_.size());
    std::vector<ShardCall> calls = make_calls(Operation::assign_state);
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      ps::StateSpec spec;
      if (state != nullptr) spec = {true, static_cast<std::uint32_t>(k), state->step};
      const auto prefix = ps::encode(spec);
      auto& bytes = requests[s];
      bytes.assign(prefix.begin(), prefix.end());
      for (std::size_t j = 0; j < k; ++j) {
        const auto slice = std::as_bytes(
            std::span(state->slots).subspan(j * size() + shards_[s].offset, shards_[s].size));
        bytes.insert(bytes.end(), slice.begin(), slice.end());
      }
      calls[s].values = bytes;
    }
    client_->call(0, calls);
  }

 private:
  // A push_pull ready to send: its requests, and the prefixes and change they point into.
  struct PreparedPush {
    std::vector<std::array<std::byte, ps::kPushPrefixBytes>> prefixes;
    std::vector<T> delta;
    std::vector<ShardCall> calls;
  };

  // What push_pull refuses before it changes anything: a gradient of another size, or an
  // optimizer the servers lack for a variable they update.
  template <class O>
  void check_push(const O& /*optimizer*/, std::span<const T> gradient) const {
    check_size("apply_gradients", gradient.size());
    if constexpr (!ps::ServerOptimizer<O>) {
      if (rule_ != UpdateRule::sum)
        throw UsageError(client_->rank(), "apply_gradients",
                         fmt::format("variable '{}' is updated by the parameter servers, which "
                                     "apply Sgd, Momentum and Adam, not this optimizer",
                                     name_),
                         "create it with UpdateRule::sum (per variable: create_variable(initial, "
                         "aggregation, UpdateRule::sum)), where each worker applies its "
                         "optimizer and the servers add up the changes");
    }
  }

  // Replica `lane`'s push of `gradient` (or, under UpdateRule::sum, of the change its optimizer
  // makes to its copy), with the pull of the values after it into its copy.
  template <class O>
  PreparedPush prepare_push_pull(int lane, const O& optimizer, std::span<const T> gradient,
                                 ps::SyncSpec sync) {
    const auto l = static_cast<std::size_t>(lane);
    // A synchronous push names the step its gradient was computed on: the version of the
    // values this replica last received (a replica that has none yet asks first), or with
    // backups the step the caller set.
    if (sync.mode == ps::SyncSpec::Mode::synchronous && versions_[l].empty()) pull(lane);
    auto& copy = copies_[l];
    PreparedPush prepared;
    std::span<const T> pushed = gradient;
    OptimizerSpec spec;
    if (rule_ == UpdateRule::sum) {
      // The worker is the optimizer: the servers add up what every worker's optimizer did.
      auto& state = states_[l];
      if (!state) state = optim::make_state<T>(optimizer, size());
      prepared.delta.assign(copy.begin(), copy.end());
      optimizer.apply(std::span<T>(copy), gradient, *state);
      for (std::size_t i = 0; i < prepared.delta.size(); ++i)
        prepared.delta[i] = copy[i] - prepared.delta[i];
      pushed = prepared.delta;
    } else if constexpr (ps::ServerOptimizer<O>) {
      spec = ps::spec_of(optimizer);
    }
    prepared.prefixes.resize(shards_.size());
    prepared.calls = make_calls(Operation::push_pull);
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      if (sync.mode == ps::SyncSpec::Mode::synchronous && !with_backups(sync))
        sync.step = versions_[l][s];
      prepared.prefixes[s] = ps::push_prefix(spec, sync);
      prepared.calls[s].prefix = prepared.prefixes[s];
      prepared.calls[s].values = std::as_bytes(pushed.subspan(shards_[s].offset, shards_[s].size));
      prepared.calls[s].result =
          std::as_writable_bytes(std::span(copy).subspan(shards_[s].offset, shards_[s].size));
    }
    return prepared;
  }

  // UpdateRule::sum: the replicas' states, which a checkpoint holds only while they are slotless.
  std::optional<std::size_t> local_optimizer_state(optim::OptimizerState<T>& into) const {
    const optim::OptimizerState<T>* first = nullptr;
    for (const auto& lane : states_) {
      if (!lane) continue;
      if (!lane->slots.empty())
        throw UsageError(client_->rank(), "read_optimizer_state",
                         fmt::format("variable '{}' is updated by each replica's own optimizer "
                                     "(UpdateRule::sum), whose slots differ from replica to "
                                     "replica: no one task's checkpoint holds them",
                                     name_),
                         "let the servers apply Momentum or Adam (UpdateRule::optimizer) to "
                         "checkpoint it; under UpdateRule::sum use a slotless optimizer (Sgd)");
      if (first == nullptr) first = &*lane;
    }
    if (first == nullptr) return std::nullopt;
    into = {{}, first->step};
    return 0;
  }

  // Synchronous with backup replicas: a step aggregates fewer gradients than there are
  // replicas, so shards of one step can move on without this replica. Counting steps per shard
  // could then hold replicas each on a shard that the others' pushes reached too late (a
  // deadlock), so every push of a step names one step.
  static bool with_backups(const ps::SyncSpec& sync) noexcept {
    return sync.mode == ps::SyncSpec::Mode::synchronous && sync.bound < sync.replicas;
  }

  // The oldest version among this variable's shards that replica `lane` last received.
  std::uint64_t oldest_version(int lane) {
    const auto l = static_cast<std::size_t>(lane);
    if (versions_[l].empty()) pull(lane);
    return versions_[l].empty() ? 0 : *std::min_element(versions_[l].begin(), versions_[l].end());
  }

  void remember_versions(std::size_t lane, std::span<const ShardCall> calls) const {
    versions_[lane].resize(calls.size());
    for (std::size_t s = 0; s < calls.size(); ++s)
      versions_[lane][s] = calls[s].version;
  }

  std::vector<ShardCall> make_calls(Operation operation) const {
    std::vector<ShardCall> calls(shards_.size());
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      calls[s].server = shards_[s].server;
      calls[s].handle = shards_[s].handle;
      calls[s].operation = operation;
      calls[s].type = data_type_of<T>;
      calls[s].count = shards_[s].size;
    }
    return calls;
  }

  void check_size(std::string_view operation, std::size_t got) const {
    if (got != size())
      throw UsageError(client_->rank(), operation,
                       fmt::format("got {} elements for variable '{}' of {}", got, name_, size()),
                       "pass one value per element of the variable");
  }

  std::shared_ptr<Client> client_;
  std::string name_;
  std::vector<ShardLocation> shards_;
  // A replica's copy is refreshed by the pull inside read() too, which is const: the copy is
  // a cache of the servers' values, not the variable's state.
  mutable std::vector<std::vector<T>> copies_;
  // The shards' versions (updates applied) in each copy, as the servers last said; empty for a
  // copy never refreshed.
  mutable std::vector<std::vector<std::uint64_t>> versions_;
  std::vector<std::optional<optim::OptimizerState<T>>> states_;  // UpdateRule::sum only
  VariableAggregation aggregation_;
  UpdateRule rule_;
};

/// Creates variable `initial` on the servers of `session`: split and placed by the session's
/// rules, each shard created or, when another worker created it first, found with its values.
template <std::floating_point T, class SessionType>
ShardedVariable<T> create_sharded(SessionType& session, std::span<const T> initial,
                                  VariableAggregation aggregation, UpdateRule rule) {
  const std::string name = session.next_name();
  const std::size_t shape[] = {initial.size()};
  std::vector<ShardLocation> shards = session.place(name, shape, sizeof(T));
  std::vector<T> values(initial.begin(), initial.end());
  Client& client = *session.client();
  for (std::size_t s = 0; s < shards.size(); ++s) {
    ShardLocation& shard = shards[s];
    const auto part = std::span(values).subspan(shard.offset, shard.size);
    std::vector<T> current(shard.size);
    const auto created = client.create(
        shard.server, shards.size() == 1 ? name : fmt::format("{}/part_{}", name, s),
        data_type_of<T>, rule, std::as_bytes(part), std::as_writable_bytes(std::span(current)));
    shard.handle = created.handle;
    if (created.existed) std::copy(current.begin(), current.end(), part.begin());
  }
  return ShardedVariable<T>(session.client(), name, std::move(shards), values,
                            session.local_replicas(), aggregation, rule);
}

}  // namespace strata::placement
