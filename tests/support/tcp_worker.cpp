// tests/support/tcp_worker.cpp — a worker process for the multi-process TCP tests.
//
//   strata_test_tcp_worker SCENARIO [ARGS...]      (cluster from resolve_cluster(): TF_CONFIG, ...)
//
// Scenarios:
//   loop ITERATIONS COUNT   all_reduce(sum) of COUNT floats ITERATIONS times, each result
//                           checked against the value every rank can compute; prints
//                           "ready" after the first iteration, "ok" at the end.
//   loop ITERATIONS COUNT lend   the same, lending every message of 64 KiB or more
//                           (TcpOptions::lend_from_bytes = 0).
//   mismatch                all_reduce whose count depends on the rank (rank 1 differs).
//   join                    forms the group, runs a barrier.
//   train K EPOCHS          trains examples/logistic_regression.hpp with
//                           MultiWorkerMirroredStrategy (K local replicas) and with
//                           OneDeviceStrategy; prints "replicas N", "drift D" (largest
//                           parameter difference) and "params" with the exact bits.
//   conformance [LARGE]     every collective × op × element type × count {0, 1, 7, 1023, LARGE}
//                           (default 65539) × root × in/out of place, checking this rank's
//                           outputs against tests/support/collective_reference.hpp; all_reduce
//                           once per all-reduce algorithm (a communicator each, formed in turn
//                           on the same addresses). Prints the first 20 wrong elements as
//                           "wrong: rank R, ...", then "conformance ok: rank R of N, C cases"
//                           or "conformance failed: ..." (exit 8).
// On a strata::Error it prints "error KIND MILLISECONDS MESSAGE" (time since the error's call
// began) and exits with 3 (PeerFailureError), 4 (TimeoutError), 5 (MismatchError),
// 6 (ConfigurationError) or 7 (other); a wrong result exits 8.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include <strata/resolve.hpp>
#include <strata/strategies.hpp>

#include <strata/communicator/tcp.hpp>
#include <strata/core/error.hpp>
#include "collective_reference.hpp"
#include "logistic_regression.hpp"

namespace {

using Clock = std::chrono::steady_clock;

int report(const char* kind, int code, Clock::time_point began, const std::exception& error) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count();
  fmt::print("error {} {} {}\n", kind, ms, error.what());
  std::fflush(stdout);
  return code;
}

}  // namespace

// ---- conformance: one rank's share of the sweep of tcp_test.cpp, across processes ------------
namespace conformance {

namespace testing = strata::testing;
using strata::DataType;
using strata::ReduceOp;
using strata::communicator::Collective;
using strata::communicator::TcpCommunicator;
using testing::CaseSpec;

// Sentinel elements on each side of every buffer catch writes past a span.
constexpr std::size_t kGuard = 16;
constexpr std::size_t kMaxPrinted = 20;
constexpr int kMaxRanks = 64;

struct Totals {
  std::size_t cases = 0;
  std::size_t failed = 0;
  std::size_t wrong = 0;
  std::size_t printed = 0;
  std::size_t not_identical = 0;  // collectives whose results differ in bits between ranks
};

// A buffer of `count` elements between guards, all holding the sentinel.
template <strata::Element T>
class Buffer {
 public:
  explicit Buffer(std::size_t count)
      : storage_(count + 2 * kGuard, testing::detail::sentinel_value<T>()), count_(count) {}
  T* data() noexcept { return storage_.data() + kGuard; }
  std::size_t count() const noexcept { return count_; }
  bool guards_intact() const {
    const T sentinel = testing::detail::sentinel_value<T>();
    for (std::size_t i = 0; i < kGuard; ++i)
      if (!testing::same_bits(storage_[i], sentinel) ||
          !testing::same_bits(storage_[kGuard + count_ + i], sentinel))
        return false;
    return true;
  }

