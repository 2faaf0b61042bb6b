// benchmarks/perf/compare.hpp — `strata-perf --compare`: strata next to its peers, measured in
// the same run on the same machine.
//
// The contenders run one after another as separate programs, each with the same sizes, type, op,
// ranks, warm-up and iteration counts and the same data check (check.hpp), and each writes
// strata-perf's CSV (report.hpp) to a file this process reads back:
//   strata over TCP        strata-perf --transport tcp  (processes on 127.0.0.1)
//   strata in process      strata-perf --transport local (threads)
//   Gloo                   strata-perf-gloo --algo all   (ring, ring_chunked, halving_doubling,
//                          bcube over Gloo's TCP transport), when libgloo-dev was found
//   OpenMPI over TCP       mpirun --mca btl tcp,self --mca pml ob1 strata-perf-mpi
//   OpenMPI, defaults      mpirun strata-perf-mpi (shared memory between processes)
// Every contender places its ranks alike (--bind, bind.hpp): the ranks strata-perf and
// strata-perf-gloo start, and mpirun's (--bind-to core or none).
// With --launches K every contender runs K times, interleaved (launch 1 of each, then launch 2
// of each, ...), so that a noisy neighbour hurts all of them alike; the tables show, per size,
// the median over launches of each contender's in-place time, the bus bandwidth of that time,
// and the fastest and slowest launch. Any wrong value in any launch of anyone fails the comparison
// (exit status 1).
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "bind.hpp"
#include "ceiling_report.hpp"
#include "nccl_format.hpp"
#include "options.hpp"
#include "report.hpp"

namespace strata::perf {

/// One row of a contender's CSV: the in-place measurement at one size.
struct PeerRow {
  std::size_t bytes = 0;
  double time_us = 0;
  long long wrong = 0;
};

/// What one launch of one program produced: one series per algo column value in its CSV.
struct Series {
  std::string label;  ///< "strata tcp", "gloo ring", "mpi tcp", ...
  bool strata = false;
  bool tcp = false;  ///< moves its bytes over TCP (the peers strata's TCP ring must beat)
  std::vector<PeerRow> rows;
  /// The program, when it reports several algorithms ("gloo"): the tables add its best.
  std::string family{};
};

namespace detail::compare {

inline std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ','))
    fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

inline double to_double(const std::string& text, std::string_view what) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0)
    throw std::runtime_error(fmt::format("bad {} '{}'", what, text));
  return value;
}

}  // namespace detail::compare

/// Reads strata-perf's CSV (report.hpp's CsvSink), as the peers write it too: one series per
/// value of the algo column, in the order they first appear, labelled with that value.
inline std::vector<Series> read_series_csv(const std::string& path) {
  namespace d = detail::compare;
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read '{}'", path));
  std::string line;
  if (!std::getline(in, line)) throw std::runtime_error(fmt::format("'{}' is empty", path));
  const auto header = d::split_csv_line(line);
  auto column = [&](std::string_view name) {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end())
      throw std::runtime_error(fmt::format("'{}' has no column '{}'", path, name));
    return static_cast<std::size_t>(it - header.begin());
  };
  const std::size_t algo = column("algo"), bytes = column("size_bytes"),
                    time = column("ip_time_us"), wrong = column("ip_wrong");
  std::vector<Series> series;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto fields = d::split_csv_line(line);
    if (fields.size() < header.size())
      throw std::runtime_error(fmt::format("'{}': short line '{}'", path, line));
    const std::string& label = fields[algo];
    auto it = std::find_if(series.begin(), series.end(),
                           [&](const Series& s) { return s.label == label; });
    if (it == series.end()) {
      series.push_back(Series{label, false, false, {}});
      it = series.end() - 1;
    }
    PeerRow row;
    row.bytes = static_cast<std::size_t>(d::to_double(fields[bytes], "size"));
    row.time_us = d::to_double(fields[time], "time");
    row.wrong =
        fields[wrong].empty() ? 0 : static_cast<long long>(d::to_double(fields[wrong], "#wrong"));
    it->rows.push_back(row);
  }
  return series;
}

/// A program to run for the comparison, and how to name its series.
struct Contender {
  std::string name;  ///< for messages: "strata tcp", "Gloo", "OpenMPI (TCP)"
  std::vector<std::string> argv;
  /// The series' label; with `per_algo`, "label algo" for each algo the program reports.
  std::string label;
  bool per_algo = false;
  bool strata = false;
  bool tcp = false;
};

