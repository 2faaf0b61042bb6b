// Tests for benchmarks/perf/nccl_format.hpp (strata-perf's nccl-tests arithmetic and text):
// bus-bandwidth factors from nccl-tests' doc/PERFORMANCE.md, bandwidths and time columns against
// rows that nccl-tests printed (published runs, cited per case), nccl-tests' size and count
// semantics per collective, sizes with K/M/G suffixes, and the sweep.
//
// The header lives with the benchmark, in strata_perf_core, which these tests link.
#include <perf/nccl_format.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace {

using strata::communicator::Collective;
using namespace strata::perf;

// A value as nccl-tests prints a bandwidth ("%6.2f").
std::string bw(double gbps) {
  return fmt::format("{:6.2f}", gbps);
}

TEST_CASE("bus-bandwidth factors are doc/PERFORMANCE.md's") {
  // AllReduce 2(n-1)/n; ReduceScatter and AllGather (n-1)/n; Broadcast and Reduce 1.
  CHECK(bus_bandwidth_factor(Collective::all_reduce, 8) == doctest::Approx(1.75));
  CHECK(bus_bandwidth_factor(Collective::all_reduce, 2) == doctest::Approx(1.0));
  CHECK(bus_bandwidth_factor(Collective::all_reduce, 3) == doctest::Approx(4.0 / 3.0));
  CHECK(bus_bandwidth_factor(Collective::all_reduce, 1) == 0.0);
  CHECK(bus_bandwidth_factor(Collective::all_gather, 8) == doctest::Approx(0.875));
  CHECK(bus_bandwidth_factor(Collective::reduce_scatter, 4) == doctest::Approx(0.75));
  CHECK(bus_bandwidth_factor(Collective::all_gather, 1) == 0.0);
  for (int n : {1, 2, 3, 8, 64}) {
    CHECK(bus_bandwidth_factor(Collective::broadcast, n) == 1.0);
    CHECK(bus_bandwidth_factor(Collective::reduce, n) == 1.0);
  }
}

TEST_CASE("bandwidths and times match rows printed by nccl-tests") {
  // all_reduce_perf, 8 ranks (8x A100, one node): 10737418240 B in 80922 us -> 132.69 / 232.20.
  CHECK(format_time_us(80922) == "  80922");
  CHECK(bw(algorithm_bandwidth_gbps(10737418240ULL, 80922e-6)) == "132.69");
  CHECK(bw(bus_bandwidth_gbps(Collective::all_reduce, 8, 10737418240ULL, 80922e-6)) == "232.20");

  // all_reduce_perf -b 8 -e 128M -f 2 -g 2 (2 ranks): 8192 B in 8.69 us -> 0.94 / 0.94,
  // 16384 B in 10.78 us -> 1.52 / 1.52.
  CHECK(format_time_us(8.69) == "   8.69");
  CHECK(bw(algorithm_bandwidth_gbps(8192, 8.69e-6)) == "  0.94");
  CHECK(bw(bus_bandwidth_gbps(Collective::all_reduce, 2, 8192, 8.69e-6)) == "  0.94");
  CHECK(bw(bus_bandwidth_gbps(Collective::all_reduce, 2, 16384, 10.78e-6)) == "  1.52");

  // all_reduce_perf on 16 ranks (2 nodes x 8): 32768 B in 184.8 us -> 0.18 / 0.33;
  // 2048 B in 166.6 us -> 0.01 / 0.02.
  CHECK(format_time_us(184.8) == "  184.8");
  CHECK(bw(algorithm_bandwidth_gbps(32768, 184.8e-6)) == "  0.18");
  CHECK(bw(bus_bandwidth_gbps(Collective::all_reduce, 16, 32768, 184.8e-6)) == "  0.33");
  CHECK(bw(algorithm_bandwidth_gbps(2048, 166.6e-6)) == "  0.01");
  CHECK(bw(bus_bandwidth_gbps(Collective::all_reduce, 16, 2048, 166.6e-6)) == "  0.02");

  // The time column switches precision at 100 us and 10 ms.
  CHECK(format_time_us(99.994) == "  99.99");
  CHECK(format_time_us(100.0) == "  100.0");
  CHECK(format_time_us(9999.94) == " 9999.9");
  CHECK(format_time_us(10000.4) == "  10000");

  CHECK(algorithm_bandwidth_gbps(1000, 0.0) == 0.0);  // no division by zero
}

