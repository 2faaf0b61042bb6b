// benchmarks/perf/measured_rows.hpp — the row producer that measures and checks one collective
// on a strata communicator (or a peer's adapter that looks like one, peers/peer_rank.hpp).
//
// Per size and placement (out of place, then in place), `MeasuredRows`:
//   1. fills the inputs; makes WARMUP untimed calls; meets the other ranks at a barrier;
//   2. times ITERS calls on a steady clock; the row's time is the slowest rank's average
//      (an all-reduce max: nccl-tests' `-a 3`; its default, `-a 1`, averages over the ranks,
//      which for a collective that ends together on every rank differs little), and
//      algbw/busbw follow nccl-tests' formulas;
//   3. with the check on: refills the inputs for a new seed, poisons the outputs and a guard
//      after them, makes one call, and counts the elements that differ from the reference
//      (check.hpp) and the guard elements it overwrote; the counts are summed over the ranks
//      (an all-reduce sum).
// Every call goes through the communicator, so every wait has its deadline
// (CommunicatorOptions::timeout). A communicator of device memory (NcclCommunicator) gets device
// buffers: inputs are filled on the host and copied over before the calls, outputs copied back
// for the check; the run's own all-reduces go through its side group, in host memory.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <perf/check.hpp>
#include <perf/nccl_format.hpp>
#include <perf/options.hpp>
#include <perf/output.hpp>
#include <perf/sweep.hpp>

#include <strata/communicator/collective.hpp>
#include <strata/communicator/replica_group.hpp>
#include <strata/communicator/shared_buffer.hpp>
#include <strata/config.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

#if STRATA_HAS_CUDA
#include <strata/transport/cuda/device.hpp>
#endif

namespace strata::perf {

/// Times and checks `options.collective` on `comm` with elements of type T.
template <class Comm, Element T>
class MeasuredRows {
 public:
  /// `points` sizes the buffers (allocated once, for the largest point); `progress` may be null
  /// (ranks other than 0).
  MeasuredRows(Comm& comm, const Options& options, const std::vector<SweepPoint>& points,
               Progress* progress)
      : comm_(comm), options_(options), progress_(progress), points_(points.size()) {
    std::size_t send = 0;
    std::size_t recv = 0;
    for (const auto& point : points) {
      send = std::max(send, point.sizes.send_count);
      // In place, reduce_scatter reduces its whole input in the output buffer.
      recv = std::max({recv, point.sizes.recv_count, point.sizes.send_count});
    }
    bool allocated = false;
    if constexpr (requires { comm.allocate_shared(std::size_t{}); }) {
      if (options.shared_buffers) {
        shared_send_ = comm.allocate_shared(send * sizeof(T));
        shared_recv_ = comm.allocate_shared((recv + kGuard) * sizeof(T));
        send_ = shared_send_.template as<T>().first(send);
        recv_ = shared_recv_.template as<T>().first(recv + kGuard);
        allocated = true;
      }
    }
    if (!allocated) {
      send_storage_.resize(send);
      recv_storage_.resize(recv + kGuard);
      send_ = send_storage_;
      recv_ = recv_storage_;
    }
    if constexpr (kDevice) {
      device_send_ = DeviceBuffer(send_.size());
      device_recv_ = DeviceBuffer(recv_.size());
    }
  }

  Row operator()(const SweepPoint& point) {
    Row row;
    row.bytes = point.sizes.bytes;
    row.count = point.sizes.param_count;
    row.type = std::string(to_string(data_type_of<T>));
    const Collective kind = options_.collective;
    row.redop = communicator::reduces(kind) ? std::string(nccl_op_name(options_.op)) : "none";
    row.root = communicator::has_root(kind) ? options_.root : -1;
    row.out_of_place = measure(point, /*in_place=*/false);
    row.in_place = measure(point, /*in_place=*/true);
    return row;
  }

 private:
  Measurement measure(const SweepPoint& point, bool in_place) {
    const Collective kind = options_.collective;
    const int n = comm_.size();
    show(point, in_place, "timing");

    // Timing runs on valid inputs (not poison: NaN or denormal arithmetic could be slower).
    const std::uint64_t timing_seed = 2 * (2 * point.index + (in_place ? 1 : 0));
    fill(point, in_place, DataCheck<T>(timing_seed, options_.op, n), /*poison=*/false);
    to_device(point);
    for (int i = 0; i < options_.warmup_iters; ++i)
      call(point, in_place);
    host_comm().barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < options_.iters; ++i)
      call(point, in_place);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    double seconds = elapsed.count() / options_.iters;
    host_comm().all_reduce(std::span<double>(&seconds, 1), ReduceOp::max);

