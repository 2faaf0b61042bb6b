// strata/communicator/collective.hpp — the call vocabulary under the communicator's names.
//
// The description of a call lives in core (core/collective.hpp) so that algorithms and
// transports need nothing from this layer; communicator code and its users keep naming it
// `communicator::CollectiveCall`.
#pragma once

#include <strata/core/collective.hpp>

namespace strata::communicator {

using strata::Collective;
using strata::CollectiveCall;
using strata::describe;
using strata::has_root;
using strata::reduces;

}  // namespace strata::communicator
