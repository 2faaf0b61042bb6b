// strata/ps/session.hpp — one worker's view of its parameter servers: the connections, and
// the rules that name, split and place the variables it creates.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/core/error.hpp>
#include <strata/ps/client.hpp>
#include <strata/ps/partitioner.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/ps/shard_placement.hpp>

namespace strata::ps {

/// The largest shard a parameter server holds: its optimizer state (kMaxSlotsPerElement arrays
/// of its size, after a StateSpec) must fit one frame, whose length is 32 bits.
inline constexpr std::size_t kMaxShardBytes =
    (std::size_t{0xFFFF'FFFFu} - std::max(kPushPrefixBytes, kStateSpecBytes)) / kMaxSlotsPerElement;

/// Where one shard of a variable lives: the elements [offset, offset + size) of the variable,
/// on ps task `server` under `handle`.
struct ShardLocation {
  int server = 0;
  std::uint32_t handle = 0;
  std::size_t offset = 0;
  std::size_t size = 0;
};

/// A worker's session with the parameter servers, held by its strategy: connections with a lane
/// per local replica, and the naming, partitioning and placement of the variables it creates.
/// Every worker creates the same variables in the same order (the same program), so every
/// worker derives the same names and places: the first worker to create a shard initializes
/// it, the others find it (TF's chief-initializes rule, without a wait).
///
/// When it ends, the session tells the servers this worker has finished.
template <Partitioner PartitionerType = NoPartitioner,
          ShardPlacement PlacementPolicy = RoundRobinPlacement>
class Session {
 public:
  /// Connects to every ps task of `cluster` as collective rank `rank` with `local_replicas`
  /// lanes.
  /// @throws what Client's constructor throws.
  Session(const cluster::ClusterSpec& cluster, int rank, int local_replicas, ClientOptions options,
          PartitionerType partitioner = {})
      : client_(std::make_shared<Client>(cluster, rank, local_replicas, std::move(options))),
        group_size_(cluster.collective_size()),
        local_replicas_(local_replicas),
        partitioner_(std::move(partitioner)),
        placement_(client_->num_servers()) {}

  ~Session() {
    // Every variable holds the client too: what matters is that this worker is done.
    try {
      client_->done();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a server that is gone needs no goodbye
    }
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::shared_ptr<Client>& client() const noexcept { return client_; }
  int local_replicas() const noexcept { return local_replicas_; }
  /// The replicas of every worker: each pushes its own gradients.
  int num_replicas() const noexcept { return group_size_ * local_replicas_; }
  /// The workers (chief included) of the cluster, and this one's index among them.
  int num_workers() const noexcept { return group_size_; }
  int worker() const noexcept { return client_->rank(); }
  /// This worker's first replica among them.
  int first_replica() const noexcept { return client_->rank() * local_replicas_; }
  /// TF's chief: the chief task, or worker 0 without one (collective rank 0 either way).
  bool is_chief() const noexcept { return client_->rank() == 0; }
  /// Bytes of shards placed on each ps task so far (the placement policy's load report).
  std::span<const std::uint64_t> bytes_per_server() const noexcept {
    return placement_.bytes_per_task();
  }

  /// The next variable's name: its index in creation order, as TF names unnamed variables.
  std::string next_name() { return fmt::format("variable_{}", created_++); }

  /// Splits variable `name` of `shape` (`element_bytes` each) by the partitioner and places
  /// each shard with the policy. Handles are filled in when the shards are created.
  /// @throws UsageError when a shard is larger than kMaxShardBytes.
  std::vector<ShardLocation> place(std::string_view name, std::span<const std::size_t> shape,
                                   std::size_t element_bytes) {
    std::size_t row_elements = 1;
    for (std::size_t d = 1; d < shape.size(); ++d)
      row_elements *= shape[d];
    std::vector<ShardLocation> shards;
    for (const RowRange& rows : shard_variable(partitioner_, shape, element_bytes)) {
      ShardLocation shard;
      shard.offset = rows.offset * row_elements;
      shard.size = rows.rows * row_elements;
      if (shard.size > kMaxShardBytes / element_bytes)
        throw UsageError(client_->rank(), "ParameterServer::create_variable",
                         fmt::format("variable '{}' would have a shard of {} bytes, more than the "
                                     "{} a parameter server takes (a frame carries at most 4 GiB, "
                                     "and a shard's optimizer state up to twice its values)",
                                     name, shard.size * element_bytes, kMaxShardBytes),
                         "split it into more shards: FixedShardsPartitioner or "
                         "MaxSizePartitioner");
      shard.server = placement_.place(shard.size * element_bytes);
      shards.push_back(shard);
    }
    return shards;
  }

 private:
  std::shared_ptr<Client> client_;
  int group_size_;
  int local_replicas_;
  PartitionerType partitioner_;
  PlacementPolicy placement_;
  std::size_t created_ = 0;
};

}  // namespace strata::ps
