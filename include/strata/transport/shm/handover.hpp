// strata/transport/shm/handover.hpp — passing the region's descriptor to the co-located ranks.
//
// A descriptor crosses processes only over a Unix socket (SCM_RIGHTS). The owner listens on an
// abstract address (no file to leave behind; scoped to the network namespace, which the ranks
// share) whose random name, with a random secret, it sends its peers over their authenticated
// TCP connections. A peer connects and proves it holds the secret before it is given the
// descriptor: a process that finds the address without the TCP connection gets nothing.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>

#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>

namespace strata::transport::shm {

/// What the owner tells its peers over TCP: the abstract address and the secret.
struct HandoverTicket {
  static constexpr std::size_t kNameBytes = 24;
  static constexpr std::size_t kSecretBytes = 16;
  std::array<std::byte, kNameBytes> name{};
  std::array<std::byte, kSecretBytes> secret{};
};

namespace detail {

inline void fill_random(std::span<std::byte> bytes, int rank) {
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    const auto n = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw ConfigurationError(rank, "shared memory",
                               fmt::format("getrandom failed: {}", std::strerror(errno)),
                               "turn shared memory off (TcpOptions::shared_memory = false)");
    filled += static_cast<std::size_t>(n);
  }
}

// "\0strata-shm-" and the name in hex: an abstract address.
inline std::pair<sockaddr_un, socklen_t> abstract_address(const HandoverTicket& ticket) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::string text = "strata-shm-";
  for (std::byte b : ticket.name)
    text += fmt::format("{:02x}", static_cast<unsigned>(b));
  std::memcpy(address.sun_path + 1, text.data(), text.size());
  return {address, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + text.size())};
}

class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Waits until `fd` has `events`, the deadline at most; false at the deadline.
inline bool wait_for(int fd, short events, const Deadline& deadline) {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline.time_point() - Clock::now());
    if (left.count() <= 0) return false;
    pollfd poll_fd{fd, events, 0};
    const int ready =
        ::poll(&poll_fd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
}

// One byte and room for one descriptor: the message that carries the region.
struct DescriptorMessage {
  char byte = 's';
  iovec part{&byte, 1};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> control{};
  msghdr header{};
  DescriptorMessage() noexcept {
    header.msg_iov = &part;
    header.msg_iovlen = 1;
    header.msg_control = control.data();
    header.msg_controllen = control.size();
  }
  DescriptorMessage(const DescriptorMessage&) = delete;
  DescriptorMessage& operator=(const DescriptorMessage&) = delete;
};

[[noreturn]] inline void handover_failed(int rank, std::string_view what) {
  throw ConfigurationError(rank, "shared memory", fmt::format("handing over the region: {}", what),
                           "turn shared memory off (TcpOptions::shared_memory = false) if the "
                           "ranks of this host cannot reach each other over Unix sockets");
}

}  // namespace detail

/// The owner's side: listens from construction; `serve` hands the descriptor to `peers`
/// connections that present the secret.
class HandoverServer {
 public:
  explicit HandoverServer(int rank) : rank_(rank) {
    detail::fill_random(ticket_.name, rank);
    detail::fill_random(ticket_.secret, rank);
    socket_ = detail::Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (socket_.get() < 0) detail::handover_failed(rank, std::strerror(errno));
    const auto [address, length] = detail::abstract_address(ticket_);
    if (::bind(socket_.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
        ::listen(socket_.get(), 128) != 0)
      detail::handover_failed(rank, std::strerror(errno));
  }

  const HandoverTicket& ticket() const noexcept { return ticket_; }

  /// Hands `fd` to `peers` connections that present the secret, by the deadline. Connections
  /// without it are closed and do not count.
  /// @throws ConfigurationError when the peers did not all come by the deadline.
  void serve(int fd, int peers, const Deadline& deadline) {
    int served = 0;
    while (served < peers) {
      if (!detail::wait_for(socket_.get(), POLLIN, deadline))
        detail::handover_failed(rank_, fmt::format("{} of {} co-located ranks did not collect it",
                                                   peers - served, peers));
      detail::Fd peer(::accept4(socket_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (peer.get() < 0) continue;
      std::array<std::byte, HandoverTicket::kSecretBytes> secret{};
      std::size_t got = 0;
      while (got < secret.size() && detail::wait_for(peer.get(), POLLIN, deadline)) {
        const auto n = ::recv(peer.get(), secret.data() + got, secret.size() - got, MSG_DONTWAIT);
        if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) break;
        if (n > 0) got += static_cast<std::size_t>(n);
      }
      if (got != secret.size() || secret != ticket_.secret) continue;
      detail::DescriptorMessage message;
      cmsghdr* header = CMSG_FIRSTHDR(&message.header);
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
      if (::sendmsg(peer.get(), &message.header, MSG_NOSIGNAL) == 1) ++served;
    }
  }

 private:
  int rank_;
  HandoverTicket ticket_;
  detail::Fd socket_;
};

/// A peer's side: collects the descriptor the ticket's owner hands over.
/// @throws ConfigurationError when it cannot be collected by the deadline.
inline int collect_handover(const HandoverTicket& ticket, int rank, const Deadline& deadline) {
  detail::Fd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (socket.get() < 0) detail::handover_failed(rank, std::strerror(errno));
  const auto [address, length] = detail::abstract_address(ticket);
  if (::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN)
      detail::handover_failed(rank, fmt::format("connect: {}", std::strerror(errno)));
    if (!detail::wait_for(socket.get(), POLLOUT, deadline))
      detail::handover_failed(rank, "the owner did not accept by the deadline");
  }
  if (::send(socket.get(), ticket.secret.data(), ticket.secret.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(ticket.secret.size()))
    detail::handover_failed(rank, fmt::format("send: {}", std::strerror(errno)));
  if (!detail::wait_for(socket.get(), POLLIN, deadline))
    detail::handover_failed(rank, "the owner did not answer by the deadline");
  detail::DescriptorMessage message;
  if (::recvmsg(socket.get(), &message.header, MSG_CMSG_CLOEXEC) != 1)
    detail::handover_failed(rank, "the owner closed without handing it over");
  const cmsghdr* header = CMSG_FIRSTHDR(&message.header);
  if (header == nullptr || header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS ||
      header->cmsg_len != CMSG_LEN(sizeof(int)))
    detail::handover_failed(rank, "the owner's answer carries no descriptor");
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(header), sizeof(int));
  return fd;
}

}  // namespace strata::transport::shm
