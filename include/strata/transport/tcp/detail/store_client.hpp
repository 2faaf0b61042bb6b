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
#include <strata/transport/tcp/store_options.hpp>

namespace strata::transport::tcp::detail::store {

using asio::ip::tcp;

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
  const auto endpoints = resolve_endpoints<tcp>(options.host, options.port, ec);
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
