// strata/transport/tcp/group.hpp — the state one rank's TCP group keeps across calls: its
// mesh, its tunables, its first failure, and what each peer said on its control connection.
//
// A failure anywhere fails the whole group: the first one is remembered and rethrown by every
// later call, every peer is told why (an abort frame on the control connection, which is always
// at a message boundary), and every connection is shut down so that peers blocked on this rank
// wake at once. fail() may be called from any thread; it wakes a call waiting in poll(2)
// through an eventfd.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <strata/core/error.hpp>
#include <strata/detail/usable_cpus.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/lending.hpp>
#include <strata/transport/tcp/mesh.hpp>

namespace strata::transport::tcp {

/// The connections of one rank and the state they share across calls: the first failure,
/// what each peer said on its control connection, the wake-up for abort().
class Group {
 public:
  /// What one peer said on its control connection.
  struct ControlState {
    std::array<std::byte, kFrameHeaderBytes + kMaxControlPayload> buffer{};
    std::size_t filled = 0;
    bool closed = false;
    bool departed = false;  // said goodbye: finished its collectives on purpose
    bool heard = false;     // answered during the current timeout
    // In the current call: payload bytes this rank lent the peer, and how many of them the
    // peer has said it read.
    std::uint64_t lent_bytes = 0;
    std::uint64_t lent_sent_bytes = 0;  // of lent_bytes, in messages sent whole
    std::uint64_t released_bytes = 0;
  };

  Group(std::unique_ptr<Mesh> mesh, std::uint32_t chunk_bytes, std::size_t lend_from_bytes)
      : mesh_(std::move(mesh)),
        chunk_bytes_(chunk_bytes),
        lend_from_bytes_(lend_from_bytes),
        ranks_share_cpus_(mesh_->ranks_on_this_host() > strata::detail::host_cpus()),
        peers_(static_cast<std::size_t>(mesh_->size())),
        pipes_(mesh_->size(), mesh_->data_connections()) {
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0)
      throw ConfigurationError(mesh_->rank(), "tcp", "eventfd failed",
                               "raise the process's file descriptor limit");
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() {
    if (!failed()) say_goodbye();
    ::close(wake_fd_);
  }

  int rank() const noexcept { return mesh_->rank(); }
  int size() const noexcept { return mesh_->size(); }
  int data_connections() const noexcept { return mesh_->data_connections(); }
  std::uint32_t chunk_bytes() const noexcept { return chunk_bytes_; }
  /// Calls that send at least this many bytes lend their large messages (TcpOptions).
  std::size_t lend_from_bytes() const noexcept { return lend_from_bytes_; }
  /// This host runs more of the group's ranks than it has CPUs (detail::host_cpus()).
  bool ranks_share_cpus() const noexcept { return ranks_share_cpus_; }
  std::uint64_t next_sequence() noexcept {
    return sequence_.fetch_add(1, std::memory_order_relaxed);
  }
  /// How many calls have begun (the number the next one gets).
  std::uint64_t calls() const noexcept { return sequence_.load(std::memory_order_relaxed); }

  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

  /// Rethrows the group's first failure, as seen by a later call.
  [[noreturn]] void raise_failure(std::string_view operation) const {
    std::lock_guard lock(failure_mutex_);
    const std::string_view what_to_do =
        "the group failed in an earlier call: re-create the communicator (every rank) to "
        "continue";
    switch (failure_class_) {
      case FailureClass::mismatch:
        throw MismatchError(rank(), operation, failure_cause_, what_to_do);
      case FailureClass::timeout:
        throw TimeoutError(rank(), operation, failure_cause_, what_to_do);
      case FailureClass::peer_failure:
        break;
    }
    throw PeerFailureError(rank(), operation, failure_cause_, what_to_do);
  }

