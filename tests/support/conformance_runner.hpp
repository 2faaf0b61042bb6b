// tests/support/conformance_runner.hpp — `ConformanceRunner<Comm>::run(CaseSpec)`: fills every
// rank's buffers, runs one collective on all ranks of a group (a RankTeam), and checks every
// rank's output (conformance_checks.hpp), split by index over the rank threads. It counts wrong
// elements (nccl-tests' #wrong) and reports the first, by (rank, index), with got and expected.
// `run_cases` runs a plan (sweep_plan.hpp) and summarizes it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <collective_reference/inputs.hpp>
#include <strata/communicator/collective.hpp>
#include <strata/communicator/options.hpp>
#include <strata/core/data_type.hpp>

#include "conformance_case.hpp"
#include "conformance_checks.hpp"
#include "rank_team.hpp"

namespace strata::testing {

/// Runs conformance cases on groups of `Comm` of any world size. Teams (threads and groups) are
/// created on first use per world size and kept; buffers are shared by all of them and freed
/// with the runner.
template <class Comm>
class ConformanceRunner {
 public:
  /// The largest world size the runner checks.
  static constexpr int kMaxRanks = kMaxConformanceRanks;

  /// `name` appears in messages, e.g. "local<scatter_gather>".
  explicit ConformanceRunner(std::string name, communicator::CommunicatorOptions options = {},
                             GroupFactory<Comm> create = created_by_comm<Comm>())
      : name_(std::move(name)), options_(options), create_(std::move(create)) {}

  RankTeam<Comm>& team(int size) {
    if (teams_.size() < static_cast<std::size_t>(size) + 1)
      teams_.resize(static_cast<std::size_t>(size) + 1);
    auto& team = teams_[static_cast<std::size_t>(size)];
    if (!team) team = std::make_unique<RankTeam<Comm>>(size, options_, create_);
    return *team;
  }

  /// Runs one case and checks it; the group is re-created if the case failed it.
  CaseResult run(const CaseSpec& spec) {
    return visit_data_type(spec.type,
                           [&]<class T>(std::type_identity<T>) { return run_typed<T>(spec); });
  }

 private:
  // Carves every rank's buffers for `spec` out of its storage.
  template <Element T>
  CaseLayout<T> layout_for(const CaseSpec& spec) {
    const auto un = static_cast<std::size_t>(spec.size);
    if (storage_.size() < un) storage_.resize(un);
    CaseLayout<T> layout;
    layout.in.resize(un);
    layout.out.resize(un);
    layout.in_count.resize(un);
    layout.out_count.resize(un);
    layout.buffer_count.resize(un);
    for (std::size_t r = 0; r < un; ++r) {
      std::size_t in_count = spec.count;
      std::size_t out_count = spec.count;
      if (spec.kind == Collective::all_gather) out_count = un * spec.count;
      if (spec.kind == Collective::reduce_scatter) in_count = un * spec.count;
      if (spec.kind == Collective::reduce && spec.empty_non_root_recv &&
          r != static_cast<std::size_t>(spec.root))
        out_count = 0;
      layout.in_count[r] = in_count;
      layout.out_count[r] = out_count;
      if (spec.in_place) {
        const std::size_t buffer = std::max(in_count, out_count);
        T* data = reinterpret_cast<T*>(storage_[r].region(0, buffer * sizeof(T)));
        layout.buffer_count[r] = buffer;
        layout.in[r] = data;
        layout.out[r] = data;
        if (spec.kind == Collective::all_gather) layout.in[r] = data + r * spec.count;
        if (spec.kind == Collective::reduce_scatter) layout.out[r] = data + r * spec.count;
      } else {
        layout.in[r] = reinterpret_cast<T*>(storage_[r].region(0, in_count * sizeof(T)));
        layout.out[r] = reinterpret_cast<T*>(storage_[r].region(1, out_count * sizeof(T)));
      }
    }
    return layout;
  }

  template <Element T>
  CaseResult run_typed(const CaseSpec& spec) {
    RankTeam<Comm>& team = this->team(spec.size);
    const auto un = static_cast<std::size_t>(spec.size);
    const CaseLayout<T> layout = layout_for<T>(spec);
    std::vector<std::string> thrown(un);
    std::vector<detail::Tally> tallies(un);
    auto body = [&](int rank) {
      const auto ur = static_cast<std::size_t>(rank);
      try {
        prepare<T>(spec, layout, rank);
        call<T>(team[rank], spec, layout, rank);
      } catch (const std::exception& error) {
        thrown[ur] = fmt::format("rank {} threw: {}", rank, error.what());
      } catch (...) {
        thrown[ur] = fmt::format("rank {} threw a non-std exception", rank);
      }
      team.arrive_and_wait();  // every rank's call has returned: outputs are final
      if (std::all_of(thrown.begin(), thrown.end(), [](const auto& t) { return t.empty(); })) {
        CaseChecker<T> checker(spec, layout, tallies[ur]);
        checker.check_part(rank);
        checker.check_guards(rank, storage_[ur]);
      }
    };
    const auto failures = team.run(body);
    CaseResult result = collect(spec, thrown, failures, tallies);
    if (!result.exceptions.empty()) team.reset();
    return result;
  }

