// strata/transport/tcp/run_until.hpp — one asynchronous socket operation, run to completion
// or to a deadline, for code that talks to one peer at a time (the address store, a parameter
// server's clients).
#pragma once

#include <optional>
#include <system_error>
#include <utility>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <strata/core/deadline.hpp>

namespace strata::transport::tcp {

/// Runs one asynchronous operation on `socket` until it completes or `until` passes; on
/// timeout the socket is closed, which completes the operation with an error, and
/// `timed_out` is set.
template <class Start>
std::error_code run_until(asio::io_context& io, asio::ip::tcp::socket& socket,
                          Clock::time_point until, bool& timed_out, Start&& start) {
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

}  // namespace strata::transport::tcp
