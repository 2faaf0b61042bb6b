// benchmarks/ps/skewed_load.cpp — how a skewed model's bytes land on the parameter servers:
// one 100 MB embedding and many small tensors, under round-robin and greedy placement, unsplit
// and split by MinSizePartitioner (TF's rules, ps/partitioner.hpp, ps/shard_placement.hpp).
//
//   build/dev/benchmarks/strata_bench_ps_skewed_load [PS_TASKS...]     (default: 2 4)
//
// Real servers: P ps::Server threads on loopback and one worker's ps::Session creating every
// variable through placement::create_sharded, as ParameterServerStrategy does; the load is what
// each server reports it holds (ServerReport::shard_bytes). Prints a markdown table.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/placement/sharded_variable.hpp>
#include <strata/ps/partitioner.hpp>
#include <strata/ps/server.hpp>
#include <strata/ps/session.hpp>
#include <strata/ps/shard_placement.hpp>

namespace {

using strata::cluster::TaskType;

// The model: a [100000, 256] float embedding (102.4 MB), then 100 dense layers of [256, 256]
// weights (256 KiB) and [256] biases (1 KiB).
constexpr std::size_t kEmbeddingElements = std::size_t{100'000} * 256;
constexpr int kLayers = 100;

strata::cluster::ClusterSpec loopback(int servers) {
  asio::io_context io;
  std::vector<asio::ip::tcp::acceptor> holders;
  strata::cluster::ClusterSpec spec;
  for (int t = 0; t <= servers; ++t) {
    holders.emplace_back(io, asio::ip::tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
    const strata::cluster::Address address{"127.0.0.1", holders.back().local_endpoint().port()};
    if (t == 0)
      spec.add({TaskType::worker, 0}, address);
    else
      spec.add({TaskType::ps, t - 1}, address);
  }
  return spec;
}

struct Load {
  std::vector<std::uint64_t> bytes;  // per server, as the servers report
  std::size_t shards = 0;
};

template <class Partitioner, class Policy>
Load measure(int servers, Partitioner partitioner) {
  const auto spec = loopback(servers);
  std::vector<std::unique_ptr<strata::ps::Server>> running;
  std::vector<strata::ps::ServerReport> reports(static_cast<std::size_t>(servers));
  std::vector<std::thread> threads;
  for (int s = 0; s < servers; ++s)
    running.push_back(std::make_unique<strata::ps::Server>(spec, s));
  for (int s = 0; s < servers; ++s)
    threads.emplace_back([&, s] {
      reports[static_cast<std::size_t>(s)] = running[static_cast<std::size_t>(s)]->serve();
    });
  {
    strata::ps::Session<Partitioner, Policy> session(spec, 0, 1, {}, partitioner);
    const auto create = [&](std::size_t elements) {
      const std::vector<float> zeros(elements, 0.0f);
      (void)strata::placement::create_sharded<float>(session, zeros,
                                                     strata::placement::VariableAggregation::sum,
                                                     strata::ps::UpdateRule::optimizer);
    };
    create(kEmbeddingElements);
    for (int layer = 0; layer < kLayers; ++layer) {
      create(256 * 256);
      create(256);
    }
  }  // the session says done: the servers return their reports
  for (auto& thread : threads)
    thread.join();
  Load load;
  for (const auto& report : reports) {
    load.bytes.push_back(report.shard_bytes);
    load.shards += report.shards;
  }
  return load;
}

void row(const std::string& name, const Load& load) {
  const auto most = *std::max_element(load.bytes.begin(), load.bytes.end());
  const auto least = *std::min_element(load.bytes.begin(), load.bytes.end());
  std::uint64_t total = 0;
  std::string each;
  for (const auto bytes : load.bytes) {
    total += bytes;
    each += fmt::format("{}{:.1f}", each.empty() ? "" : " / ", static_cast<double>(bytes) / 1e6);
  }
  const double mean = static_cast<double>(total) / static_cast<double>(load.bytes.size());
  fmt::print("| {} | {} | {} | {:.2f} | {:.1f} |\n", name, load.shards, each,
             static_cast<double>(most) / mean, static_cast<double>(most - least) / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i)
    sizes.push_back(std::stoi(argv[i]));
  if (sizes.empty()) sizes = {2, 4};
  for (const int servers : sizes) {
    fmt::print(
        "\n{} ps tasks: one [100000, 256] float embedding (102.4 MB) and {} layers of "
        "[256, 256] + [256] floats (26.3 MB)\n\n",
        servers, kLayers);
    fmt::print("| placement | shards | MB per server | busiest / mean | busiest - idlest (MB) |\n");
    fmt::print("| --- | ---: | --- | ---: | ---: |\n");
    using strata::ps::GreedyPlacement;
    using strata::ps::MinSizePartitioner;
    using strata::ps::NoPartitioner;
    using strata::ps::RoundRobinPlacement;
    row("round robin, unsplit", measure<NoPartitioner, RoundRobinPlacement>(servers, {}));
    row("greedy, unsplit", measure<NoPartitioner, GreedyPlacement>(servers, {}));
    const MinSizePartitioner min_size{.min_shard_bytes = 256 << 10, .max_shards = servers};
    row(fmt::format("round robin, MinSize(256 KiB, {})", servers),
        measure<MinSizePartitioner, RoundRobinPlacement>(servers, min_size));
    row(fmt::format("greedy, MinSize(256 KiB, {})", servers),
        measure<MinSizePartitioner, GreedyPlacement>(servers, min_size));
  }
  return 0;
}
