// benchmarks/perf/strata_perf_nccl.cpp — strata-perf's --transport nccl: one thread per GPU of
// this process, rank r on GPU r, each an NcclCommunicator over a LocalCommunicator side group.
//
// Per size, three contenders run on the same devices in the same run, one after the other:
// raw NCCL (the ncclAllReduce & co. an application would call, on the same NCCL communicator
// and stream, then cudaStreamSynchronize), strata with its call check on (the default, whose
// rows are the table) and strata with it off (a second group). Each is timed and checked by
// MeasuredRows, the code every strata-perf run uses; the footer compares their times and busbw.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <perf/measured_rows.hpp>
#include <perf/options.hpp>
#include <perf/report.hpp>
#include <perf/run_info.hpp>
#include <perf/runner.hpp>
#include <perf/sweep.hpp>

#include <strata/config.hpp>

#include "strata_perf_modes.hpp"

#if STRATA_HAS_NCCL
#include <nccl.h>

#include <strata/communicator/local.hpp>
#include <strata/communicator/nccl.hpp>
#include <strata/transport/cuda/device.hpp>
#include <strata/transport/nccl/status.hpp>
#include <strata/transport/nccl/types.hpp>
#endif

namespace strata::perf {

#if STRATA_HAS_NCCL

namespace {

using Nccl = communicator::NcclCommunicator<communicator::LocalCommunicator<>>;

// Raw NCCL on a strata rank's NCCL communicator and stream: what strata is measured against.
// It has what MeasuredRows calls; its bookkeeping goes through the rank's side group.
class RawNccl {
 public:
  static constexpr bool kDeviceMemory = true;

  explicit RawNccl(Nccl& nccl) : nccl_(&nccl) {}
  int rank() const noexcept { return nccl_->rank(); }
  int size() const noexcept { return nccl_->size(); }
  auto& side() noexcept { return nccl_->side(); }

  template <class T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    all_reduce(std::span<const T>(data), data, op);
  }
  template <class T>
  void all_reduce(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    finish(ncclAllReduce(send.data(), recv.data(), recv.size(), type<T>(), op_of(op), comm(),
                         stream()));
  }
  template <class T>
  void broadcast(std::span<T> data, int root) {
    broadcast(std::span<const T>(data), data, root);
  }
  template <class T>
  void broadcast(std::span<const T> send, std::span<T> recv, int root) {
    finish(ncclBroadcast(send.data(), recv.data(), recv.size(), type<T>(), root, comm(), stream()));
  }
  template <class T>
  void reduce(std::span<T> data, ReduceOp op, int root) {
    reduce(std::span<const T>(data), data, op, root);
  }
  template <class T>
  void reduce(std::span<const T> send, std::span<T> recv, ReduceOp op, int root) {
    finish(ncclReduce(send.data(), recv.data(), send.size(), type<T>(), op_of(op), root, comm(),
                      stream()));
  }
  // In place, rank r's block is block r of the output (NCCL's in-place layout, and strata's).
  template <class T>
  void all_gather(std::span<T> data) {
    const std::size_t count = data.size() / static_cast<std::size_t>(size());
    finish(ncclAllGather(data.data() + static_cast<std::size_t>(rank()) * count, data.data(), count,
                         type<T>(), comm(), stream()));
  }
  template <class T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    finish(ncclAllGather(send.data(), recv.data(), send.size(), type<T>(), comm(), stream()));
  }
  template <class T>
  void reduce_scatter(std::span<T> data, ReduceOp op) {
    const std::size_t count = data.size() / static_cast<std::size_t>(size());
    finish(ncclReduceScatter(data.data(), data.data() + static_cast<std::size_t>(rank()) * count,
                             count, type<T>(), op_of(op), comm(), stream()));
  }
  template <class T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    finish(ncclReduceScatter(send.data(), recv.data(), recv.size(), type<T>(), op_of(op), comm(),
                             stream()));
  }
  void barrier() { side().barrier(); }

 private:
  template <class T>
  static ncclDataType_t type() noexcept {
    return transport::nccl::nccl_type(data_type_of<T>);
  }
  // As strata does: NCCL 2.28's ncclAvg on one rank leaves out-of-place outputs partly
  // unwritten (docs/nccl.md), and the mean of one rank is its sum.
  ncclRedOp_t op_of(ReduceOp op) const noexcept {
    return size() == 1 && op == ReduceOp::mean ? ncclSum : transport::nccl::nccl_op(op);
  }
  ncclComm_t comm() const noexcept { return nccl_->native_handle(); }
  cudaStream_t stream() const noexcept { return nccl_->stream(); }

  // The communicator is non-blocking: an enqueue may still be in progress when the call
  // returns, and the stream holds the collective only once it is not.
  void finish(ncclResult_t status) {
    constexpr std::string_view kOperation = "raw NCCL";
    transport::nccl::check_nccl(status, comm(), rank(), kOperation, "the NCCL call");
    while (status == ncclInProgress)
      transport::nccl::check_nccl(ncclCommGetAsyncError(comm(), &status), comm(), rank(),
                                  kOperation, "ncclCommGetAsyncError");
    transport::nccl::check_nccl(status, comm(), rank(), kOperation, "the NCCL call");
    transport::cuda::check_cuda(cudaStreamSynchronize(stream()), rank(), kOperation,
                                "cudaStreamSynchronize");
  }

  Nccl* nccl_;
};

// One size: raw NCCL's row, strata's with the call check on and with it off.
struct Contenders {
  Row raw;
  Row strata;
  Row unchecked;
};

