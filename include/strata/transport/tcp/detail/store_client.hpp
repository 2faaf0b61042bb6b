// strata/transport/tcp/detail/store_client.hpp — the other ranks' side of the address store.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/detail/store_protocol.hpp>
#include <strata/transport/tcp/route.hpp>
#include <strata/transport/tcp/run_until.hpp>
#include <strata/transport/tcp/store_options.hpp>

namespace strata::transport::tcp::detail::store {

using asio::ip::tcp;

/// One connection to the store, each step bounded by the attempt's deadline.
class StoreConnection {
 public:
  explicit StoreConnection(Clock::time_point until) : until_(until) {}

  /// Whether the last step ran out of time.
  bool timed_out() const noexcept { return timed_out_; }

  std::error_code connect(const std::vector<tcp::endpoint>& endpoints) {
    return run_until(io_, socket_, until_, timed_out_, [&](auto done) {
      asio::async_connect(socket_, endpoints,
                          [done](const std::error_code& e, const tcp::endpoint&) { done(e); });
    });
  }

  std::error_code write(asio::const_buffer bytes) {
    return run_until(io_, socket_, until_, timed_out_, [&](auto done) {
      asio::async_write(socket_, bytes, [done](const std::error_code& e, std::size_t) { done(e); });
    });
  }

  std::error_code read(asio::mutable_buffer bytes) {
    return run_until(io_, socket_, until_, timed_out_, [&](auto done) {
      asio::async_read(socket_, bytes, [done](const std::error_code& e, std::size_t) { done(e); });
    });
  }

 private:
  asio::io_context io_{1};
  tcp::socket socket_{io_};
  Clock::time_point until_;
  bool timed_out_ = false;
};

/// Why a step of an attempt failed, when trying again may help.
inline std::string retry_reason(std::string_view step, const std::error_code& error,
                                bool timed_out) {
  if (timed_out) return fmt::format("{} timed out", step);
  if (error == asio::error::eof || error == asio::error::connection_reset ||
      error == asio::error::broken_pipe)
    return "the store closed the connection";
  return fmt::format("{}: {}", step, error.message());
}

inline ConfigurationError not_a_store(const StoreOptions& options, std::string_view where,
                                      std::string_view why) {
  return ConfigurationError(
      options.rank, "store",
      fmt::format("the service at {} is not a strata store of this version: {}", where, why),
      "check the store's address and port (MASTER_ADDR, MASTER_PORT or STRATA_STORE_PORT): "
      "another program may hold that port");
}

[[noreturn]] inline void throw_no_answer(const StoreOptions& options, std::string_view where,
                                         const Deadline& deadline) {
  throw TimeoutError(
      options.rank, "store",
      fmt::format("registered with the store at {}, but it did not answer within {} ms", where,
                  deadline.budget().count()),
      "rank 0 answers once every rank has registered: look for a rank that was not started "
      "or points at another store, or raise the timeout (StoreOptions::timeout or "
      "STRATA_TIMEOUT)");
}

/// What a reply's header announces, once it is known to come from a store of this version.
struct ReplyHeader {
  Status status;
  std::uint32_t body_bytes;
};

inline ReplyHeader check_reply_header(const std::array<std::uint8_t, kReplyHeaderBytes>& header,
                                      const StoreOptions& options, std::string_view where) {
  if (get_u32(header.data()) != kMagic)
    throw not_a_store(options, where, "its reply has the wrong magic number");
  if (get_u16(header.data() + 4) != kVersion)
    throw not_a_store(options, where,
                      fmt::format("it speaks protocol version {}, this rank speaks version {}",
                                  get_u16(header.data() + 4), kVersion));
  const auto status = static_cast<Status>(get_u16(header.data() + 6));
  const std::uint32_t world_size = get_u32(header.data() + 8);
  const std::uint32_t body_bytes = get_u32(header.data() + 12);
  const std::size_t max_body =
      status == Status::kOk
          ? static_cast<std::size_t>(options.world_size) * (4 + kMaxStoreValueBytes)
          : kMaxMessageBytes;
  if (body_bytes > max_body)
    throw not_a_store(options, where, fmt::format("its reply announces {} bytes", body_bytes));
  if (status == Status::kOk && world_size != static_cast<std::uint32_t>(options.world_size))
    throw not_a_store(options, where,
                      fmt::format("it answered with a table of {} ranks instead of {}", world_size,
                                  options.world_size));
  return {status, body_bytes};
}

/// Raises what rank 0's store reported instead of the table.
[[noreturn]] inline void throw_store_gave_up(Status status, const std::vector<std::uint8_t>& body,
                                             const StoreOptions& options, std::string_view where) {
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
      throw not_a_store(options, where,
                        fmt::format("unknown status {}", static_cast<unsigned>(status)));
  }
}