namespace detail::compare {

/// Runs `argv` with stdout sent to /dev/null and stderr inherited; kills it at `deadline`.
/// Returns its exit status (128 + signal when a signal ended it).
inline int run_program(const std::vector<std::string>& argv,
                       std::chrono::steady_clock::time_point deadline) {
  std::vector<char*> args;
  for (const auto& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::setpgid(0, 0);  // its own process group, so a kill reaches mpirun's ranks too
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 1);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    if (done < 0 && errno != EINTR)
      throw std::runtime_error(fmt::format("waitpid: {}", std::strerror(errno)));
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return 128 + SIGKILL;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

inline std::string format_time(double us) {
  return us >= 1e4   ? fmt::format("{:.0f}", us)
         : us >= 100 ? fmt::format("{:.1f}", us)
                     : fmt::format("{:.2f}", us);
}

}  // namespace detail::compare

/// Every contender's series over all launches, merged: per label and size, the in-place times.
class Comparison {
 public:
  void add(const std::vector<Series>& launch) {
    for (const Series& s : launch) {
      auto& entry = entries_[s.label];
      entry.strata = s.strata;
      entry.tcp = s.tcp;
      entry.family = s.family;
      if (std::find(order_.begin(), order_.end(), s.label) == order_.end())
        order_.push_back(s.label);
      for (const PeerRow& row : s.rows) {
        entry.times[row.bytes].push_back(row.time_us);
        entry.wrong += row.wrong;
        sizes_.insert(std::lower_bound(sizes_.begin(), sizes_.end(), row.bytes), row.bytes);
        sizes_.erase(std::unique(sizes_.begin(), sizes_.end()), sizes_.end());
      }
    }
  }

  long long wrong() const {
    long long total = 0;
    for (const auto& [label, entry] : entries_)
      total += entry.wrong;
    return total;
  }

  /// The two tables (median time, busbw of that time, and strata's ratios) as Markdown; with
  /// the ceilings (2 ranks), strata tcp's share of the full-duplex TCP rate for its size. A
  /// program with several algorithms gets a "best" column after them: per size, its fastest
  /// algorithm's median.
  std::string tables(Collective kind, int ranks, int launches,
                     const Ceilings* ceilings = nullptr) const {
    namespace d = detail::compare;
    struct Column {
      std::string label;
      std::vector<std::string> members;  // more than one: the family's best
    };
    std::vector<Column> columns;
    for (std::size_t i = 0; i < order_.size(); ++i) {
      columns.push_back({order_[i], {order_[i]}});
      const std::string& family = entries_.at(order_[i]).family;
      const bool last_of_family = !family.empty() && (i + 1 == order_.size() ||
                                                      entries_.at(order_[i + 1]).family != family);
      if (!last_of_family) continue;
      Column best{family + " best", {}};
      for (const auto& label : order_)
        if (entries_.at(label).family == family) best.members.push_back(label);
      if (best.members.size() > 1) columns.push_back(std::move(best));
    }
    const auto column_time = [&](const Column& column, std::size_t bytes) {
      std::optional<double> fastest;
      for (const auto& label : column.members)
        if (const auto t = median_time(label, bytes); t && (!fastest || *t < *fastest)) fastest = t;
      return fastest;
    };
    std::string out;
    const auto header = [&](std::string_view what, bool ratios) {
      std::string line = fmt::format("| size |");
      std::string rule = "| ---: |";
      for (const auto& column : columns) {
        line += fmt::format(" {} |", column.label);
        rule += " ---: |";
      }
      if (ratios) {
        line += " strata tcp / best TCP peer | best strata / best peer |";
        rule += " ---: | ---: |";
        if (ceilings != nullptr) {
          line += " strata tcp / TCP ceiling |";
          rule += " ---: |";
        }
      }
      return fmt::format("{}, median of {} launch{}, {} ranks, in place:\n\n{}\n{}\n", what,
                         launches, launches == 1 ? "" : "es", ranks, line, rule);
    };
    out += header("Time per call (µs)", false);
    for (const std::size_t bytes : sizes_) {
      out += fmt::format("| {} |", format_size(bytes));
      for (const auto& column : columns) {
        const auto t = column_time(column, bytes);
        out += t ? fmt::format(" {} |", d::format_time(*t)) : std::string(" – |");
      }
      out += '\n';
    }
    out += '\n';
    out += header("Bus bandwidth (GB/s, nccl-tests' busbw)", true);
    for (const std::size_t bytes : sizes_) {
      out += fmt::format("| {} |", format_size(bytes));
      double strata_tcp = 0, strata_best = 0, tcp_peer = 0, any_peer = 0;
      for (const auto& column : columns) {
        const auto t = column_time(column, bytes);
        if (!t) {
          out += " – |";
          continue;
        }
        const double busbw = bus_bandwidth_gbps(kind, ranks, bytes, *t * 1e-6);
        out += fmt::format(" {:.3g} |", busbw);
        const Entry& entry = entries_.at(column.members.front());
        if (entry.strata) {
          strata_best = std::max(strata_best, busbw);
          if (entry.tcp) strata_tcp = std::max(strata_tcp, busbw);
        } else {
          any_peer = std::max(any_peer, busbw);
          if (entry.tcp) tcp_peer = std::max(tcp_peer, busbw);
        }
      }
      const auto ratio = [](double ours, double theirs) {
        return ours > 0 && theirs > 0 ? fmt::format(" {:.2f}× |", ours / theirs)
                                      : std::string(" – |");
      };
      out += ratio(strata_tcp, tcp_peer) + ratio(strata_best, any_peer);
      // Below 1 MiB a message fits the socket buffers and is no streaming measurement.
      if (ceilings != nullptr)
        out += bytes >= (std::size_t{1} << 20)
                   ? fmt::format(" {:.0f}% |",
                                 100 * strata_tcp / (ceilings->tcp_duplex_for(bytes) / 1e9))
                   : std::string(" – |");
      out += '\n';
    }
    // A median hides how far apart the launches were; on a shared machine that is most of
    // what there is to know about a single figure.
    if (launches > 1) {
      out += fmt::format(
          "\nSpread of the time per call over the {} launches (µs, fastest–slowest), {} ranks, "
          "in place:\n\n| size |",
          launches, ranks);
      std::string rule = "| ---: |";
      for (const auto& label : order_) {
        out += fmt::format(" {} |", label);
        rule += " ---: |";
      }
      out += '\n' + rule + '\n';
      for (const std::size_t bytes : sizes_) {
        out += fmt::format("| {} |", format_size(bytes));
        for (const auto& label : order_) {
          const auto range = time_range(label, bytes);
          out += range ? fmt::format(" {}–{} |", d::format_time(range->first),
                                     d::format_time(range->second))
                       : std::string(" – |");
        }
        out += '\n';
      }
    }
    return out;
  }

