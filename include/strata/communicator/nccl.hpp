// strata/communicator/nccl.hpp — the NCCL communicator: collectives over GPU memory.
//
// NCCL moves the data; a CPU communicator of the same ranks (the side group: TcpCommunicator
// across processes, LocalCommunicator among the threads of one process) does what NCCL cannot:
// it carries the unique id that forms the NCCL group, checks before each collective that every
// rank calls the same one (NCCL would hang or reinterpret bytes, nccl#1417), and tells a rank
// that a peer died or failed. Every call has the communicator's deadline: the NCCL group is
// non-blocking (ncclConfig_t::blocking = 0), and a waiting call polls its completion event,
// NCCL's asynchronous error and the side group until the deadline, then aborts the NCCL group
// and raises the same typed errors as the TCP communicator.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_NCCL

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <strata/cluster/resolve.hpp>
#include <strata/communicator/collective.hpp>
#include <strata/communicator/communicator.hpp>
#include <strata/communicator/detail/call_agreement.hpp>
#include <strata/communicator/detail/collective_api.hpp>
#include <strata/communicator/detail/serial_executor.hpp>
#include <strata/communicator/detail/teardown_together.hpp>
#include <strata/communicator/options.hpp>
#include <strata/communicator/work.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/transport/cuda/device.hpp>
#include <strata/transport/nccl/collective.hpp>
#include <strata/transport/nccl/status.hpp>

namespace strata::communicator {

/// Settings of an NCCL group beyond CommunicatorOptions.
struct NcclOptions {
  /// Before each collective, every rank checks over the side group that all ranks call the
  /// same one (kind, count, element type, op, root): a mismatch is a MismatchError on every
  /// rank instead of a hang or wrong results. It costs one small side all-gather per call
  /// (see benchmarks/RESULTS.md); turn it off only for calls known to agree.
  bool check_calls = true;
  /// The caller's stream: each collective starts after the work queued on it so far, and work
  /// queued on it later starts after the collective. Null: the legacy default stream.
  cudaStream_t stream = nullptr;
};

/// One rank of an NCCL group, on one CUDA device; buffers are device memory of that device.
///
/// `Side` is a CPU communicator of the same ranks in the same order (TcpCommunicator across
/// processes, LocalCommunicator among threads). The constructor forms the NCCL group: rank 0
/// makes the unique id, the side group carries it, every rank joins within the deadline.
///
/// Blocking calls return once the result is in the output buffer; `_async` calls run in call
/// order on a thread of the communicator and their Work completes with the collective. A
/// failure on any rank (a timeout, a mismatch, a dead peer, `abort`) fails the group on every
/// rank: its calls raise, the NCCL group is aborted, and later calls refuse.
///
/// @code
///   strata::communicator::TcpCommunicator side(membership);
///   strata::communicator::NcclCommunicator nccl(std::move(side), /*device=*/0);
///   nccl.all_reduce(std::span(gradients_on_device, n), strata::ReduceOp::mean);
/// @endcode
template <class Side>
class NcclCommunicator : public detail::CollectiveApi<NcclCommunicator<Side>> {
 public:
  static constexpr std::string_view kName = "nccl";
  static constexpr int kMaxSize = std::numeric_limits<int>::max();
  static constexpr bool kSpansProcesses = Side::kSpansProcesses;
  static constexpr bool kDeviceMemory = true;

  /// The group of `replicas` threads of one process (a side group that does not span
  /// processes, e.g. LocalCommunicator<>), rank r on CUDA device
  /// transport::cuda::replica_device(r), formed by one thread per rank: what GpuMirroredStrategy
  /// runs on. @throws UsageError for more replicas than devices (NCCL takes one device per
  /// rank); the constructor's errors otherwise.
  static std::vector<NcclCommunicator> create(
      int replicas, CommunicatorOptions options = {},
      NcclOptions nccl = {}) requires(!Side::kSpansProcesses) {
    check_devices(replicas, replicas);
    return form_group(Side::create(replicas, options), 0, nccl, options);
  }