    Measurement m;
    m.time_us = seconds * 1e6;
    m.algbw_gbps = algorithm_bandwidth_gbps(point.sizes.bytes, seconds);
    m.busbw_gbps = bus_bandwidth_gbps(kind, n, point.sizes.bytes, seconds);
    if (!options_.check) return m;

    show(point, in_place, "checking");
    const DataCheck<T> check(timing_seed + 1, options_.op, n);
    fill(point, in_place, check, /*poison=*/true);
    to_device(point);
    call(point, in_place);
    from_device(point);
    const std::int64_t wrong = count_wrong(point, in_place, check);
    std::int64_t totals[2] = {wrong, wrong != 0 ? 1 : 0};
    host_comm().all_reduce(std::span<std::int64_t>(totals), ReduceOp::sum);
    m.wrong = totals[0];
    m.ranks_wrong = totals[1];
    return m;
  }

  void show(const SweepPoint& point, bool in_place, std::string_view what) {
    if (progress_ == nullptr) return;
    progress_->show(fmt::format("[{} {} {}/{}] {} {}", to_string(options_.collective),
                                format_size(point.sizes.bytes), point.index + 1, points_,
                                in_place ? "in-place" : "out-of-place", what));
  }

  // Inputs where the call reads them, and (for a check) poison wherever it must write.
  void fill(const SweepPoint& point, bool in_place, const DataCheck<T>& check, bool poison) {
    const int rank = comm_.rank();
    const auto& s = point.sizes;
    const std::size_t c = s.param_count;
    // Poison what the call may write and a guard after it, not the whole buffer, which is
    // sized for the sweep's largest point: writing 256 MiB before each check slowed the
    // timing of the points after it (2 ranks, 64 KiB: 36.5 against 26.9 µs).
    if (poison)
      std::memset(static_cast<void*>(recv_.data()), kPoisonByte,
                  (output_elements(point) + kGuard) * sizeof(T));
    if (!in_place) {
      for (std::size_t i = 0; i < s.send_count; ++i)
        send_[i] = check.input(rank, i);
      return;
    }
    if (options_.collective == Collective::all_gather) {
      // In place, rank r's contribution is block r of the output.
      T* own = recv_.data() + static_cast<std::size_t>(rank) * c;
      for (std::size_t i = 0; i < c; ++i)
        own[i] = check.input(rank, i);
      return;
    }
    for (std::size_t i = 0; i < s.send_count; ++i)
      recv_[i] = check.input(rank, i);
  }

  // The communicator of the run's own bookkeeping (the barrier, the slowest time, the wrong
  // counts), which works on host memory: a communicator of device memory has its side group.
  auto& host_comm() {
    if constexpr (kDevice)
      return comm_.side();
    else
      return comm_;
  }

  // Copies what the point's calls read (the inputs, and the poisoned output with its guard) to
  // the device buffers; nothing for host memory.
  void to_device(const SweepPoint& point) {
    if constexpr (kDevice) {
      device_send_.copy_from(std::span<const T>(send_.data(), point.sizes.send_count));
      device_recv_.copy_from(std::span<const T>(recv_.data(), output_elements(point) + kGuard));
    }
  }
  // Copies the point's output and its guard back for the check.
  void from_device(const SweepPoint& point) {
    if constexpr (kDevice)
      device_recv_.copy_to(std::span<T>(recv_.data(), output_elements(point) + kGuard));
  }

