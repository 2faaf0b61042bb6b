// tests/support/device_staging.hpp — a `Memory` policy of the conformance harness
// (tcp_worker_conformance.hpp) for communicators over device memory: each case's host buffers,
// guards included, are staged in the current device's memory around the call, so that writes
// past a span on the device show in the guards. `exchange(comm, mine, all)` all-gathers the
// ranks' digests in host memory (over a side group).
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include <strata/transport/cuda/device.hpp>

#include "tcp_worker_conformance.hpp"

namespace conformance {

template <class Exchange>
struct DeviceStaging {
  Exchange exchange;

  template <strata::Element T, class Call>
  void run(Buffer<T>& send, Buffer<T>& recv, Call&& call) {
    strata::transport::cuda::DeviceBuffer<T> device_send(send.storage().size());
    strata::transport::cuda::DeviceBuffer<T> device_recv(recv.storage().size());
    device_send.copy_from(send.storage());
    device_recv.copy_from(recv.storage());
    std::forward<Call>(call)(device_send.data() + kGuard, device_recv.data() + kGuard);
    device_send.copy_to(send.storage());
    device_recv.copy_to(recv.storage());
  }
  template <class Comm>
  void all_gather(Comm& comm, std::span<const std::int64_t> mine, std::span<std::int64_t> all) {
    exchange(comm, mine, all);
  }
};

template <class Exchange>
DeviceStaging(Exchange) -> DeviceStaging<Exchange>;

}  // namespace conformance