  /// This process's `local_replicas` ranks of the group over every process of `cluster` (a side
  /// group that spans processes, e.g. HierarchicalCommunicator<>): what
  /// GpuMultiWorkerMirroredStrategy runs on. The processes of one host share its GPUs in the
  /// order of their local rank: this one's replicas take the devices after those of the
  /// processes before it (cluster.local_rank), modulo the devices it sees.
  /// @throws UsageError for more local replicas than devices; the side group's and the
  /// constructor's errors otherwise.
  static std::vector<NcclCommunicator> create(
      int local_replicas, cluster::ResolvedCluster& cluster, CommunicatorOptions options = {},
      NcclOptions nccl = {}) requires(Side::kSpansProcesses) {
    check_devices(local_replicas, local_replicas);
    return form_group(Side::create(local_replicas, cluster, options),
                      cluster.local_rank * local_replicas, nccl, options);
  }

  /// True on the process that writes checkpoints (the side group's chief).
  bool is_chief() const noexcept requires(Side::kSpansProcesses) { return state_->side.is_chief(); }

  /// Combines one value per process across the processes, in host memory (Strategy::reduce).
  template <Element T>
  void combine_across_workers(std::span<T> values, ReduceOp op) requires(Side::kSpansProcesses) {
    state_->side.combine_across_workers(values, op);
  }

  /// Forms the NCCL group of `side`'s ranks, this rank on CUDA device `device`.
  /// @throws TimeoutError when not every rank joins by the deadline; ConfigurationError for a
  /// device this process lacks; PeerFailureError when a peer fails meanwhile.
  NcclCommunicator(Side side, int device, NcclOptions nccl = {}, CommunicatorOptions options = {})
      : state_(std::make_unique<State>(std::move(side), device, nccl, options)) {
    form(*state_);
  }
  NcclCommunicator(NcclCommunicator&&) noexcept = default;
  NcclCommunicator& operator=(NcclCommunicator&& other) noexcept {
    if (this != &other) {
      release();
      state_ = std::move(other.state_);
      teardown_ = std::move(other.teardown_);
    }
    return *this;
  }
  ~NcclCommunicator() { release(); }

  int rank() const noexcept { return state_->rank; }
  int size() const noexcept { return state_->size; }
  /// The CUDA device of this rank.
  int device() const noexcept { return state_->device; }
  const CommunicatorOptions& options() const noexcept { return state_->options; }
  const NcclOptions& nccl_options() const noexcept { return state_->nccl; }
  /// The side group (CPU communicator of the same ranks).
  Side& side() noexcept { return state_->side; }
  /// The stream the collectives run on.
  cudaStream_t stream() const noexcept { return state_->stream.get(); }
  /// NCCL's handle of this rank's communicator, for calls strata does not wrap (null once the
  /// group has failed). Calls through it bypass strata's checks and deadlines.
  ncclComm_t native_handle() const noexcept { return state_->comm; }

  /// Fails the whole group from any thread: every pending and later call on every rank throws
  /// PeerFailureError carrying `reason`.
  void abort(std::string_view reason) noexcept { fail(abort_failure(rank(), reason)); }

  /// Fails the whole group from any thread because of `error` (see fail_group): the call in
  /// flight on this rank raises it, and so does every rank through the side group.
  void fail(const std::exception_ptr& error) noexcept { state_->fail(error); }

 private:
  friend class detail::CollectiveApi<NcclCommunicator<Side>>;
  friend struct detail::CallAccess;
  using Clock = std::chrono::steady_clock;

  struct State {
    State(Side s, int dev, const NcclOptions& n, const CommunicatorOptions& o)
        : side(std::move(s)),
          rank(side.rank()),
          size(side.size()),
          device(dev),
          nccl(n),
          options(o) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;

    // Aborts the NCCL group unless it finished healthy; the CUDA objects go after it.
    ~State() {
      executor.reset();  // finishes the queued calls
      if (comm == nullptr) return;
      int previous = 0;
      (void)cudaGetDevice(&previous);
      (void)cudaSetDevice(device);
      if (!failed() && finalize())
        (void)ncclCommDestroy(comm);
      else
        (void)ncclCommAbort(comm);
      (void)cudaSetDevice(previous);
    }

