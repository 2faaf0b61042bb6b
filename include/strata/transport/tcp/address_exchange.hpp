// strata/transport/tcp/address_exchange.hpp — how ranks of torchrun, OpenMPI and SLURM learn
// where the others listen.
//
// Those launchers say where rank 0 runs, not where the other ranks listen. Each rank binds a
// listening socket on the interface that routes toward the master, on a port the kernel picks,
// and publishes it through the address store rank 0 serves (store.hpp). The socket stays bound
// and is handed to the communicator, so no other program can take the port in between.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/cluster/launcher_environment.hpp>
#include <strata/cluster/resolve.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/route.hpp>
#include <strata/transport/tcp/store.hpp>

namespace strata::transport::tcp {

/// The `cluster::AddressExchange` over the TCP address store: binds this rank's listener and
/// exchanges every rank's "host:port" through the store on `launcher.master_addr:master_port`.
/// @throws ConfigurationError when no listener can be bound or a published address is not one;
/// TimeoutError and the other errors of `exchange` (store.hpp).
inline cluster::ExchangedAddresses exchange_addresses(const cluster::LauncherEnvironment& launcher,
                                                      std::chrono::milliseconds timeout) {
  const std::string host = local_address_toward(launcher.master_addr, launcher.master_port);
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io);
  std::error_code ec;
  const asio::ip::tcp::endpoint endpoint(asio::ip::make_address(host, ec), 0);
  if (!ec) acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw ConfigurationError(launcher.rank, launcher.launcher,
                             fmt::format("cannot listen on {}: {}", host, ec.message()),
                             "check the network configuration of this host");
  const cluster::Address own{host, acceptor.local_endpoint().port()};
  StoreOptions store;
  store.host = launcher.master_addr;
  store.port = launcher.master_port;
  store.rank = launcher.rank;
  store.world_size = launcher.world_size;
  store.timeout = timeout;
  const auto values = transport::tcp::exchange(store, own.to_string());
  cluster::ExchangedAddresses exchanged;
  for (const std::string& value : values)
    exchanged.addresses.push_back(cluster::parse_address(value, launcher.launcher));
  exchanged.listener = cluster::ListeningSocket(acceptor.release());
  return exchanged;
}

}  // namespace strata::transport::tcp
