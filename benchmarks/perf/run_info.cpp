// benchmarks/perf/run_info.cpp — the footer's summary and the ceiling share (run_info.hpp).
#include <perf/run_info.hpp>

#include <algorithm>

namespace strata::perf {

std::optional<double> share_of_tcp_ceiling(const RunInfo& info, const Row& row) {
  const Options& o = info.options;
  if (!info.ceilings || o.transport != Transport::tcp || o.collective != Collective::all_reduce ||
      info.ranks != 2)
    return std::nullopt;
  const double busbw = std::max(row.out_of_place.busbw_gbps, row.in_place.busbw_gbps);
  return busbw / (info.ceilings->tcp_duplex_for(row.bytes) / 1e9);
}

void SummaryBuilder::add(const Row& row) {
  for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
    busbw_sum_ += m->busbw_gbps;
    ++measurements_;
    summary_.out_of_bounds += m->ranks_wrong;
  }
  ++summary_.rows;
}

Summary SummaryBuilder::summary() const {
  Summary s = summary_;
  s.average_busbw_gbps = measurements_ == 0 ? 0.0 : busbw_sum_ / static_cast<double>(measurements_);
  return s;
}

}  // namespace strata::perf