  /// Long-form CSV: one line per contender and size with the median time and its busbw.
  std::string csv(Collective kind, int ranks) const {
    std::string out =
        "contender,strata,tcp,ranks,size_bytes,median_time_us,busbw_gbps,launches,min_time_us,"
        "max_time_us\n";
    for (const auto& label : order_) {
      const Entry& entry = entries_.at(label);
      for (const auto& [bytes, times] : entry.times) {
        const double t = detail::compare::median(times);
        const auto [fastest, slowest] = std::minmax_element(times.begin(), times.end());
        out += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", label, entry.strata ? 1 : 0,
                           entry.tcp ? 1 : 0, ranks, bytes, t,
                           bus_bandwidth_gbps(kind, ranks, bytes, t * 1e-6), times.size(), *fastest,
                           *slowest);
      }
    }
    return out;
  }

 private:
  struct Entry {
    bool strata = false;
    bool tcp = false;
    std::string family;
    long long wrong = 0;
    std::map<std::size_t, std::vector<double>> times;
  };

  std::optional<std::pair<double, double>> time_range(const std::string& label,
                                                      std::size_t bytes) const {
    const Entry& entry = entries_.at(label);
    const auto it = entry.times.find(bytes);
    if (it == entry.times.end() || it->second.empty()) return std::nullopt;
    const auto [fastest, slowest] = std::minmax_element(it->second.begin(), it->second.end());
    return std::pair{*fastest, *slowest};
  }

  std::optional<double> median_time(const std::string& label, std::size_t bytes) const {
    const Entry& entry = entries_.at(label);
    const auto it = entry.times.find(bytes);
    if (it == entry.times.end() || it->second.empty()) return std::nullopt;
    return detail::compare::median(it->second);
  }

  std::map<std::string, Entry> entries_;
  std::vector<std::string> order_;
  std::vector<std::size_t> sizes_;
};

