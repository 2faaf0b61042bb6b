// strata/ps/protocol.hpp — what workers and parameter servers say to each other.
//
// A worker opens connections to every ps task with the TCP transport's handshake
// (transport/tcp/handshake.hpp: cluster fingerprint, cluster token, incarnation; the tunables
// field carries kTunables, so a collective peer and a ps client never pair up). Then each call is
// a request frame and its reply frame (transport/tcp/frame.hpp), in order on each connection:
//
//   request: kind = Operation, element type of the values, root = the shard's handle (0 for
//            create and done: the server knows the worker from the handshake), sequence = the
//            call's number on this connection, count = elements of the values carried or asked
//            for
//   reply:   kind = the request's, root = Status, sequence = the request's, count = the shard's
//            handle (create) or its version (updates applied so far); payload = values, or the
//            reason for a Status other than ok (text, element type uint8)
//
// Payloads (little-endian):
//   create      CreateSpec (kCreateSpecBytes) | name, zero-padded to a multiple of 8 | values
//   pull        nothing; the reply carries the values
//   push        OptimizerSpec (kOptimizerSpecBytes) | SyncSpec (kSyncSpecBytes) | gradient; the
//               reply carries nothing
//   push_pull   as push; the reply carries the values after this push
//   assign      values; the reply carries nothing
//   done        nothing: the worker has finished (a ps task serves until every worker has)
//   pull_state  nothing; the reply carries StateSpec (kStateSpecBytes) | the optimizer's slots
//               (slots_per_element arrays of the shard's size, slot by slot), for checkpoints
//   assign_state StateSpec | slots, as pull_state's reply: replaces the shard's optimizer state
//   attach_region AttachSpec: a worker offers a shared-memory region for the values of the
//               connection's later calls (BytePS's co-located servers). Phase probe asks whether
//               the server runs on the worker's host (same boot, same network namespace): reply
//               count 1, or 0 (the worker stays on TCP). Phase collect names where the server
//               collects the region (a sealed memfd, transport/shm/handover.hpp); the reply's
//               count is the bytes it mapped.
// A push, push_pull, assign or pull with the in_region flag (transport/tcp/frame.hpp) carries its
// values in the attached region, from its first byte, instead of the payload (a push's payload
// is then its prefix alone), and a reply with the flag left the values there.
// Every length and value is checked by the receiver before it allocates or applies anything.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/detail/fnv1a.hpp>
#include <strata/core/detail/little_endian.hpp>
#include <strata/optim/adam.hpp>
#include <strata/optim/momentum.hpp>
#include <strata/optim/sgd.hpp>

