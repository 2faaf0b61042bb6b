// strata/ps/impl/client.ipp — a worker's parameter-server client's definitions (ps/client.hpp).
//
// Each connection is a client of the servers' TCP service (transport/tcp/service_client.hpp).
// A connection to a ps task on this host attaches a shared-memory region the first time a call
// is large enough, and its large calls' values travel through it (attach_region, ps/protocol.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>
#include <strata/ps/client.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/transport/shm/handover.hpp>
#include <strata/transport/shm/host.hpp>
#include <strata/transport/shm/region.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/handshake.hpp>
#include <strata/transport/tcp/service_client.hpp>

namespace strata::ps {

namespace detail::client {

struct Connection {
  std::unique_ptr<transport::tcp::ServiceConnection> link;
  std::uint64_t sequence = 0;
  std::exception_ptr broken;  // why this connection can no longer be used
  enum class Sharing : std::uint8_t { unknown, no, yes };
  Sharing sharing = Sharing::unknown;  // whether the server shares this host
  std::optional<transport::shm::Region> region;
  bool in_region = false;  // the request in flight carries its values in the region
};

// The region a call of `bytes` attaches: a power of two from 1 MiB, so that a few growing calls
// do not each attach a new one.
inline std::size_t region_bytes_for(std::size_t bytes) {
  return std::bit_ceil(std::max(bytes, std::size_t{1} << 20));
}

}  // namespace detail::client

struct Client::State {
  using Connection = detail::client::Connection;
  using Io = transport::tcp::ServiceIo;

  State(const cluster::ClusterSpec& spec, int worker_rank, int lane_count, ClientOptions opts)
      : cluster(spec),
        rank(worker_rank),
        lanes(lane_count),
        options(std::move(opts)),
        token(options.cluster_token ? options.cluster_token
                                    : environment_variable("STRATA_CLUSTER_TOKEN")),
        fingerprint(ps_fingerprint(spec)) {
    for (const auto& [index, address] : cluster.tasks(cluster::TaskType::ps))
      servers.push_back({index, address});
    const auto usage = [&](std::string why, std::string_view what_to_do) {
      return UsageError(rank, "ps::Client", why, what_to_do);
    };
    if (servers.empty())
      throw ConfigurationError(rank, "ps::Client", "the cluster has no ps task",
                               "add the parameter servers to the cluster spec (TF_CONFIG \"ps\")");
    if (rank < 0 || rank >= cluster.collective_size())
      throw usage(fmt::format("rank {} is not a rank of the collective group ({} tasks)", rank,
                              cluster.collective_size()),
                  "connect from a chief or worker task");
    if (lanes < 1 || lanes > 1024)
      throw usage(fmt::format("{} lanes", lanes), "ask for 1 to 1024 lanes (one per replica)");
    if (token && token->empty())
      throw ConfigurationError(rank, "ps::Client", "the cluster token is empty",
                               "set a secret shared by every task, or leave it unset");
    transport::tcp::random_bytes(std::as_writable_bytes(std::span(&incarnation, 1)));
    const Deadline deadline = Deadline::after(options.timeout);
    for (std::size_t s = 0; s < servers.size(); ++s)
      for (int lane = 0; lane < lanes; ++lane)
        connections.push_back(connect(static_cast<int>(s), lane, deadline));
  }

  std::string who(int server) const {
    const auto& entry = servers[static_cast<std::size_t>(server)];
    return fmt::format("ps task {} ({})", entry.index, entry.address.to_string());
  }

  Connection& connection(int server, int lane) {
    return *connections[static_cast<std::size_t>(server * lanes + lane)];
  }

  // ---- connecting ----------------------------------------------------------------------------

