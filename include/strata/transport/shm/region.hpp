// strata/transport/shm/region.hpp — the memory co-located ranks share: one sealed memfd, mapped.
//
// A memfd has no name in any file system: nothing is left in /dev/shm when a process dies, and
// the memory goes when the last rank unmaps it. Sealed against shrinking and growing before it
// is handed over, it cannot be truncated under a peer (a truncated mapping faults on access),
// and a rank that adopts one checks the seals and the size before mapping it.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::transport::shm {

/// One mapping of a sealed memfd; owns the mapping and, until `close_fd`, the descriptor.
class Region {
 public:
  static constexpr unsigned kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

  /// A new zero-filled region of `bytes`, sealed and mapped.
  /// @throws ConfigurationError (operation "shared memory") when the system refuses.
  static Region create(std::size_t bytes, int rank) {
    const int fd = ::memfd_create("strata-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) fail(rank, "memfd_create", errno);
    Region region(fd);
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) fail(rank, "ftruncate", errno);
    if (::fcntl(fd, F_ADD_SEALS, kSeals) != 0) fail(rank, "sealing the memfd", errno);
    region.map(bytes, rank);
    return region;
  }

  /// Maps a region a peer created and handed over, after checking that it is a memfd of
  /// exactly `bytes` sealed as `create` seals. Takes `fd` over, also when it throws.
  /// @throws PeerFailureError naming `owner` when the descriptor is not such a region.
  static Region adopt(int fd, std::size_t bytes, int rank, int owner) {
    Region region(fd);
    struct stat status {};
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode) || seals < 0 ||
        (static_cast<unsigned>(seals) & kSeals) != kSeals ||
        static_cast<std::size_t>(status.st_size) != bytes)
      throw PeerFailureError(
          rank, "shared memory",
          RootCause{owner, fmt::format("rank {} handed over a region that is not a sealed memfd "
                                       "of {} bytes",
                                       owner, bytes)},
          "every rank of a host must run the same strata version and options");
    region.map(bytes, rank);
    return region;
  }

  Region(Region&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  Region& operator=(Region&& other) noexcept {
    if (this != &other) {
      release();
      fd_ = std::exchange(other.fd_, -1);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() { release(); }

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return bytes_; }
  int fd() const noexcept { return fd_; }
  /// The mapping keeps the memory alive: once every peer holds its own, the descriptor can go.
  void close_fd() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  explicit Region(int fd) noexcept : fd_(fd) {}

  void map(std::size_t bytes, int rank) {
    void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (data == MAP_FAILED) fail(rank, "mmap", errno);
    data_ = static_cast<std::byte*>(data);
    bytes_ = bytes;
  }

  void release() noexcept {
    if (data_ != nullptr) ::munmap(data_, bytes_);
    close_fd();
    data_ = nullptr;
  }

  [[noreturn]] static void fail(int rank, std::string_view what, int error) {
    throw ConfigurationError(rank, "shared memory",
                             fmt::format("{} failed: {}", what, std::strerror(error)),
                             "allow memfd_create and mmap (seccomp, memory limits), or turn "
                             "shared memory off (TcpOptions::shared_memory = false)");
  }

  int fd_ = -1;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace strata::transport::shm
