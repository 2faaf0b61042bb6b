// strata/transport/tcp/detail/store_server.hpp — rank 0's side of the address store.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
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
    const auto endpoints = resolve_endpoints<tcp>(options_.host, options_.port, ec);
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

}  // namespace strata::transport::tcp::detail::store
