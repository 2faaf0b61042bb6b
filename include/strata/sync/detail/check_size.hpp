// strata/sync/detail/check_size.hpp — the checks sync policies make before an update.
#pragma once

#include <cstddef>
#include <string_view>

#include <fmt/format.h>

#include <strata/core/error.hpp>
#include <strata/placement/variable.hpp>

namespace strata::sync::detail {

/// @throws UsageError naming the replica when `size` differs from the variable's.
template <class Context>
void check_size(Context& context, std::string_view operation, std::size_t size,
                std::size_t variable_size) {
  if (size == variable_size) return;
  throw UsageError(context.replica_id_in_sync_group(), operation,
                   fmt::format("got {} elements for a variable of {}", size, variable_size),
                   "pass one value per element of the variable");
}

/// @throws UsageError naming the replica when a variable of aggregation `none` is updated by
///         more than one replica: there is no one value to give them.
template <class Context>
void require_aggregation(Context& context, std::string_view operation,
                         placement::VariableAggregation aggregation) {
  if (aggregation != placement::VariableAggregation::none) return;
  throw UsageError(context.replica_id_in_sync_group(), operation,
                   fmt::format("the variable has aggregation 'none' but {} replicas update it",
                               context.num_replicas_in_sync()),
                   "create the variable with VariableAggregation::mean, sum or "
                   "only_first_replica");
}

}  // namespace strata::sync::detail