  void call(const SweepPoint& point, bool in_place) {
    const auto& s = point.sizes;
    const ReduceOp op = options_.op;
    const int root = options_.root;
    T* const send_data = kDevice ? device_data(device_send_) : send_.data();
    T* const recv_data = kDevice ? device_data(device_recv_) : recv_.data();
    const std::span<const T> send(send_data, s.send_count);
    const std::span<T> recv(recv_data, s.recv_count);
    const std::span<T> data(recv_data, std::max(s.send_count, s.recv_count));
    switch (options_.collective) {
      case Collective::all_reduce:
        in_place ? comm_.all_reduce(data, op) : comm_.all_reduce(send, recv, op);
        break;
      case Collective::broadcast:
        in_place ? comm_.broadcast(data, root) : comm_.broadcast(send, recv, root);
        break;
      case Collective::reduce:
        in_place ? comm_.reduce(data, op, root) : comm_.reduce(send, recv, op, root);
        break;
      case Collective::all_gather:
        in_place ? comm_.all_gather(data) : comm_.all_gather(send, recv);
        break;
      case Collective::reduce_scatter:
        in_place ? comm_.reduce_scatter(data, op) : comm_.reduce_scatter(send, recv, op);
        break;
      case Collective::barrier:
        comm_.barrier();
        break;
    }
  }

  // Elements of the output buffer a call may write: in place, the larger of its two views.
  static std::size_t output_elements(const SweepPoint& point) noexcept {
    return std::max(point.sizes.send_count, point.sizes.recv_count);
  }

  // Elements of this rank's output that differ from the reference, and of the guard after it
  // that the call overwrote.
  std::int64_t count_wrong(const SweepPoint& point, bool in_place, const DataCheck<T>& check) {
    const int rank = comm_.rank();
    const int n = comm_.size();
    const std::size_t c = point.sizes.param_count;
    const T* out = recv_.data();
    std::int64_t wrong = 0;
    auto tally = [&](bool ok) { wrong += ok ? 0 : 1; };
    for (std::size_t i = 0; i < kGuard; ++i)
      tally(DataCheck<T>::untouched(out[output_elements(point) + i]));
    switch (options_.collective) {
      case Collective::all_reduce:
        for (std::size_t i = 0; i < c; ++i)
          tally(check.reduced_ok(out[i], i));
        break;
      case Collective::broadcast:
        for (std::size_t i = 0; i < c; ++i)
          tally(check.copy_ok(out[i], options_.root, i));
        break;
      case Collective::reduce:
        if (rank == options_.root) {
          for (std::size_t i = 0; i < c; ++i)
            tally(check.reduced_ok(out[i], i));
        } else if (in_place) {  // a non-root's buffer is its input, untouched
          for (std::size_t i = 0; i < c; ++i)
            tally(check.copy_ok(out[i], rank, i));
        } else {  // a non-root's output is left alone
          for (std::size_t i = 0; i < c; ++i)
            tally(DataCheck<T>::untouched(out[i]));
        }
        break;
      case Collective::all_gather:
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < c; ++i)
            tally(check.copy_ok(out[static_cast<std::size_t>(r) * c + i], r, i));
        break;
      case Collective::reduce_scatter: {
        // Rank r's output is block r of the reduction; in place it is block r of the buffer.
        const std::size_t offset = static_cast<std::size_t>(rank) * c;
        const T* block = in_place ? out + offset : out;
        for (std::size_t i = 0; i < c; ++i)
          tally(check.reduced_ok(block[i], offset + i));
        break;
      }
      case Collective::barrier:
        break;
    }
    return wrong;
  }

  // Poisoned elements after each point's output: a write past it counts as wrong.
  static constexpr std::size_t kGuard = 64;
  static constexpr bool kDevice = communicator::kDeviceMemory<Comm>;

#if STRATA_HAS_CUDA
  using DeviceBuffer = transport::cuda::DeviceBuffer<T>;
  static T* device_data(const DeviceBuffer& buffer) noexcept {
    return buffer.data();
  }
#else
  struct DeviceBuffer {};
  static T* device_data(const DeviceBuffer& /*buffer*/) noexcept {
    return nullptr;
  }
#endif

  Comm& comm_;
  const Options& options_;
  Progress* progress_;
  std::size_t points_;
  // The buffers: vectors, or the arena's with --shared-buffers.
  std::vector<T> send_storage_;
  std::vector<T> recv_storage_;
  communicator::SharedBuffer shared_send_;
  communicator::SharedBuffer shared_recv_;
  std::span<T> send_;
  std::span<T> recv_;
  // Device memory of the rank's device, for a communicator of device memory.
  DeviceBuffer device_send_;
  DeviceBuffer device_recv_;
};

}  // namespace strata::perf
