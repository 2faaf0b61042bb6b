// strata/transport/tcp/store.hpp — a one-shot address store: every rank publishes one short
// string and learns everyone's.
//
// The torchrun, OpenMPI and SLURM resolvers know each process's rank and where rank 0 runs,
// but not where the other ranks listen. Each rank binds its own listening socket, then calls
// `exchange` with "host:port"; rank 0 serves a tiny TCP store on the master address for the
// duration of the call, the others connect to it, and everyone leaves with the full table.
//
// Wire protocol (all integers big-endian; every length is checked before anything is
// allocated for it):
//
//   request, client → rank 0:  magic u32 | version u16 | kind u16 (1 = register)
//                              | rank u32 | world_size u32 | value_len u32 | value
//   reply,   rank 0 → client:  magic u32 | version u16 | status u16 | world_size u32
//                              | body_len u32 | body
//     status 0 (ok):     body = world_size × (len u32 | bytes), in rank order
//     any other status:  body = a message saying why the exchange failed
//
// After its request a client sends nothing more; rank 0 reads on, so that a client which
// disconnects is forgotten and may register again (a retry after a broken connection).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/detail/store_client.hpp>
#include <strata/transport/tcp/detail/store_server.hpp>
#include <strata/transport/tcp/route.hpp>
#include <strata/transport/tcp/store_options.hpp>

namespace strata::transport::tcp {

/// Exchanges one short value per rank; returns the values of all ranks, in rank order.
///
/// Every rank calls it once with its own value. Rank 0 binds `host:port`, contributes its own
/// value and serves the others until all `world_size` ranks have registered, then sends each
/// the table and returns. The other ranks connect, retrying with exponential backoff (10 ms
/// doubling to 1 s, with jitter) while rank 0 is not up yet, register, and wait for the table.
/// With `world_size == 1` it returns `{value}` without touching the network.
///
/// The call runs an asio io_context in the calling thread and leaves no thread, socket or
/// timer behind. Connections that send garbage, oversized fields or nothing at all are
/// dropped (each within a short read deadline of its own) without affecting the exchange.
/// A fatal error seen by rank 0 (timeout, duplicate rank, world size mismatch) is sent to
/// every connected rank, so that all of them fail with the same reason at once.
///
/// Example (each rank, after binding its own listener on `port`):
/// ```
/// const auto launch = strata::cluster::torchrun_environment(process_environment()).value();
/// const std::vector<std::string> peers = strata::transport::tcp::exchange(
///     {.host = launch.master_addr, .port = launch.master_port, .rank = launch.rank,
///      .world_size = launch.world_size},
///     fmt::format("{}:{}", local_address_toward(launch.master_addr, launch.master_port), port));
/// ```
///
/// @param options  where the store is and who is calling.
/// @param value    this rank's value, at most `kMaxStoreValueBytes` bytes (any bytes).
/// @throws UsageError when `options` or `value` break the limits above.
/// @throws ConfigurationError on rank 0 when `host:port` cannot be bound (port in use,
///   address not local); on any rank when ranks disagree about the world size or two
///   processes claim the same rank, or when the service at `host:port` is not a strata store.
/// @throws TimeoutError on rank 0 naming the ranks that did not register in time; on the
///   others when the store could not be reached (naming the last error, e.g. "connection
///   refused" or "the store closed the connection") or did not answer in time.
/// Cost: one round trip per rank to rank 0; rank 0 sends world_size × (4 + value) bytes to
///   each rank.
inline std::vector<std::string> exchange(const StoreOptions& options, std::string_view value) {
  const auto usage = [&](const std::string& why, std::string_view what_to_do) {
    return UsageError(options.rank, "store", why, what_to_do);
  };
  if (options.world_size < 1 || options.world_size > kMaxStoreWorldSize)
    throw usage(fmt::format("world size {} is out of range", options.world_size),
                fmt::format("pass a world size between 1 and {}", kMaxStoreWorldSize));
  if (options.rank < 0 || options.rank >= options.world_size)
    throw usage(
        fmt::format("rank {} is out of range for world size {}", options.rank, options.world_size),
        "pass a rank in [0, world_size)");
  if (value.size() > kMaxStoreValueBytes)
    throw usage(fmt::format("the value is {} bytes long", value.size()),
                fmt::format("publish at most {} bytes per rank", kMaxStoreValueBytes));
  if (options.world_size == 1) return {std::string(value)};
  if (options.host.empty() || options.port == 0)
    throw usage(fmt::format("the store's address {} is incomplete",
                            endpoint_text(options.host, options.port)),
                "pass the host and a non-zero port where rank 0 serves the store");
  if (options.timeout <= std::chrono::milliseconds::zero())
    throw usage(fmt::format("the timeout {} ms is not positive", options.timeout.count()),
                "pass a positive timeout");

  const Deadline deadline = Deadline::after(options.timeout);
  if (options.rank == 0) return detail::store::Server(options, value, deadline).run();
  return detail::store::register_with(options, value, deadline);
}

}  // namespace strata::transport::tcp
