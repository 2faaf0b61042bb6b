// strata/transport/nccl/device.hpp — the CUDA pieces an NCCL group holds: the current device
// for a scope, a stream, an event, and a typed buffer of device memory.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_NCCL

#include <cstddef>
#include <span>
#include <utility>

#include <cuda_runtime_api.h>

#include <strata/core/data_type.hpp>
#include <strata/transport/nccl/status.hpp>

namespace strata::transport::nccl {

/// How many CUDA devices this process sees: 0 without a driver or a device (never throws).
inline int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // the runtime keeps the error: clear it for later calls
    return 0;
  }
  return count;
}

/// Makes `device` current for its scope and restores the one before.
class DeviceScope {
 public:
  DeviceScope(int device, int rank, std::string_view operation) {
    check_cuda(cudaGetDevice(&previous_), rank, operation, "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), rank, operation, "cudaSetDevice");
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

/// A non-blocking stream of the current device (it does not wait for the legacy default one).
class Stream {
 public:
  Stream() = default;
  Stream(int rank, std::string_view operation) {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), rank, operation,
               "cudaStreamCreateWithFlags");
  }
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    std::swap(stream_, other.stream_);
    return *this;
  }
  ~Stream() {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// An event without timing (the cheapest to record and query).
class Event {
 public:
  Event() = default;
  Event(int rank, std::string_view operation) {
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), rank, operation,
               "cudaEventCreateWithFlags");
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  ~Event() {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// `count` elements of T in the memory of the current device.
template <Element T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count, int rank = -1,
                        std::string_view operation = "DeviceBuffer")
      : count_(count) {
    if (count > 0)
      check_cuda(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)), rank, operation,
                 "cudaMalloc");
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }

  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return count_; }
  std::span<T> span() const noexcept { return {data_, count_}; }

  /// Copies `host` (at most size() elements) in, and waits for it.
  void copy_from(std::span<const T> host) {
    check_cuda(cudaMemcpy(data_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice), -1,
               "DeviceBuffer", "cudaMemcpy to the device");
  }
  /// Copies the first host.size() elements out, and waits for it.
  void copy_to(std::span<T> host) const {
    check_cuda(cudaMemcpy(host.data(), data_, host.size_bytes(), cudaMemcpyDeviceToHost), -1,
               "DeviceBuffer", "cudaMemcpy from the device");
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace strata::transport::nccl

#endif  // STRATA_HAS_NCCL
