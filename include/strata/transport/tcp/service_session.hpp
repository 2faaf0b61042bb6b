// strata/transport/tcp/service_session.hpp — what a service above the TCP transport implements
// (ServiceHandler, one ServiceSession per connection) and the steps a session answers a request
// with: read more payload, reply, or wait and reply later. ServiceServer (service_server.hpp)
// drives them; a session sees frames' headers and payload bytes, never a socket.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include <strata/core/data_type.hpp>
#include <strata/transport/tcp/frame.hpp>

namespace strata::transport::tcp {

/// What a session wants next: more payload read into `into` (in order; at most what the
/// request has left), or the reply.
struct ReadPayload {
  std::vector<std::span<std::byte>> into;
};
struct SendReply {
  std::uint8_t status = 0;  ///< the frame's root
  std::uint64_t count = 0;
  DataType type = DataType::uint8;
  std::uint8_t flags = 0;  ///< FrameFlag bits of a reply (in_region)
  /// Must stay valid and unchanged until the session's next call.
  std::span<const std::byte> payload{};
  /// Close every connection once this reply is written: the service is finished.
  bool then_close = false;
};
/// The reply comes later, through the session's ServiceReplier (once other connections' requests
/// have made it possible). The request's payload must have been read whole. After `hold` (when
/// positive) the session's `on_hold_expired` answers instead; zero waits until the client gives
/// up and closes.
struct WaitForReply {
  std::chrono::milliseconds hold{0};
};
using SessionStep = std::variant<ReadPayload, SendReply, WaitForReply>;

/// Sends the reply a session deferred with WaitForReply. Call it on the serving thread (from
/// another session's call); it does nothing once the connection is gone. The reply's payload
/// must stay valid until the session's next call.
using ServiceReplier = std::function<void(const SendReply&)>;

/// One connection's conversation, as the service holds it.
class ServiceSession {
 public:
  virtual ~ServiceSession() = default;
  /// A request's header arrived (a valid request frame); its payload is unread.
  virtual SessionStep on_request(const FrameHeader& request) = 0;
  /// The buffers of the last ReadPayload are filled.
  virtual SessionStep on_payload() = 0;
  /// A WaitForReply's hold ran out before the reply was sent; what to do now (by default, wait
  /// on without a hold).
  virtual SessionStep on_hold_expired() { return WaitForReply{}; }
};

/// The service: opens a session for each connection that passed the handshake, with the means
/// to send the replies it defers.
class ServiceHandler {
 public:
  virtual ~ServiceHandler() = default;
  virtual std::unique_ptr<ServiceSession> open(int rank, ServiceReplier replier) = 0;
};

}  // namespace strata::transport::tcp