  std::unique_ptr<Connection> connect(int server, int lane, const Deadline& deadline) {
    const auto& entry = servers[static_cast<std::size_t>(server)];
    const transport::tcp::ServiceIdentity mine{fingerprint, kTunables, cluster.collective_size(),
                                               rank, token};
    std::minstd_rand random(static_cast<unsigned>(incarnation ^ static_cast<unsigned>(lane)));
    std::uniform_real_distribution<double> jitter(0.75, 1.25);
    auto backoff = std::chrono::milliseconds(10);
    std::string why = "no attempt was made";
    while (!deadline.expired()) {
      auto link = transport::tcp::ServiceConnection::connect(
          entry.address, mine, entry.index, static_cast<std::uint16_t>(lane), incarnation,
          deadline.time_point(), "ps::Client", who(server), why);
      if (link) {
        auto connection = std::make_unique<Connection>();
        connection->link = std::move(link);
        return connection;
      }
      const auto pause = std::chrono::duration_cast<Clock::duration>(backoff * jitter(random));
      std::this_thread::sleep_until(std::min(Clock::now() + pause, deadline.time_point()));
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(1));
    }
    throw TimeoutError(rank, "ps::Client",
                       fmt::format("could not connect to {} within {} ms (last attempt: {})",
                                   who(server), deadline.budget().count(), why),
                       "check that the ps task is running with the same cluster spec, or raise "
                       "the timeout (ClientOptions::timeout or STRATA_TIMEOUT)");
  }

  // ---- calls -----------------------------------------------------------------------------------

  std::exception_ptr io_failure(int server, Operation operation, Io io,
                                const Deadline& deadline) const {
    const std::string what = fmt::format("ps::{}", to_string(operation));
    if (io == Io::timed_out)
      return std::make_exception_ptr(TimeoutError(
          rank, what,
          fmt::format("{} did not answer within {} ms", who(server), deadline.budget().count()),
          "check that the ps task is running and not stopped, or raise the timeout "
          "(ClientOptions::timeout or STRATA_TIMEOUT)"));
    return std::make_exception_ptr(PeerFailureError(
        rank, what,
        fmt::format("{} {}", who(server),
                    io == Io::closed ? "closed the connection: the parameter server died or "
                                       "stopped serving"
                                     : "failed: the connection broke"),
        "the variables on that ps task are gone: restart the job and restore from the last "
        "checkpoint"));
  }

  void send(Connection& connection, const ShardCall& call, const Deadline& deadline) {
    if (connection.broken) std::rethrow_exception(connection.broken);
    connection.in_region = use_region(connection, call, deadline);
    if (connection.in_region && !call.values.empty())
      std::memcpy(connection.region->data(), call.values.data(), call.values.size());
    send_frame(connection, call, deadline);
  }

  // The request of `call`; its values go in the payload unless the connection's region has them.
  void send_frame(Connection& connection, const ShardCall& call, const Deadline& deadline) {
    const std::span<const std::byte> values =
        connection.in_region ? std::span<const std::byte>() : call.values;
    transport::tcp::FrameHeader header;
    header.type = transport::tcp::FrameType::request;
    header.kind = static_cast<Collective>(call.operation);
    header.element_type = call.type;
    header.root = static_cast<std::int32_t>(call.handle);
    header.sequence = ++connection.sequence;
    header.count = call.count;
    header.flags =
        connection.in_region ? static_cast<std::uint8_t>(transport::tcp::FrameFlag::in_region) : 0;
    header.payload_bytes = static_cast<std::uint32_t>(call.prefix.size() + values.size());
    const std::array<std::span<const std::byte>, 2> parts{call.prefix, values};
    const Io io = connection.link->send(header, parts, deadline.time_point());
    if (io != Io::done) fail(connection, call, io, deadline);
  }

  // ---- shared memory with a ps task on this host -----------------------------------------

  // Whether `call` moves its values through the connection's region, attaching one first when
  // the server shares this host and the region is missing or too small.
  bool use_region(Connection& connection, const ShardCall& call, const Deadline& deadline) {
    using Sharing = Connection::Sharing;
    const std::size_t bytes = std::max(call.values.size(), call.result.size());
    if (!options.shared_memory || !may_use_region(call.operation) || bytes < kRegionMinBytes ||
        connection.sharing == Sharing::no)
      return false;
    if (connection.sharing == Sharing::unknown) {
      AttachSpec probe;
      probe.host = host().bytes;
      connection.sharing = Sharing::no;
      try {
        if (host().known() && attach_request(connection, call.server, probe, deadline, [] {}) == 1)
          connection.sharing = Sharing::yes;
      } catch (const UsageError&) {  // a server without shared regions refused: TCP it is
      }
      if (connection.sharing == Sharing::no) return false;
    }
    if (!connection.region || connection.region->size() < bytes)
      attach(connection, call.server, bytes, deadline);
    return connection.region.has_value();
  }

