// Tests of strata/communicator/reduce_to_one_device.hpp on a GPU: replicas are threads of this
// process, rank r on CUDA device r modulo the devices (on a one-GPU machine, every rank shares
// it, which this communicator allows).
//   - conformance of every collective × op × element type × count {0, 1, 7, 1023, 65539,
//     1 M + 3} × root × in/out of place against the collective reference, world sizes 1-4,
//     results bit-identical on every rank;
//   - buffers in pinned host memory as well as device memory; asynchronous calls;
//   - a rank that never calls: TimeoutError on the others; mismatched counts: MismatchError on
//     every rank; abort: PeerFailureError naming the rank; the group refuses later calls.
// Without a CUDA device the test is skipped (exit 77).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <span>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <strata/config.hpp>

#if STRATA_HAS_CUDA
#include <cuda_runtime_api.h>

#include <strata/communicator/local.hpp>
#include <strata/communicator/reduce_to_one_device.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/cuda/device.hpp>

#include "device_staging.hpp"
#include "tcp_worker_conformance.hpp"
#endif

namespace {

constexpr int kSkipped = 77;

// Ends the process as skipped: doctest has no run-time skip.
[[noreturn]] void skip(const char* reason) {
  std::fprintf(stderr, "skipped: %s\n", reason);
  std::exit(kSkipped);  // NOLINT(concurrency-mt-unsafe)
}

#if STRATA_HAS_CUDA

using strata::communicator::ReduceToOneDevice;
using strata::transport::cuda::DeviceBuffer;

void need_a_device() {
  if (strata::transport::cuda::device_count() == 0) skip("no CUDA device");
}

// Runs body(rank, communicator) on one thread per rank, each with its rank's device current;
// returns what each rank threw (null if nothing).
template <class Body>
std::vector<std::exception_ptr> on_every_rank(std::vector<ReduceToOneDevice>& group, Body body) {
  std::vector<std::exception_ptr> errors(group.size());
  std::vector<std::jthread> threads;
  for (std::size_t r = 0; r < group.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        strata::transport::cuda::DeviceScope scope(group[r].device(), static_cast<int>(r), "test");
        body(static_cast<int>(r), group[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  threads.clear();
  return errors;
}

template <class E>
bool raised(const std::exception_ptr& error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const E&) {
    return true;
  } catch (...) {
  }
  return false;
}

#endif

}  // namespace

#if STRATA_HAS_CUDA

TEST_CASE("every collective matches the reference on the GPU, 1 to 4 replicas") {
  need_a_device();
  using strata::communicator::Collective;
  const std::size_t counts[] = {0, 1, 7, 1023, 65539, 1048579};
  constexpr Collective kEvery[] = {Collective::all_reduce, Collective::broadcast,
                                   Collective::reduce, Collective::all_gather,
                                   Collective::reduce_scatter};
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    auto group = ReduceToOneDevice::create(n);
    auto digests = strata::communicator::LocalCommunicator<>::create(n);
    std::vector<conformance::Totals> totals(static_cast<std::size_t>(n));
    const auto errors = on_every_rank(group, [&](int r, ReduceToOneDevice& comm) {
      conformance::Clock::time_point began;
      auto& side = digests[static_cast<std::size_t>(r)];
      conformance::run_phase(
          comm, "reduce_to_one_device", kEvery, counts, began, totals[static_cast<std::size_t>(r)],
          conformance::DeviceStaging{
              [&side](ReduceToOneDevice&, auto mine, auto all) { side.all_gather(mine, all); }});
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      const auto& mine = totals[static_cast<std::size_t>(r)];
      CHECK_FALSE(errors[static_cast<std::size_t>(r)]);
      CHECK(mine.cases > 0);
      CHECK(mine.failed == 0);
      CHECK(mine.not_identical == 0);
    }
  }
}

TEST_CASE("pinned host memory works as a buffer, and asynchronous calls complete in order") {
  need_a_device();
  constexpr int kRanks = 3;
  constexpr std::size_t kCount = 4099;
  auto group = ReduceToOneDevice::create(kRanks);
  const auto errors = on_every_rank(group, [&](int r, ReduceToOneDevice& comm) {
    std::vector<float, strata::transport::cuda::PinnedAllocator<float>> host(kCount);
    std::iota(host.begin(), host.end(), static_cast<float>(r));
    DeviceBuffer<float> device(kCount);
    device.copy_from(std::span<const float>(host.data(), host.size()));
    // Out of place from device memory into pinned host memory, then in place on the device.
    comm.all_reduce(std::span<const float>(device.data(), kCount), std::span(host),
                    strata::ReduceOp::sum);
    auto first = comm.all_reduce_async(device.span(), strata::ReduceOp::max);
    auto second = comm.broadcast_async(device.span(), 0);
    first.wait();
    second.wait();
    std::vector<float> back(kCount);
    device.copy_to(std::span(back));
    for (std::size_t i = 0; i < kCount; ++i) {
      // Sum over ranks of (i + r) = 3i + 3; the max over ranks is i + 2.
      REQUIRE(host[i] == static_cast<float>(3 * i + 3));
      REQUIRE(back[i] == static_cast<float>(i + 2));
    }
  });
  for (const auto& error : errors)
    CHECK_FALSE(error);
}

TEST_CASE("a rank that never calls: the others time out; the group refuses later calls") {
  need_a_device();
  auto group = ReduceToOneDevice::create(3, {.timeout = std::chrono::milliseconds(500)});
  const auto errors = on_every_rank(group, [&](int r, ReduceToOneDevice& comm) {
    if (r == 2) return;  // never calls
    DeviceBuffer<float> data(1000);
    comm.all_reduce(data.span(), strata::ReduceOp::sum);
  });
  CHECK(raised<strata::TimeoutError>(errors[0]));
  CHECK(raised<strata::TimeoutError>(errors[1]));
  CHECK_FALSE(errors[2]);
  DeviceBuffer<float> data(10);
  CHECK_THROWS(group[2].all_reduce(data.span(), strata::ReduceOp::sum));
}

TEST_CASE("mismatched counts: MismatchError on every rank") {
  need_a_device();
  auto group = ReduceToOneDevice::create(2);
  const auto errors = on_every_rank(group, [&](int r, ReduceToOneDevice& comm) {
    DeviceBuffer<float> data(r == 0 ? 1000 : 999);
    comm.all_reduce(data.span(), strata::ReduceOp::sum);
  });
  CHECK(raised<strata::MismatchError>(errors[0]));
  CHECK(raised<strata::MismatchError>(errors[1]));
}

TEST_CASE("abort fails every rank with PeerFailureError naming the rank") {
  need_a_device();
  auto group = ReduceToOneDevice::create(3);
  const auto errors = on_every_rank(group, [&](int r, ReduceToOneDevice& comm) {
    if (r == 1) {
      comm.abort("out of memory in the replica");
      return;
    }
    DeviceBuffer<float> data(1000);
    comm.all_reduce(data.span(), strata::ReduceOp::sum);
  });
  for (const int r : {0, 2}) {
    CAPTURE(r);
    REQUIRE(raised<strata::PeerFailureError>(errors[static_cast<std::size_t>(r)]));
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const strata::Error& error) {
      CHECK(error.root_cause().rank == 1);
    }
  }
}

TEST_CASE("devices this process lacks and empty groups are usage errors") {
  need_a_device();
  const int missing[] = {strata::transport::cuda::device_count()};
  CHECK_THROWS_AS(ReduceToOneDevice::create(std::span<const int>(missing)), strata::UsageError);
  CHECK_THROWS_AS(ReduceToOneDevice::create(0), strata::UsageError);
}

#else

TEST_CASE("built without CUDA") {
  skip("strata was built without CUDA (STRATA_HAS_CUDA=0)");
}

#endif
