// strata/coordinator/impl/worker_link.ipp — the coordinator's connection to one worker's
// server (worker_server.hpp): the handshake, then one request and its reply at a time.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/cluster/address.hpp>
#include <strata/coordinator/codec.hpp>
#include <strata/coordinator/protocol.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/deadline.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/growing_payload.hpp>
#include <strata/transport/tcp/service_client.hpp>

namespace strata::coordinator::detail {

/// How a request went: answered (the result's bytes, or the RemoteError's), or the connection
/// lost (why), after which the link is of no more use.
struct WorkerReply {
  enum class Kind : std::uint8_t { ok, error, lost } kind = Kind::lost;
  std::vector<std::byte> bytes;
  std::string why;
};

class WorkerLink {
  using Io = transport::tcp::ServiceIo;

 public:
  /// Connects to the worker at `address` (collective rank `worker_rank`) by `until`; nothing,
  /// when it cannot be reached now.
  /// @throws ConfigurationError (naming `who`) when the worker refuses this coordinator.
  static std::unique_ptr<WorkerLink> connect(const cluster::Address& address,
                                             const transport::tcp::ServiceIdentity& mine,
                                             int worker_rank, std::uint64_t incarnation,
                                             Clock::time_point until, std::string_view who) {
    std::string why;
    auto connection = transport::tcp::ServiceConnection::connect(
        address, mine, worker_rank, 0, incarnation, until, "ClusterCoordinator", who, why);
    if (!connection) return nullptr;
    auto link = std::unique_ptr<WorkerLink>(new WorkerLink());
    link->connection_ = std::move(connection);
    return link;
  }

  /// Sends a request (within `send_timeout`) and waits for its reply (`reply_timeout`).
  WorkerReply call(Operation operation, const RequestPrefix& prefix,
                   std::span<const std::byte> args, std::chrono::milliseconds send_timeout,
                   std::chrono::milliseconds reply_timeout) {
    WorkerReply reply;
    Writer writer;
    if (operation != Operation::done) encode(writer, prefix);
    const auto& head = writer.view();
    transport::tcp::FrameHeader header;
    header.type = transport::tcp::FrameType::request;
    header.kind = static_cast<Collective>(operation);
    header.element_type = DataType::uint8;
    header.sequence = ++sequence_;
    header.count = head.size() + args.size();
    if (header.count > 0xFFFF'FFFFu) {
      reply.why = "a request over 4 GiB";
      return reply;
    }
    header.payload_bytes = static_cast<std::uint32_t>(header.count);
    const std::array<std::span<const std::byte>, 2> parts{std::span(head), args};
    Io io = connection_->send(header, parts, Clock::now() + send_timeout);
    if (io != Io::done) {
      reply.why = describe(io, "sending a request");
      return reply;
    }
    const auto until = Clock::now() + reply_timeout;
    transport::tcp::FrameBytes bytes{};
    io = connection_->receive(bytes, until);
    if (io != Io::done) {
      reply.why = describe(io, "waiting for the reply");
      return reply;
    }
    transport::tcp::FrameHeader answer;
    if (transport::tcp::decode(bytes, answer, 0xFFFF'FFFFu) ||
        answer.type != transport::tcp::FrameType::reply || answer.sequence != sequence_ ||
        static_cast<std::uint8_t>(answer.kind) != static_cast<std::uint8_t>(operation) ||
        (answer.root != static_cast<std::int32_t>(ReplyStatus::ok) &&
         answer.root != static_cast<std::int32_t>(ReplyStatus::error))) {
      reply.why = "a reply that does not answer the request";
      return reply;
    }
    // The reply grows with what has arrived, as a worker's requests do: a reply that claims
    // gigabytes costs memory only as its bytes come.
    reply.bytes.clear();
    for (auto next = transport::tcp::grow_toward(reply.bytes, answer.payload_bytes); !next.empty();
         next = transport::tcp::grow_toward(reply.bytes, answer.payload_bytes)) {
      io = connection_->receive(next, until);
      if (io != Io::done) {
        reply.why = describe(io, "reading the reply");
        return reply;
      }
    }
    reply.kind = answer.root == static_cast<std::int32_t>(ReplyStatus::ok)
                     ? WorkerReply::Kind::ok
                     : WorkerReply::Kind::error;
    return reply;
  }

 private:
  WorkerLink() = default;

  static std::string describe(Io io, std::string_view doing) {
    switch (io) {
      case Io::closed:
        return fmt::format("the connection closed while {}", doing);
      case Io::timed_out:
        return fmt::format("no answer within the deadline while {}", doing);
      default:
        return fmt::format("the connection broke while {}", doing);
    }
  }

  std::unique_ptr<transport::tcp::ServiceConnection> connection_;
  std::uint64_t sequence_ = 0;
};

}  // namespace strata::coordinator::detail