namespace strata::ps {

/// What a request asks of a parameter server.
enum class Operation : std::uint8_t {
  create = 1,         ///< create a shard, or find the one of that name
  pull = 2,           ///< read a shard's values
  push = 3,           ///< apply a gradient (or add a delta) to a shard
  push_pull = 4,      ///< push, then read the values after it, in one round trip
  assign = 5,         ///< set a shard's values (its optimizer slots stay)
  done = 6,           ///< the calling worker has finished
  pull_state = 7,     ///< read a shard's optimizer state (slots and step)
  assign_state = 8,   ///< set a shard's optimizer state
  attach_region = 9,  ///< share a memory region for the connection's values (same host only)
};
inline constexpr std::uint8_t kLastOperation = 9;

/// A reply's verdict.
enum class Status : std::uint8_t {
  ok = 0,
  unknown_variable = 1,    ///< no shard has the handle: not created, or the ps task restarted
  mismatch = 2,            ///< the values' element type or count differ from the shard's
  bad_request = 3,         ///< a malformed payload, an invalid optimizer, an unknown operation
  exists_differently = 4,  ///< a shard of that name exists with another type, size or update
  held_too_long = 5,       ///< a push waited for other replicas' pushes for the server's hold
};
inline constexpr std::uint8_t kLastStatus = 5;

/// How a shard takes a push.
enum class UpdateRule : std::uint8_t {
  /// The server applies the optimizer named in each push, with its slots kept next to the shard.
  optimizer = 0,
  /// The server adds each push to the values (BytePS's summation service): the worker applies
  /// its optimizer itself and pushes the change of its copy.
  sum = 1,
};

/// The optimizer a push asks the server to apply (optim/'s Sgd, Momentum, Adam).
struct OptimizerSpec {
  enum class Kind : std::uint8_t { none = 0, sgd = 1, momentum = 2, nesterov = 3, adam = 4 };
  Kind kind = Kind::none;
  double learning_rate = 0;
  double momentum = 0;
  double beta1 = 0;
  double beta2 = 0;
  double epsilon = 0;
  friend bool operator==(const OptimizerSpec&, const OptimizerSpec&) = default;
};
inline constexpr std::size_t kOptimizerSpecBytes = 48;

/// When a push meets the shard, as the worker's sync policy decides (sync/): at once
/// (Asynchronous), within `bound` pushes of the slowest replica (BoundedStaleness), or
/// aggregated with the pushes of the other replicas of the same step (Synchronous, TF1's
/// SyncReplicasOptimizer with `bound` gradients to aggregate). Every push to a shard must name
/// the same mode, replicas and bound.
struct SyncSpec {
  enum class Mode : std::uint8_t { asynchronous = 0, bounded_staleness = 1, synchronous = 2 };
  enum class Aggregation : std::uint8_t { sum = 0, mean = 1 };
  Mode mode = Mode::asynchronous;
  Aggregation aggregation = Aggregation::sum;
  std::uint32_t replica = 0;   ///< the pushing replica, in [0, replicas)
  std::uint32_t replicas = 1;  ///< every replica of the cluster
  std::uint32_t bound = 0;     ///< staleness bound k, or gradients to aggregate per step
  std::uint64_t step = 0;      ///< synchronous: the shard version the gradient was computed on
  friend bool operator==(const SyncSpec&, const SyncSpec&) = default;
};
inline constexpr std::size_t kSyncSpecBytes = 32;
/// What comes before a push's gradient.
inline constexpr std::size_t kPushPrefixBytes = kOptimizerSpecBytes + kSyncSpecBytes;

/// A shard's optimizer state as pull_state and assign_state carry it before the slots: none yet
/// (no update applied, or a sum shard), or `slots_per_element` arrays of the shard's size and
/// the number of updates the optimizer has made.
struct StateSpec {
  bool present = false;
  std::uint32_t slots_per_element = 0;
  std::int64_t step = 0;  ///< never negative
  friend bool operator==(const StateSpec&, const StateSpec&) = default;
};
inline constexpr std::size_t kStateSpecBytes = 16;
/// The most slots per element a server's optimizer keeps (Adam's m and v).
inline constexpr std::uint32_t kMaxSlotsPerElement = 2;

/// A create request's fixed part.
struct CreateSpec {
  std::uint64_t elements = 0;
  UpdateRule update = UpdateRule::optimizer;
  std::uint32_t name_bytes = 0;
};
inline constexpr std::size_t kCreateSpecBytes = 24;
/// The longest variable name a server takes.
inline constexpr std::size_t kMaxNameBytes = 1024;

/// An attach_region request's payload. The host and ticket bytes are
/// transport::shm::HostIdentity's and transport::shm::HandoverTicket's (name, then secret).
struct AttachSpec {
  enum class Phase : std::uint8_t { probe = 0, collect = 1 };
  Phase phase = Phase::probe;
  std::uint64_t bytes = 0;             ///< collect: the region's size
  std::array<std::byte, 64> host{};    ///< the worker's host
  std::array<std::byte, 40> ticket{};  ///< collect: where the server collects the region
  friend bool operator==(const AttachSpec&, const AttachSpec&) = default;
};
inline constexpr std::size_t kAttachSpecBytes = 120;
/// Whether a request of `operation` may carry its values in the attached region (in_region).
constexpr bool may_use_region(Operation operation) noexcept {
  return operation == Operation::push || operation == Operation::push_pull ||
         operation == Operation::pull || operation == Operation::assign;
}

/// The largest region a server maps.
inline constexpr std::uint64_t kMaxRegionBytes = std::uint64_t{1} << 40;
/// How long a server waits, at most, for the worker to hand its region over: the serving thread
/// waits with it.
inline constexpr std::chrono::seconds kHandoverWait{10};

/// What a ps connection puts in the handshake's tunables field: ps connections and collective
/// connections refuse each other (tunables_differ).
inline constexpr std::uint64_t kTunables = 0x7370'2d73'7472'6174ULL;  // "tarts-ps"

/// What the handshake's cluster field holds on ps connections: a hash of the ps job alone, which
/// every task knows even where a worker's TF_CONFIG lists only itself and the ps tasks.
inline std::uint64_t ps_fingerprint(const cluster::ClusterSpec& cluster) {
  std::uint64_t hash = strata::detail::fnv1a(strata::detail::kFnv1aBasis, std::string_view("ps"));
  for (const auto& [index, address] : cluster.tasks(cluster::TaskType::ps))
    hash = strata::detail::fnv1a(hash, std::to_string(index) + "=" + address.to_string() + ";");
  return hash == 0 ? 1 : hash;
}

namespace detail {

using strata::detail::load_le;
using strata::detail::store_le;

inline std::uint64_t bits_of(double value) noexcept {
  return std::bit_cast<std::uint64_t>(value);
}
inline double double_of(std::uint64_t bits) noexcept {
  return std::bit_cast<double>(bits);
}

}  // namespace detail

inline std::array<std::byte, kOptimizerSpecBytes> encode(const OptimizerSpec& spec) noexcept {
  std::array<std::byte, kOptimizerSpecBytes> out{};
  out[0] = static_cast<std::byte>(spec.kind);
  const double fields[] = {spec.learning_rate, spec.momentum, spec.beta1, spec.beta2, spec.epsilon};
  for (std::size_t i = 0; i < 5; ++i)
    detail::store_le<std::uint64_t>(&out[8 + 8 * i], detail::bits_of(fields[i]));
  return out;
}

/// The spec in `in`, or nothing when the bytes are not one (unknown kind, padding set).
inline std::optional<OptimizerSpec> decode_optimizer(std::span<const std::byte> in) noexcept {
  if (in.size() < kOptimizerSpecBytes) return std::nullopt;
  const auto kind = static_cast<std::uint8_t>(in[0]);
  if (kind > static_cast<std::uint8_t>(OptimizerSpec::Kind::adam)) return std::nullopt;
  for (std::size_t i = 1; i < 8; ++i)
    if (in[i] != std::byte{0}) return std::nullopt;
  OptimizerSpec spec;
  spec.kind = static_cast<OptimizerSpec::Kind>(kind);
  double* fields[] = {&spec.learning_rate, &spec.momentum, &spec.beta1, &spec.beta2, &spec.epsilon};
  for (std::size_t i = 0; i < 5; ++i)
    *fields[i] = detail::double_of(detail::load_le<std::uint64_t>(&in[8 + 8 * i]));
  return spec;
}

inline std::array<std::byte, kSyncSpecBytes> encode(const SyncSpec& spec) noexcept {
  std::array<std::byte, kSyncSpecBytes> out{};
  out[0] = static_cast<std::byte>(spec.mode);
  out[1] = static_cast<std::byte>(spec.aggregation);
  detail::store_le<std::uint32_t>(&out[4], spec.replica);
  detail::store_le<std::uint32_t>(&out[8], spec.replicas);
  detail::store_le<std::uint32_t>(&out[12], spec.bound);
  detail::store_le<std::uint64_t>(&out[16], spec.step);
  return out;
}

/// What comes before a push's gradient: the optimizer to apply and when the push meets the
/// shard.
inline std::array<std::byte, kPushPrefixBytes> push_prefix(const OptimizerSpec& optimizer,
                                                           const SyncSpec& sync = {}) noexcept {
  std::array<std::byte, kPushPrefixBytes> out{};
  const auto first = encode(optimizer);
  const auto second = encode(sync);
  std::copy(first.begin(), first.end(), out.begin());
  std::copy(second.begin(), second.end(), out.begin() + kOptimizerSpecBytes);
  return out;
}

/// The spec in `in`, or nothing when the bytes are not one (unknown mode, padding set, a
/// replica out of range, a synchronous step that aggregates nothing or more than there are).
inline std::optional<SyncSpec> decode_sync(std::span<const std::byte> in) noexcept {
  if (in.size() < kSyncSpecBytes) return std::nullopt;
  const auto mode = static_cast<std::uint8_t>(in[0]);
  const auto aggregation = static_cast<std::uint8_t>(in[1]);
  if (mode > static_cast<std::uint8_t>(SyncSpec::Mode::synchronous) ||
      aggregation > static_cast<std::uint8_t>(SyncSpec::Aggregation::mean))
    return std::nullopt;
  for (const std::size_t i : {2, 3, 24, 25, 26, 27, 28, 29, 30, 31})
    if (in[i] != std::byte{0}) return std::nullopt;
  SyncSpec spec;
  spec.mode = static_cast<SyncSpec::Mode>(mode);
  spec.aggregation = static_cast<SyncSpec::Aggregation>(aggregation);
  spec.replica = detail::load_le<std::uint32_t>(&in[4]);
  spec.replicas = detail::load_le<std::uint32_t>(&in[8]);
  spec.bound = detail::load_le<std::uint32_t>(&in[12]);
  spec.step = detail::load_le<std::uint64_t>(&in[16]);
  if (spec.replicas == 0 || spec.replicas > (1u << 20) || spec.replica >= spec.replicas)
    return std::nullopt;
  if (spec.mode == SyncSpec::Mode::synchronous && (spec.bound == 0 || spec.bound > spec.replicas))
    return std::nullopt;
  return spec;
}

inline std::array<std::byte, kCreateSpecBytes> encode(const CreateSpec& spec) noexcept {
  std::array<std::byte, kCreateSpecBytes> out{};
  detail::store_le<std::uint64_t>(&out[0], spec.elements);
  out[8] = static_cast<std::byte>(spec.update);
  detail::store_le<std::uint32_t>(&out[16], spec.name_bytes);
  return out;
}

/// The spec in `in`, or nothing when the bytes are not one.
inline std::optional<CreateSpec> decode_create(std::span<const std::byte> in) noexcept {
  if (in.size() < kCreateSpecBytes) return std::nullopt;
  const auto update = static_cast<std::uint8_t>(in[8]);
  if (update > static_cast<std::uint8_t>(UpdateRule::sum)) return std::nullopt;
  for (const std::size_t i : {9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23})
    if (in[i] != std::byte{0}) return std::nullopt;
  CreateSpec spec;
  spec.elements = detail::load_le<std::uint64_t>(&in[0]);
  spec.update = static_cast<UpdateRule>(update);
  spec.name_bytes = detail::load_le<std::uint32_t>(&in[16]);
  if (spec.name_bytes == 0 || spec.name_bytes > kMaxNameBytes) return std::nullopt;
  return spec;
}

inline std::array<std::byte, kStateSpecBytes> encode(const StateSpec& spec) noexcept {
  std::array<std::byte, kStateSpecBytes> out{};
  out[0] = static_cast<std::byte>(spec.present ? 1 : 0);
  detail::store_le<std::uint32_t>(&out[4], spec.slots_per_element);
  detail::store_le<std::uint64_t>(&out[8], static_cast<std::uint64_t>(spec.step));
  return out;
}

/// The spec in `in`, or nothing when the bytes are not one (padding set, slots beyond
/// kMaxSlotsPerElement, a negative step or the largest, or slots and a step without a state).
inline std::optional<StateSpec> decode_state(std::span<const std::byte> in) noexcept {
  if (in.size() < kStateSpecBytes) return std::nullopt;
  const auto present = static_cast<std::uint8_t>(in[0]);
  if (present > 1) return std::nullopt;
  for (const std::size_t i : {1, 2, 3})
    if (in[i] != std::byte{0}) return std::nullopt;
  StateSpec spec;
  spec.present = present == 1;
  spec.slots_per_element = detail::load_le<std::uint32_t>(&in[4]);
  spec.step = static_cast<std::int64_t>(detail::load_le<std::uint64_t>(&in[8]));
  if (spec.slots_per_element > kMaxSlotsPerElement || spec.step < 0 ||
      spec.step == std::numeric_limits<std::int64_t>::max())  // no update could follow it
    return std::nullopt;
  if (!spec.present && (spec.slots_per_element != 0 || spec.step != 0)) return std::nullopt;
  return spec;
}

inline std::array<std::byte, kAttachSpecBytes> encode(const AttachSpec& spec) noexcept {
  std::array<std::byte, kAttachSpecBytes> out{};
  out[0] = static_cast<std::byte>(spec.phase);
  detail::store_le<std::uint64_t>(&out[8], spec.bytes);
  std::copy(spec.host.begin(), spec.host.end(), out.begin() + 16);
  std::copy(spec.ticket.begin(), spec.ticket.end(), out.begin() + 80);
  return out;
}

/// The spec in `in`, or nothing when the bytes are not one (unknown phase, padding set, a
/// collect of no bytes or more than kMaxRegionBytes, a probe that names a region).
inline std::optional<AttachSpec> decode_attach(std::span<const std::byte> in) noexcept {
  if (in.size() < kAttachSpecBytes) return std::nullopt;
  const auto phase = static_cast<std::uint8_t>(in[0]);
  if (phase > static_cast<std::uint8_t>(AttachSpec::Phase::collect)) return std::nullopt;
  for (std::size_t i = 1; i < 8; ++i)
    if (in[i] != std::byte{0}) return std::nullopt;
  AttachSpec spec;
  spec.phase = static_cast<AttachSpec::Phase>(phase);
  spec.bytes = detail::load_le<std::uint64_t>(&in[8]);
  std::copy_n(in.begin() + 16, spec.host.size(), spec.host.begin());
  std::copy_n(in.begin() + 80, spec.ticket.size(), spec.ticket.begin());
  const bool collect = spec.phase == AttachSpec::Phase::collect;
  if (collect ? spec.bytes == 0 || spec.bytes > kMaxRegionBytes
              : spec.bytes != 0 || spec.ticket != decltype(spec.ticket){})
    return std::nullopt;
  return spec;
}

/// Bytes of a name in a create payload: padded so that the values after it stay aligned.
constexpr std::size_t padded_name_bytes(std::size_t name_bytes) noexcept {
  return (name_bytes + 7) / 8 * 8;
}

/// What a server must apply for optimizer `O` (the optimizers of optim/).
template <class O>
concept ServerOptimizer =
    std::same_as<O, optim::Sgd> || std::same_as<O, optim::Momentum> || std::same_as<O, optim::Adam>;

inline OptimizerSpec spec_of(const optim::Sgd& sgd) noexcept {
  return {OptimizerSpec::Kind::sgd, sgd.learning_rate, 0, 0, 0, 0};
}
inline OptimizerSpec spec_of(const optim::Momentum& momentum) noexcept {
  return {momentum.nesterov ? OptimizerSpec::Kind::nesterov : OptimizerSpec::Kind::momentum,
          momentum.learning_rate,
          momentum.momentum,
          0,
          0,
          0};
}
inline OptimizerSpec spec_of(const optim::Adam& adam) noexcept {
  return {OptimizerSpec::Kind::adam, adam.learning_rate, 0, adam.beta1, adam.beta2, adam.epsilon};
}

inline std::string_view to_string(Operation operation) noexcept {
  switch (operation) {
    case Operation::create:
      return "create";
    case Operation::pull:
      return "pull";
    case Operation::push:
      return "push";
    case Operation::push_pull:
      return "push_pull";
    case Operation::assign:
      return "assign";
    case Operation::done:
      return "done";
    case Operation::pull_state:
      return "pull_state";
    case Operation::assign_state:
      return "assign_state";
    case Operation::attach_region:
      return "attach_region";
  }
  return "unknown operation";
}

}  // namespace strata::ps
