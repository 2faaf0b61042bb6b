// tests/support/loopback_ports.hpp — listening sockets on 127.0.0.1 for groups built by hand.
#pragma once

#include <cstddef>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/communicator/tcp.hpp>

namespace strata::testing {

/// One listening socket per rank on a kernel-chosen loopback port, handed to the group
/// (TcpMembership::listen_fd), so that a test knows the ports and no other program can take
/// one between choosing and binding it.
struct LoopbackPorts {
  explicit LoopbackPorts(int n) {
    for (int r = 0; r < n; ++r) {
      asio::ip::tcp::acceptor acceptor(
          io, asio::ip::tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
      addresses.push_back({"127.0.0.1", acceptor.local_endpoint().port()});
      fds.push_back(acceptor.release());
    }
  }
  communicator::TcpMembership membership(int rank) const {
    return {rank, addresses, 0, fds[static_cast<std::size_t>(rank)]};
  }
  asio::io_context io;
  std::vector<cluster::Address> addresses;
  std::vector<int> fds;
};

}  // namespace strata::testing