TEST_CASE("size and count per collective follow nccl-tests") {
  // all_reduce, broadcast, reduce: count = size / element size, one buffer of that size.
  for (Collective kind : {Collective::all_reduce, Collective::broadcast, Collective::reduce}) {
    const auto s = collective_sizes(kind, 1024, 4, 3);
    CHECK(s.send_count == 256);
    CHECK(s.recv_count == 256);
    CHECK(s.param_count == 256);
    CHECK(s.bytes == 1024);
  }
  // A size that is not a whole number of elements rounds down: 9 B of float is 2 floats.
  CHECK(collective_sizes(Collective::all_reduce, 9, 4, 2).bytes == 8);

  // all_gather: size is the output; each of n ranks sends count/n ("count" column).
  auto ag = collective_sizes(Collective::all_gather, 1 << 20, 4, 4);
  CHECK(ag.param_count == 65536);
  CHECK(ag.send_count == 65536);
  CHECK(ag.recv_count == 262144);
  CHECK(ag.bytes == (1u << 20));
  // Not divisible by n: the output shrinks to n · (count/n) elements.
  ag = collective_sizes(Collective::all_gather, 1000, 4, 3);  // 250 floats -> 83 per rank
  CHECK(ag.param_count == 83);
  CHECK(ag.recv_count == 249);
  CHECK(ag.bytes == 996);
  // Smaller than one element per rank: an empty row, as nccl-tests prints it.
  ag = collective_sizes(Collective::all_gather, 8, 4, 3);
  CHECK(ag.param_count == 0);
  CHECK(ag.bytes == 0);

  // reduce_scatter: size is the input; each rank receives count/n.
  auto rs = collective_sizes(Collective::reduce_scatter, 1 << 20, 2, 8);  // half
  CHECK(rs.param_count == 65536);
  CHECK(rs.recv_count == 65536);
  CHECK(rs.send_count == 524288);
  CHECK(rs.bytes == (1u << 20));

  // algbw is size / time for every collective: the all_gather row of 1 MiB over 4 ranks in
  // 100 us has an algbw of 10.49 GB/s and a busbw of 3/4 of that.
  CHECK(bw(algorithm_bandwidth_gbps(1 << 20, 100e-6)) == " 10.49");
  CHECK(bus_bandwidth_gbps(Collective::all_gather, 4, 1 << 20, 100e-6) ==
        doctest::Approx(10.48576 * 0.75));
}

TEST_CASE("sizes take nccl-tests' binary suffixes") {
  CHECK(parse_size("8") == 8u);
  CHECK(parse_size("0") == 0u);
  CHECK(parse_size("1K") == 1024u);
  CHECK(parse_size("1k") == 1024u);
  CHECK(parse_size("256M") == std::size_t{256} << 20);
  CHECK(parse_size("1G") == std::size_t{1} << 30);
  CHECK(parse_size("0.5K") == 512u);
  CHECK(parse_size("1.5M") == std::size_t{3} << 19);
  CHECK_FALSE(parse_size(""));
  CHECK_FALSE(parse_size("-8"));
  CHECK_FALSE(parse_size("8X"));
  CHECK_FALSE(parse_size("8KB"));
  CHECK_FALSE(parse_size("K"));
  CHECK_FALSE(parse_size("1.3"));   // not a whole number of bytes
  CHECK_FALSE(parse_size("0.1K"));  // 102.4 bytes
  CHECK_FALSE(parse_size("99999999999999999999"));
  CHECK_FALSE(parse_size("17179869184G"));  // 2^64 bytes

  CHECK(format_size(8) == "8");
  CHECK(format_size(1024) == "1K");
  CHECK(format_size(std::size_t{16} << 20) == "16M");
  CHECK(format_size(1536) == "1.5K");
  CHECK(format_size(1000) == "1000");
}

TEST_CASE("a sweep goes from -b to -e in factors of -f") {
  CHECK(sweep_sizes(8, 1 << 20, 4) ==
        std::vector<std::size_t>{8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288});
  CHECK(sweep_sizes(8, 128, 2) == std::vector<std::size_t>{8, 16, 32, 64, 128});
  CHECK(sweep_sizes(64, 64, 1) == std::vector<std::size_t>{64});
  CHECK(sweep_sizes(0, 64, 2) == std::vector<std::size_t>{0});
  CHECK(sweep_sizes(128, 8, 2).empty());
  const std::size_t huge = ~std::size_t{0};
  CHECK(sweep_sizes(huge / 2, huge, 2).size() == 2);  // stops instead of overflowing
  CHECK(sweep_sizes(std::size_t{8}, std::size_t{256} << 20, 2).size() == 26);
}

TEST_CASE("table lines have nccl-tests' columns") {
  Row row;
  row.bytes = 8;
  row.count = 2;
  row.type = "float";
  row.redop = "sum";
  row.root = -1;
  row.out_of_place = {6.21, 0.0, 0.0, 0, 0};
  row.in_place = {6.23, 0.0, 0.0, 0, 0};
  CHECK(table_row(row) ==
        "           8             2     float     sum      -1     6.21    0.00    0.00      0"
        "     6.23    0.00    0.00      0\n");
  row.out_of_place.wrong.reset();
  row.in_place.wrong.reset();
  CHECK(table_row(row).ends_with("     6.23    0.00    0.00    N/A\n"));

  const std::string header = table_header();
  CHECK(header.find("#       size         count      type   redop    root     time   algbw   "
                    "busbw #wrong     time   algbw   busbw #wrong\n") != std::string::npos);
  CHECK(header.find("#        (B)    (elements)                               (us)  (GB/s)  "
                    "(GB/s)            (us)  (GB/s)  (GB/s)") != std::string::npos);
  CHECK(header.find("out-of-place") != std::string::npos);

  CHECK(table_footer(0, 232.167) ==
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 232.167 \n#\n");
  CHECK(table_footer(3, 0.5).starts_with("# Out of bounds values : 3 FAILED\n"));
}

}  // namespace
