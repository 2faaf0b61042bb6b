// strata/communicator/reduce_to_one_device.hpp — collectives among the replicas (threads) of
// one process whose buffers live on GPUs: TF's ReductionToOneDevice.
//
// Every reduction copies the other ranks' data to one device (rank 0's, or the root's), reduces
// it there with one CUDA kernel in rank order, and copies the result to every rank that
// receives it. It needs no NCCL, takes any number of replicas per GPU, and every rank gets the bits
// that strata::reduce_n gives on the host. The ranks meet on the host as LocalCommunicator's do
// (transport/local/): a posted call, checked for agreement, then the device work, then a last
// meeting so that no rank returns while a peer may still copy from or into its buffers.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_CUDA

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <strata/communicator/collective.hpp>
#include <strata/communicator/communicator.hpp>
#include <strata/communicator/detail/collective_api.hpp>
#include <strata/communicator/detail/serial_executor.hpp>
#include <strata/communicator/options.hpp>
#include <strata/communicator/work.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/cuda/device.hpp>
#include <strata/transport/cuda/kernels.hpp>
#include <strata/transport/cuda/status.hpp>
#include <strata/transport/local/group.hpp>
#include <strata/transport/local/link.hpp>

namespace strata::communicator {

/// One rank of a group of replicas of one process, each on a CUDA device (several ranks may
/// share one). Buffers are memory the rank's device can reach: its device memory, or pinned
/// host memory (transport::cuda::PinnedAllocator).
///
/// Each call starts after the work queued so far on the legacy default stream of the rank's
/// device, and returns once its results are in place. `_async` calls run in call order on a
/// thread of the communicator. A failure on any rank (a timeout, a mismatch, a CUDA error,
/// `abort`) fails the group on every rank.
///
/// @code
///   auto group = strata::communicator::ReduceToOneDevice::create(4);  // replica r on GPU r % n
///   // on replica r's thread, with `gradient` in the memory of group[r].device():
///   group[r].all_reduce(std::span(gradient, count), strata::ReduceOp::mean);
/// @endcode
class ReduceToOneDevice : public detail::CollectiveApi<ReduceToOneDevice> {
  friend class detail::CollectiveApi<ReduceToOneDevice>;
  friend struct detail::CallAccess;

 public:
  static constexpr std::string_view kName = "reduce_to_one_device";
  static constexpr int kMaxSize = std::numeric_limits<int>::max();
  static constexpr bool kSpansProcesses = false;
  static constexpr bool kDeviceMemory = true;

  /// Creates a group of `size` ranks, rank r on CUDA device transport::cuda::replica_device(r).
  /// @throws UsageError when size < 1; ConfigurationError when no device is visible.
  static std::vector<ReduceToOneDevice> create(int size, CommunicatorOptions options = {}) {
    if (size < 1)
      throw UsageError(-1, "ReduceToOneDevice::create",
                       fmt::format("a group needs at least one rank, got size {}", size),
                       "pass the number of replicas (threads) that will take part");
    std::vector<int> devices;
    for (int r = 0; r < size; ++r)
      devices.push_back(transport::cuda::replica_device(r, "ReduceToOneDevice::create"));
    return create(std::span<const int>(devices), options);
  }

  /// Creates a group of devices.size() ranks, rank r on CUDA device devices[r].
  /// @throws UsageError when `devices` is empty or names a device this process lacks.
  static std::vector<ReduceToOneDevice> create(std::span<const int> devices,
                                               CommunicatorOptions options = {}) {
    const int visible = transport::cuda::device_count();
    if (devices.empty())
      throw UsageError(-1, "ReduceToOneDevice::create", "a group needs at least one rank",
                       "pass one CUDA device per replica");
    for (const int device : devices)
      if (device < 0 || device >= visible)
        throw UsageError(
            -1, "ReduceToOneDevice::create",
            fmt::format("CUDA device {} does not exist: this process sees {}", device, visible),
            "pass device indices below the count (CUDA_VISIBLE_DEVICES)");
    auto group = std::make_shared<Group>(static_cast<int>(devices.size()), options);
    std::vector<ReduceToOneDevice> ranks;
    for (std::size_t r = 0; r < devices.size(); ++r)
      ranks.push_back(ReduceToOneDevice(group, static_cast<int>(r), devices[r]));
    return ranks;
  }

  ReduceToOneDevice(ReduceToOneDevice&&) noexcept = default;
  ReduceToOneDevice& operator=(ReduceToOneDevice&&) noexcept = default;
  ReduceToOneDevice(const ReduceToOneDevice&) = delete;
  ReduceToOneDevice& operator=(const ReduceToOneDevice&) = delete;
  ~ReduceToOneDevice() = default;  // waits for this rank's pending asynchronous calls

  int rank() const noexcept { return endpoint_->rank; }
  int size() const noexcept { return endpoint_->group->rendezvous.size(); }
  /// The CUDA device of this rank.
  int device() const noexcept { return endpoint_->device; }
  const CommunicatorOptions& options() const noexcept { return endpoint_->group->options; }

