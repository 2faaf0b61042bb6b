// benchmarks/perf/peers/peer_rank.cpp — what a peer's adapter throws for what it does not run
// (peer_rank.hpp).
#include <perf/peers/peer_rank.hpp>

namespace strata::perf::peers {

void unsupported_collective(std::string_view name) {
  throw std::logic_error(fmt::format("strata-perf's peers do not run {}", name));
}

}  // namespace strata::perf::peers
