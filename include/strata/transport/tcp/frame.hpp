// strata/transport/tcp/frame.hpp — the header in front of every message between two ranks.
//
// Every message on a TCP connection is a 32-byte header followed by `payload_bytes` bytes:
//
//   offset  size  field
//   0       2     magic 0x5346 (bytes 46 53, "FS", on the wire)
//   2       1     protocol version (kFrameVersion)
//   3       1     frame type (FrameType)
//   4       1     collective (Collective); a request or reply's operation (the service's)
//   5       1     element type (DataType)
//   6       1     reduce op (ReduceOp)
//   7       1     flags (FrameFlag: lent on data frames, in_region on requests and replies)
//   8       4     root (int32)
//   12      4     payload bytes (uint32)
//   16      8     sequence number of the collective on the sending rank
//   24      8     count: the collective's per-rank element count
//
// All fields little-endian. A data frame carries the sender's view of the collective (kind,
// type, op, root, count, sequence); the receiver compares it with its own call before it
// touches the payload, so ranks that disagree raise MismatchError instead of reducing bytes
// that mean different things. The check costs one 32-byte compare per message, always on.
// Control frames (abort, timeout notice, alive, goodbye, release) travel on a connection of
// their own and carry a short text payload. Request and reply frames carry a service's calls
// (the parameter servers of ps/): the kind byte is the service's operation, which the service
// checks, and the payload is bounded as a data frame's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include <strata/core/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/detail/little_endian.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::transport::tcp {

inline constexpr std::uint16_t kFrameMagic = 0x5346;
inline constexpr std::uint8_t kFrameVersion = 2;
inline constexpr std::size_t kFrameHeaderBytes = 32;
/// Control frames carry at most this much text; longer messages are cut.
inline constexpr std::uint32_t kMaxControlPayload = 4096;

enum class FrameType : std::uint8_t {
  data = 1,            ///< a segment of a collective's data (may be empty)
  abort = 2,           ///< the sender failed the group; payload: FailureClass byte, the root
                       ///< cause's rank (i32, little-endian), what happened there (text)
  timeout_notice = 3,  ///< the sender's deadline expired; receivers inside a call answer alive
  alive = 4,           ///< answer to a timeout notice: the sender is inside a collective
  goodbye = 5,         ///< the sender closes its communicator after `sequence` collectives
  release = 6,         ///< the sender has read `count` bytes of payload lent to it in
                       ///< collective `sequence` (a running total)
  request = 7,         ///< a call to a service; `kind` is its operation
  reply = 8,           ///< the service's answer to the request of the same `sequence`
};

/// Whether frames of `type` carry bulk payload (bounded by the caller's limit, not by
/// kMaxControlPayload).
constexpr bool carries_data(FrameType type) noexcept {
  return type == FrameType::data || type == FrameType::request || type == FrameType::reply;
}
/// Whether the kind byte of frames of `type` is a service's operation rather than a Collective.
constexpr bool is_service_frame(FrameType type) noexcept {
  return type == FrameType::request || type == FrameType::reply;
}

/// Bits of the flags byte; each frame type allows its own (allowed_flags).
enum class FrameFlag : std::uint8_t {
  /// Data frames: the payload travels in the sender's own memory pages, not a copy (vmsplice(2)
  /// and splice(2) on the sending side): the sender must not return from the collective, and so
  /// let its caller overwrite that memory, before the receiver has read the payload. The
  /// receiver answers each such message, once read, with a release frame.
  lent = 0x01,
  /// Request and reply frames: the call's values are in the shared-memory region the connection
  /// attached (ps/protocol.hpp), not in the payload.
  in_region = 0x02,
};

/// The flags frames of `type` may carry: none on control frames.
constexpr std::uint8_t allowed_flags(FrameType type) noexcept {
  if (type == FrameType::data) return static_cast<std::uint8_t>(FrameFlag::lent);
  if (is_service_frame(type)) return static_cast<std::uint8_t>(FrameFlag::in_region);
  return 0;
}

/// Why a group failed, carried by abort frames so that every rank raises the same error type.
enum class FailureClass : std::uint8_t { peer_failure = 1, mismatch = 2, timeout = 3 };