    // Finalizes (flushes) a healthy group within the deadline; false if it did not.
    bool finalize() noexcept {
      if (ncclCommFinalize(comm) == ncclSuccess) {
        const auto deadline = Deadline::after(options.timeout);
        ncclResult_t status = ncclInProgress;
        while (status == ncclInProgress && !deadline.expired()) {
          if (ncclCommGetAsyncError(comm, &status) != ncclSuccess) return false;
          if (status == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        return status == ncclSuccess;
      }
      return false;
    }

    bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

    // The first failure wins; the side group tells the peers. Safe from any thread: the NCCL
    // group itself is aborted by the thread in the call (or the destructor), never here.
    void fail(const std::exception_ptr& error) noexcept {
      {
        std::lock_guard lock(failure_mutex);
        if (failed_.load(std::memory_order_relaxed)) return;
        failure = error;
        failed_.store(true, std::memory_order_release);
      }
      fail_group(side, error);
    }

    // Rethrows the group's failure as seen by `operation` on this rank.
    [[noreturn]] void raise_failure(std::string_view operation) const {
      std::exception_ptr error;
      {
        std::lock_guard lock(failure_mutex);
        error = failure;
      }
      raise_root_cause(error, rank, operation,
                       "the group failed: re-create the communicator (every rank) to continue");
    }

    Side side;
    int rank;
    int size;
    int device;
    NcclOptions nccl;
    CommunicatorOptions options;
    ncclComm_t comm = nullptr;
    transport::cuda::Stream stream;
    transport::cuda::Event ready;  // the caller's stream reached the call
    transport::cuda::Event done;   // the collective finished
    transport::cuda::DeviceBuffer<std::uint8_t> barrier_byte;
    std::uint64_t sequence = 0;
    mutable std::mutex failure_mutex;
    std::exception_ptr failure;
    std::atomic<bool> failed_{false};
    bool aborted = false;
    std::unique_ptr<detail::SerialExecutor> executor = std::make_unique<detail::SerialExecutor>();
  };

  static void check_devices(int replicas, int wanted) {
    const int devices = transport::cuda::device_count();
    if (replicas < 1 || wanted > devices)
      throw UsageError(-1, "NcclCommunicator::create",
                       fmt::format("{} replica(s) on {} CUDA device(s): NCCL takes one device per "
                                   "rank",
                                   replicas, devices),
                       "ask for 1 to one replica per GPU, or use ReduceToOneDevice "
                       "(GpuCentralStorageStrategy), which shares a GPU among replicas");
  }

  // The ranks of one process in one group finalize (or abort) together.
  using Teardown = detail::TeardownTogether<State>;

  // Forms the NCCL group of `sides` (this process's ranks of the side group), local rank r on
  // device (first_device + r) modulo the devices, one thread per rank: each rank's
  // constructor is a collective of the side group.
  static std::vector<NcclCommunicator> form_group(std::vector<Side> sides, int first_device,
                                                  const NcclOptions& nccl,
                                                  const CommunicatorOptions& options) {
    const int devices = transport::cuda::device_count();
    std::vector<std::optional<NcclCommunicator>> formed(sides.size());
    std::vector<std::exception_ptr> errors(sides.size());
    {
      std::vector<std::jthread> threads;
      for (std::size_t r = 0; r < sides.size(); ++r)
        threads.emplace_back([&, r] {
          try {
            formed[r].emplace(std::move(sides[r]), (first_device + static_cast<int>(r)) % devices,
                              nccl, options);
          } catch (...) {
            errors[r] = std::current_exception();
          }
        });
    }
    for (const auto& error : errors)
      if (error) std::rethrow_exception(error);
    auto teardown = std::make_shared<Teardown>(formed.size());
    std::vector<NcclCommunicator> group;
    for (auto& communicator : formed) {
      communicator->teardown_ = teardown;
      group.push_back(std::move(*communicator));
    }
    return group;
  }

  [[noreturn]] void fail_usage(Collective kind, std::string_view what,
                               std::string_view what_to_do) {
    UsageError error(rank(), to_string(kind), what, what_to_do);
    state_->fail(std::make_exception_ptr(error));  // the peers would wait for this rank
    throw error;
  }

  void run(const CollectiveCall& call, const CallOptions& options) {
    state_->executor->drain();  // keep call order with earlier asynchronous calls
    execute(*state_, call, options);
  }

  Work submit(const CollectiveCall& call, const CallOptions& options) {
    State* state = state_.get();
    return state->executor->submit([state, call, options] { execute(*state, call, options); });
  }

  static std::chrono::milliseconds left(const Deadline& deadline) noexcept {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline.time_point() - Clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  }

  // Forms the NCCL group: rank 0's unique id reaches every rank over the side group, then the
  // non-blocking init is polled until it completes or the deadline passes.
  static void form(State& state) {
    constexpr std::string_view kOperation = "rendezvous";
    const auto deadline = Deadline::after(state.options.timeout);
    try {
      const int devices = transport::cuda::device_count();
      if (state.device < 0 || state.device >= devices)
        throw ConfigurationError(
            state.rank, kOperation,
            fmt::format("CUDA device {} does not exist: this process sees {} device(s)",
                        state.device, devices),
            "give each rank a device index below the count (CUDA_VISIBLE_DEVICES)");
      transport::cuda::DeviceScope scope(state.device, state.rank, kOperation);
      ncclUniqueId id{};
      if (state.rank == 0)
        transport::nccl::check_nccl(ncclGetUniqueId(&id), nullptr, state.rank, kOperation,
                                    "ncclGetUniqueId");
      std::span<std::uint8_t> id_bytes(reinterpret_cast<std::uint8_t*>(id.internal),
                                       sizeof id.internal);
      state.side.broadcast(id_bytes, 0, CallOptions{left(deadline)});
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      transport::nccl::check_nccl(
          ncclCommInitRankConfig(&state.comm, state.size, id, state.rank, &config), state.comm,
          state.rank, kOperation, "ncclCommInitRankConfig");
      await_nccl(state, kOperation, deadline, "forming the NCCL group");
      state.stream = transport::cuda::Stream(state.rank, kOperation);
      state.ready = transport::cuda::Event(state.rank, kOperation);
      state.done = transport::cuda::Event(state.rank, kOperation);
      state.barrier_byte = transport::cuda::DeviceBuffer<std::uint8_t>(1, state.rank, kOperation);
    } catch (...) {
      state.fail(std::current_exception());
      abort_nccl(state);
      throw;
    }
  }

  // Polls a non-blocking NCCL operation (init, an enqueue) until it leaves ncclInProgress.
  static void await_nccl(State& state, std::string_view operation, const Deadline& deadline,
                         std::string_view what) {
    for (;;) {
      ncclResult_t status = ncclSuccess;
      transport::nccl::check_nccl(ncclCommGetAsyncError(state.comm, &status), state.comm,
                                  state.rank, operation, "ncclCommGetAsyncError");
      if (status == ncclSuccess) return;
      if (status != ncclInProgress) raise_async(state, status, operation, deadline, what);
      watch(state, operation, deadline, what);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // Runs `side_call` on the side group: its errors become this call's, root cause kept.
  template <class SideCall>
  static void on_side(State& state, std::string_view operation, SideCall&& side_call) {
    try {
      side_call();
    } catch (const Error&) {
      raise_root_cause(std::current_exception(), state.rank, operation);
    }
  }

  // What a waiting call checks besides its own completion: an abort, the side group (a dead
  // or failed peer), the deadline.
  static void watch(State& state, std::string_view operation, const Deadline& deadline,
                    std::string_view what) {
    if (state.failed()) state.raise_failure(operation);
    if constexpr (requires { state.side.check_peers(); })
      on_side(state, operation, [&] { state.side.check_peers(); });
    if (deadline.expired())
      throw TimeoutError(state.rank, operation,
                         fmt::format("{} did not complete within {} ms on CUDA device {}; NCCL "
                                     "cannot tell which rank it waits for (a rank that stalls "
                                     "or calls other collectives)",
                                     what, deadline.budget().count(), state.device));
  }

  // NCCL's network transport sees a dead peer too, but cannot name it: the side group is given
  // a moment to say who it was before NCCL's own error is raised.
  [[noreturn]] static void raise_async(State& state, ncclResult_t status,
                                       std::string_view operation, const Deadline& deadline,
                                       std::string_view what) {
    const auto until = Clock::now() + std::chrono::milliseconds(200);
    while (Clock::now() < until) {
      watch(state, operation, deadline, what);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    transport::nccl::raise_nccl(status, state.comm, state.rank, operation, what);
  }

  static void abort_nccl(State& state) noexcept {
    if (state.comm == nullptr || state.aborted) return;
    state.aborted = true;
    (void)ncclCommAbort(state.comm);
    state.comm = nullptr;
  }

  static void execute(State& state, const CollectiveCall& call, const CallOptions& options) {
    const std::string_view operation = to_string(call.kind);
    if (state.failed()) state.raise_failure(operation);
    const auto deadline = Deadline::after(options.timeout.value_or(state.options.timeout));
    const std::uint64_t sequence = state.sequence++;
    try {
      if (state.nccl.check_calls) check_agreement(state, call, sequence, deadline);
      transport::cuda::DeviceScope scope(state.device, state.rank, operation);
      enqueue(state, call, deadline);
      const std::string what = fmt::format("{} (collective #{})", describe(call), sequence);
      transport::cuda::wait_for(state.done.get(), state.rank, operation, [&] {
        ncclResult_t status = ncclSuccess;
        (void)ncclCommGetAsyncError(state.comm, &status);
        if (status != ncclSuccess && status != ncclInProgress)
          raise_async(state, status, operation, deadline, what);
        watch(state, operation, deadline, what);
      });
    } catch (...) {
      state.fail(std::current_exception());
      abort_nccl(state);
      throw;
    }
  }

  // Every rank gathers every rank's description of this call over the side group.
  static void check_agreement(State& state, const CollectiveCall& call, std::uint64_t sequence,
                              const Deadline& deadline) {
    detail::check_call_agreement(state.rank, state.size, call, sequence, [&](auto mine, auto all) {
      on_side(state, to_string(call.kind),
              [&] { state.side.all_gather(mine, all, CallOptions{left(deadline)}); });
    });
  }

  // Queues the collective on the communicator's stream, after the caller's stream, and the
  // caller's stream after it.
  static void enqueue(State& state, const CollectiveCall& call, const Deadline& deadline) {
    namespace cuda = transport::cuda;
    namespace nccl = transport::nccl;
    const std::string_view operation = to_string(call.kind);
    const cudaStream_t stream = state.stream.get();
    cuda::check_cuda(cudaEventRecord(state.ready.get(), state.nccl.stream), state.rank, operation,
                     "cudaEventRecord on the caller's stream");
    cuda::check_cuda(cudaStreamWaitEvent(stream, state.ready.get(), 0), state.rank, operation,
                     "cudaStreamWaitEvent");
    const ncclResult_t status =
        nccl::enqueue_collective(call, state.comm, stream, state.size, state.barrier_byte.data());
    nccl::check_nccl(status, state.comm, state.rank, operation, "enqueueing the collective");
    if (status == ncclInProgress)
      await_nccl(state, operation, deadline, "enqueueing the collective");
    cuda::check_cuda(cudaEventRecord(state.done.get(), stream), state.rank, operation,
                     "cudaEventRecord");
    cuda::check_cuda(cudaStreamWaitEvent(state.nccl.stream, state.done.get(), 0), state.rank,
                     operation, "cudaStreamWaitEvent on the caller's stream");
  }

  // A rank of a group that `create` formed hands its state to the group's teardown, which
  // destroys every rank of this process at once when the last one goes.
  void release() noexcept {
    if (teardown_ && state_) teardown_->adopt(std::move(state_));
    state_.reset();
    teardown_.reset();
  }

  std::unique_ptr<State> state_;
  std::shared_ptr<Teardown> teardown_;  // null for a rank constructed on its own
};

}  // namespace strata::communicator

#endif  // STRATA_HAS_NCCL
