// strata/impl/src.hpp — strata's non-template parts, for the one translation unit of a program
// built with STRATA_SEPARATE_COMPILATION that compiles them (config.hpp). The strata::compiled
// CMake target is that unit; without CMake, compile a .cpp holding only this include once, with
// STRATA_SEPARATE_COMPILATION defined there and everywhere else.
#pragma once

#include <strata/config.hpp>

#if STRATA_HEADER_ONLY
#error "strata/impl/src.hpp needs STRATA_SEPARATE_COMPILATION defined (header-only needs no src)"
#endif

#include <strata/checkpoint/checkpoint.hpp>
#include <strata/checkpoint/manager.hpp>
#include <strata/checkpoint/safetensors.hpp>
#include <strata/cluster/resolve.hpp>
#include <strata/cluster/tf_config.hpp>
#include <strata/communicator/tcp.hpp>
#include <strata/coordinator/cluster_coordinator.hpp>
#include <strata/coordinator/worker_server.hpp>
#include <strata/core/reduce.hpp>
#include <strata/ps/client.hpp>
#include <strata/ps/server.hpp>
#include <strata/resolve.hpp>

#include <strata/checkpoint/impl/checkpoint.ipp>
#include <strata/checkpoint/impl/manager.ipp>
#include <strata/checkpoint/impl/safetensors.ipp>
#include <strata/cluster/impl/resolve.ipp>
#include <strata/cluster/impl/tf_config.ipp>
#include <strata/communicator/impl/tcp.ipp>
#include <strata/coordinator/impl/cluster_coordinator.ipp>
#include <strata/coordinator/impl/worker_server.ipp>
#include <strata/core/impl/reduce.ipp>
#include <strata/impl/resolve.ipp>
#include <strata/ps/impl/client.ipp>
#include <strata/ps/impl/server.ipp>