// The footer: strata's added time and its share of raw NCCL's busbw, out of place, per size;
// then the share from 1 MiB up and the added time at the smallest size.
void print_comparison(const std::vector<Contenders>& sizes) {
  fmt::print(
      "#\n# strata against raw NCCL on the same buffers, NCCL communicator and stream (out of "
      "place; time in us, busbw in GB/s)\n"
      "# {:>12} {:>10} {:>10} {:>8} {:>10} {:>8} {:>9} {:>9} {:>7}\n",
      "size", "raw", "strata", "added", "unchecked", "added", "raw bw", "strata bw", "share");
  std::vector<double> shares;
  for (const auto& c : sizes) {
    const double raw = c.raw.out_of_place.time_us;
    const double strata = c.strata.out_of_place.time_us;
    const double unchecked = c.unchecked.out_of_place.time_us;
    const double raw_bw = c.raw.out_of_place.busbw_gbps;
    const double share = raw_bw > 0 ? c.strata.out_of_place.busbw_gbps / raw_bw : 0;
    if (c.raw.bytes >= (std::size_t{1} << 20)) shares.push_back(share);
    fmt::print(
        "# {:>12} {:>10.2f} {:>10.2f} {:>+8.2f} {:>10.2f} {:>+8.2f} {:>9.2f} {:>9.2f} "
        "{:>6.1f}%\n",
        c.raw.bytes, raw, strata, strata - raw, unchecked, unchecked - raw, raw_bw,
        c.strata.out_of_place.busbw_gbps, 100 * share);
  }
  if (!shares.empty()) {
    std::sort(shares.begin(), shares.end());
    fmt::print("# strata's busbw from 1 MiB: {:.1f}% of raw NCCL's at the least, {:.1f}% median\n",
               100 * shares.front(), 100 * shares[shares.size() / 2]);
  }
  if (!sizes.empty()) {
    const auto& first = sizes.front();
    fmt::print("# added at {} B: {:+.2f} us with the call check, {:+.2f} us without\n",
               first.raw.bytes, first.strata.out_of_place.time_us - first.raw.out_of_place.time_us,
               first.unchecked.out_of_place.time_us - first.raw.out_of_place.time_us);
  }
}

// Everything rank `checked.rank()` does; rank 0 reports. Returns 0 when every value was right.
int run_nccl_rank(Nccl& checked, Nccl& unchecked, const Options& options, Reporter* reporter) {
  RunInfo info{options,
               checked.size(),
               "nccl",
               gather_rank_info(checked.side(), fmt::format("thread {:>3} (nccl), CUDA device {}",
                                                            checked.rank(), checked.device())),
               {}};
  if (reporter != nullptr) reporter->begin(info);
  std::vector<Contenders> sizes;
  const Summary summary = visit_data_type(options.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto points = sweep_points(options, sizeof(T), checked.size());
    Progress* progress = reporter != nullptr ? &reporter->progress() : nullptr;
    RawNccl raw(unchecked);
    MeasuredRows<RawNccl, T> raw_rows(raw, options, points, progress);
    MeasuredRows<Nccl, T> strata_rows(checked, options, points, progress);
    MeasuredRows<Nccl, T> unchecked_rows(unchecked, options, points, progress);
    return run_sweep(
        points,
        [&](const SweepPoint& point) {
          Contenders one{raw_rows(point), strata_rows(point), unchecked_rows(point)};
          sizes.push_back(one);
          return one.strata;
        },
        reporter);
  });
  if (reporter != nullptr) print_comparison(sizes);
  const auto wrong = [](const Row& row) {
    return row.out_of_place.ranks_wrong + row.in_place.ranks_wrong;
  };
  std::int64_t others_wrong = 0;
  for (const auto& one : sizes)
    others_wrong += wrong(one.raw) + wrong(one.unchecked);
  return summary.out_of_bounds == 0 && others_wrong == 0 ? 0 : 1;
}

}  // namespace

int run_nccl(const Options& options) {
  const int devices = transport::cuda::device_count();
  if (devices == 0)
    throw CommandLineError("--transport nccl needs a CUDA device, and this process sees none");
  const int ranks = options.ranks.value_or(devices);
  if (ranks < 1 || ranks > devices)
    throw CommandLineError(fmt::format(
        "--ranks {}: NCCL takes one GPU per rank, and this process sees {}", ranks, devices));
  check_against_group(options, ranks);
  Reporter reporter(options);
  auto checked = Nccl::create(ranks, {}, {.check_calls = true});
  auto unchecked = Nccl::create(ranks, {}, {.check_calls = false});
  std::vector<int> status(static_cast<std::size_t>(ranks), 0);
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        const auto i = static_cast<std::size_t>(r);
        try {
          transport::cuda::DeviceScope scope(checked[i].device(), r, "strata-perf");
          status[i] =
              run_nccl_rank(checked[i], unchecked[i], options, r == 0 ? &reporter : nullptr);
        } catch (const std::exception& error) {
          checked[i].abort(error.what());  // the other ranks stop waiting for this one
          unchecked[i].abort(error.what());
          errors[i] = error.what();
          status[i] = kExitFailure;
        }
      });
  }
  std::set<std::string> printed;
  for (const auto& error : errors)
    if (!error.empty() && printed.insert(error).second)
      fmt::print(stderr, "strata-perf: {}\n", error);
  return printed.empty() ? status[0] : kExitFailure;
}

#else

int run_nccl(const Options& /*options*/) {
  throw CommandLineError("--transport nccl: this strata-perf was built without NCCL");
}

#endif

}  // namespace strata::perf