  // A region of region_bytes_for(bytes), handed to the server. A system that refuses the
  // region (memfd, Unix sockets), here or on the server, leaves the connection on TCP for good.
  void attach(Connection& connection, int server, std::size_t bytes, const Deadline& deadline) {
    connection.region.reset();
    std::optional<transport::shm::Region> region;
    std::optional<transport::shm::HandoverServer> handover;
    try {
      region.emplace(transport::shm::Region::create(detail::client::region_bytes_for(bytes), rank));
      handover.emplace(rank);
    } catch (const ConfigurationError&) {
      connection.sharing = Connection::Sharing::no;
      return;
    }
    AttachSpec spec;
    spec.phase = AttachSpec::Phase::collect;
    spec.bytes = region->size();
    spec.host = host().bytes;
    const auto& ticket = handover->ticket();
    std::copy(ticket.name.begin(), ticket.name.end(), spec.ticket.begin());
    std::copy(ticket.secret.begin(), ticket.secret.end(),
              spec.ticket.begin() + static_cast<std::ptrdiff_t>(ticket.name.size()));
    // The server collects the descriptor while this thread serves it, then replies. A server
    // that fails to collect says so in its reply, which comes once the handover gives up: after
    // as long as the server would wait at most.
    const Deadline handover_deadline = deadline.time_point() - Clock::now() > kHandoverWait
                                           ? Deadline::after(kHandoverWait)
                                           : deadline;
    std::uint64_t mapped = 0;
    try {
      mapped = attach_request(connection, server, spec, deadline,
                              [&] { handover->serve(region->fd(), 1, handover_deadline); });
    } catch (const UsageError&) {  // the server's refusal, the connection still in step
      connection.sharing = Connection::Sharing::no;
      return;
    } catch (const ConfigurationError&) {  // the handover failed
      connection.sharing = Connection::Sharing::no;
      return;
    }
    if (mapped != region->size()) {
      connection.broken = std::make_exception_ptr(PeerFailureError(
          rank, "ps::attach_region",
          fmt::format("{} broke the protocol: it mapped {} bytes of a region of {}", who(server),
                      mapped, region->size()),
          "check that every task runs the same strata version"));
      std::rethrow_exception(connection.broken);
    }
    region->close_fd();
    connection.region = std::move(region);
  }

  // One attach_region request and its reply's count; `while_waiting` runs between the two.
  template <class F>
  std::uint64_t attach_request(Connection& connection, int server, const AttachSpec& spec,
                               const Deadline& deadline, F&& while_waiting) {
    const auto bytes = encode(spec);
    ShardCall call;
    call.server = server;
    call.operation = Operation::attach_region;
    call.type = DataType::uint8;
    call.prefix = bytes;
    connection.in_region = false;
    if (connection.broken) std::rethrow_exception(connection.broken);
    send_frame(connection, call, deadline);
    std::exception_ptr serving;
    try {
      while_waiting();
    } catch (const ConfigurationError&) {
      serving = std::current_exception();  // the reply says why, or the handover does
    }
    receive(connection, call, deadline);
    if (serving) std::rethrow_exception(serving);
    return call.version;
  }

  static const transport::shm::HostIdentity& host() {
    static const transport::shm::HostIdentity identity = transport::shm::this_host();
    return identity;
  }

  [[noreturn]] void fail(Connection& connection, const ShardCall& call, Io io,
                         const Deadline& deadline) {
    connection.broken = io_failure(call.server, call.operation, io, deadline);
    std::rethrow_exception(connection.broken);
  }

