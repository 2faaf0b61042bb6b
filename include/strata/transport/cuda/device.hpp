// strata/transport/cuda/device.hpp — the CUDA pieces strata holds: the current device for a
// scope, a stream, an event, and typed buffers of device memory and of pinned host memory.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_CUDA

#include <chrono>
#include <cstddef>
#include <span>
#include <string_view>
#include <thread>
#include <utility>

#include <cuda_runtime_api.h>

#include <strata/core/data_type.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/cuda/status.hpp>

namespace strata::transport::cuda {

/// How many CUDA devices this process sees: 0 without a driver or a device (never throws).
inline int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // the runtime keeps the error: clear it for later calls
    return 0;
  }
  return count;
}

/// The CUDA device of local replica `local_replica` when a process runs its replicas on GPUs:
/// replica r on device r modulo the devices this process sees (CUDA_VISIBLE_DEVICES picks and
/// orders them). @throws ConfigurationError when the process sees no device.
inline int replica_device(int local_replica, std::string_view operation = "Strategy") {
  const int devices = device_count();
  if (devices == 0)
    throw ConfigurationError(-1, operation, "no CUDA device is visible to this process",
                             "run on a machine with a GPU and its driver (check nvidia-smi and "
                             "CUDA_VISIBLE_DEVICES), or use a CPU strategy");
  return local_replica % devices;
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

/// Waits until `event` has completed, calling `watch()` about every millisecond (it throws to
/// stop waiting: a deadline, a failed peer). Spinning first catches short work at once; after
/// 10 ms the wait sleeps between queries so that it does not hold a core.
template <class Watch>
void wait_for(cudaEvent_t event, int rank, std::string_view operation, Watch&& watch) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  auto next_check = started;
  for (int spins = 0;; ++spins) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) raise_cuda(status, rank, operation, "the device's work");
    if (spins < 1024) continue;
    const auto now = Clock::now();
    if (now >= next_check) {
      watch();
      next_check = now + std::chrono::milliseconds(1);
    }
    if (now - started < std::chrono::milliseconds(10))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

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

/// Page-locked host memory mapped into every device's address space: kernels on any GPU read
/// and write it through the same pointer (unified addressing), and copies to and from it run
/// at full bus speed. For std::vector and the host copy of CentralStorage's variables.
template <class T>
struct PinnedAllocator {
  using value_type = T;
  PinnedAllocator() = default;
  template <class U>
  PinnedAllocator(const PinnedAllocator<U>& /*other*/) noexcept {}  // NOLINT: an allocator

  T* allocate(std::size_t count) {
    void* memory = nullptr;
    check_cuda(
        cudaHostAlloc(&memory, count * sizeof(T), cudaHostAllocPortable | cudaHostAllocMapped), -1,
        "PinnedAllocator", "cudaHostAlloc");
    return static_cast<T*>(memory);
  }
  void deallocate(T* memory, std::size_t /*count*/) noexcept { (void)cudaFreeHost(memory); }

  template <class U>
  bool operator==(const PinnedAllocator<U>& /*other*/) const noexcept {
    return true;
  }
};

}  // namespace strata::transport::cuda

#endif  // STRATA_HAS_CUDA
