// Tests for benchmarks/perf/report.hpp (strata-perf's outputs): the CSV and JSON a machine
// reads, and the footer's share of the TCP ceiling, which only a 2-rank TCP all-reduce gets.
//
// The header lives with the benchmark, in strata_perf_core, which these tests link.
#include <perf/report.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

namespace {

using strata::communicator::Collective;
using namespace strata::perf;

// A file name of its own in the temporary directory, removed at the end of the test.
struct TemporaryFile {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("strata-report-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  ~TemporaryFile() { std::filesystem::remove(path); }
  std::string text() const {
    std::ifstream in(path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
  }
  static inline int counter = 0;
};

RunInfo run_info(Transport transport, int ranks, bool check, bool with_ceilings) {
  RunInfo info;
  info.options.collective = Collective::all_reduce;
  info.options.transport = transport;
  info.options.check = check;
  info.options.bind = Binding::none;
  info.options.congestion = "cubic";
  info.options.lend_from = std::size_t{32} << 20;
  info.ranks = ranks;
  info.algorithm = "ring";
  for (int r = 0; r < ranks; ++r)
    info.rank_info.push_back({100 + r, "host", "tcp 127.0.0.1:1, CPU 0"});
  if (with_ceilings) {
    Ceilings c;
    c.cpus = "CPUs 0-1";
    c.tcp_duplex = 4e9;              // held to below 16 MiB
    c.tcp_duplex_memory_reno = 2e9;  // held to from 16 MiB up
    info.ceilings = c;
  }
  return info;
}

Row row(std::size_t bytes, double busbw_gbps, bool check) {
  Row r;
  r.bytes = bytes;
  r.count = bytes / 4;
  r.type = "float";
  r.redop = "sum";
  r.out_of_place = {10.0, busbw_gbps / 2, busbw_gbps / 2, std::nullopt, 0};
  r.in_place = {9.0, busbw_gbps, busbw_gbps, std::nullopt, 0};
  if (check) {
    r.out_of_place.wrong = 0;
    r.in_place.wrong = 3;
    r.in_place.ranks_wrong = 1;
  }
  return r;
}

void feed(RowSink& sink, const RunInfo& info, const std::vector<Row>& rows) {
  sink.begin(info);
  SummaryBuilder summary;
  for (const Row& r : rows) {
    sink.row(r);
    summary.add(r);
  }
  sink.end(summary.summary());
}

TEST_CASE("the CSV has the run's columns and one line per size; #wrong is empty unchecked") {
  for (const bool check : {true, false}) {
    CAPTURE(check);
    TemporaryFile file;
    {
      CsvSink sink(file.path.string());
      feed(sink, run_info(Transport::tcp, 2, check, false),
           {row(1024, 1.0, check), row(1 << 20, 2.0, check)});
    }
    const std::string text = file.text();
    CAPTURE(text);
    CHECK(text.starts_with(std::string(kCsvHeader)));
    CHECK(text.find("all_reduce,tcp,ring,2,1024,256,float,sum,-1,10,0.5,0.5," +
                    std::string(check ? "0" : "") + ",9,1,1," + (check ? "3" : "") + "\n") !=
          std::string::npos);
    CHECK(text.find("all_reduce,tcp,ring,2,1048576,262144,") != std::string::npos);
  }
}

TEST_CASE("the JSON document has the settings, the rows, the summary and the ceiling share") {
  TemporaryFile file;
  {
    JsonSink sink(file.path.string());
    feed(sink, run_info(Transport::tcp, 2, true, true),
         {row(1024, 1.0, true), row(64 << 20, 1.5, true)});
  }
  const auto j = nlohmann::json::parse(file.text());
  CHECK(j["collective"] == "all_reduce");
  CHECK(j["transport"] == "tcp");
  CHECK(j["ranks"] == 2);
  CHECK(j["bind"] == "none");
  CHECK(j["congestion"] == "cubic");
  CHECK(j["lend_from_bytes"] == std::size_t{32} << 20);
  CHECK(j["ceiling"]["cpus"] == "CPUs 0-1");
  REQUIRE(j["devices"].size() == 2);
  CHECK(j["devices"][1]["pid"] == 101);
  REQUIRE(j["rows"].size() == 2);
  CHECK(j["rows"][1]["size_bytes"] == 64 << 20);
  CHECK(j["rows"][0]["in_place"]["wrong"] == 3);
  CHECK(j["out_of_bounds"] == 2);  // one rank wrong in place, in each of two rows
  CHECK(j["ok"] == false);
  // 64 MiB comes from memory: held to the in-memory rate, 1.5 of 2 GB/s.
  CHECK(j["largest_size_share_of_tcp_ceiling"].get<double>() == doctest::Approx(0.75));
}

TEST_CASE("only a 2-rank TCP all-reduce is held to the full-duplex ceiling") {
  struct Case {
    Transport transport;
    int ranks;
    bool held;
  };
  for (const Case& test : {Case{Transport::tcp, 2, true}, Case{Transport::tcp, 4, false},
                           Case{Transport::local, 2, false}}) {
    CAPTURE(test.ranks);
    CAPTURE(to_string(test.transport));
    const RunInfo info = run_info(test.transport, test.ranks, true, true);
    // 1 MiB is in cache: held to the in-cache rate, 3 of 4 GB/s.
    const auto share = share_of_tcp_ceiling(info, row(1 << 20, 3.0, true));
    CHECK(share.has_value() == test.held);
    if (share) CHECK(*share == doctest::Approx(0.75));

    TemporaryFile file;
    {
      std::FILE* out = std::fopen(file.path.c_str(), "w");
      REQUIRE(out != nullptr);
      TableSink sink(out);
      feed(sink, info, {row(1 << 20, 3.0, true)});
      std::fclose(out);
    }
    const std::string text = file.text();
    CAPTURE(text);
    CHECK(text.find("# Ceiling (this machine, this run, CPUs 0-1):") != std::string::npos);
    CHECK((text.find("= 75% of the full-duplex TCP ceiling (4.000 GB/s each way, arrays in "
                     "cache)") != std::string::npos) == test.held);
  }
}

}  // namespace
