// benchmarks/perf/peers/mpi_perf.cpp — strata-perf-mpi: MPI_Allreduce measured the way
// strata-perf measures strata, for `strata-perf --compare`. The caller starts the ranks:
//
//   mpirun --allow-run-as-root --oversubscribe -n 2 --mca pml ob1 --mca btl tcp,self
//          --mca btl_tcp_if_include lo strata-perf-mpi all_reduce -b 8 -e 64M --algo tcp --csv -
//   mpirun --allow-run-as-root --oversubscribe -n 2 strata-perf-mpi all_reduce --algo default
//
// The first runs Open MPI's TCP byte transfer layer over loopback, the second its default (shared
// memory, vader, between ranks of one host). Tested here with Open MPI 4.1.4 (Debian 12), as
// root, on a host with lo and one other interface: --allow-run-as-root is needed as root (or
// OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1), --oversubscribe when -n exceeds the
// cores; btl_tcp_if_include lo (and oob_tcp_if_include lo) keep TCP on loopback: it also
// worked here without them, since Open MPI then picks among all interfaces, lo or not. Open
// MPI's options can also be given as OMPI_MCA_<name>=<value> variables (OMPI_MCA_btl=tcp,self).
// Open MPI 4.1.4's AVX reduction component (op/avx) gets int8 and uint8 sums wrong here (about
// half the elements, as if it saturated instead of wrapping around), so -d int8/uint8 with -o sum
// or avg reports wrong values (exit status 1) unless it is turned off: mpirun --mca op ^avx ...
//
// It takes strata-perf's flags (peer_options.hpp); --algo is only the label of the CSV's and the
// table's "algo" column (default "mpi"); --ranks, if given, must equal the MPI world size. Each
// rank runs strata-perf's MeasuredRows on MpiComm (peer_rank.hpp): out of place is
// MPI_Allreduce(send, recv), in place MPI_Allreduce(MPI_IN_PLACE, buffer), nccl-tests' pair;
// rank 0 prints the table and the CSV (transport "mpi"). MPI has no deadline of its own: a hung
// rank hangs the run (mpirun --timeout SECONDS bounds it).
// Exit status (every rank's, which mpirun returns): 0 every value right; 1 wrong values; 2 bad
// command line; 3 an MPI call failed (MPI_Abort with 3).
#include <climits>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>

#include <perf/bind.hpp>
#include <perf/options.hpp>
#include <perf/peers/peer_options.hpp>
#include <perf/peers/peer_rank.hpp>
#include <perf/peers/peer_report.hpp>

#include <strata/core/error.hpp>

namespace strata::perf::peers {
namespace {

constexpr std::string_view kTool = "strata-perf-mpi";

void check(int code, std::string_view call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(fmt::format("{} failed: {}", call, std::string_view(text, length)));
}

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, std::int8_t>) return MPI_INT8_T;
  if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
  if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  return MPI_DATATYPE_NULL;  // half and bfloat16: rejected by peer_options.hpp
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean:  // summed, then divided (divide_for_mean)
      return MPI_SUM;
    case ReduceOp::product:
      return MPI_PROD;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
  }
  return MPI_SUM;
}

int mpi_count(std::size_t count) {
  if (count > static_cast<std::size_t>(INT_MAX))
    throw std::length_error(fmt::format("MPI counts are int: {} elements", count));
  return static_cast<int>(count);
}

/// MPI_COMM_WORLD as the communicator MeasuredRows expects (peer_rank.hpp).
class MpiComm : public AllReduceOnly {
 public:
  using AllReduceOnly::all_gather;
  MpiComm() {
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  void barrier() { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  template <Element T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    check(MPI_Allreduce(MPI_IN_PLACE, data.data(), mpi_count(data.size()), mpi_type<T>(),
                        mpi_op(op), MPI_COMM_WORLD),
          "MPI_Allreduce (in place)");
    if (op == ReduceOp::mean) divide_for_mean(data, size_);
  }

  template <Element T>
  void all_reduce(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check(MPI_Allreduce(send.data(), recv.data(), mpi_count(send.size()), mpi_type<T>(), mpi_op(op),
                        MPI_COMM_WORLD),
          "MPI_Allreduce");
    if (op == ReduceOp::mean) divide_for_mean(recv.first(send.size()), size_);
  }

  template <class T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    check(MPI_Allgather(send.data(), mpi_count(send.size_bytes()), MPI_BYTE, recv.data(),
                        mpi_count(send.size_bytes()), MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Allgather");
  }

 private:
  int rank_ = 0;
  int size_ = 0;
};

std::string library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "mpi";
  std::string_view version(text, static_cast<std::size_t>(length));
  version = version.substr(0, version.find_first_of(",\n"));  // "Open MPI v4.1.4"
  return std::string(version);
}

int run(const PeerCommandLine& line, MpiComm& comm) {
  const Options& options = line.options;
  if (options.ranks && *options.ranks != comm.size())
    throw CommandLineError(
        fmt::format("--ranks {} but MPI started {} ranks", *options.ranks, comm.size()));
  check_against_group(options, comm.size());
  // Only rank 0 opens the CSV file; every rank must learn that it could not, or the others
  // would wait for it in the first collective.
  std::optional<PeerReporter> reporter;
  std::string open_error;
  if (comm.rank() == 0) {
    try {
      reporter.emplace(options, PeerRun{std::string(kTool), "mpi"});
    } catch (const CommandLineError& error) {
      open_error = error.what();
    }
  }
  int failed = open_error.empty() ? 0 : 1;
  check(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  if (failed != 0)
    throw CommandLineError(open_error.empty() ? "rank 0 cannot write --csv" : open_error);
  return run_peer_rank(comm, options, line.algorithm.value_or("mpi"),
                       fmt::format("mpi ({}), {}", library_version(), describe_affinity()),
                       reporter ? &*reporter : nullptr);
}

}  // namespace
}  // namespace strata::perf::peers

int main(int argc, char** argv) {
  using namespace strata::perf;
  using namespace strata::perf::peers;
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    fmt::print(stderr, "{}: MPI_Init failed\n", kTool);
    return kExitFailure;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  int status = 0;
  try {
    // Every rank parses the same command line and fails the same way: no collective is left
    // waiting for a rank that gave up.
    const PeerCommandLine line = parse_peer_command_line(args);
    if (line.options.help) {
      if (rank == 0)
        fmt::print("{}", peer_usage(kTool, "MPI_Allreduce",
                                    "Start it under mpirun (mpirun -n 2 strata-perf-mpi ...).",
                                    "LABEL (the algo column; default: mpi)"));
    } else {
      MpiComm comm;
      status = run(line, comm);
    }
  } catch (const CommandLineError& error) {
    if (rank == 0)
      fmt::print(stderr, "{}: {}\nrun '{} --help' for the flags\n", kTool, error.what(), kTool);
    status = kExitUsage;
  } catch (const std::exception& error) {
    // Another rank may be waiting in a collective: end them all.
    fmt::print(stderr, "{}: rank {}: {}\n", kTool, rank, error.what());
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, kExitFailure);
    return kExitFailure;
  }
  MPI_Finalize();
  return status;
}