  /// Fails the group: remembers the first failure, tells every peer its root cause (on the
  /// control connections, which are always at a message boundary), and shuts every connection
  /// so that peers blocked on this rank wake at once. Safe from any thread; later calls are
  /// no-ops.
  void fail(FailureClass kind, const RootCause& cause) noexcept {
    try {
      {
        std::lock_guard lock(failure_mutex_);
        if (failed_.load(std::memory_order_relaxed)) return;
        failure_class_ = kind;
        failure_cause_ = cause;
        failed_.store(true, std::memory_order_release);
      }
      std::string payload(1 + 4, static_cast<char>(kind));
      detail::store_le<std::uint32_t>(reinterpret_cast<std::byte*>(payload.data() + 1),
                                      static_cast<std::uint32_t>(cause.rank));
      payload.append(std::string_view(cause.what_happened).substr(0, kMaxControlPayload - 5));
      broadcast_control(FrameType::abort, payload);
    } catch (...) {  // out of memory for the text: the peers still learn from the shutdown
      failed_.store(true, std::memory_order_release);
    }
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank()) continue;
      ::shutdown(mesh_->fd(peer, 0), SHUT_WR);
      for (int index = 1; index <= data_connections(); ++index)
        ::shutdown(mesh_->fd(peer, index), SHUT_RDWR);
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] auto ignored = ::write(wake_fd_, &one, sizeof one);
  }

  /// Fails the group with `error` as the reason: a strata::Error passes its root cause on, any
  /// other exception is a failure of this rank.
  void fail(const std::exception_ptr& error) noexcept {
    try {
      std::rethrow_exception(error);
    } catch (const MismatchError& e) {
      fail(FailureClass::mismatch, e.root_cause());
    } catch (const TimeoutError& e) {
      fail(FailureClass::timeout, e.root_cause());
    } catch (const Error& e) {
      fail(FailureClass::peer_failure, e.root_cause());
    } catch (const std::exception& e) {
      fail(FailureClass::peer_failure, own_cause(e.what()));
    } catch (...) {
      fail(FailureClass::peer_failure, own_cause("an exception that is not a std::exception"));
    }
  }

  // ---- for the calls that run on the group (control.hpp, channel.hpp, plan_run.hpp) ----------

  const Mesh& mesh() const noexcept { return *mesh_; }
  ControlState& peer_state(int peer) noexcept { return peers_[static_cast<std::size_t>(peer)]; }
  std::span<ControlState> peer_states() noexcept { return peers_; }
  /// Readable once fail() has run: a call waiting in poll(2) watches it.
  int wake_fd() const noexcept { return wake_fd_; }
  /// The pipe that lends to data connection `index` (1..K) of `peer`, or nullptr (lending.hpp).
  Pipe* pipe_for(int peer, int index) { return pipes_.pipe_for(peer, index); }
  /// Scratch memory reused across calls; valid until the next call.
  std::byte* scratch(std::size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

  void send_control(int peer, FrameType type, std::string_view payload) noexcept {
    send_control(peer, type, payload, sequence_.load(std::memory_order_relaxed), 0);
  }

  void send_control(int peer, FrameType type, std::string_view payload, std::uint64_t sequence,
                    std::uint64_t count) noexcept {
    FrameHeader header;
    header.type = type;
    header.sequence = sequence;
    header.count = count;
    header.payload_bytes = static_cast<std::uint32_t>(payload.size());
    const FrameBytes bytes = encode(header);
    iovec parts[2] = {{const_cast<std::byte*>(bytes.data()), bytes.size()},
                      {const_cast<char*>(payload.data()), payload.size()}};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = payload.empty() ? 1 : 2;
    // Control frames are tiny and the connection otherwise idle: one non-blocking send fits.
    // If it does not, the peer is not reading, and it learns from the closed connection.
    std::lock_guard lock(control_mutex_);
    [[maybe_unused]] auto sent =
        ::sendmsg(mesh_->fd(peer, 0), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  void broadcast_control(FrameType type, std::string_view payload) noexcept {
    for (int peer = 0; peer < size(); ++peer)
      if (peer != rank()) send_control(peer, type, payload);
  }

 private:
  RootCause own_cause(std::string_view what) const {
    try {
      return {rank(), fmt::format("rank {} failed: {}", rank(), what)};
    } catch (...) {
      return {rank(), {}};
    }
  }

  void say_goodbye() noexcept {
    broadcast_control(FrameType::goodbye, {});
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank()) continue;
      for (int index = 0; index <= data_connections(); ++index)
        ::shutdown(mesh_->fd(peer, index), SHUT_WR);
    }
  }

  std::unique_ptr<Mesh> mesh_;
  std::uint32_t chunk_bytes_;
  std::size_t lend_from_bytes_;
  bool ranks_share_cpus_;
  std::vector<ControlState> peers_;
  // Atomic: abort() sends control frames from other threads while a call advances it.
  std::atomic<std::uint64_t> sequence_{0};
  std::vector<std::byte> scratch_;
  Pipes pipes_;  // closed after the wake fd, before the mesh's connections
  int wake_fd_ = -1;
  std::mutex control_mutex_;
  mutable std::mutex failure_mutex_;
  std::atomic<bool> failed_{false};
  FailureClass failure_class_ = FailureClass::peer_failure;
  RootCause failure_cause_;
};

}  // namespace strata::transport::tcp
