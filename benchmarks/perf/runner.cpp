// benchmarks/perf/runner.cpp — the records of the "# Using devices" header (runner.hpp).
#include <perf/runner.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include <fmt/format.h>

namespace strata::perf {

std::vector<std::uint8_t> own_rank_record(std::string_view where) {
  char host[65] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  const std::string own = fmt::format("{}\t{}\t{}", static_cast<long>(::getpid()), host, where);
  std::vector<std::uint8_t> record(kRankRecordBytes, 0);
  std::memcpy(record.data(), own.data(), std::min(own.size(), kRankRecordBytes - 1));
  return record;
}

std::vector<RankInfo> parse_rank_records(std::span<const std::uint8_t> records, int ranks) {
  std::vector<RankInfo> infos;
  for (std::size_t r = 0; r < static_cast<std::size_t>(ranks); ++r) {
    const auto* record = reinterpret_cast<const char*>(records.data() + kRankRecordBytes * r);
    const std::string_view text(record, strnlen(record, kRankRecordBytes));
    const auto tab1 = text.find('\t');
    const auto tab2 = text.find('\t', tab1 + 1);
    RankInfo info;
    info.pid = std::atol(std::string(text.substr(0, tab1)).c_str());
    info.host = std::string(text.substr(tab1 + 1, tab2 - tab1 - 1));
    info.where = std::string(text.substr(tab2 + 1));
    infos.push_back(std::move(info));
  }
  return infos;
}

}  // namespace strata::perf
