// benchmarks/perf/table_sink.cpp — nccl-tests' table with strata-perf's header (sinks.hpp).
#include <iterator>

#include <fmt/format.h>

#include <perf/sinks.hpp>

namespace strata::perf {

std::string table_preamble(std::string_view tool, std::string_view transport, const RunInfo& info) {
  const Options& o = info.options;
  std::string text;
  auto out = std::back_inserter(text);
  fmt::format_to(out, "# Collective test starting: {} {}\n", tool, operation_name(o));
  fmt::format_to(out,
                 "# nRanks {} transport {} algo {} minBytes {} maxBytes {} step: {}(factor) "
                 "warmup iters: {} iters: {} validation: {}\n",
                 info.ranks, transport, info.algorithm, o.min_bytes, o.max_bytes, o.step_factor,
                 o.warmup_iters, o.iters, o.check ? 1 : 0);
  text += "#\n# Using devices\n";
  for (std::size_t r = 0; r < info.rank_info.size(); ++r) {
    const RankInfo& rank = info.rank_info[r];
    fmt::format_to(out, "#  Rank {:>2} Pid {:>6} on {:>10} {}\n", r, rank.pid, rank.host,
                   rank.where);
  }
  for (std::size_t s = 0; s < info.servers.size(); ++s) {
    const RankInfo& server = info.servers[s];
    fmt::format_to(out, "#  PS   {:>2} Pid {:>6} on {:>10} {}\n", s, server.pid, server.host,
                   server.where);
  }
  return text + "#\n";
}

void TableSink::begin(const RunInfo& info) {
  const Options& o = info.options;
  collective_ = operation_name(o);
  info_ = info;
  std::string text = table_preamble("strata-perf", to_string(o.transport), info);
  if (info.ceilings) text += format_ceilings(*info.ceilings) + "#\n";
  text += table_header();
  write_flushed(out_, text);
}

void TableSink::row(const Row& row) {
  last_ = row;
  write_flushed(out_, table_row(row));
}

void TableSink::end(const Summary& summary) {
  std::string text = table_footer(summary.out_of_bounds, summary.average_busbw_gbps);
  if (const auto share = last_ ? share_of_tcp_ceiling(info_, *last_) : std::nullopt) {
    const double ceiling = info_.ceilings->tcp_duplex_for(last_->bytes);
    text += fmt::format(
        "# Largest size {}: busbw {:.3f} GB/s = {:.0f}% of the full-duplex TCP ceiling "
        "({:.3f} GB/s each way, arrays in {})\n",
        format_size(last_->bytes), *share * ceiling / 1e9, 100 * *share, ceiling / 1e9,
        last_->bytes >= Ceilings::kMemoryBytes ? "memory" : "cache");
  }
  write_flushed(out_,
                text + fmt::format("# Collective test concluded: strata-perf {}\n", collective_));
}

}  // namespace strata::perf