/// The table of a successful reply: one length-prefixed value per rank, nothing after.
inline std::vector<std::string> parse_table(const std::vector<std::uint8_t>& body,
                                            const StoreOptions& options, std::string_view where) {
  std::vector<std::string> values;
  values.reserve(static_cast<std::size_t>(options.world_size));
  std::size_t pos = 0;
  for (int r = 0; r < options.world_size; ++r) {
    if (body.size() - pos < 4) throw not_a_store(options, where, "its table is truncated");
    const std::uint32_t length = get_u32(body.data() + pos);
    pos += 4;
    if (length > kMaxStoreValueBytes || body.size() - pos < length)
      throw not_a_store(options, where, "its table holds an invalid length");
    values.emplace_back(reinterpret_cast<const char*>(body.data() + pos), length);
    pos += length;
  }
  if (pos != body.size()) throw not_a_store(options, where, "its table has trailing bytes");
  return values;
}

/// One attempt of a non-zero rank: connect, register, read the reply. Returns the table, or
/// nullopt with the reason to try again in `retry_why`; throws when retrying cannot help.
inline std::optional<std::vector<std::string>> attempt(const StoreOptions& options,
                                                       const std::vector<std::uint8_t>& request,
                                                       const Deadline& deadline,
                                                       std::string& retry_why) {
  const std::string where = endpoint_text(options.host, options.port);
  std::error_code ec;
  const auto endpoints = resolve_endpoints<tcp>(options.host, options.port, ec);
  if (ec) {
    retry_why = fmt::format("cannot resolve {}: {}", options.host, ec.message());
    return std::nullopt;
  }
  StoreConnection connection(deadline.time_point());
  auto failed = [&](std::string_view step, const std::error_code& error) {
    retry_why = retry_reason(step, error, connection.timed_out());
    return std::nullopt;
  };
  ec = connection.connect(endpoints);
  if (ec) return failed("connect", ec);
  ec = connection.write(asio::buffer(request));
  if (ec) return failed("send", ec);
  std::array<std::uint8_t, kReplyHeaderBytes> header{};
  ec = connection.read(asio::buffer(header));
  if (connection.timed_out()) throw_no_answer(options, where, deadline);
  if (ec) return failed("receive", ec);
  const ReplyHeader reply = check_reply_header(header, options, where);
  std::vector<std::uint8_t> body(reply.body_bytes);
  ec = connection.read(asio::buffer(body));
  if (ec) return failed("receive", ec);
  if (reply.status != Status::kOk) throw_store_gave_up(reply.status, body, options, where);
  return parse_table(body, options, where);
}

inline std::vector<std::string> register_with(const StoreOptions& options, std::string_view value,
                                              const Deadline& deadline) {
  // Sized once and filled in place: g++ 12 at -O3 reports a false -Warray-bounds inside an
  // inlined vector::insert here.
  std::vector<std::uint8_t> request(kRequestBytes + value.size());
  put_u32(request.data(), kMagic);
  put_u16(request.data() + 4, kVersion);
  put_u16(request.data() + 6, kKindRegister);
  put_u32(request.data() + 8, static_cast<std::uint32_t>(options.rank));
  put_u32(request.data() + 12, static_cast<std::uint32_t>(options.world_size));
  put_u32(request.data() + 16, static_cast<std::uint32_t>(value.size()));
  if (!value.empty()) std::memcpy(request.data() + kRequestBytes, value.data(), value.size());

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

}  // namespace strata::transport::tcp::detail::store