struct FrameHeader {
  FrameType type = FrameType::data;
  Collective kind = Collective::barrier;  ///< a service's operation in request/reply frames
  DataType element_type = DataType::uint8;
  ReduceOp op = ReduceOp::sum;
  std::int32_t root = 0;
  std::uint32_t payload_bytes = 0;
  std::uint64_t sequence = 0;
  std::uint64_t count = 0;
  std::uint8_t flags = 0;  ///< FrameFlag bits

  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

using FrameBytes = std::array<std::byte, kFrameHeaderBytes>;

/// Why a header was rejected. Each is a reason to drop the connection: a peer speaking strata
/// never sends one.
enum class FrameError {
  bad_magic = 1,
  bad_version,
  bad_type,
  bad_collective,
  bad_element_type,
  bad_op,
  bad_flags,
  payload_too_large,
};

inline std::string_view to_string(FrameError error) noexcept {
  switch (error) {
    case FrameError::bad_magic:
      return "not a strata frame (bad magic)";
    case FrameError::bad_version:
      return "unsupported strata protocol version";
    case FrameError::bad_type:
      return "unknown frame type";
    case FrameError::bad_collective:
      return "unknown collective";
    case FrameError::bad_element_type:
      return "unknown element type";
    case FrameError::bad_op:
      return "unknown reduce op";
    case FrameError::bad_flags:
      return "flags the frame's type does not allow";
    case FrameError::payload_too_large:
      return "payload length above the limit";
  }
  return "invalid frame";
}

namespace detail {
using strata::detail::load_le;
using strata::detail::store_le;
}  // namespace detail

constexpr FrameBytes encode(const FrameHeader& header) noexcept {
  FrameBytes out{};
  detail::store_le<std::uint16_t>(&out[0], kFrameMagic);
  out[2] = static_cast<std::byte>(kFrameVersion);
  out[3] = static_cast<std::byte>(header.type);
  out[4] = static_cast<std::byte>(header.kind);
  out[5] = static_cast<std::byte>(header.element_type);
  out[6] = static_cast<std::byte>(header.op);
  out[7] = static_cast<std::byte>(header.flags);
  detail::store_le<std::uint32_t>(&out[8], static_cast<std::uint32_t>(header.root));
  detail::store_le<std::uint32_t>(&out[12], header.payload_bytes);
  detail::store_le<std::uint64_t>(&out[16], header.sequence);
  detail::store_le<std::uint64_t>(&out[24], header.count);
  return out;
}

}  // namespace strata::transport::tcp

namespace std {
template <>
struct is_error_code_enum<strata::transport::tcp::FrameError> : true_type {};
}  // namespace std

namespace strata::transport::tcp {

inline const std::error_category& frame_category() noexcept {
  struct Category : std::error_category {
    const char* name() const noexcept override { return "strata.frame"; }
    std::string message(int value) const override {
      return std::string(to_string(static_cast<FrameError>(value)));
    }
  };
  static const Category category;
  return category;
}

inline std::error_code make_error_code(FrameError error) noexcept {
  return {static_cast<int>(error), frame_category()};
}

/// Decodes and validates a header. Every enum is range-checked (a service's operation by the
/// service) and the payload length is bounded (by `chunk_bytes` for data, request and reply
/// frames, kMaxControlPayload otherwise) before anyone allocates or reads for it. `out` is
/// written only on success.
/// @returns an empty error_code on success, else the reason: the connection must be dropped.
inline std::error_code decode(std::span<const std::byte, kFrameHeaderBytes> in, FrameHeader& out,
                              std::uint32_t chunk_bytes) noexcept {
  if (detail::load_le<std::uint16_t>(&in[0]) != kFrameMagic) return FrameError::bad_magic;
  if (static_cast<std::uint8_t>(in[2]) != kFrameVersion) return FrameError::bad_version;
  const auto type = static_cast<std::uint8_t>(in[3]);
  if (type < 1 || type > 8) return FrameError::bad_type;
  const auto frame_type = static_cast<FrameType>(type);
  const auto kind = static_cast<std::uint8_t>(in[4]);
  if (!is_service_frame(frame_type) && kind > static_cast<std::uint8_t>(Collective::barrier))
    return FrameError::bad_collective;
  const auto element = static_cast<std::uint8_t>(in[5]);
  if (element > static_cast<std::uint8_t>(DataType::float64)) return FrameError::bad_element_type;
  const auto op = static_cast<std::uint8_t>(in[6]);
  if (op > static_cast<std::uint8_t>(ReduceOp::mean)) return FrameError::bad_op;
  const auto payload = detail::load_le<std::uint32_t>(&in[12]);
  const auto flags = static_cast<std::uint8_t>(in[7]);
  if ((flags & ~allowed_flags(frame_type)) != 0) return FrameError::bad_flags;
  const std::uint32_t limit = carries_data(frame_type) ? chunk_bytes : kMaxControlPayload;
  if (payload > limit) return FrameError::payload_too_large;
  out.type = frame_type;
  out.kind = static_cast<Collective>(kind);
  out.element_type = static_cast<DataType>(element);
  out.op = static_cast<ReduceOp>(op);
  out.flags = flags;
  out.root = static_cast<std::int32_t>(detail::load_le<std::uint32_t>(&in[8]));
  out.payload_bytes = payload;
  out.sequence = detail::load_le<std::uint64_t>(&in[16]);
  out.count = detail::load_le<std::uint64_t>(&in[24]);
  return {};
}

}  // namespace strata::transport::tcp
