// strata/transport/tcp/detail/store_protocol.hpp — the address store's messages on the wire
// (the layout is in transport/tcp/store.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace strata::transport::tcp::detail::store {

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

inline void put_reply_header(std::uint8_t* out, Status status, std::uint32_t world_size,
                             std::size_t body_bytes) noexcept {
  put_u32(out, kMagic);
  put_u16(out + 4, kVersion);
  put_u16(out + 6, static_cast<std::uint16_t>(status));
  put_u32(out + 8, world_size);
  put_u32(out + 12, static_cast<std::uint32_t>(body_bytes));
}

inline std::vector<std::uint8_t> reply_header(Status status, std::uint32_t world_size,
                                              std::size_t body_bytes) {
  std::vector<std::uint8_t> out(kReplyHeaderBytes);
  put_reply_header(out.data(), status, world_size, body_bytes);
  return out;
}

inline std::vector<std::uint8_t> error_reply(Status status, std::uint32_t world_size,
                                             std::string_view message) {
  message = message.substr(0, kMaxMessageBytes);
  // Sized once and filled in place: g++ 12 reports false -Warray-bounds and
  // -Wstringop-overflow inside an inlined vector::insert or resize here.
  std::vector<std::uint8_t> out(kReplyHeaderBytes + message.size());
  put_reply_header(out.data(), status, world_size, message.size());
  if (!message.empty()) std::memcpy(out.data() + kReplyHeaderBytes, message.data(), message.size());
  return out;
}

/// "rank 2" / "ranks 2, 5" / "ranks 1, 2, ..., 16 and 84 more".
inline std::string rank_list(const std::vector<int>& ranks) {
  constexpr std::size_t kMaxListed = 16;
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < kMaxListed; ++i)
    text += fmt::format("{}{}", i == 0 ? "" : ", ", ranks[i]);
  if (ranks.size() > kMaxListed) text += fmt::format(" and {} more", ranks.size() - kMaxListed);
  return text;
}

}  // namespace strata::transport::tcp::detail::store
