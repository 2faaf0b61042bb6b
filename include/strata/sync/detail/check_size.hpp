// strata/sync/detail/check_size.hpp — the check every sync policy makes before an update.
#pragma once

#include <cstddef>
#include <string_view>

#include <fmt/format.h>

#include <strata/core/error.hpp>

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

}  // namespace strata::sync::detail