/// The arguments every contender shares: the sweep, type, op, iterations and check.
inline std::vector<std::string> shared_arguments(const Options& options, int ranks) {
  return {std::string(to_string(options.collective)),
          "-b",
          std::to_string(options.min_bytes),
          "-e",
          std::to_string(options.max_bytes),
          "-f",
          std::to_string(options.step_factor),
          "-w",
          std::to_string(options.warmup_iters),
          "-n",
          std::to_string(options.iters),
          "-d",
          std::string(to_string(options.type)),
          "-o",
          std::string(to_string(options.op)),
          "-c",
          options.check ? "1" : "0",
          "--ranks",
          std::to_string(ranks),
          "--bind",
          std::string(to_string(options.bind))};
}

/// Where the peer programs are: next to this executable.
inline std::filesystem::path own_directory() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::current_path() : self.parent_path();
}

/// mpirun, from the build (STRATA_PERF_MPIEXEC) or the PATH; empty when there is none.
inline std::string find_mpiexec() {
#ifdef STRATA_PERF_MPIEXEC
  if (std::filesystem::exists(STRATA_PERF_MPIEXEC)) return STRATA_PERF_MPIEXEC;
#endif
  const char* path = std::getenv("PATH");  // NOLINT(concurrency-mt-unsafe)
  std::istringstream dirs(path == nullptr ? "" : path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const auto candidate = std::filesystem::path(dir) / "mpirun";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return {};
}

/// mpirun's options that place rank r where cpu_of_rank puts strata's: a rankfile (written
/// into `scratch`) of the CPUs' OS numbers. Open MPI yields while it waits only when it knows
/// a core is overloaded, which a rankfile hides: it is told, as it tells itself under
/// --oversubscribe, or ranks spinning on one core starve each other (milliseconds per call).
inline std::vector<std::string> mpirun_placement(Binding binding, int ranks,
                                                 const std::filesystem::path& scratch) {
  const auto cpus = allowed_cpus();
  if (!cpu_of_rank(binding, 0, ranks, cpus)) return {"--bind-to", "none"};
  const auto path = scratch / "mpi.rankfile";
  std::ofstream file(path);
  for (int r = 0; r < ranks; ++r)
    file << fmt::format("rank {}=localhost slot={}\n", r, *cpu_of_rank(binding, r, ranks, cpus));
  if (!file.flush()) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
  std::vector<std::string> placement = {"--rankfile", path.string(), "--mca",
                                        "rmaps_rank_file_physical", "1"};
  if (static_cast<std::size_t>(ranks) > cpus.size())
    placement.insert(placement.end(), {"--mca", "mpi_yield_when_idle", "1"});
  return placement;
}

/// The contenders available on this machine; `skipped` gets one line per peer that is not.
/// `scratch`: a directory that outlives their runs.
inline std::vector<Contender> contenders(const Options& options, int ranks,
                                         std::vector<std::string>& skipped,
                                         const std::filesystem::path& scratch) {
  const auto dir = own_directory();
  const auto shared = shared_arguments(options, ranks);
  auto with = [&](std::vector<std::string> head, std::vector<std::string> tail) {
    head.insert(head.end(), shared.begin(), shared.end());
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  const std::string self = (dir / "strata-perf").string();
  std::vector<std::string> tcp_tail = {"--transport", "tcp"};
  if (options.algorithm != Algorithm::automatic) {
    tcp_tail.push_back("--algo");
    tcp_tail.emplace_back(to_string(options.algorithm));
  }
  if (options.congestion) {
    tcp_tail.push_back("--congestion");
    tcp_tail.push_back(*options.congestion);
  }
  if (options.lend_from) {
    tcp_tail.push_back("--lend-from");
    tcp_tail.push_back(*options.lend_from == SIZE_MAX ? std::string("off")
                                                      : std::to_string(*options.lend_from));
  }
  std::vector<Contender> list = {
      {"strata over TCP", with({self}, tcp_tail), "strata tcp", false, true, true},
      {"strata in process", with({self}, {"--transport", "local"}), "strata local", false, true,
       false},
  };
  if (options.type == DataType::float16 || options.type == DataType::bfloat16) {
    skipped.push_back(
        fmt::format("Gloo and OpenMPI: neither has {} here (strata alone is measured; "
                    "-d float or double compares)",
                    to_string(options.type)));
    return list;
  }
  const auto gloo = dir / "strata-perf-gloo";
  if (std::filesystem::exists(gloo))
    list.push_back({"Gloo", with({gloo.string()}, {"--algo", "all"}), "gloo", true, false, true});
  else
    skipped.push_back("Gloo: strata-perf-gloo was not built (install libgloo-dev and reconfigure)");
  const auto mpi = dir / "strata-perf-mpi";
  const std::string mpiexec = find_mpiexec();
  if (std::filesystem::exists(mpi) && !mpiexec.empty()) {
    // The same placement as --bind gives the others.
    std::vector<std::string> launcher = {mpiexec, "-n", std::to_string(ranks), "--oversubscribe"};
    const auto placement = mpirun_placement(options.bind, ranks, scratch);
    launcher.insert(launcher.end(), placement.begin(), placement.end());
    if (::geteuid() == 0) launcher.emplace_back("--allow-run-as-root");
    auto tcp = launcher;
    for (const char* arg :
         {"--mca", "btl", "tcp,self", "--mca", "pml", "ob1", "--mca", "btl_tcp_if_include", "lo"})
      tcp.emplace_back(arg);
    tcp.push_back(mpi.string());
    auto shm = launcher;
    shm.push_back(mpi.string());
    list.push_back(
        {"OpenMPI over TCP", with(tcp, {"--algo", "tcp"}), "mpi tcp", false, false, true});
    list.push_back({"OpenMPI with its defaults (shared memory)", with(shm, {"--algo", "default"}),
                    "mpi default", false, false, false});
  } else {
    skipped.push_back(
        "OpenMPI: strata-perf-mpi or mpirun is missing (install libopenmpi-dev and openmpi-bin "
        "and reconfigure)");
  }
  return list;
}

/// The order of the contenders in launch `launch` (0-based): the list rotated by one more each
/// launch, so that each runs first in turn, right after the ceilings' seconds of full-speed
/// TCP (with --ceiling), and after each neighbour: what the previous program leaves behind on a
/// shared machine then falls on every contender alike.
inline std::vector<std::size_t> launch_order(std::size_t contenders, int launch) {
  std::vector<std::size_t> order(contenders);
  for (std::size_t i = 0; i < contenders; ++i)
    order[i] = (i + static_cast<std::size_t>(launch)) % contenders;
  return order;
}

/// Runs the comparison; prints the tables (and the ceilings with --ceiling) on stdout, or on
/// stderr when the CSV goes to stdout.
/// Returns strata-perf's exit status: 0, 1 on wrong values, 3 when a contender failed.
inline int run_comparison(const Options& options, int ranks) {
  namespace d = detail::compare;
  char pattern[] = "/tmp/strata-perf-compare-XXXXXX";
  if (::mkdtemp(pattern) == nullptr)
    throw std::runtime_error(fmt::format("mkdtemp: {}", std::strerror(errno)));
  const std::filesystem::path scratch(pattern);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{scratch};

  std::vector<std::string> skipped;
  const auto list = contenders(options, ranks, skipped, scratch);

  // With --csv - the CSV is stdout, and the tables go to stderr (as without --compare).
  std::FILE* const text = options.csv == "-" ? stderr : stdout;
  fmt::print(
      text,
      "# strata-perf --compare: {} {}, {} ranks, {} to {}, -f {}, -w {}, -n {}, {} launch{}\n",
      to_string(options.collective), to_string(options.type), ranks, format_size(options.min_bytes),
      format_size(options.max_bytes), options.step_factor, options.warmup_iters, options.iters,
      options.launches, options.launches == 1 ? "" : "es");
  for (const auto& line : skipped)
    fmt::print(text, "# skipped: {}\n", line);
  std::fflush(text);

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
      const Contender& contender = list[index];
      const auto csv = scratch / fmt::format("launch{}-{}.csv", launch, index);
      auto argv = contender.argv;
      argv.push_back("--csv");
      argv.push_back(csv.string());
      fmt::print(stderr, "strata-perf --compare: launch {}/{}: {}\n", launch + 1, options.launches,
                 contender.name);
      const int status = d::run_program(argv, std::chrono::steady_clock::now() + budget);
      if (status != 0) {
        fmt::print(stderr, "strata-perf --compare: {} failed with exit status {}{}:\n  {}\n",
                   contender.name, status,
                   status == 128 + SIGKILL ? " (killed at the --run-timeout)" : "",
                   fmt::join(argv, " "));
        return status == 1 ? 1 : 3;
      }
      auto series = read_series_csv(csv.string());
      for (auto& s : series) {
        s.label = contender.per_algo ? contender.label + " " + s.label : contender.label;
        if (contender.per_algo) s.family = contender.label;
        s.strata = contender.strata;
        s.tcp = contender.tcp;
      }
      comparison.add(series);
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