  /// Fails the whole group from any thread: every pending and later call on every rank throws
  /// PeerFailureError carrying `reason`.
  void abort(std::string_view reason) noexcept { fail(abort_failure(rank(), reason)); }

  /// Fails the whole group from any thread because of `error` (see fail_group).
  void fail(const std::exception_ptr& error) noexcept { endpoint_->group->rendezvous.fail(error); }

  /// Raises the group's failure if another rank failed it.
  void check_peers() const {
    if (endpoint_->group->rendezvous.failed())
      endpoint_->group->rendezvous.raise_failure(rank(), "check_peers");
  }

 private:
  struct Group {
    Group(int size, const CommunicatorOptions& opts) : rendezvous(size), options(opts) {}
    transport::local::Group rendezvous;
    CommunicatorOptions options;
  };

  // Heap-held so that queued asynchronous calls keep a stable address when the communicator
  // is moved; the executor is declared last, so it finishes pending calls first.
  struct Endpoint {
    Endpoint(std::shared_ptr<Group> g, int r, int d) : group(std::move(g)), rank(r), device(d) {
      transport::cuda::DeviceScope scope(device, rank, "ReduceToOneDevice::create");
      stream = transport::cuda::Stream(rank, "ReduceToOneDevice::create");
      ready = transport::cuda::Event(rank, "ReduceToOneDevice::create");
      done = transport::cuda::Event(rank, "ReduceToOneDevice::create");
    }
    std::shared_ptr<Group> group;
    int rank;
    int device;
    std::uint64_t round = 0;
    transport::cuda::Stream stream;
    transport::cuda::Event ready;  // the caller's stream reached the call
    transport::cuda::Event done;   // this rank's device work finished
    // On the rank that reduces: the other ranks' data side by side (a slot per rank), then
    // the reduced result.
    transport::cuda::DeviceBuffer<std::uint8_t> staging;
    detail::SerialExecutor executor;
  };

  ReduceToOneDevice(std::shared_ptr<Group> group, int rank, int device)
      : endpoint_(std::make_unique<Endpoint>(std::move(group), rank, device)) {}

  [[noreturn]] void fail_usage(Collective kind, std::string_view what,
                               std::string_view what_to_do) {
    UsageError error(rank(), to_string(kind), what, what_to_do);
    endpoint_->group->rendezvous.fail(std::make_exception_ptr(error));
    throw error;
  }

  void run(const CollectiveCall& call, const CallOptions& options) {
    endpoint_->executor.drain();  // keep call order with earlier asynchronous calls
    execute(*endpoint_, call, options);
  }

  Work submit(const CollectiveCall& call, const CallOptions& options) {
    Endpoint* endpoint = endpoint_.get();
    return endpoint->executor.submit(
        [endpoint, call, options] { execute(*endpoint, call, options); });
  }

  static void execute(Endpoint& endpoint, const CollectiveCall& call, const CallOptions& options) {
    auto& rendezvous = endpoint.group->rendezvous;
    const std::string_view operation = to_string(call.kind);
    if (rendezvous.failed()) rendezvous.raise_failure(endpoint.rank, operation);
    const Deadline deadline =
        Deadline::after(options.timeout.value_or(endpoint.group->options.timeout));
    const std::uint64_t round = endpoint.round++;
    const auto watch = [&] {
      if (rendezvous.failed()) rendezvous.raise_failure(endpoint.rank, operation);
      if (deadline.expired())
        throw TimeoutError(endpoint.rank, operation,
                           fmt::format("{} did not finish on CUDA device {} within {} ms",
                                       describe(call), endpoint.device, deadline.budget().count()));
    };
    transport::cuda::DeviceScope scope(endpoint.device, endpoint.rank, operation);
    try {
      // Peers read and write this rank's buffers from their streams: the work the caller
      // queued on them must be done first.
      check(cudaEventRecord(endpoint.ready.get(), nullptr), endpoint, operation,
            "cudaEventRecord on the default stream");
      transport::cuda::wait_for(endpoint.ready.get(), endpoint.rank, operation, watch);
    } catch (...) {
      rendezvous.fail(std::current_exception());
      throw;
    }
    rendezvous.call(round, endpoint.rank) = call;
    transport::local::Link link(rendezvous, round, endpoint.rank, deadline, operation);
    link.open_transfer();  // every rank has posted its call
    try {
      transport::local::check_agreement(link);
      if (move_data(endpoint, link, call)) {
        check(cudaEventRecord(endpoint.done.get(), endpoint.stream.get()), endpoint, operation,
              "cudaEventRecord");
        transport::cuda::wait_for(endpoint.done.get(), endpoint.rank, operation, watch);
      }
      if (call.kind != Collective::barrier) link.sync();
    } catch (...) {
      rendezvous.fail(std::current_exception());
      rendezvous.end_transfer(/*failed=*/true);
      throw;
    }
    rendezvous.end_transfer(/*failed=*/false);
  }

