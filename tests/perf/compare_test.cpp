// Tests for strata-perf --compare (benchmarks/perf/compare/): the tables and CSV of Comparison
// (medians over launches, the ratios to the best peers, the spread over launches), the order of
// the launches, and Open MPI's placement.
//
// The headers live with the benchmark, in strata_perf_core, which these tests link.
#include <perf/bind.hpp>
#include <perf/compare/contenders.hpp>
#include <perf/compare/placement.hpp>
#include <perf/compare/series.hpp>
#include <perf/compare/tables.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <stdlib.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace {

using strata::communicator::Collective;
using namespace strata::perf;

// One launch: strata over TCP and one TCP peer, at 4 B and 1 KiB, with these in-place times.
std::vector<Series> launch(double strata_4, double strata_1k, double peer_4, double peer_1k) {
  return {Series{"strata tcp", true, true, {{4, strata_4, 0}, {1024, strata_1k, 0}}},
          Series{"mpi tcp", false, true, {{4, peer_4, 0}, {1024, peer_1k, 0}}}};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_CASE("the tables show medians over launches, strata's ratio, and each launch's spread") {
  Comparison comparison;
  comparison.add(launch(6.0, 10.0, 8.0, 9.0));
  comparison.add(launch(7.0, 30.0, 9.0, 10.0));
  comparison.add(launch(60.0, 11.0, 10.0, 11.0));  // one slow launch of each size
  const std::string tables = comparison.tables(Collective::all_reduce, 2, 3);
  CAPTURE(tables);
  // Medians: strata 7 and 11 µs, the peer 9 and 10 µs.
  CHECK(contains(tables, "| 4 | 7.00 | 9.00 |"));
  CHECK(contains(tables, "| 1K | 11.00 | 10.00 |"));
  // busbw ratio of the medians: 9/7 at 4 B, 10/11 at 1 KiB.
  CHECK(contains(tables, "1.29× |"));
  CHECK(contains(tables, "0.91× |"));
  // The spread: fastest–slowest launch.
  CHECK(contains(tables, "fastest–slowest"));
  CHECK(contains(tables, "| 4 | 6.00–60.00 | 8.00–10.00 |"));
  CHECK(contains(tables, "| 1K | 10.00–30.00 | 9.00–11.00 |"));
}

TEST_CASE("one launch has no spread table; the CSV carries median, fastest and slowest") {
  Comparison comparison;
  comparison.add(launch(6.0, 10.0, 8.0, 9.0));
  CHECK_FALSE(contains(comparison.tables(Collective::all_reduce, 2, 1), "fastest–slowest"));
  comparison.add(launch(8.0, 12.0, 8.0, 9.0));
  const std::string csv = comparison.csv(Collective::all_reduce, 2);
  CAPTURE(csv);
  CHECK(csv.starts_with(
      "contender,strata,tcp,ranks,size_bytes,median_time_us,busbw_gbps,launches,min_time_us,"
      "max_time_us\n"));
  CHECK(contains(csv, "strata tcp,1,1,2,4,7,"));
  CHECK(contains(csv, ",2,6,8\n"));
  CHECK(contains(csv, "mpi tcp,0,1,2,1024,9,"));
}

TEST_CASE("a program with several algorithms gets a column with its best at each size") {
  Comparison comparison;
  for (int i = 0; i < 2; ++i)  // two launches, the same times: the medians are these
    comparison.add({Series{"strata tcp", true, true, {{4, 6.0, 0}, {1024, 10.0, 0}}},
                    Series{"gloo ring", false, true, {{4, 90.0, 0}, {1024, 40.0, 0}}, "gloo"},
                    Series{"gloo bcube", false, true, {{4, 60.0, 0}, {1024, 80.0, 0}}, "gloo"},
                    Series{"mpi tcp", false, true, {{4, 8.0, 0}, {1024, 9.0, 0}}}});
  const std::string tables = comparison.tables(Collective::all_reduce, 2, 2);
  CAPTURE(tables);
  // After the family's last member, in both tables; the spread table has no such column.
  CHECK(contains(tables, "| size | strata tcp | gloo ring | gloo bcube | gloo best | mpi tcp |"));
  CHECK(contains(tables, "| 4 | 6.00 | 90.00 | 60.00 | 60.00 | 8.00 |"));
  CHECK(contains(tables, "| 1K | 10.00 | 40.00 | 80.00 | 40.00 | 9.00 |"));
  CHECK(contains(tables, "| size | strata tcp | gloo ring | gloo bcube | mpi tcp |\n"));
  // The ratios are unchanged by it: 8/6 and 9/10 against Open MPI.
  CHECK(contains(tables, "1.33× |"));
  CHECK(contains(tables, "0.90× |"));
  // One algorithm alone gets no best column.
  Comparison single;
  single.add({Series{"gloo ring", false, true, {{4, 90.0, 0}}, "gloo"}});
  CHECK_FALSE(contains(single.tables(Collective::all_reduce, 2, 1), "gloo best"));
}

TEST_CASE("each launch starts with the next contender, so that each runs first in turn") {
  CHECK(launch_order(5, 0) == std::vector<std::size_t>{0, 1, 2, 3, 4});
  CHECK(launch_order(5, 1) == std::vector<std::size_t>{1, 2, 3, 4, 0});
  CHECK(launch_order(5, 7) == std::vector<std::size_t>{2, 3, 4, 0, 1});
  CHECK(launch_order(1, 3) == std::vector<std::size_t>{0});
  CHECK(launch_order(0, 2).empty());
}

TEST_CASE("mpirun gets each rank on the CPU the other contenders' rank gets, in a rankfile") {
  char pattern[] = "/tmp/strata-compare-test-XXXXXX";
  REQUIRE(::mkdtemp(pattern) != nullptr);
  const std::filesystem::path scratch(pattern);
  const auto cpus = allowed_cpus();
  REQUIRE_FALSE(cpus.empty());
  // More ranks than CPUs, so that some share one.
  const int ranks = static_cast<int>(cpus.size()) + 2;
  const auto placement = mpirun_placement(Binding::core, ranks, scratch);
  const auto path = scratch / "mpi.rankfile";
  CHECK(placement == std::vector<std::string>{"--rankfile", path.string(), "--mca",
                                              "rmaps_rank_file_physical", "1", "--mca",
                                              "mpi_yield_when_idle", "1"});
  std::ifstream file(path);
  std::string line;
  for (int r = 0; r < ranks; ++r) {
    REQUIRE(std::getline(file, line));
    CHECK(line ==
          fmt::format("rank {}=localhost slot={}", r, *cpu_of_rank(Binding::core, r, ranks, cpus)));
  }
  CHECK_FALSE(std::getline(file, line));
  // One rank per CPU: Open MPI sees no overload and needs no telling.
  CHECK(mpirun_placement(Binding::core, 1, scratch).size() == 5);
  CHECK(mpirun_placement(Binding::none, ranks, scratch) ==
        std::vector<std::string>{"--bind-to", "none"});
  std::filesystem::remove_all(scratch);
}

}  // namespace
