// strata/transport/tcp/congestion.hpp — which TCP congestion control a connection runs.
//
// Loopback never queues or drops, so congestion control has nothing to find out there, and a
// pacing algorithm (BBR, a common host default) only throttles the sender with timers. So
// connections within one host run reno, which is built in and allowed to everyone; across hosts
// the kernel's default stands unless the user names one.
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <asio/ip/tcp.hpp>

namespace strata::transport::tcp {

/// True for a connection over loopback or between two addresses of this host.
inline bool same_host(const asio::ip::tcp::socket& socket) {
  std::error_code ec;
  const auto local = socket.local_endpoint(ec).address();
  if (ec) return false;
  const auto remote = socket.remote_endpoint(ec).address();
  return !ec && (remote.is_loopback() || remote == local);
}

/// Sets TCP_CONGESTION on `socket`: `named` when given, else reno within one host and nothing
/// across hosts. Returns the kernel's error for a refused `named` algorithm; a refused reno is
/// ignored, as the kernel's default works.
inline std::error_code choose_congestion_control(asio::ip::tcp::socket& socket,
                                                 const std::optional<std::string>& named) {
  std::string_view congestion;
  if (named)
    congestion = *named;
  else if (same_host(socket))
    congestion = "reno";
  if (congestion.empty() ||
      ::setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_CONGESTION, congestion.data(),
                   static_cast<socklen_t>(congestion.size())) == 0 ||
      !named)
    return {};
  return std::error_code(errno, std::generic_category());
}

}  // namespace strata::transport::tcp
