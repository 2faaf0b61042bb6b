// strata/transport/tcp/store_options.hpp — where the address store is served and who calls it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include <strata/core/deadline.hpp>

namespace strata::transport::tcp {

/// The longest value one rank may publish through `exchange`, in bytes.
inline constexpr std::size_t kMaxStoreValueBytes = 1024;
/// The largest world size `exchange` accepts (it bounds what rank 0 and every client
/// allocate for the table).
inline constexpr int kMaxStoreWorldSize = 1 << 20;

/// Where the store is served and who is calling. Plain data: set the fields you care about.
struct StoreOptions {
  /// Address or host name where rank 0 serves the store (e.g. `LauncherEnvironment::
  /// master_addr`). Rank 0 binds exactly this address, never all interfaces, so it must be
  /// an address of rank 0's host that the other ranks can reach (beware host names that
  /// /etc/hosts maps to 127.0.1.1 when ranks span hosts).
  std::string host;
  /// TCP port of the store (e.g. `LauncherEnvironment::master_port`); not 0 unless
  /// `world_size` is 1.
  std::uint16_t port = 0;
  /// The calling process's rank in [0, world_size).
  int rank = 0;
  /// Number of ranks taking part; every rank must pass the same value.
  int world_size = 1;
  /// Budget of the whole call: rank 0 waits this long for every rank to register, the
  /// others this long to reach rank 0 and get the table. Defaults to `STRATA_TIMEOUT` when
  /// set, else 60 s (see `strata::default_timeout`).
  std::chrono::milliseconds timeout = default_timeout();
};

}  // namespace strata::transport::tcp
