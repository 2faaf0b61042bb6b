// strata/impl/resolve.ipp — strata::resolve_cluster over the TCP address exchange. Included at
// the end of strata/resolve.hpp (header-only) or by impl/src.hpp after it (compiled).
#pragma once

#include <utility>

#include <strata/transport/tcp/address_exchange.hpp>

namespace strata {

STRATA_DECL cluster::ResolvedCluster resolve_cluster(cluster::ResolveOptions options) {
  if (!options.exchange) options.exchange = transport::tcp::exchange_addresses;
  return cluster::resolve_cluster(std::move(options));
}

}  // namespace strata
