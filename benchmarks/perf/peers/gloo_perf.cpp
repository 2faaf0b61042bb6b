// benchmarks/perf/peers/gloo_perf.cpp — strata-perf-gloo: Gloo's all-reduce algorithms measured
// the way strata-perf measures strata, for `strata-perf --compare`:
//
//   strata-perf-gloo all_reduce -b 8 -e 64M -f 2 --ranks 4 --algo all --csv -
//
// It takes strata-perf's flags (peer_options.hpp). --algo picks Gloo's algorithm: ring,
// ring_chunked, halving_doubling, bcube, or all (the default: the four one after another, each
// its own table and block of CSV rows). The parent forks --ranks processes (default 2) before any
// Gloo state exists (fork_ranks.hpp); they meet through a gloo::rendezvous::FileStore in a fresh
// temporary directory (a PrefixStore per algorithm, each with its own full mesh) over Gloo's TCP
// transport on 127.0.0.1, and run strata-perf's MeasuredRows on GlooComm (peer_rank.hpp). Rank 0
// prints the table and the CSV (transport "gloo-tcp", algo the Gloo algorithm's name).
//
// Gloo's all-reduces are in place. In-place columns time the algorithm object's run() on the
// buffer; out-of-place columns time a copy of the input into the output buffer followed by the
// same in-place run() on it (what a caller with separate buffers pays). The algorithm objects
// are built once per buffer and size (buffer registration is Gloo's setup, not its all-reduce),
// during the warm-up calls, after a barrier that frees the previous size's object safely; with
// -w 0 the first timed call includes that setup. Small sizes: every Gloo message is read by
// its TCP device thread (epoll), which then wakes the waiting caller; Open MPI's ranks poll.
// Here (2 cores, shared) that is ~100-300 us per small all-reduce for Gloo, ~15 us for MPI.
//
// Deadlines: every Gloo call has the context timeout, STRATA_TIMEOUT (default 60s); the whole
// run has STRATA_PERF_DEADLINE (default 30m), after which the parent kills the ranks.
// Exit status: 0 every value right; 1 wrong values; 2 bad command line; 3 a rank failed.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <typeindex>
#include <utility>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <perf/bind.hpp>
#include <perf/options.hpp>
#include <perf/output.hpp>
#include <perf/peers/fork_ranks.hpp>
#include <perf/peers/peer_options.hpp>
#include <perf/peers/peer_rank.hpp>
#include <perf/peers/peer_report.hpp>

#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>

namespace strata::perf::peers {
namespace {

constexpr std::string_view kTool = "strata-perf-gloo";
constexpr int kDefaultRanks = 2;

enum class GlooAlgorithm : std::uint8_t { ring, ring_chunked, halving_doubling, bcube };

constexpr GlooAlgorithm kAllAlgorithms[] = {GlooAlgorithm::ring, GlooAlgorithm::ring_chunked,
                                            GlooAlgorithm::halving_doubling, GlooAlgorithm::bcube};

constexpr std::string_view to_string(GlooAlgorithm algorithm) noexcept {
  switch (algorithm) {
    case GlooAlgorithm::ring:
      return "ring";
    case GlooAlgorithm::ring_chunked:
      return "ring_chunked";
    case GlooAlgorithm::halving_doubling:
      return "halving_doubling";
    case GlooAlgorithm::bcube:
      return "bcube";
  }
  return "invalid";
}

// Gloo's AllreduceBcube computes wrong sums unless the number of ranks is a power of its base,
// 2 (seen here with 3, 5 and 6 ranks; its documentation asks only for a multiple of the base).
bool bcube_supports(int ranks) noexcept {
  return ranks > 0 && (ranks & (ranks - 1)) == 0;
}

std::vector<GlooAlgorithm> algorithms_from(const std::optional<std::string>& name, int ranks) {
  if (!name || *name == "all") {
    std::vector<GlooAlgorithm> all(std::begin(kAllAlgorithms), std::end(kAllAlgorithms));
    if (!bcube_supports(ranks)) {
      std::erase(all, GlooAlgorithm::bcube);
      fmt::print(stderr,
                 "{}: bcube skipped: Gloo's bcube is wrong unless the number of ranks is "
                 "a power of 2 ({} is not)\n",
                 kTool, ranks);
    }
    return all;
  }
  for (const GlooAlgorithm algorithm : kAllAlgorithms) {
    if (*name != to_string(algorithm)) continue;
    if (algorithm == GlooAlgorithm::bcube && !bcube_supports(ranks))
      throw CommandLineError(fmt::format(
          "--algo bcube needs a power of 2 ranks (Gloo's bcube gives wrong sums otherwise), "
          "not {}",
          ranks));
    return {algorithm};
  }
  throw CommandLineError(fmt::format(
      "unknown Gloo algorithm '{}': use ring, ring_chunked, halving_doubling, bcube or all",
      *name));
}

template <class T>
const gloo::ReductionFunction<T>* reduction_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean:  // summed, then divided (divide_for_mean)
      return gloo::ReductionFunction<T>::sum;
    case ReduceOp::product:
      return gloo::ReductionFunction<T>::product;
    case ReduceOp::min:
      return gloo::ReductionFunction<T>::min;
    case ReduceOp::max:
      return gloo::ReductionFunction<T>::max;
  }
  return gloo::ReductionFunction<T>::sum;
}