 private:
  std::vector<T> storage_;
  std::size_t count_;
};

// Running hashes of the outputs every rank must have bit for bit (all_reduce, broadcast,
// all_gather); compared across ranks at the end of each phase.
struct Digests {
  std::uint64_t all_reduce = 0;
  std::uint64_t broadcast = 0;
  std::uint64_t all_gather = 0;
};

template <strata::Element T>
void call(TcpCommunicator& comm, const CaseSpec& spec, Buffer<T>& send, Buffer<T>& recv) {
  if (spec.in_place) {
    const std::span<T> data(send.data(), send.count());
    switch (spec.kind) {
      case Collective::all_reduce:
        return comm.all_reduce(data, spec.op);
      case Collective::broadcast:
        return comm.broadcast(data, spec.root);
      case Collective::reduce:
        return comm.reduce(data, spec.op, spec.root);
      case Collective::all_gather:
        return comm.all_gather(data);
      case Collective::reduce_scatter:
        return comm.reduce_scatter(data, spec.op);
      case Collective::barrier:
        return comm.barrier();
    }
    return;
  }
  const std::span<const T> in(send.data(), send.count());
  const std::span<T> out(recv.data(), recv.count());
  switch (spec.kind) {
    case Collective::all_reduce:
      return comm.all_reduce(in, out, spec.op);
    case Collective::broadcast:
      return comm.broadcast(in, out, spec.root);
    case Collective::reduce:
      return comm.reduce(in, out, spec.op, spec.root);
    case Collective::all_gather:
      return comm.all_gather(in, out);
    case Collective::reduce_scatter:
      return comm.reduce_scatter(in, out, spec.op);
    case Collective::barrier:
      return comm.barrier();
  }
}

// The reference results of elements [first, first + spec.count) of a reduction. The last
// ones computed are kept, per element type, for the in- or out-of-place twin of the case that
// follows: references of 16-bit floats cost more than the collective itself.
template <strata::Element T>
std::span<const testing::Expected<T>> references(const CaseSpec& spec, std::size_t first) {
  struct Memo {
    ReduceOp op = ReduceOp::sum;
    int size = 0;  // 0: nothing kept
    std::size_t first = 0;
    std::vector<testing::Expected<T>> values;
  };
  static Memo memo;
  if (memo.size == spec.size && memo.op == spec.op && memo.first == first &&
      memo.values.size() == spec.count)
    return memo.values;
  const auto n = static_cast<std::size_t>(spec.size);
  // n-1 combines and a mean's division, each of which may round a 16-bit float: every
  // message-passing step rounds (testing::Rounding::every_step, as tcp_test.cpp checks).
  const int roundings = spec.size + 1;
  T inputs[kMaxRanks];
  memo.values.resize(spec.count);
  for (std::size_t i = 0; i < spec.count; ++i) {
    for (std::size_t q = 0; q < n; ++q)
      inputs[q] = testing::input_value<T>(static_cast<int>(q), first + i, spec.op);
    memo.values[i] = testing::reference<T>(std::span<const T>(inputs, n), spec.op, roundings);
  }
  memo.op = spec.op;
  memo.size = spec.size;
  memo.first = first;
  return memo.values;
}

// Runs one case on this rank and checks this rank's outputs, inputs and guards.
template <strata::Element T>
void run_case(TcpCommunicator& comm, std::string_view phase, const CaseSpec& spec,
              Clock::time_point& began, Totals& totals, Digests& digests) {
  const int rank = comm.rank();
  const auto n = static_cast<std::size_t>(spec.size);
  const auto own = static_cast<std::size_t>(rank);
  const std::size_t count = spec.count;
  std::size_t in_count = count;
  std::size_t out_count = count;
  if (spec.kind == Collective::all_gather) out_count = n * count;
  if (spec.kind == Collective::reduce_scatter) in_count = n * count;
  if (spec.kind == Collective::reduce && spec.empty_non_root_recv && rank != spec.root)
    out_count = 0;
  auto input = [&](int q, std::size_t i) { return testing::input_value<T>(q, i, spec.op); };

  Buffer<T> send(spec.in_place ? std::max(in_count, out_count) : in_count);
  Buffer<T> recv(spec.in_place ? 0 : out_count);
  T* in = send.data();
  T* out = spec.in_place ? send.data() : recv.data();
  // In place, all_gather's input and reduce_scatter's output are this rank's block; the rest
  // of an all_gather buffer keeps the sentinel, so blocks left unwritten show.
  if (spec.in_place && spec.kind == Collective::all_gather) in += own * count;
  if (spec.in_place && spec.kind == Collective::reduce_scatter) out += own * count;
  for (std::size_t i = 0; i < in_count; ++i)
    in[i] = input(rank, i);

  try {
    began = Clock::now();
    call<T>(comm, spec, send, recv);
  } catch (const std::exception&) {
    fmt::print("failed: rank {}, {} {} threw\n", rank, phase, testing::describe(spec));
    throw;
  }

  std::size_t wrong = 0;
  auto fail = [&](std::string_view where, std::size_t index, const std::string& got,
                  const std::string& expected, std::string_view why = "") {
    ++wrong;
    if (totals.printed == kMaxPrinted) return;
    ++totals.printed;
    fmt::print("wrong: rank {}, {} {}: {}[{}]: got {}, expected {}{}\n", rank, phase,
               testing::describe(spec), where, index, got, expected, why);
  };
  auto check_reduced = [&](std::span<const testing::Expected<T>> expected) {
    for (std::size_t i = 0; i < count; ++i)
      if (!testing::matches(out[i], expected[i]))
        fail("output", i, testing::format_value(out[i]), testing::describe(expected[i]));
  };
  auto check_bits = [&](std::size_t i, T expected, std::string_view why = "") {
    if (!testing::same_bits(out[i], expected))
      fail("output", i, testing::format_value(out[i]), testing::format_value(expected), why);
  };

  switch (spec.kind) {
    case Collective::all_reduce:
      check_reduced(references<T>(spec, 0));
      break;
    case Collective::broadcast:
      for (std::size_t i = 0; i < count; ++i)
        check_bits(i, input(spec.root, i));
      break;
    case Collective::reduce:
      if (rank == spec.root) {
        check_reduced(references<T>(spec, 0));
      } else if (spec.in_place) {
        for (std::size_t i = 0; i < count; ++i)
          check_bits(i, input(rank, i), " (a non-root's buffer must be untouched)");
      } else {
        for (std::size_t i = 0; i < out_count; ++i)
          check_bits(i, testing::detail::sentinel_value<T>(),
                     " (a non-root's recv must be untouched)");
      }
      break;
    case Collective::all_gather:
      for (std::size_t j = 0; j < n * count; ++j)
        check_bits(j, input(static_cast<int>(j / count), j % count));
      break;
    case Collective::reduce_scatter:
      check_reduced(references<T>(spec, own * count));
      break;
    case Collective::barrier:
      break;
  }
  if (!spec.in_place)
    for (std::size_t i = 0; i < in_count; ++i)
      if (!testing::same_bits(in[i], input(rank, i)))
        fail("send", i, testing::format_value(in[i]), testing::format_value(input(rank, i)),
             " (an out-of-place input must be unchanged)");
  if (!send.guards_intact()) fail("guards of send", 0, "overwritten", "intact");
  if (!recv.guards_intact()) fail("guards of recv", 0, "overwritten", "intact");

  std::uint64_t* digest = spec.kind == Collective::all_reduce   ? &digests.all_reduce
                          : spec.kind == Collective::broadcast  ? &digests.broadcast
                          : spec.kind == Collective::all_gather ? &digests.all_gather
                                                                : nullptr;
  if (digest != nullptr)
    for (std::size_t i = 0; i < out_count; ++i)
      *digest = testing::mix64(*digest ^ testing::bits_of(out[i]));

  ++totals.cases;
  if (wrong > 0) {
    ++totals.failed;
    totals.wrong += wrong;
  }
}

// The roots of broadcast and reduce: every rank.
std::vector<int> roots_of(Collective kind, int size) {
  if (!strata::communicator::has_root(kind)) return {0};
  std::vector<int> roots;
  for (int r = 0; r < size; ++r)
    roots.push_back(r);
  return roots;
}

// Runs `kinds` × counts × element types × ops × roots × in/out of place and a barrier on
// `comm`, then compares this rank's digests with every other rank's.
void run_phase(TcpCommunicator& comm, std::string_view phase, std::span<const Collective> kinds,
               std::span<const std::size_t> counts, Clock::time_point& began, Totals& totals) {
  Digests digests;
  const int size = comm.size();
  if (size > kMaxRanks)
    throw std::invalid_argument(fmt::format("conformance checks at most {} ranks", kMaxRanks));
  for (Collective kind : kinds)
    for (std::size_t count : counts)
      for (DataType type : testing::kAllDataTypes)
        for (ReduceOp op : testing::detail::ops_of(kind))
          for (int root : roots_of(kind, size))
            for (bool in_place : {false, true}) {
              CaseSpec spec{kind, type, op, size, count, root, in_place};
              // Reduce out of place: non-roots alternate between no output and an untouched one.
              spec.empty_non_root_recv =
                  kind == Collective::reduce && !in_place && (root + size) % 2 == 1;
              strata::visit_data_type(type, [&]<class T>(std::type_identity<T>) {
                run_case<T>(comm, phase, spec, began, totals, digests);
              });
            }
  run_case<std::int8_t>(comm, phase, CaseSpec{Collective::barrier, DataType::int8}, began, totals,
                        digests);

  // Results must be bit-identical on every rank (the determinism promise).
  const std::int64_t mine[] = {std::bit_cast<std::int64_t>(digests.all_reduce),
                               std::bit_cast<std::int64_t>(digests.broadcast),
                               std::bit_cast<std::int64_t>(digests.all_gather)};
  constexpr std::string_view kNames[] = {"all_reduce", "broadcast", "all_gather"};
  std::vector<std::int64_t> everyone(std::size(mine) * static_cast<std::size_t>(size));
  began = Clock::now();
  comm.all_gather(std::span<const std::int64_t>(mine), std::span(everyone));
  for (std::size_t k = 0; k < std::size(mine); ++k)
    for (int q = 0; q < size; ++q)
      if (everyone[static_cast<std::size_t>(q) * std::size(mine) + k] != mine[k]) {
        fmt::print(
            "wrong: rank {}, {}: {} results differ in bits from rank {}'s (results must be "
            "bit-identical on every rank)\n",
            comm.rank(), phase, kNames[k], q);
        ++totals.not_identical;
        break;
      }
}

}  // namespace conformance

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    fmt::print(
        stderr,
        "usage: strata_test_tcp_worker loop N COUNT [lend] | mismatch | join | train K EPOCHS | "
        "conformance [LARGE]\n");
    return 2;
  }
  auto began = Clock::now();
  try {
    if (args[0] == "train" && args.size() == 3) {
      strata::MultiWorkerMirroredStrategy strategy(
          {.num_replicas = std::stoi(std::string(args[1]))});
      example::TrainConfig config;
      config.epochs = std::stoul(std::string(args[2]));
      const auto problem = example::make_problem(1024, 8);
      const auto result = example::train(strategy, problem, config, [](std::size_t, double) {});
      strata::OneDeviceStrategy single;
      const auto reference = example::train(single, problem, config, [](std::size_t, double) {});
      float drift = std::abs(result.bias - reference.bias);
      std::string bits = fmt::format("{:a}", result.bias);
      for (std::size_t j = 0; j < result.weights.size(); ++j) {
        drift = std::max(drift, std::abs(result.weights[j] - reference.weights[j]));
        bits += fmt::format(" {:a}", result.weights[j]);
      }
      fmt::print("replicas {}\nchief {}\ndrift {:.3e}\nparams {}\nok\n",
                 strategy.num_replicas_in_sync(), strategy.is_chief() ? 1 : 0, drift, bits);
      return 0;
    }
    auto resolved = strata::resolve_cluster();
    if (args[0] == "conformance" && args.size() <= 2) {
      using strata::communicator::Collective;
      using strata::communicator::TcpAllReduce;
      const std::size_t large = args.size() == 2 ? std::stoul(std::string(args[1])) : 65539;
      const std::size_t counts[] = {0, 1, 7, 1023, large};
      constexpr Collective kEvery[] = {Collective::all_reduce, Collective::broadcast,
                                       Collective::reduce, Collective::all_gather,
                                       Collective::reduce_scatter};
      constexpr Collective kAllReduce[] = {Collective::all_reduce};
      struct Phase {
        std::string_view name;
        TcpAllReduce algorithm;
        std::span<const Collective> kinds;
      };
      // The algorithm is a tunable every rank must share, so each needs a group of its own;
      // the other collectives do not depend on it and run once.
      const Phase phases[] = {{"tcp", TcpAllReduce::automatic, kEvery},
                              {"tcp<ring>", TcpAllReduce::ring, kAllReduce},
                              {"tcp<rd>", TcpAllReduce::recursive_doubling, kAllReduce}};
      auto membership = strata::communicator::membership_of(resolved);
      conformance::Totals totals;
      const auto started = Clock::now();
      int rank = 0;
      int size = 0;
      for (const Phase& phase : phases) {
        strata::communicator::TcpOptions tcp;
        tcp.all_reduce = phase.algorithm;
        began = Clock::now();
        strata::communicator::TcpCommunicator comm(membership, tcp);
        membership.listen_fd = -1;  // adopted by the first group; later ones bind their own
        rank = comm.rank();
        size = comm.size();
        conformance::run_phase(comm, phase.name, phase.kinds, counts, began, totals);
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
      if (totals.failed > 0 || totals.not_identical > 0) {
        fmt::print(
            "conformance failed: rank {} of {}, {} of {} cases wrong, {} wrong elements, {} "
            "collectives not bit-identical across ranks\n",
            rank, size, totals.failed, totals.cases, totals.wrong, totals.not_identical);
        return 8;
      }
      fmt::print("conformance ok: rank {} of {}, {} cases, {:.2f} s\n", rank, size, totals.cases,
                 seconds);
      return 0;
    }
    strata::communicator::TcpOptions tcp;
    const bool lend = args[0] == "loop" && args.size() == 4 && args[3] == "lend";
    if (lend) tcp.lend_from_bytes = 0;  // every message of 64 KiB or more
    strata::communicator::TcpCommunicator comm(strata::communicator::membership_of(resolved), tcp);
    const int rank = comm.rank();
    const int size = comm.size();
    if (args[0] == "join") {
      began = Clock::now();
      comm.barrier();
      fmt::print("ok rank {} of {}\n", rank, size);
      return 0;
    }
    if (args[0] == "mismatch") {
      std::vector<float> data(rank == 1 ? 1000 : 999, 1.0F);
      began = Clock::now();
      comm.all_reduce(std::span(data), strata::ReduceOp::sum);
      fmt::print("ok\n");
      return 0;
    }
    if (args[0] == "loop" && (args.size() == 3 || lend)) {
      const long iterations = std::stol(std::string(args[1]));
      const auto count = static_cast<std::size_t>(std::stol(std::string(args[2])));
      std::vector<float> data(count);
      for (long i = 0; i < iterations; ++i) {
        // Small integers: every partial sum is exact in float, whatever the order.
        for (std::size_t k = 0; k < count; ++k)
          data[k] = static_cast<float>((rank + 1) * ((k + static_cast<std::size_t>(i)) % 7));
        began = Clock::now();
        comm.all_reduce(std::span(data), strata::ReduceOp::sum);
        const float ranks = static_cast<float>(size * (size + 1) / 2);
        for (std::size_t k = 0; k < count; ++k)
          if (data[k] != ranks * static_cast<float>((k + static_cast<std::size_t>(i)) % 7)) {
            fmt::print("wrong result at iteration {} index {}: {}\n", i, k, data[k]);
            return 8;
          }
        if (i == 0) {
          fmt::print("ready\n");
          std::fflush(stdout);
        }
      }
      fmt::print("ok\n");
      return 0;
    }
    fmt::print(stderr, "unknown scenario\n");
    return 2;
  } catch (const strata::PeerFailureError& e) {
    return report("peer_failure", 3, began, e);
  } catch (const strata::TimeoutError& e) {
    return report("timeout", 4, began, e);
  } catch (const strata::MismatchError& e) {
    return report("mismatch", 5, began, e);
  } catch (const strata::ConfigurationError& e) {
    return report("configuration", 6, began, e);
  } catch (const std::exception& e) {
    return report("other", 7, began, e);
  }
}
