// strata/communicator/self.hpp — the communicator of a group of one.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/algorithms/all_reduce_reduce_to_one.hpp>
#include <strata/communicator/local.hpp>

namespace strata::communicator {

/// The communicator of a single replica (OneDevice and Default strategies): every collective
/// is the identity or a copy — all_reduce with `mean` divides by one — but calls are still
/// validated (spans, roots) and keep their deadlines and asynchronous forms, so code written
/// against `Communicator` runs unchanged on one replica.
class SelfCommunicator : public LocalCommunicator<algorithms::AllReduceReduceToOne> {
  using Base = LocalCommunicator<algorithms::AllReduceReduceToOne>;

 public:
  static constexpr std::string_view kName = "self";
  static constexpr int kMaxSize = 1;
  static constexpr bool kSpansProcesses = false;

  /// Creates the group of one. @throws UsageError unless size == 1.
  static std::vector<SelfCommunicator> create(int size = 1, CommunicatorOptions options = {}) {
    if (size != 1)
      throw UsageError(
          -1, "SelfCommunicator::create",
          fmt::format("a SelfCommunicator group has exactly one rank, got size {}", size),
          "use LocalCommunicator for several replicas");
    std::vector<SelfCommunicator> group;
    group.push_back(SelfCommunicator(std::move(Base::create(1, options).front())));
    return group;
  }

 private:
  explicit SelfCommunicator(Base&& base) : Base(std::move(base)) {}
};

}  // namespace strata::communicator