/// Gloo's all-to-all barrier, which also waits until its own notifications have left: after
/// it, every rank has finished whatever it called before, so no message of an earlier call is
/// still on its way (Gloo's algorithms do not all wait for their last sends, and destroying an
/// algorithm object whose send is still queued corrupts the connection).
class FlushingBarrier final : public gloo::BarrierAllToAll {
 public:
  using gloo::BarrierAllToAll::BarrierAllToAll;
  void run_and_flush() {
    run();
    for (auto& buffer : sendBuffers_)
      buffer->waitSend();
  }
};

/// Gloo as the communicator MeasuredRows expects (peer_rank.hpp): every all-reduce runs the
/// chosen Gloo algorithm; barrier is Gloo's all-to-all barrier, all_gather Gloo's allgather.
class GlooComm : public AllReduceOnly {
 public:
  using AllReduceOnly::all_gather;
  GlooComm(std::shared_ptr<gloo::Context> context, GlooAlgorithm algorithm)
      : context_(std::move(context)), algorithm_(algorithm), barrier_(context_) {}

  int rank() const noexcept { return context_->rank; }
  int size() const noexcept { return context_->size; }

  void barrier() { barrier_.run_and_flush(); }

  /// Frees the algorithm objects once no rank uses them; call on every rank before the context
  /// goes away.
  void close() {
    barrier();
    cache_.clear();
  }

  template <Element T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    if (data.empty()) return;
    algorithm_for(data, op).run();
    if (op == ReduceOp::mean) divide_for_mean(data, size());
  }

  template <Element T>
  void all_reduce(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    std::memcpy(static_cast<void*>(recv.data()), send.data(), send.size_bytes());
    all_reduce(recv.first(send.size()), op);
  }

  template <class T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    gloo::AllgatherOptions options(context_);
    options.setInput(const_cast<T*>(send.data()), send.size());  // Gloo only reads it
    options.setOutput(recv.data(), recv.size());
    options.setTag(next_tag());
    gloo::allgather(options);
  }

 private:
  struct Key {
    std::type_index type;
    ReduceOp op;
    const void* data;
    std::size_t count;
    bool operator==(const Key&) const = default;
  };
  struct Cached {
    Key key;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };
  // One object per (type, op, buffer), rebuilt when the count changes; every rank makes the same
  // calls, so every rank builds and frees the same objects in the same order (Gloo's slots
  // match, and the barrier before a free is met by all).
  static constexpr std::size_t kMaxCached = 8;

  template <Element T>
  gloo::Algorithm& algorithm_for(std::span<T> data, ReduceOp op) {
    const Key key{typeid(T), op, data.data(), data.size()};
    for (auto& cached : cache_)
      if (cached.key == key) return *cached.algorithm;
    const auto stale = [&](const Cached& cached) {
      return cached.key.type == key.type && cached.key.op == key.op && cached.key.data == key.data;
    };
    const bool full = cache_.size() >= kMaxCached;
    if (full || std::any_of(cache_.begin(), cache_.end(), stale)) {
      barrier();  // nobody is still running the objects freed here
      std::erase_if(cache_, stale);
      if (cache_.size() >= kMaxCached) cache_.erase(cache_.begin());
    }
    if (data.size() > static_cast<std::size_t>(INT_MAX))
      throw std::length_error(fmt::format("Gloo counts are int: {} elements", data.size()));
    const int count = static_cast<int>(data.size());
    const std::vector<T*> pointers{data.data()};
    const auto* fn = reduction_of<T>(op);
    std::unique_ptr<gloo::Algorithm> algorithm;
    switch (algorithm_) {
      case GlooAlgorithm::ring:
        algorithm = std::make_unique<gloo::AllreduceRing<T>>(context_, pointers, count, fn);
        break;
      case GlooAlgorithm::ring_chunked:
        algorithm = std::make_unique<gloo::AllreduceRingChunked<T>>(context_, pointers, count, fn);
        break;
      case GlooAlgorithm::halving_doubling:
        algorithm =
            std::make_unique<gloo::AllreduceHalvingDoubling<T>>(context_, pointers, count, fn);
        break;
      case GlooAlgorithm::bcube:
        algorithm = std::make_unique<gloo::AllreduceBcube<T>>(context_, pointers, count, fn);
        break;
    }
    cache_.push_back({key, std::move(algorithm)});
    return *cache_.back().algorithm;
  }

  std::uint32_t next_tag() noexcept { return tag_++; }

  std::shared_ptr<gloo::Context> context_;
  GlooAlgorithm algorithm_;
  FlushingBarrier barrier_;
  std::vector<Cached> cache_;
  std::uint32_t tag_ = 1;
};

