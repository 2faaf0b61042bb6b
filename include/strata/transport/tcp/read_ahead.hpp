// strata/transport/tcp/read_ahead.hpp — the bytes a service connection has read from its socket
// and not yet consumed. Both ends of a service (service_server.hpp, service_client.hpp) read up
// to kReadAhead bytes at once while they wait for a frame, so that a small frame, header and
// payload, arrives in one recv(2); what belongs to later reads waits here.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>

namespace strata::transport::tcp {

/// The most a service connection reads from its socket in one recv(2) while it waits for a
/// frame.
inline constexpr std::size_t kReadAhead = 4096;

class ReadAhead {
 public:
  std::size_t buffered() const noexcept { return end_ - begin_; }

  /// The buffered bytes, oldest first.
  std::span<const std::byte> bytes() const noexcept { return {data_.data() + begin_, buffered()}; }

  /// Moves the oldest buffered bytes into `out`, as many as fit; returns how many.
  std::size_t take(std::span<std::byte> out) noexcept {
    const std::size_t n = std::min(out.size(), buffered());
    std::copy_n(data_.begin() + static_cast<std::ptrdiff_t>(begin_), n, out.begin());
    begin_ += n;
    return n;
  }

  /// Drops the oldest `n` buffered bytes (at most buffered()).
  void skip(std::size_t n) noexcept { begin_ += std::min(n, buffered()); }

  /// Where the next recv(2) may write: the free space behind the buffered bytes, which move to
  /// the front first. Empty when kReadAhead bytes are buffered.
  std::span<std::byte> space() noexcept {
    if (begin_ != 0) {
      std::copy(data_.begin() + static_cast<std::ptrdiff_t>(begin_),
                data_.begin() + static_cast<std::ptrdiff_t>(end_), data_.begin());
      end_ -= begin_;
      begin_ = 0;
    }
    return {data_.data() + end_, data_.size() - end_};
  }

  /// `n` bytes were received into space().
  void filled(std::size_t n) noexcept { end_ = std::min(end_ + n, data_.size()); }

 private:
  std::array<std::byte, kReadAhead> data_{};
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

}  // namespace strata::transport::tcp