  void receive(Connection& connection, ShardCall& call, const Deadline& deadline) {
    transport::tcp::FrameBytes bytes{};
    Io io = connection.link->receive(bytes, deadline.time_point());
    if (io != Io::done) fail(connection, call, io, deadline);
    transport::tcp::FrameHeader header;
    const auto limit = static_cast<std::uint32_t>(
        std::max<std::size_t>(call.result.size(), transport::tcp::kMaxControlPayload));
    const std::string what = fmt::format("ps::{}", to_string(call.operation));
    const auto protocol_error = [&](std::string_view why) {
      connection.broken = std::make_exception_ptr(PeerFailureError(
          rank, what, fmt::format("{} broke the protocol: {}", who(call.server), why),
          "check that every task runs the same strata version"));
      std::rethrow_exception(connection.broken);
    };
    if (transport::tcp::decode(bytes, header, limit) ||
        header.type != transport::tcp::FrameType::reply || header.sequence != connection.sequence ||
        static_cast<std::uint8_t>(header.kind) != static_cast<std::uint8_t>(call.operation) ||
        header.root < 0 || header.root > kLastStatus)
      protocol_error("a reply that does not answer the request");
    const auto status = static_cast<Status>(header.root);
    if (status != Status::ok) {
      std::string text(header.payload_bytes, '\0');
      io = connection.link->receive(std::as_writable_bytes(std::span(text)), deadline.time_point());
      if (io != Io::done) fail(connection, call, io, deadline);
      raise(call, status, text);
    }
    const bool values_back = call.operation == Operation::pull ||
                             call.operation == Operation::push_pull ||
                             call.operation == Operation::pull_state ||
                             (call.operation == Operation::create && header.payload_bytes != 0);
    // The values of a request that carried them in the region come back there.
    const bool in_region =
        (header.flags & static_cast<std::uint8_t>(transport::tcp::FrameFlag::in_region)) != 0;
    if (in_region != (connection.in_region && values_back))
      protocol_error(in_region ? "values in the shared region nobody asked for there"
                               : "values on the socket that belong in the shared region");
    // An optimizer state's size depends on its slot count: `result` holds the largest.
    const bool sized =
        in_region ? header.payload_bytes == 0
        : call.operation == Operation::pull_state
            ? header.payload_bytes >= kStateSpecBytes && header.payload_bytes <= call.result.size()
            : header.payload_bytes == call.result.size();
    if (values_back && (!sized || header.element_type != call.type))
      protocol_error(fmt::format("{} bytes of {} instead of {} bytes of {}", header.payload_bytes,
                                 to_string(header.element_type), call.result.size(),
                                 to_string(call.type)));
    if (!values_back && header.payload_bytes != 0) protocol_error("values nobody asked for");
    call.received = values_back ? header.payload_bytes : 0;
    if (in_region) {
      if (!call.result.empty())
        std::memcpy(call.result.data(), connection.region->data(), call.result.size());
      call.received = call.result.size();
    } else if (values_back) {
      io = connection.link->receive(call.result.first(header.payload_bytes), deadline.time_point());
      if (io != Io::done) fail(connection, call, io, deadline);
    }
    call.version = header.count;
    if (call.operation == Operation::create) {
      call.handle = static_cast<std::uint32_t>(header.count);
      call.version = header.payload_bytes != 0 ? 1 : 0;  // whether it existed
    }
  }

  [[noreturn]] void raise(const ShardCall& call, Status status, const std::string& text) const {
    const std::string what = fmt::format("ps::{}", to_string(call.operation));
    const std::string happened = fmt::format("{} refused: {}", who(call.server), text);
    switch (status) {
      case Status::held_too_long:
        throw TimeoutError(rank, what, text,
                           "find the worker named (a stopped process, a hung host) and restart "
                           "the job from its last checkpoint; if it is only slow, raise "
                           "STRATA_TIMEOUT on every task");
      case Status::unknown_variable:
        throw UsageError(rank, what, happened,
                         "create variables through the strategy before using them; after a ps "
                         "task restarts, restore its variables from a checkpoint");
      case Status::mismatch:
      case Status::exists_differently:
        throw MismatchError(rank, what, happened,
                            "every worker must create each variable with the same element type "
                            "and shape, in the same order");
      default:
        throw UsageError(rank, what, happened,
                         "pass an optimizer the servers apply (Sgd, Momentum, Adam) and values "
                         "of the variable's size");
    }
  }

