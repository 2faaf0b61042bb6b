// benchmarks/perf/json_sink.cpp — the run as one JSON document (sinks.hpp).
#include <cstdint>

#include <perf/sinks.hpp>

namespace strata::perf {

namespace {

nlohmann::json settings_of(const RunInfo& info) {
  const Options& o = info.options;
  nlohmann::json j = {
      {"tool", "strata-perf"},
      {"collective", operation_name(o)},
      {"transport", to_string(o.transport)},
      {"algo", info.algorithm},
      {"ranks", info.ranks},
      {"type", to_string(o.type)},
      {"redop", nullptr},
      {"root", nullptr},
      {"min_bytes", o.min_bytes},
      {"max_bytes", o.max_bytes},
      {"step_factor", o.step_factor},
      {"warmup_iters", o.warmup_iters},
      {"iters", o.iters},
      {"check", o.check},
      {"bind", to_string(o.bind)},
      {"congestion", nullptr},
      {"lend_from_bytes", nullptr},
      {"devices", nlohmann::json::array()},
      {"rows", nlohmann::json::array()},
  };
  if (communicator::reduces(o.collective)) j["redop"] = nccl_op_name(o.op);
  if (communicator::has_root(o.collective)) j["root"] = o.root;
  if (o.congestion) j["congestion"] = *o.congestion;
  if (o.lend_from && *o.lend_from != SIZE_MAX) j["lend_from_bytes"] = *o.lend_from;
  if (o.transport == Transport::ps) j["ps_shared_memory"] = o.ps_shared_memory;
  if (o.transport == Transport::shm) j["shared_buffers"] = o.shared_buffers;
  return j;
}

nlohmann::json ceilings_of(const Ceilings& c) {
  return {{"tcp_duplex_gbps", c.tcp_duplex / 1e9},
          {"tcp_duplex_1mib_buffers_gbps", c.tcp_duplex_1mib_buffers / 1e9},
          {"tcp_duplex_reno_gbps", c.tcp_duplex_reno / 1e9},
          {"tcp_duplex_memory_gbps", c.tcp_duplex_memory / 1e9},
          {"tcp_duplex_memory_reno_gbps", c.tcp_duplex_memory_reno / 1e9},
          {"tcp_congestion_control", c.congestion},
          {"cpus", c.cpus},
          {"tcp_round_trip_sleeping_us", c.round_trip_sleeping_us},
          {"tcp_round_trip_polling_us", c.round_trip_polling_us},
          {"memcpy_gbps", c.memcpy / 1e9},
          {"add_gbps", c.add / 1e9}};
}

nlohmann::json measurement_of(const Measurement& m) {
  nlohmann::json j = {{"time_us", m.time_us},
                      {"algbw_gbps", m.algbw_gbps},
                      {"busbw_gbps", m.busbw_gbps},
                      {"wrong", nullptr}};
  if (m.wrong) j["wrong"] = *m.wrong;
  return j;
}

}  // namespace

void JsonSink::begin(const RunInfo& info) {
  document_ = settings_of(info);
  info_ = info;
  for (std::size_t r = 0; r < info.rank_info.size(); ++r) {
    const RankInfo& rank = info.rank_info[r];
    document_["devices"].push_back(
        {{"rank", r}, {"pid", rank.pid}, {"host", rank.host}, {"where", rank.where}});
  }
  if (info.options.transport == Transport::ps) {
    document_["servers"] = nlohmann::json::array();
    for (std::size_t s = 0; s < info.servers.size(); ++s) {
      const RankInfo& server = info.servers[s];
      document_["servers"].push_back(
          {{"ps", s}, {"pid", server.pid}, {"host", server.host}, {"where", server.where}});
    }
  }
  if (info.ceilings) document_["ceiling"] = ceilings_of(*info.ceilings);
}

void JsonSink::row(const Row& row) {
  last_ = row;
  document_["rows"].push_back({{"size_bytes", row.bytes},
                               {"count", row.count},
                               {"type", row.type},
                               {"redop", row.redop},
                               {"root", row.root},
                               {"out_of_place", measurement_of(row.out_of_place)},
                               {"in_place", measurement_of(row.in_place)}});
}

void JsonSink::end(const Summary& summary) {
  document_["out_of_bounds"] = summary.out_of_bounds;
  document_["ok"] = summary.out_of_bounds == 0;
  document_["avg_busbw_gbps"] = summary.average_busbw_gbps;
  if (const auto share = last_ ? share_of_tcp_ceiling(info_, *last_) : std::nullopt)
    document_["largest_size_share_of_tcp_ceiling"] = *share;
  write_flushed(file_.get(), document_.dump(2) + "\n");
}

}  // namespace strata::perf