  // Queues this rank's part of the collective on its stream; false when it has none.
  static bool move_data(Endpoint& endpoint, const transport::local::Link& link,
                        const CollectiveCall& call) {
    const int n = link.size();
    const int rank = endpoint.rank;
    const std::size_t bytes = call.count * size_of(call.type);
    switch (call.kind) {
      case Collective::all_reduce:
        if (rank != 0) return false;
        reduce_here(endpoint, link, call, call.count, call.recv);
        for (int peer = 1; peer < n; ++peer)
          copy(endpoint, link.peer_call(peer).recv, call.recv, bytes);
        return true;
      case Collective::reduce:
        if (rank != call.root) return false;
        reduce_here(endpoint, link, call, call.count, call.recv);
        return true;
      case Collective::reduce_scatter: {
        if (rank != 0) return false;
        // `count` is each rank's share: the reduced whole goes after the ranks' inputs.
        const std::size_t total = call.count * static_cast<std::size_t>(n);
        auto* result = staging(endpoint, (static_cast<std::size_t>(n) + 1) * total, call) +
                       static_cast<std::size_t>(n) * total * size_of(call.type);
        reduce_here(endpoint, link, call, total, result);
        for (int peer = 0; peer < n; ++peer)
          copy(endpoint, link.peer_call(peer).recv, result + static_cast<std::size_t>(peer) * bytes,
               bytes);
        return true;
      }
      case Collective::broadcast:
        if (rank != call.root) return false;
        for (int peer = 0; peer < n; ++peer)
          copy(endpoint, link.peer_call(peer).recv, call.send, bytes);
        return true;
      case Collective::all_gather: {
        auto* out = static_cast<std::uint8_t*>(call.recv);
        for (int peer = 0; peer < n; ++peer)
          copy(endpoint, out + static_cast<std::size_t>(peer) * bytes, link.peer_call(peer).send,
               bytes);
        return true;
      }
      case Collective::barrier:
        return false;
    }
    return false;
  }

  // Copies the other ranks' `count` input elements side by side into this rank's staging
  // buffer (slot r for rank r) and reduces them with this rank's own input, read where it is,
  // in rank order, into `out`.
  static void reduce_here(Endpoint& endpoint, const transport::local::Link& link,
                          const CollectiveCall& call, std::size_t count, void* out) {
    const int n = link.size();
    const std::size_t bytes = count * size_of(call.type);
    std::uint8_t* slots = staging(endpoint, static_cast<std::size_t>(n) * count, call);
    for (int peer = 0; peer < n; ++peer)
      if (peer != endpoint.rank)
        copy(endpoint, slots + static_cast<std::size_t>(peer) * bytes, link.peer_call(peer).send,
             bytes);
    namespace kernels = transport::cuda::kernels;
    check(kernels::reduce_slots(static_cast<kernels::Element>(call.type),
                                static_cast<kernels::Op>(call.op), out, slots,
                                static_cast<std::size_t>(n), count, call.send,
                                static_cast<std::size_t>(endpoint.rank), endpoint.stream.get()),
          endpoint, to_string(call.kind), "the reduction kernel");
  }

  // At least `count` elements of the call's type in this rank's staging buffer.
  static std::uint8_t* staging(Endpoint& endpoint, std::size_t count, const CollectiveCall& call) {
    const std::size_t bytes = count * size_of(call.type);
    if (endpoint.staging.size() < bytes)
      endpoint.staging =
          transport::cuda::DeviceBuffer<std::uint8_t>(bytes, endpoint.rank, to_string(call.kind));
    return endpoint.staging.data();
  }

  static void copy(Endpoint& endpoint, void* to, const void* from, std::size_t bytes) {
    if (to == from || bytes == 0) return;
    // cudaMemcpyDefault: unified addressing tells the devices (or pinned host memory) apart.
    check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, endpoint.stream.get()), endpoint,
          "copy", "cudaMemcpyAsync between the replicas' buffers");
  }

  static void check(cudaError_t status, const Endpoint& endpoint, std::string_view operation,
                    std::string_view what) {
    transport::cuda::check_cuda(status, endpoint.rank, operation, what);
  }

  std::unique_ptr<Endpoint> endpoint_;
};

// The kernels take strata's element and reduction codes as they are.
static_assert(static_cast<int>(transport::cuda::kernels::Element::float16) ==
                  static_cast<int>(DataType::float16) &&
              static_cast<int>(transport::cuda::kernels::Element::float64) ==
                  static_cast<int>(DataType::float64) &&
              static_cast<int>(transport::cuda::kernels::Element::int64) ==
                  static_cast<int>(DataType::int64));
static_assert(static_cast<int>(transport::cuda::kernels::Op::mean) ==
                  static_cast<int>(ReduceOp::mean) &&
              static_cast<int>(transport::cuda::kernels::Op::max) ==
                  static_cast<int>(ReduceOp::max));

}  // namespace strata::communicator

#endif  // STRATA_HAS_CUDA
