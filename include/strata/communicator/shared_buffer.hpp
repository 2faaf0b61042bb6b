// strata/communicator/shared_buffer.hpp — memory for collective buffers that the other ranks
// of a host read in place (TcpCommunicator::allocate_shared).
//
// Co-located processes cannot read each other's ordinary memory, so an all-reduce between them
// stages every byte through a shared region and copies every result byte out. Buffers in the
// region itself need neither: the processes run the threads' algorithm on them.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <utility>

namespace strata::communicator {

/// A buffer of a communicator's arena, or ordinary memory where its rank shares no host.
/// Move-only; the memory stays valid while the buffer lives, also past the communicator.
class SharedBuffer {
 public:
  SharedBuffer() = default;
  /// `owner` frees the memory when the buffer goes; `shared`: the peers map it.
  SharedBuffer(std::span<std::byte> bytes, std::shared_ptr<void> owner, bool shared) noexcept
      : bytes_(bytes), owner_(std::move(owner)), shared_(shared) {}
  SharedBuffer(SharedBuffer&& other) noexcept
      : bytes_(std::exchange(other.bytes_, {})),
        owner_(std::move(other.owner_)),
        shared_(std::exchange(other.shared_, false)) {}
  SharedBuffer& operator=(SharedBuffer&& other) noexcept {
    bytes_ = std::exchange(other.bytes_, {});
    owner_ = std::move(other.owner_);
    shared_ = std::exchange(other.shared_, false);
    return *this;
  }
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  /// `bytes` of ordinary memory, zeroed, aligned as an arena's buffers: what a rank that shares
  /// memory with nobody gets, and a buffer's stand-in where the arena has no room.
  static SharedBuffer ordinary(std::size_t bytes) {
    if (bytes == 0) return {};
    void* memory = ::operator new(bytes, kAlignment);
    std::memset(memory, 0, bytes);
    std::shared_ptr<void> owner(memory, [](void* p) { ::operator delete(p, kAlignment); });
    return SharedBuffer(std::span(static_cast<std::byte*>(memory), bytes), std::move(owner), false);
  }

  std::span<std::byte> bytes() const noexcept { return bytes_; }
  /// The buffer as elements of T, as many as fit (it starts on a 64-byte boundary).
  template <class T>
  std::span<T> as() const noexcept {
    return {reinterpret_cast<T*>(bytes_.data()), bytes_.size() / sizeof(T)};
  }
  /// Whether the other ranks of this host map it (false: ordinary memory).
  bool shared() const noexcept { return shared_; }

 private:
  static constexpr std::align_val_t kAlignment{64};

  std::span<std::byte> bytes_;
  std::shared_ptr<void> owner_;
  bool shared_ = false;
};

}  // namespace strata::communicator
