// strata/resolve.hpp — one call that finds this process's cluster, whatever launched it.
//
// `cluster::resolve_cluster` parses TF_CONFIG and the launchers' variables; ranks started by
// torchrun, OpenMPI or SLURM must also exchange their addresses over the network, which this
// layer wires in: the TCP address store (transport/tcp/address_exchange.hpp).
#pragma once

#include <strata/cluster/resolve.hpp>
#include <strata/config.hpp>

namespace strata {

/// `cluster::resolve_cluster(options)`, with the TCP address exchange unless `options.exchange`
/// names another: explicit arguments, TF_CONFIG, torchrun, OpenMPI, SLURM, or one worker.
///
/// Example:
/// @code
///   auto resolved = strata::resolve_cluster();
///   strata::communicator::TcpCommunicator comm(strata::communicator::membership_of(resolved));
/// @endcode
/// @throws as `cluster::resolve_cluster` and `transport::tcp::exchange_addresses` do.
STRATA_DECL cluster::ResolvedCluster resolve_cluster(cluster::ResolveOptions options = {});

}  // namespace strata

#if STRATA_HEADER_ONLY
#include <strata/impl/resolve.ipp>
#endif