struct Settings {
  Options options;
  std::vector<GlooAlgorithm> algorithms;
  int ranks = kDefaultRanks;
  std::chrono::milliseconds timeout{};
  std::string store_directory;
};

// One rank: a block of rows per algorithm, each on its own context and full mesh.
int run_rank(const Settings& settings, int rank) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    attr.ai_family = AF_INET;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(settings.store_directory);
    std::optional<PeerReporter> reporter;
    if (rank == 0) reporter.emplace(settings.options, PeerRun{std::string(kTool), "gloo-tcp"});
    int status = 0;
    for (const GlooAlgorithm algorithm : settings.algorithms) {
      const std::string name(to_string(algorithm));
      gloo::rendezvous::PrefixStore prefixed(name, store);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, settings.ranks);
      context->setTimeout(settings.timeout);
      context->connectFullMesh(prefixed, device);
      GlooComm comm(context, algorithm);
      const int block = run_peer_rank(comm, settings.options, name,
                                      fmt::format("gloo-tcp 127.0.0.1, {}", describe_affinity()),
                                      reporter ? &*reporter : nullptr);
      comm.close();
      // Nobody closes its connections before every rank is done with them: Gloo fails a wait
      // on a connection that the peer closed even when the awaited message had arrived.
      prefixed.set(fmt::format("done_{}", rank), {'1'});
      std::vector<std::string> done;
      for (int r = 0; r < settings.ranks; ++r)
        done.push_back(fmt::format("done_{}", r));
      prefixed.wait(done, settings.timeout);
      status = std::max(status, block);
    }
    return status;
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}: rank {}: {}\n", kTool, rank, error.what());
    return kExitFailure;
  }
}

std::chrono::milliseconds run_deadline() {
  const char* text = std::getenv("STRATA_PERF_DEADLINE");  // NOLINT(concurrency-mt-unsafe)
  if (text == nullptr || *text == '\0') return std::chrono::minutes(30);
  return parse_timeout(text, "STRATA_PERF_DEADLINE");
}

int run(const PeerCommandLine& line) {
  Settings settings;
  settings.options = line.options;
  settings.ranks = line.options.ranks.value_or(kDefaultRanks);
  settings.algorithms = algorithms_from(line.algorithm, settings.ranks);
  check_against_group(settings.options, settings.ranks);
  settings.timeout = default_timeout();
  ForkOptions fork_options;
  fork_options.deadline = run_deadline();
  fork_options.tool = kTool.data();
  fork_options.binding = settings.options.bind;
  // A file that cannot be written is a usage error, reported once, before any rank starts.
  if (settings.options.csv && *settings.options.csv != "-") OutputFile probe(*settings.options.csv);

  std::string directory =
      (std::filesystem::temp_directory_path() / "strata-perf-gloo-XXXXXX").string();
  if (::mkdtemp(directory.data()) == nullptr)
    throw std::runtime_error(fmt::format("mkdtemp {}: {}", directory, std::strerror(errno)));
  settings.store_directory = directory;
  const int status = fork_ranks(
      settings.ranks, [&](int rank) { return run_rank(settings, rank); }, fork_options);
  std::error_code ignored;
  std::filesystem::remove_all(directory, ignored);
  return status;
}

}  // namespace
}  // namespace strata::perf::peers

int main(int argc, char** argv) {
  using namespace strata::perf;
  using namespace strata::perf::peers;
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  try {
    const PeerCommandLine line = parse_peer_command_line(args);
    if (line.options.help) {
      fmt::print("{}", peer_usage(kTool, "Gloo's all-reduce algorithms",
                                  "It starts --ranks processes (default 2) on 127.0.0.1, which "
                                  "talk over Gloo's TCP transport.",
                                  "ring|ring_chunked|halving_doubling|bcube|all (default all: "
                                  "one table and\n  block of CSV rows each; bcube only for a "
                                  "power of 2 ranks)"));
      return 0;
    }
    return run(line);
  } catch (const CommandLineError& error) {
    fmt::print(stderr, "{}: {}\nrun '{} --help' for the flags\n", kTool, error.what(), kTool);
    return kExitUsage;
  } catch (const strata::ConfigurationError& error) {
    fmt::print(stderr, "{}: {}\n", kTool, error.what());
    return kExitUsage;
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}: {}\n", kTool, error.what());
    return kExitFailure;
  }
}
