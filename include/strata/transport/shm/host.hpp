// strata/transport/shm/host.hpp — which ranks can share memory: one boot, one network namespace.
//
// The boot id tells one running kernel from another (a host, a VM, a rebooted host); the
// network namespace tells containers apart that share a kernel but not an abstract Unix socket
// namespace, over which the region is handed over (handover.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include <sys/stat.h>

#include <strata/core/detail/little_endian.hpp>

namespace strata::transport::shm {

/// This process's host, as ranks compare it: 64 bytes, all zero when unknown (never shared).
struct HostIdentity {
  static constexpr std::size_t kBytes = 64;
  std::array<std::byte, kBytes> bytes{};

  bool known() const noexcept { return bytes != std::array<std::byte, kBytes>{}; }
  friend bool operator==(const HostIdentity&, const HostIdentity&) = default;
};

/// The identity of the host this process runs on: boot id, then the network namespace's
/// device and inode numbers.
inline HostIdentity this_host() {
  HostIdentity identity;
  std::string boot_id;
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  struct stat netns {};
  if (!std::getline(file, boot_id) || boot_id.size() < 32 || boot_id.size() > 40 ||
      ::stat("/proc/self/ns/net", &netns) != 0)
    return identity;
  std::memcpy(identity.bytes.data(), boot_id.data(), boot_id.size());
  strata::detail::store_le<std::uint64_t>(identity.bytes.data() + 40,
                                          static_cast<std::uint64_t>(netns.st_dev));
  strata::detail::store_le<std::uint64_t>(identity.bytes.data() + 48,
                                          static_cast<std::uint64_t>(netns.st_ino));
  return identity;
}

}  // namespace strata::transport::shm