  void call(int lane, std::span<ShardCall> calls) {
    const Deadline deadline = Deadline::after(options.timeout);
    // Calls to one server go one after another on its connection (its replies come in order, and
    // a large request must not wait behind a reply nobody reads); calls to different servers
    // overlap: every server of a wave gets its request before any reply is read.
    std::vector<bool> finished(calls.size(), false);
    std::size_t left = calls.size();
    std::vector<std::size_t> wave;
    std::vector<bool> busy(servers.size());
    while (left > 0) {
      wave.clear();
      std::fill(busy.begin(), busy.end(), false);
      for (std::size_t i = 0; i < calls.size(); ++i) {
        const auto server = static_cast<std::size_t>(calls[i].server);
        if (finished[i] || busy[server]) continue;
        busy[server] = true;
        wave.push_back(i);
      }
      for (const std::size_t i : wave)
        send(connection(calls[i].server, lane), calls[i], deadline);
      for (const std::size_t i : wave) {
        receive(connection(calls[i].server, lane), calls[i], deadline);
        finished[i] = true;
        --left;
      }
    }
  }

  cluster::ClusterSpec cluster;
  int rank;
  int lanes;
  ClientOptions options;
  std::optional<std::string> token;
  std::uint64_t fingerprint;
  std::uint64_t incarnation = 0;
  struct ServerEntry {
    int index;
    cluster::Address address;
  };
  std::vector<ServerEntry> servers;
  std::vector<std::unique_ptr<Connection>> connections;  // server-major: server · lanes + lane
};

STRATA_DECL Client::Client(const cluster::ClusterSpec& cluster, int rank, int lanes,
                           ClientOptions options)
    : state_(std::make_unique<State>(cluster, rank, lanes, std::move(options))) {}

STRATA_DECL Client::~Client() = default;

STRATA_DECL int Client::num_servers() const noexcept {
  return static_cast<int>(state_->servers.size());
}
STRATA_DECL int Client::num_lanes() const noexcept {
  return state_->lanes;
}
STRATA_DECL int Client::rank() const noexcept {
  return state_->rank;
}
STRATA_DECL std::string Client::describe_server(int server) const {
  return state_->who(server);
}

STRATA_DECL Client::Created Client::create(int server, std::string_view name, DataType type,
                                           UpdateRule update, std::span<const std::byte> initial,
                                           std::span<std::byte> current) {
  if (server < 0 || server >= num_servers() || name.empty() || name.size() > kMaxNameBytes ||
      current.size() != initial.size() || initial.size() % size_of(type) != 0)
    throw UsageError(state_->rank, "ps::create",
                     fmt::format("variable '{}' on server {} of {}", name, server, num_servers()),
                     "name each variable (1 to 1024 bytes) and pass matching buffers");
  CreateSpec spec;
  spec.elements = initial.size() / size_of(type);
  spec.update = update;
  spec.name_bytes = static_cast<std::uint32_t>(name.size());
  std::vector<std::byte> prefix(kCreateSpecBytes + padded_name_bytes(name.size()));
  const auto fixed = encode(spec);
  std::copy(fixed.begin(), fixed.end(), prefix.begin());
  std::copy_n(reinterpret_cast<const std::byte*>(name.data()), name.size(),
              prefix.begin() + kCreateSpecBytes);
  ShardCall call;
  call.server = server;
  call.operation = Operation::create;
  call.type = type;
  call.count = spec.elements;
  call.prefix = prefix;
  call.values = initial;
  call.result = current;
  state_->call(0, std::span(&call, 1));
  return {call.handle, call.version != 0};
}

STRATA_DECL void Client::call(int lane, std::span<ShardCall> calls) {
  if (lane < 0 || lane >= state_->lanes)
    throw UsageError(state_->rank, "ps::Client::call",
                     fmt::format("lane {} of {}", lane, state_->lanes),
                     "call from lane 0 to num_lanes() - 1 (one per replica)");
  for (const ShardCall& call : calls)
    if (call.server < 0 || call.server >= num_servers())
      throw UsageError(state_->rank, "ps::Client::call",
                       fmt::format("server {} of {}", call.server, num_servers()),
                       "name a ps task of the cluster");
  state_->call(lane, calls);
}

STRATA_DECL void Client::done() {
  std::vector<ShardCall> calls(state_->servers.size());
  for (std::size_t s = 0; s < calls.size(); ++s) {
    calls[s].server = static_cast<int>(s);
    calls[s].operation = Operation::done;
    calls[s].type = DataType::uint8;
  }
  state_->call(0, calls);
}

}  // namespace strata::ps
