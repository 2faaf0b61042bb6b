// strata/cluster/environment.hpp — the environment resolvers read, under the cluster's names.
//
// Environments live in core (core/environment.hpp), the one place strata reads variables.
#pragma once

#include <strata/core/environment.hpp>

namespace strata::cluster {

using strata::Environment;
using strata::environment_from;
using strata::process_environment;

}  // namespace strata::cluster
