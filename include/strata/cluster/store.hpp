// strata/cluster/store.hpp — a one-shot rendezvous store: every rank publishes one short
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

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/udp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>

namespace strata::cluster {

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
/// const std::vector<std::string> peers = strata::cluster::exchange(
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
inline std::vector<std::string> exchange(const StoreOptions& options, std::string_view value);

/// The address of this host's interface that routes toward `host`, as text ("10.0.0.7"),
/// for publishing an address the other ranks can reach. Uses a connected UDP socket: the
/// kernel picks the route, and no packet is sent. For 127.0.0.1 it returns 127.0.0.1.
///
/// `port` only completes the destination (0 is replaced by 9, since some systems refuse to
/// connect to port 0). A host name is resolved with the system resolver, which blocks for as
/// long as the system's own resolver timeouts allow.
/// @throws ConfigurationError (rank -1, operation "local_address_toward") when `host` cannot
///   be resolved or no route leads to it.
inline std::string local_address_toward(std::string_view host, std::uint16_t port);

// ---- implementation ---------------------------------------------------------------------------

namespace detail::store {

using asio::ip::tcp;

inline constexpr std::uint32_t kMagic = 0x53545253;  // "STRS"
inline constexpr std::uint16_t kVersion = 1;
inline constexpr std::uint16_t kKindRegister = 1;
inline constexpr std::size_t kRequestBytes = 20;
inline constexpr std::size_t kReplyHeaderBytes = 16;
inline constexpr std::size_t kMaxMessageBytes = 4096;

enum class Status : std::uint16_t {
  kOk = 0,
  kWorldSizeMismatch = 1,
  kDuplicateRank = 2,
  kTimedOut = 3,
  kVersionMismatch = 4,
};

/// A client has this long to send its request once connected: real clients send it at once,
/// so only stalled or hostile connections hit it, and each holds a socket until it does.
inline constexpr std::chrono::milliseconds kRequestTimeout{5000};
/// Rank 0's replies get at least this long to leave, even when the last rank registered just
/// before the deadline.
inline constexpr std::chrono::milliseconds kReplyGrace{1000};
/// Connections that have not registered yet beyond this many are closed at once, so that a
/// flood cannot exhaust rank 0's file descriptors.
inline constexpr std::size_t kMaxPendingConnections = 256;
inline constexpr std::chrono::milliseconds kFirstBackoff{10};
inline constexpr std::chrono::milliseconds kMaxBackoff{1000};

inline constexpr std::string_view kRaiseTimeout =
    "raise the timeout (StoreOptions::timeout or STRATA_TIMEOUT)";

inline void put_u16(std::uint8_t* out, std::uint16_t v) noexcept {
  out[0] = static_cast<std::uint8_t>(v >> 8);
  out[1] = static_cast<std::uint8_t>(v);
}
inline void put_u32(std::uint8_t* out, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i)
    out[i] = static_cast<std::uint8_t>(v >> (24 - 8 * i));
}
inline std::uint16_t get_u16(const std::uint8_t* in) noexcept {
  return static_cast<std::uint16_t>((in[0] << 8) | in[1]);
}
inline std::uint32_t get_u32(const std::uint8_t* in) noexcept {
  return (std::uint32_t{in[0]} << 24) | (std::uint32_t{in[1]} << 16) | (std::uint32_t{in[2]} << 8) |
         std::uint32_t{in[3]};
}

/// "host:port", with brackets around IPv6 addresses.
inline std::string endpoint_text(std::string_view host, std::uint16_t port) {
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

/// Resolves `host` (an address is used as is, without a lookup).
template <class Protocol>
std::vector<typename Protocol::endpoint> resolve(const std::string& host, std::uint16_t port,
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

inline std::vector<std::uint8_t> reply_header(Status status, std::uint32_t world_size,
                                              std::size_t body_bytes) {
  std::vector<std::uint8_t> out(kReplyHeaderBytes);
  put_u32(out.data(), kMagic);
  put_u16(out.data() + 4, kVersion);
  put_u16(out.data() + 6, static_cast<std::uint16_t>(status));
  put_u32(out.data() + 8, world_size);
  put_u32(out.data() + 12, static_cast<std::uint32_t>(body_bytes));
  return out;
}

inline std::vector<std::uint8_t> error_reply(Status status, std::uint32_t world_size,
                                             std::string_view message) {
  message = message.substr(0, kMaxMessageBytes);
  std::vector<std::uint8_t> out = reply_header(status, world_size, message.size());
  out.insert(out.end(), message.begin(), message.end());
  return out;
}

/// "rank 2" / "ranks 2, 5" / "ranks 1, 2, ..., 16 and 84 more".
inline std::string rank_list(const std::vector<int>& ranks) {
  constexpr std::size_t kMaxListed = 16;
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < kMaxListed; ++i)
    fmt::format_to(std::back_inserter(text), "{}{}", i == 0 ? "" : ", ", ranks[i]);
  if (ranks.size() > kMaxListed)
    fmt::format_to(std::back_inserter(text), " and {} more", ranks.size() - kMaxListed);
  return text;
}

/// Rank 0's side: serves the store until every rank has registered, the deadline passes, or
/// the exchange fails. Single-threaded: every handler runs inside `run()`.
class Server {
 public:
  Server(const StoreOptions& options, std::string_view own_value, const Deadline& deadline)
      : options_(options),
        deadline_(deadline),
        where_(endpoint_text(options.host, options.port)),
        acceptor_(io_),
        deadline_timer_(io_),
        retry_timer_(io_),
        reply_timer_(io_),
        values_(static_cast<std::size_t>(options.world_size)),
        registered_(static_cast<std::size_t>(options.world_size)) {
    values_[0] = std::string(own_value);
    registered_count_ = 1;
  }

  std::vector<std::string> run() {
    bind();
    accept();
    deadline_timer_.expires_at(deadline_.time_point());
    deadline_timer_.async_wait([this](const std::error_code& ec) {
      if (!ec && phase_ == Phase::kCollecting) time_out();
    });
    // Timers end every phase; this bound only guards against a bug leaving us waiting.
    const auto hard_stop =
        std::max(deadline_.time_point(), Clock::now()) + kReplyGrace + std::chrono::seconds(1);
    while (phase_ != Phase::kDone) {
      if (io_.run_one_until(hard_stop) == 0) break;
    }
    close_all();
    if (failure_) std::rethrow_exception(failure_);
    if (phase_ != Phase::kDone)
      throw TimeoutError(0, "store",
                         fmt::format("the store at {} did not finish within {} ms", where_,
                                     deadline_.budget().count()),
                         kRaiseTimeout);
    std::vector<std::string> result;
    result.reserve(values_.size());
    for (auto& value : values_)
      result.push_back(std::move(*value));
    return result;
  }

 private:
  enum class Phase { kCollecting, kReplying, kDone };

  struct Connection {
    explicit Connection(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
    tcp::socket socket;
    asio::steady_timer timer;
    std::array<std::uint8_t, kRequestBytes> request{};
    std::string value;
    std::array<std::uint8_t, 1> probe{};
    int rank = -1;
  };
  using ConnectionPtr = std::shared_ptr<Connection>;

  void bind() {
    const std::string_view kOtherPort =
        "choose another port (MASTER_PORT or STRATA_STORE_PORT) or stop the process that holds "
        "it";
    const std::string_view kLocalAddress =
        "the store's host (MASTER_ADDR) must name an address of rank 0's own host";
    std::error_code ec;
    const auto endpoints = resolve<tcp>(options_.host, options_.port, ec);
    if (ec)
      throw ConfigurationError(
          0, "store", fmt::format("cannot resolve the store's host {}: {}", where_, ec.message()),
          kLocalAddress);
    std::error_code first_error;
    for (const auto& endpoint : endpoints) {
      if (endpoint.address().is_unspecified())
        throw ConfigurationError(
            0, "store",
            fmt::format("{} names every interface, not a host the other ranks can reach", where_),
            "set the store's host (MASTER_ADDR) to an address of rank 0's host");
      std::error_code attempt;
      acceptor_.open(endpoint.protocol(), attempt);
      // Lets a restarted job rebind while the previous run's connections sit in TIME_WAIT;
      // on Linux it does not let two live listeners share the port.
      if (!attempt) acceptor_.set_option(tcp::acceptor::reuse_address(true), attempt);
      if (!attempt) acceptor_.bind(endpoint, attempt);
      if (!attempt) acceptor_.listen(asio::socket_base::max_listen_connections, attempt);
      if (!attempt) return;
      std::error_code ignored;
      acceptor_.close(ignored);
      if (!first_error) first_error = attempt;
    }
    if (first_error == asio::error::address_in_use)
      throw ConfigurationError(
          0, "store",
          fmt::format("cannot serve the store on {}: the port is already in use", where_),
          kOtherPort);
    if (first_error == std::error_code(EADDRNOTAVAIL, asio::error::get_system_category()))
      throw ConfigurationError(
          0, "store",
          fmt::format("cannot serve the store on {}: the address is not one of this host's",
                      where_),
          kLocalAddress);
    throw ConfigurationError(
        0, "store", fmt::format("cannot serve the store on {}: {}", where_, first_error.message()),
        kOtherPort);
  }

  void accept() {
    acceptor_.async_accept([this](const std::error_code& ec, tcp::socket socket) {
      if (phase_ != Phase::kCollecting) return;
      if (ec) {
        if (ec == asio::error::operation_aborted) return;
        // Out of descriptors or a connection reset before it was accepted: try again shortly
        // rather than spinning.
        retry_timer_.expires_after(std::chrono::milliseconds(10));
        retry_timer_.async_wait([this](const std::error_code& timer_ec) {
          if (!timer_ec && phase_ == Phase::kCollecting) accept();
        });
        return;
      }
      if (pending_.size() < kMaxPendingConnections) {
        read_request(std::make_shared<Connection>(std::move(socket)));
      } else {
        std::error_code ignored;
        socket.close(ignored);
      }
      accept();
    });
  }

  void read_request(const ConnectionPtr& connection) {
    pending_.insert(connection);
    connection->timer.expires_at(std::min(Clock::now() + kRequestTimeout, deadline_.time_point()));
    connection->timer.async_wait([this, connection](const std::error_code& ec) {
      if (!ec && phase_ == Phase::kCollecting) drop(connection);
    });
    asio::async_read(connection->socket, asio::buffer(connection->request),
                     [this, connection](const std::error_code& ec, std::size_t) {
                       if (phase_ != Phase::kCollecting) return;
                       if (ec) return drop(connection);
                       on_request(connection);
                     });
  }

  void on_request(const ConnectionPtr& connection) {
    const std::uint8_t* in = connection->request.data();
    if (get_u32(in) != kMagic) return drop(connection);  // not one of ours
    if (get_u16(in + 4) != kVersion) {
      // A rank built against another protocol version: tell it why, and go on without it.
      auto reply = std::make_shared<std::vector<std::uint8_t>>(error_reply(
          Status::kVersionMismatch, static_cast<std::uint32_t>(options_.world_size),
          fmt::format("the store at {} speaks protocol version {}, the rank speaks version {}",
                      where_, kVersion, get_u16(in + 4))));
      pending_.erase(connection);
      asio::async_write(connection->socket, asio::buffer(*reply),
                        [connection, reply](const std::error_code&, std::size_t) {
                          std::error_code ignored;
                          connection->socket.close(ignored);
                        });
      return;
    }
    if (get_u16(in + 6) != kKindRegister) return drop(connection);
    const std::uint32_t rank = get_u32(in + 8);
    const std::uint32_t world_size = get_u32(in + 12);
    const std::uint32_t value_bytes = get_u32(in + 16);
    if (world_size != static_cast<std::uint32_t>(options_.world_size)) {
      const std::string why = fmt::format(
          "rank {} registered with world size {}, but the store at {} (rank 0) has world size "
          "{}",
          rank, world_size, where_, options_.world_size);
      return fail(std::make_exception_ptr(ConfigurationError(
                      0, "store", why, "start every rank with the same world size")),
                  Status::kWorldSizeMismatch, why, connection);
    }
    if (rank >= world_size || value_bytes > kMaxStoreValueBytes) return drop(connection);
    connection->rank = static_cast<int>(rank);
    connection->value.resize(value_bytes);
    asio::async_read(connection->socket, asio::buffer(connection->value),
                     [this, connection](const std::error_code& ec, std::size_t) {
                       if (phase_ != Phase::kCollecting) return;
                       if (ec) return drop(connection);
                       on_register(connection);
                     });
  }

  void on_register(const ConnectionPtr& connection) {
    const auto rank = static_cast<std::size_t>(connection->rank);
    if (rank == 0 || registered_[rank]) {
      const std::string why =
          fmt::format("rank {} registered twice with the store at {}", rank, where_);
      constexpr std::string_view kWhatToDo =
          "give every process its own rank: two processes claim the same one (or two jobs share "
          "the store's port)";
      return fail(std::make_exception_ptr(ConfigurationError(0, "store", why, kWhatToDo)),
                  Status::kDuplicateRank, why, connection);
    }
    pending_.erase(connection);
    connection->timer.cancel();
    registered_[rank] = connection;
    values_[rank] = std::move(connection->value);
    if (++registered_count_ == options_.world_size) return succeed();
    // Clients send nothing after registering, so this read completes only when the client
    // goes away (or misbehaves): forget it then, so that a retry can register again.
    connection->socket.async_read_some(asio::buffer(connection->probe),
                                       [this, connection](const std::error_code&, std::size_t) {
                                         if (phase_ != Phase::kCollecting) return;
                                         const auto r = static_cast<std::size_t>(connection->rank);
                                         if (registered_[r] != connection) return;
                                         registered_[r].reset();
                                         values_[r].reset();
                                         --registered_count_;
                                         std::error_code ignored;
                                         connection->socket.close(ignored);
                                       });
  }

  void drop(const ConnectionPtr& connection) {
    pending_.erase(connection);
    std::error_code ignored;
    connection->socket.close(ignored);
    connection->timer.cancel();
  }

  void time_out() {
    std::vector<int> missing;
    for (std::size_t r = 0; r < values_.size(); ++r)
      if (!values_[r]) missing.push_back(static_cast<int>(r));
    const std::string why = fmt::format("{} did not register with the store at {} within {} ms",
                                        rank_list(missing), where_, deadline_.budget().count());
    constexpr std::string_view kWhatToDo =
        "check that every rank was started, with the same store address and world size, or "
        "raise the timeout (StoreOptions::timeout or STRATA_TIMEOUT)";
    fail(std::make_exception_ptr(TimeoutError(0, "store", why, kWhatToDo)), Status::kTimedOut, why,
         nullptr);
  }

  // Ends the collection with an error: every registered rank (and `culprit`) is told why.
  void fail(std::exception_ptr failure, Status status, std::string_view why,
            const ConnectionPtr& culprit) {
    failure_ = std::move(failure);
    reply_ = error_reply(status, static_cast<std::uint32_t>(options_.world_size), why);
    std::vector<ConnectionPtr> targets;
    for (const auto& connection : registered_)
      if (connection) targets.push_back(connection);
    if (culprit) {
      pending_.erase(culprit);
      targets.push_back(culprit);
    }
    send_replies(std::move(targets), Clock::now() + kReplyGrace);
  }

  void succeed() {
    std::size_t body_bytes = 0;
    for (const auto& value : values_)
      body_bytes += 4 + value->size();
    reply_ = reply_header(Status::kOk, static_cast<std::uint32_t>(options_.world_size), body_bytes);
    reply_.reserve(kReplyHeaderBytes + body_bytes);
    for (const auto& value : values_) {
      std::array<std::uint8_t, 4> length{};
      put_u32(length.data(), static_cast<std::uint32_t>(value->size()));
      reply_.insert(reply_.end(), length.begin(), length.end());
      reply_.insert(reply_.end(), value->begin(), value->end());
    }
    std::vector<ConnectionPtr> targets;
    for (const auto& connection : registered_)
      if (connection) targets.push_back(connection);
    send_replies(std::move(targets), std::max(Clock::now() + kReplyGrace, deadline_.time_point()));
  }

  void send_replies(std::vector<ConnectionPtr> targets, Clock::time_point until) {
    phase_ = Phase::kReplying;
    std::error_code ignored;
    acceptor_.close(ignored);
    deadline_timer_.cancel();
    retry_timer_.cancel();
    for (const auto& connection : pending_) {
      connection->socket.close(ignored);
      connection->timer.cancel();
    }
    pending_.clear();
    outstanding_writes_ = targets.size();
    if (outstanding_writes_ == 0) {
      phase_ = Phase::kDone;
      return;
    }
    reply_timer_.expires_at(until);
    reply_timer_.async_wait([this, targets](const std::error_code& ec) {
      if (ec || phase_ != Phase::kReplying) return;
      // Ranks that do not take their reply in time fail on their own deadline.
      std::error_code close_ignored;
      for (const auto& connection : targets)
        connection->socket.close(close_ignored);
    });
    for (const auto& connection : targets) {
      asio::async_write(connection->socket, asio::buffer(reply_),
                        [this, connection](const std::error_code&, std::size_t) {
                          if (--outstanding_writes_ == 0) {
                            phase_ = Phase::kDone;
                            reply_timer_.cancel();
                          }
                        });
    }
  }

  void close_all() {
    std::error_code ignored;
    acceptor_.close(ignored);
    for (const auto& connection : pending_)
      connection->socket.close(ignored);
    for (const auto& connection : registered_)
      if (connection) connection->socket.close(ignored);
    // Handlers still queued only drop their references when io_ is destroyed; none runs.
  }

  const StoreOptions& options_;
  const Deadline& deadline_;
  const std::string where_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  asio::steady_timer deadline_timer_;
  asio::steady_timer retry_timer_;
  asio::steady_timer reply_timer_;
  std::vector<std::optional<std::string>> values_;
  std::vector<ConnectionPtr> registered_;
  std::set<ConnectionPtr> pending_;
  int registered_count_ = 0;
  Phase phase_ = Phase::kCollecting;
  std::exception_ptr failure_;
  std::vector<std::uint8_t> reply_;
  std::size_t outstanding_writes_ = 0;
};

/// Runs one asynchronous operation on `socket` until it completes or `until` passes; on
/// timeout the socket is closed, which completes the operation with an error, and
/// `timed_out` is set.
template <class Start>
std::error_code run_until(asio::io_context& io, tcp::socket& socket, Clock::time_point until,
                          bool& timed_out, Start&& start) {
  std::optional<std::error_code> result;
  bool timer_done = false;
  timed_out = false;
  asio::steady_timer timer(io, until);
  timer.async_wait([&](const std::error_code& ec) {
    timer_done = true;
    if (!ec && !result) {
      timed_out = true;
      std::error_code ignored;
      socket.close(ignored);
    }
  });
  std::forward<Start>(start)([&](const std::error_code& ec) {
    result = ec;
    timer.cancel();
  });
  io.restart();
  while (!result || !timer_done)
    io.run_one();
  return *result;
}

/// One attempt of a non-zero rank: connect, register, read the reply. Returns the table, or
/// nullopt with the reason to try again in `retry_why`; throws when retrying cannot help.
inline std::optional<std::vector<std::string>> attempt(const StoreOptions& options,
                                                       const std::vector<std::uint8_t>& request,
                                                       const Deadline& deadline,
                                                       std::string& retry_why) {
  const std::string where = endpoint_text(options.host, options.port);
  std::error_code ec;
  const auto endpoints = resolve<tcp>(options.host, options.port, ec);
  if (ec) {
    retry_why = fmt::format("cannot resolve {}: {}", options.host, ec.message());
    return std::nullopt;
  }
  asio::io_context io{1};
  tcp::socket socket(io);
  bool timed_out = false;
  const auto until = deadline.time_point();
  auto failed = [&](std::string_view step, const std::error_code& error) {
    if (timed_out)
      retry_why = fmt::format("{} timed out", step);
    else if (error == asio::error::eof || error == asio::error::connection_reset ||
             error == asio::error::broken_pipe)
      retry_why = "the store closed the connection";
    else
      retry_why = fmt::format("{}: {}", step, error.message());
    return std::nullopt;
  };

  ec = run_until(io, socket, until, timed_out, [&](auto done) {
    asio::async_connect(socket, endpoints,
                        [done](const std::error_code& e, const tcp::endpoint&) { done(e); });
  });
  if (ec) return failed("connect", ec);
  ec = run_until(io, socket, until, timed_out, [&](auto done) {
    asio::async_write(socket, asio::buffer(request),
                      [done](const std::error_code& e, std::size_t) { done(e); });
  });
  if (ec) return failed("send", ec);

  std::array<std::uint8_t, kReplyHeaderBytes> header{};
  ec = run_until(io, socket, until, timed_out, [&](auto done) {
    asio::async_read(socket, asio::buffer(header),
                     [done](const std::error_code& e, std::size_t) { done(e); });
  });
  if (timed_out)
    throw TimeoutError(
        options.rank, "store",
        fmt::format("registered with the store at {}, but it did not answer within {} ms", where,
                    deadline.budget().count()),
        "rank 0 answers once every rank has registered: look for a rank that was not started "
        "or points at another store, or raise the timeout (StoreOptions::timeout or "
        "STRATA_TIMEOUT)");
  if (ec) return failed("receive", ec);

  const auto not_a_store = [&](std::string_view why) {
    return ConfigurationError(
        options.rank, "store",
        fmt::format("the service at {} is not a strata store of this version: {}", where, why),
        "check the store's address and port (MASTER_ADDR, MASTER_PORT or STRATA_STORE_PORT): "
        "another program may hold that port");
  };
  if (get_u32(header.data()) != kMagic) throw not_a_store("its reply has the wrong magic number");
  if (get_u16(header.data() + 4) != kVersion)
    throw not_a_store(fmt::format("it speaks protocol version {}, this rank speaks version {}",
                                  get_u16(header.data() + 4), kVersion));
  const auto status = static_cast<Status>(get_u16(header.data() + 6));
  const std::uint32_t world_size = get_u32(header.data() + 8);
  const std::uint32_t body_bytes = get_u32(header.data() + 12);
  const std::size_t max_body =
      status == Status::kOk
          ? static_cast<std::size_t>(options.world_size) * (4 + kMaxStoreValueBytes)
          : kMaxMessageBytes;
  if (body_bytes > max_body)
    throw not_a_store(fmt::format("its reply announces {} bytes", body_bytes));
  if (status == Status::kOk && world_size != static_cast<std::uint32_t>(options.world_size))
    throw not_a_store(fmt::format("it answered with a table of {} ranks instead of {}", world_size,
                                  options.world_size));

  std::vector<std::uint8_t> body(body_bytes);
  ec = run_until(io, socket, until, timed_out, [&](auto done) {
    asio::async_read(socket, asio::buffer(body),
                     [done](const std::error_code& e, std::size_t) { done(e); });
  });
  if (ec) return failed("receive", ec);

  if (status != Status::kOk) {
    const std::string why(body.begin(), body.end());
    const std::string happened = fmt::format("the store at {} gave up: {}", where, why);
    switch (status) {
      case Status::kTimedOut:
        throw TimeoutError(options.rank, "store", happened,
                           "check that every rank was started, with the same store address and "
                           "world size, or raise the timeout (StoreOptions::timeout or "
                           "STRATA_TIMEOUT)");
      case Status::kWorldSizeMismatch:
        throw ConfigurationError(options.rank, "store", happened,
                                 "start every rank with the same world size");
      case Status::kDuplicateRank:
        throw ConfigurationError(options.rank, "store", happened,
                                 "give every process its own rank: two processes claim the same "
                                 "one (or two jobs share the store's port)");
      case Status::kVersionMismatch:
        throw ConfigurationError(options.rank, "store", happened,
                                 "build every rank against the same strata version");
      default:
        throw not_a_store(fmt::format("unknown status {}", static_cast<unsigned>(status)));
    }
  }

  std::vector<std::string> values;
  values.reserve(static_cast<std::size_t>(options.world_size));
  std::size_t pos = 0;
  for (int r = 0; r < options.world_size; ++r) {
    if (body.size() - pos < 4) throw not_a_store("its table is truncated");
    const std::uint32_t length = get_u32(body.data() + pos);
    pos += 4;
    if (length > kMaxStoreValueBytes || body.size() - pos < length)
      throw not_a_store("its table holds an invalid length");
    values.emplace_back(reinterpret_cast<const char*>(body.data() + pos), length);
    pos += length;
  }
  if (pos != body.size()) throw not_a_store("its table has trailing bytes");
  return values;
}

inline std::vector<std::string> register_with(const StoreOptions& options, std::string_view value,
                                              const Deadline& deadline) {
  std::vector<std::uint8_t> request(kRequestBytes);
  put_u32(request.data(), kMagic);
  put_u16(request.data() + 4, kVersion);
  put_u16(request.data() + 6, kKindRegister);
  put_u32(request.data() + 8, static_cast<std::uint32_t>(options.rank));
  put_u32(request.data() + 12, static_cast<std::uint32_t>(options.world_size));
  put_u32(request.data() + 16, static_cast<std::uint32_t>(value.size()));
  request.insert(request.end(), value.begin(), value.end());

  // Jitter spreads the reconnects of many ranks waiting for the same rank 0.
  std::minstd_rand random(std::random_device{}() ^ static_cast<unsigned>(options.rank));
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  auto backoff = kFirstBackoff;
  std::string why = "no attempt was made";
  while (!deadline.expired()) {
    if (auto values = attempt(options, request, deadline, why)) return std::move(*values);
    const auto pause = std::chrono::duration_cast<Clock::duration>(backoff * jitter(random));
    std::this_thread::sleep_until(std::min(Clock::now() + pause, deadline.time_point()));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  throw TimeoutError(
      options.rank, "store",
      fmt::format("could not reach the store at {} within {} ms (last attempt: {})",
                  endpoint_text(options.host, options.port), deadline.budget().count(), why),
      "check that rank 0 is running and that every rank uses its address and port (MASTER_ADDR, "
      "MASTER_PORT or STRATA_STORE_PORT), or raise the timeout (StoreOptions::timeout or "
      "STRATA_TIMEOUT)");
}

}  // namespace detail::store

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
                            detail::store::endpoint_text(options.host, options.port)),
                "pass the host and a non-zero port where rank 0 serves the store");
  if (options.timeout <= std::chrono::milliseconds::zero())
    throw usage(fmt::format("the timeout {} ms is not positive", options.timeout.count()),
                "pass a positive timeout");

  const Deadline deadline = Deadline::after(options.timeout);
  if (options.rank == 0) return detail::store::Server(options, value, deadline).run();
  return detail::store::register_with(options, value, deadline);
}

inline std::string local_address_toward(std::string_view host, std::uint16_t port) {
  using asio::ip::udp;
  const auto fail = [&](const std::error_code& ec) {
    return ConfigurationError(
        -1, "local_address_toward",
        fmt::format("cannot find this host's address toward {}: {}",
                    detail::store::endpoint_text(host, port), ec.message()),
        "check that the store's host (MASTER_ADDR) is spelled right and reachable from here");
  };
  std::error_code ec;
  const auto endpoints =
      detail::store::resolve<udp>(std::string(host), port == 0 ? std::uint16_t{9} : port, ec);
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

}  // namespace strata::cluster
