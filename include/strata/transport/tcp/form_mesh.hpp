// strata/transport/tcp/form_mesh.hpp — forming the full mesh of TCP connections of a group.
//
// The higher rank of each pair connects (connector.hpp), the lower one accepts (listener.hpp);
// each connection passes the handshake of handshake.hpp, and the mesh is complete once every
// peer has said kMeshReady (pending_mesh.hpp). The result is a Mesh (mesh.hpp).
//
// Errors: the port in use or an address that is not this host's → ConfigurationError naming
// it; a peer that refuses this rank for a reason that retrying cannot fix (other cluster,
// world size, tunables, cluster token) → ConfigurationError naming the peer and the reason;
// the deadline → TimeoutError listing the ranks that did not join, and what was rejected
// meanwhile (garbage, wrong token, ...).
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <strata/core/deadline.hpp>
#include <strata/core/detail/join.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/connector.hpp>
#include <strata/transport/tcp/listener.hpp>
#include <strata/transport/tcp/mesh.hpp>
#include <strata/transport/tcp/pending_mesh.hpp>

namespace strata::transport::tcp {

/// Forms the mesh (see the file comment). Blocks until every connection is up or `deadline`.
inline std::unique_ptr<Mesh> form_mesh(const MeshConfig& config, Deadline deadline);

// ---- implementation ---------------------------------------------------------------------------

/// One rank's forming of its mesh: the pending mesh, its listener and its connector.
class MeshBuilder {
 public:
  MeshBuilder(const MeshConfig& config, Deadline deadline)
      : pending_(config, deadline), listener_(pending_), connector_(pending_) {
    pending_.on_reconnect([this](int peer) { connector_.connect_to(peer); });
  }

  std::unique_ptr<Mesh> build() {
    // Every rank binds its own address, also one that no peer connects to (the last rank, a
    // group of one): a foreign address or a port in use is then this rank's configuration
    // error, not a timeout blamed on a peer, and a socket handed in is closed below with the
    // rest instead of listening on for the life of the process.
    listener_.listen();
    if (pending_.alone()) {
      listener_.close();
      return pending_.release();
    }
    for (int peer = 0; peer < rank(); ++peer)
      connector_.connect_to(peer);
    if (!pending_.complete() && !pending_.failure())
      pending_.io().run_until(pending_.deadline().time_point());
    // Abandon what is still in flight and let its handlers run to release their sockets.
    listener_.close();
    connector_.abandon();
    listener_.abandon_handshakes();
    pending_.io().restart();
    pending_.io().poll();
    if (pending_.failure()) std::rethrow_exception(pending_.failure());
    if (!pending_.complete()) throw timeout_error();
    return pending_.finish();
  }

 private:
  int rank() const noexcept { return pending_.config().rank; }

  TimeoutError timeout_error() const {
    std::vector<int> missing;
    std::vector<int> unready;
    for (int peer = 0; peer < pending_.size(); ++peer) {
      if (peer == rank()) continue;
      if (!pending_.connected(peer))
        missing.push_back(peer);
      else if (!pending_.said_ready(peer))
        unready.push_back(peer);
    }
    const auto ranks = [](const std::vector<int>& list) {
      return fmt::format("{} {}", list.size() == 1 ? "rank" : "ranks",
                         strata::detail::join(list, ", "));
    };
    const auto budget = pending_.deadline().budget().count();
    std::string what;
    if (!missing.empty())
      what = fmt::format("{} did not join the group within {} ms", ranks(missing), budget);
    if (!unready.empty())
      what += fmt::format(
          "{}{} connected but did not finish joining within {} ms (they wait for "
          "other ranks)",
          what.empty() ? "" : "; ", ranks(unready), budget);
    for (int peer : missing) {
      auto found = connector_.last_errors().find(peer);
      if (found != connector_.last_errors().end())
        what += fmt::format("; connecting to rank {} at {}: {}", peer,
                            pending_.address(peer).to_string(), found->second);
      auto left = pending_.departed().find(peer);
      if (left != pending_.departed().end())
        what += fmt::format("; rank {}: {}", peer, left->second);
    }
    const auto& rejections = listener_.rejections();
    if (!rejections.empty())
      what += fmt::format("; turned away: {}{}", strata::detail::join(rejections, "; "),
                          listener_.more_rejections() > 0
                              ? fmt::format(" (and {} more)", listener_.more_rejections())
                              : "");
    return TimeoutError(rank(), "rendezvous", what,
                        "start every rank of the cluster (the missing ones are listed), check "
                        "their addresses, or raise the deadline (STRATA_TIMEOUT)");
  }

  // Destroyed in reverse: the connector's and listener's sockets before the pending mesh's
  // io_context.
  PendingMesh pending_;
  Listener listener_;
  Connector connector_;
};

inline std::unique_ptr<Mesh> form_mesh(const MeshConfig& config, Deadline deadline) {
  return MeshBuilder(config, deadline).build();
}

}  // namespace strata::transport::tcp