  CaseResult collect(const CaseSpec& spec, const std::vector<std::string>& thrown,
                     const std::vector<std::exception_ptr>& failures,
                     const std::vector<detail::Tally>& tallies) const {
    CaseResult result;
    result.case_name = fmt::format("{} {}", name_, describe(spec));
    for (std::size_t r = 0; r < thrown.size(); ++r) {
      if (!thrown[r].empty()) result.exceptions.push_back(thrown[r]);
      if (failures[r]) result.exceptions.push_back(fmt::format("rank {}: harness failure", r));
    }
    detail::Tally total;
    for (const auto& tally : tallies)
      total.merge(tally);
    result.wrong = total.wrong;
    result.first_wrong = total.first;
    return result;
  }

  // Fills rank `rank`'s buffers: inputs, and the sentinel where outputs go.
  template <Element T>
  static void prepare(const CaseSpec& spec, const CaseLayout<T>& layout, int rank) {
    const auto ur = static_cast<std::size_t>(rank);
    const T sentinel = detail::sentinel_value<T>();
    const reference::Inputs<T> input(spec.op, spec.size);
    if (spec.in_place && spec.kind == Collective::all_gather) {
      // Only the own block holds input; the others must be overwritten.
      std::fill_n(buffer_of(spec, layout, rank), layout.buffer_count[ur], sentinel);
      for (std::size_t i = 0; i < spec.count; ++i)
        layout.in[ur][i] = input(rank, i);
    } else if (spec.in_place) {
      for (std::size_t i = 0; i < layout.buffer_count[ur]; ++i)
        layout.in[ur][i] = input(rank, i);
    } else {
      for (std::size_t i = 0; i < layout.in_count[ur]; ++i)
        layout.in[ur][i] = input(rank, i);
      std::fill_n(layout.out[ur], layout.out_count[ur], sentinel);
    }
  }

  // The start of rank `rank`'s in-place buffer.
  template <Element T>
  static T* buffer_of(const CaseSpec& spec, const CaseLayout<T>& layout, int rank) {
    const auto ur = static_cast<std::size_t>(rank);
    return spec.kind == Collective::all_gather ? layout.in[ur] - ur * spec.count : layout.in[ur];
  }

  template <Element T>
  static void call(Comm& comm, const CaseSpec& spec, const CaseLayout<T>& layout, int rank) {
    const auto ur = static_cast<std::size_t>(rank);
    if (spec.in_place) {
      const std::span<T> data(buffer_of(spec, layout, rank), layout.buffer_count[ur]);
      switch (spec.kind) {
        case Collective::all_reduce:
          comm.all_reduce(data, spec.op);
          break;
        case Collective::broadcast:
          comm.broadcast(data, spec.root);
          break;
        case Collective::reduce:
          comm.reduce(data, spec.op, spec.root);
          break;
        case Collective::all_gather:
          comm.all_gather(data);
          break;
        case Collective::reduce_scatter:
          comm.reduce_scatter(data, spec.op);
          break;
        case Collective::barrier:
          comm.barrier();
          break;
      }
      return;
    }
    const std::span<const T> send(layout.in[ur], layout.in_count[ur]);
    const std::span<T> recv(layout.out[ur], layout.out_count[ur]);
    switch (spec.kind) {
      case Collective::all_reduce:
        comm.all_reduce(send, recv, spec.op);
        break;
      case Collective::broadcast:
        comm.broadcast(send, recv, spec.root);
        break;
      case Collective::reduce:
        comm.reduce(send, recv, spec.op, spec.root);
        break;
      case Collective::all_gather:
        comm.all_gather(send, recv);
        break;
      case Collective::reduce_scatter:
        comm.reduce_scatter(send, recv, spec.op);
        break;
      case Collective::barrier:
        comm.barrier();
        break;
    }
  }

  std::string name_;
  communicator::CommunicatorOptions options_;
  GroupFactory<Comm> create_;
  std::vector<std::unique_ptr<RankTeam<Comm>>> teams_;
  std::vector<detail::RankStorage> storage_;
};

/// What a sweep found: how many cases ran and failed, and the messages of the first failures.
struct SweepSummary {
  std::size_t cases = 0;
  std::size_t failed = 0;
  std::size_t wrong = 0;  // wrong elements over every failed case
  std::vector<std::string> messages;
};

/// Runs `cases` in order; keeps the messages of the first `max_messages` failures.
template <class Comm>
SweepSummary run_cases(ConformanceRunner<Comm>& runner, std::span<const CaseSpec> cases,
                       std::size_t max_messages = 20) {
  SweepSummary summary;
  for (const CaseSpec& spec : cases) {
    const CaseResult result = runner.run(spec);
    ++summary.cases;
    if (result.ok()) continue;
    ++summary.failed;
    summary.wrong += result.wrong;
    if (summary.messages.size() < max_messages) summary.messages.push_back(result.message());
  }
  return summary;
}

}  // namespace strata::testing
