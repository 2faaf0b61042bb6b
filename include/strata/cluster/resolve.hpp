// strata/cluster/resolve.hpp — one call that finds this process's cluster, whatever launched it.
//
// `resolve_cluster()` looks, in this order, at:
//   1. explicit arguments (ResolveOptions::cluster and ::task);
//   2. TF_CONFIG (tf_config.hpp), as TensorFlow and Kubeflow's TFJob set it;
//   3. torchrun's RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT;
//   4. OpenMPI's OMPI_COMM_WORLD_RANK / SIZE (master from MASTER_ADDR);
//   5. SLURM's SLURM_PROCID / SLURM_NTASKS and node list;
//   6. nothing: a valid one-worker cluster.
// Launchers of kind 3–5 say where rank 0 is but not where the others listen: the ranks must
// exchange their listening addresses over the network, which is the TCP transport's job
// (transport/tcp/address_exchange.hpp binds a listener toward the master and publishes it
// through a small store there). This layer only parses and decides; it takes that exchange as
// `ResolveOptions::exchange`, and `strata::resolve_cluster()` (strata/resolve.hpp) supplies the
// TCP one. The bound socket is handed on to the communicator, so no other program can take the
// port in between.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/cluster/environment.hpp>
#include <strata/cluster/launcher_environment.hpp>
#include <strata/config.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>

namespace strata::cluster {

/// An owned listening socket (a file descriptor), closed unless released.
class ListeningSocket {
 public:
  ListeningSocket() = default;
  explicit ListeningSocket(int fd) noexcept : fd_(fd) {}
  ListeningSocket(ListeningSocket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ListeningSocket& operator=(ListeningSocket&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~ListeningSocket() { reset(); }

  int get() const noexcept { return fd_; }
  /// Gives up ownership: the caller closes the descriptor.
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

/// What an address exchange returns: every rank's listening address in rank order, and this
/// rank's listener, bound to its own address.
struct ExchangedAddresses {
  std::vector<Address> addresses;
  ListeningSocket listener;
};

/// Exchanges the listening addresses of the ranks a store-based launcher started (torchrun,
/// OpenMPI, SLURM), within `timeout`. `strata::transport::tcp::exchange_addresses` is the one
/// strata has.
using AddressExchange =
    std::function<ExchangedAddresses(const LauncherEnvironment&, std::chrono::milliseconds)>;

struct ResolveOptions {
  /// Explicit cluster and task; used when both are set.
  std::optional<ClusterSpec> cluster{};
  std::optional<Task> task{};
  /// Where variables are read (tests pass environment_from(...)).
  Environment environment = process_environment();
  /// Deadline of the address exchange of store-based launchers.
  std::chrono::milliseconds timeout = default_timeout();
  /// How ranks of store-based launchers learn each other's addresses; required only for them
  /// (strata::resolve_cluster() sets the TCP store's).
  AddressExchange exchange{};
};

/// This process's place in its cluster.
struct ResolvedCluster {
  /// "explicit", "TF_CONFIG", "torchrun", "openmpi", "slurm" or "none".
  std::string source = "none";
  /// The cluster; empty for a one-process cluster found without TF_CONFIG (as TF's resolver
  /// returns an empty ClusterSpec without TF_CONFIG), which needs no network.
  ClusterSpec cluster;
  Task task{TaskType::worker, 0};
  /// Rank in the collective group (chief first, then workers); -1 for ps and evaluator
  /// tasks, which are not members.
  int rank = 0;
  int size = 1;
  /// Index of this process among the group's processes on its host.
  int local_rank = 0;
  /// Listening address of every rank of the collective group, in rank order.
  std::vector<Address> addresses{{"127.0.0.1", 0}};
  /// Bound to addresses[rank] when the resolver bound it (store-based launchers).
  ListeningSocket listener;
  /// Replicas this process runs under MultiWorkerMirroredStrategy and ParameterServerStrategy
  /// when the strategy is not told: STRATA_LOCAL_REPLICAS (set by strata-launch
  /// --local-replicas), else 1.
  int local_replicas = 1;

  /// TF's rule: the chief task, or worker 0 when the cluster has no chief. Checkpoints and
  /// summaries belong to it.
  bool is_chief() const noexcept { return rank == 0; }
  bool in_collective_group() const noexcept { return rank >= 0; }
};

/// Resolves this process's cluster (see the file comment for the order).
/// @throws ConfigurationError naming the variable or setting at fault; TimeoutError when the
/// address exchange of a store-based launcher does not complete in time; UsageError when such
/// a launcher started the process and `options.exchange` is unset.
STRATA_DECL ResolvedCluster resolve_cluster(ResolveOptions options = {});

}  // namespace strata::cluster

#if STRATA_HEADER_ONLY
#include <strata/cluster/impl/resolve.ipp>
#endif
