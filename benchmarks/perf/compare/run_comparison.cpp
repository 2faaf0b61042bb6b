// benchmarks/perf/compare/run_comparison.cpp — the launches of `strata-perf --compare`
// (run_comparison.hpp).
#include <perf/compare/run_comparison.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <perf/ceiling_report.hpp>
#include <perf/compare/contenders.hpp>
#include <perf/compare/series.hpp>
#include <perf/compare/tables.hpp>
#include <perf/nccl_format.hpp>
#include <perf/output.hpp>

namespace strata::perf {

namespace {

// A fresh directory under /tmp, removed with everything in it at the end of the comparison.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    char pattern[] = "/tmp/strata-perf-compare-XXXXXX";
    if (::mkdtemp(pattern) == nullptr)
      throw std::runtime_error(fmt::format("mkdtemp: {}", std::strerror(errno)));
    path_ = pattern;
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  ~ScratchDirectory() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

void print_header(std::FILE* text, const Options& options, int ranks,
                  const std::vector<std::string>& skipped) {
  fmt::print(
      text,
      "# strata-perf --compare: {} {}, {} ranks, {} to {}, -f {}, -w {}, -n {}, {} launch{}\n",
      to_string(options.collective), to_string(options.type), ranks, format_size(options.min_bytes),
      format_size(options.max_bytes), options.step_factor, options.warmup_iters, options.iters,
      options.launches, options.launches == 1 ? "" : "es");
  for (const auto& line : skipped)
    fmt::print(text, "# skipped: {}\n", line);
  std::fflush(text);
}

// Runs one contender once and adds its series; returns its exit status (non-zero: it failed,
// and said so on stderr).
int run_contender(const Contender& contender, const std::filesystem::path& csv,
                  std::chrono::seconds budget, Comparison& comparison) {
  auto argv = contender.argv;
  argv.push_back("--csv");
  argv.push_back(csv.string());
  const int status = run_program(argv, std::chrono::steady_clock::now() + budget);
  if (status != 0) {
    fmt::print(stderr, "strata-perf --compare: {} failed with exit status {}{}:\n  {}\n",
               contender.name, status,
               status == 128 + SIGKILL ? " (killed at the --run-timeout)" : "",
               fmt::join(argv, " "));
    return status;
  }
  auto series = read_series_csv(csv.string());
  for (auto& s : series) {
    s.label = contender.per_algo ? contender.label + " " + s.label : contender.label;
    if (contender.per_algo) s.family = contender.label;
    s.strata = contender.strata;
    s.tcp = contender.tcp;
  }
  comparison.add(series);
  return 0;
}

}  // namespace

int run_comparison(const Options& options, int ranks, const std::string& mpiexec) {
  const ScratchDirectory scratch;
  std::vector<std::string> skipped;
  const auto list = contenders(options, ranks, mpiexec, skipped, scratch.path());

  // With --csv - the CSV is stdout, and the tables go to stderr (as without --compare).
  std::FILE* const text = options.csv == "-" ? stderr : stdout;
  print_header(text, options, ranks, skipped);

  // Ceilings are measured before every launch, interleaved with the contenders: a slow spell
  // of this shared machine then lowers one measurement, not the ceiling.
  std::optional<Ceilings> ceilings;
  Comparison comparison;
  const auto budget = std::chrono::seconds(options.run_timeout_s);
  for (int launch = 0; launch < options.launches; ++launch) {
    if (options.ceiling) {
      const Ceilings now = measure_ceilings();
      ceilings = ceilings ? best_of(*ceilings, now) : now;
    }
    for (const std::size_t index : launch_order(list.size(), launch)) {
      fmt::print(stderr, "strata-perf --compare: launch {}/{}: {}\n", launch + 1, options.launches,
                 list[index].name);
      const auto csv = scratch.path() / fmt::format("launch{}-{}.csv", launch, index);
      const int status = run_contender(list[index], csv, budget, comparison);
      if (status != 0) return status == 1 ? 1 : 3;
    }
  }

  if (ceilings) fmt::print(text, "\n{}", format_ceilings(*ceilings, options.launches));
  const Ceilings* held_to = ceilings && ranks == 2 ? &*ceilings : nullptr;
  fmt::print(text, "\n{}", comparison.tables(options.collective, ranks, options.launches, held_to));
  if (options.csv) {
    OutputFile out(*options.csv);
    std::fputs(comparison.csv(options.collective, ranks).c_str(), out.get());
  }
  const long long wrong = comparison.wrong();
  fmt::print(text, "\n# Out of bounds values : {} {}\n", wrong, wrong == 0 ? "OK" : "FAILED");
  return wrong == 0 ? 0 : 1;
}

}  // namespace strata::perf
