// strata/transport/tcp/route.hpp — host names, endpoints and the route toward a peer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <asio/io_context.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/udp.hpp>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/core/error.hpp>

namespace strata::transport::tcp {

/// "host:port", with brackets around IPv6 addresses.
inline std::string endpoint_text(std::string_view host, std::uint16_t port) {
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

/// The endpoints of `host:port` (an address is used as is, without a lookup).
template <class Protocol>
std::vector<typename Protocol::endpoint> resolve_endpoints(const std::string& host,
                                                           std::uint16_t port,
                                                           std::error_code& ec) {
  ec.clear();
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec) return {typename Protocol::endpoint(address, port)};
  ec.clear();
  asio::io_context io;
  typename Protocol::resolver resolver(io);
  const auto results =
      resolver.resolve(host, std::to_string(port), asio::ip::resolver_base::numeric_service, ec);
  std::vector<typename Protocol::endpoint> endpoints;
  if (ec) return endpoints;
  for (const auto& entry : results)
    endpoints.push_back(entry.endpoint());
  if (endpoints.empty()) ec = asio::error::host_not_found;
  return endpoints;
}

/// The address of this host's interface that routes toward `host`, as text ("10.0.0.7"),
/// for publishing an address the other ranks can reach. Uses a connected UDP socket: the
/// kernel picks the route, and no packet is sent. For 127.0.0.1 it returns 127.0.0.1.
///
/// `port` only completes the destination (0 is replaced by 9, since some systems refuse to
/// connect to port 0). A host name is resolved with the system resolver, which blocks for as
/// long as the system's own resolver timeouts allow.
/// @throws ConfigurationError (rank -1, operation "local_address_toward") when `host` cannot
///   be resolved or no route leads to it.
inline std::string local_address_toward(std::string_view host, std::uint16_t port) {
  using asio::ip::udp;
  const auto fail = [&](const std::error_code& ec) {
    return ConfigurationError(
        -1, "local_address_toward",
        fmt::format("cannot find this host's address toward {}: {}", endpoint_text(host, port),
                    ec.message()),
        "check that the store's host (MASTER_ADDR) is spelled right and reachable from here");
  };
  std::error_code ec;
  const auto endpoints =
      resolve_endpoints<udp>(std::string(host), port == 0 ? std::uint16_t{9} : port, ec);
  if (ec) throw fail(ec);
  asio::io_context io{1};
  for (const auto& endpoint : endpoints) {
    udp::socket socket(io);
    // connect() on a datagram socket only asks the kernel for a route; nothing is sent.
    socket.open(endpoint.protocol(), ec);
    if (!ec) socket.connect(endpoint, ec);
    if (ec) continue;
    const udp::endpoint local = socket.local_endpoint(ec);
    if (!ec) return local.address().to_string();
  }
  throw fail(ec);
}

/// A listening socket on 127.0.0.1, on a port the kernel picked, and its address: a rank of a
/// group formed inside one process (tests, benchmarks) before its peers know where it listens.
struct LoopbackListener {
  cluster::Address address;
  int fd = -1;  ///< owned by the caller
};

/// @throws ConfigurationError when no loopback port can be bound.
inline LoopbackListener listen_on_loopback() {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io);
  std::error_code ec;
  const asio::ip::tcp::endpoint endpoint(asio::ip::make_address_v4("127.0.0.1"), 0);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw ConfigurationError(-1, "listen_on_loopback",
                             fmt::format("cannot listen on 127.0.0.1: {}", ec.message()),
                             "check that the loopback interface is up");
  return {{"127.0.0.1", acceptor.local_endpoint().port()}, acceptor.release()};
}

}  // namespace strata::transport::tcp
