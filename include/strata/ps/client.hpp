// strata/ps/client.hpp — a worker's connections to the parameter servers of its cluster.
//
// This header declares; the definitions are in ps/impl/client.ipp (see ps/server.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/config.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/deadline.hpp>
#include <strata/ps/protocol.hpp>

namespace strata::ps {

/// Options of a worker's parameter-server client. Plain data.
struct ClientOptions {
  /// The secret the servers ask for; unset: read STRATA_CLUSTER_TOKEN (none: unauthenticated).
  std::optional<std::string> cluster_token{};
  /// Deadline of connecting (ps tasks may start after the workers) and of every call.
  /// Defaults to STRATA_TIMEOUT when set, else 60 s.
  std::chrono::milliseconds timeout = default_timeout();
  /// Whether calls of kRegionMinBytes and more to a ps task on this host (the same boot and
  /// network namespace) move their values through a shared-memory region, as BytePS does for
  /// co-located servers, instead of loopback TCP. Other hosts' ps tasks are always over TCP.
  bool shared_memory = true;
};

/// The smallest values (bytes) a call moves through a shared region: below it, the copies in
/// and out of the region save less than loopback TCP costs.
inline constexpr std::size_t kRegionMinBytes = std::size_t{64} << 10;

/// One request of a batch (`Client::call`): an operation on one shard.
struct ShardCall {
  int server = 0;
  std::uint32_t handle = 0;
  Operation operation = Operation::pull;
  DataType type = DataType::float32;
  std::uint64_t count = 0;              ///< elements of the shard
  std::span<const std::byte> prefix{};  ///< the optimizer spec of a push
  std::span<const std::byte> values{};  ///< what a push or an assign sends
  std::span<std::byte> result{};        ///< where a pull, push_pull or pull_state's reply goes
  std::uint64_t version = 0;            ///< out: the shard's updates so far
  std::size_t received = 0;             ///< out: bytes written to `result`
};

/// The connections of one worker process to every ps task: `lanes` per task, so that replicas
/// of the process call the servers concurrently, each on its own lane, without a lock.
///
/// Errors name the ps task: a server that closes its connections (it died) raises
/// PeerFailureError at once, one that stops answering TimeoutError at the deadline; the
/// server's refusals raise UsageError (unknown variable), MismatchError (another type or size)
/// or ConfigurationError (handshake: another cluster, another token).
/// Thread safety: concurrent calls on different lanes; one thread per lane.
class Client {
 public:
  /// Connects `lanes` connections to every ps task of `cluster` as collective rank `rank`,
  /// retrying while a server is not up yet, until `options.timeout`.
  STRATA_DECL Client(const cluster::ClusterSpec& cluster, int rank, int lanes,
                     ClientOptions options = {});
  STRATA_DECL ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  STRATA_DECL int num_servers() const noexcept;
  STRATA_DECL int num_lanes() const noexcept;
  /// This worker's collective rank.
  STRATA_DECL int rank() const noexcept;
  /// "ps task 1 (host:port)", for messages.
  STRATA_DECL std::string describe_server(int server) const;

  struct Created {
    std::uint32_t handle = 0;
    bool existed = false;  ///< `current` then holds the values the server had
  };
  /// Creates shard `name` on `server` from `initial` (bytes of `type` values), or finds the
  /// one created before under that name (by another worker, or before a restart), whose values
  /// are then written to `current` (as many bytes as `initial`).
  STRATA_DECL Created create(int server, std::string_view name, DataType type, UpdateRule update,
                             std::span<const std::byte> initial, std::span<std::byte> current);

  /// Runs `calls` on lane `lane`, requests to different servers in parallel.
  STRATA_DECL void call(int lane, std::span<ShardCall> calls);

  /// Tells every server this worker has finished. Once every worker has, the servers return
  /// from `serve`.
  STRATA_DECL void done();

 private:
  struct State;  // ps/impl/client.ipp
  std::unique_ptr<State> state_;
};

}  // namespace strata::ps

#if STRATA_HEADER_ONLY
#include <strata/ps/impl/client.ipp>
#endif
