// strata/fwd.hpp — forward declarations of strata's class templates and classes, for headers
// that name them without needing their definitions.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>

#include <strata/core/data_type.hpp>

namespace strata {
enum class ReduceOp : std::uint8_t;
enum class Collective : std::uint8_t;
struct CollectiveCall;
class Error;
class TimeoutError;
class PeerFailureError;
class MismatchError;
class ConfigurationError;
class UsageError;
class Deadline;
template <class E>
struct EnumNames;
struct StrategyOptions;
template <class T>
class PerReplica;
template <class StrategyType>
class ReplicaContext;
}  // namespace strata

namespace strata::communicator {
struct CommunicatorOptions;
struct CallOptions;
class Work;
template <class AllReduceAlgorithm>
class LocalCommunicator;
class SelfCommunicator;
enum class TcpAllReduce : std::uint8_t;
struct TcpOptions;
struct TcpMembership;
class TcpCommunicator;
template <class Inter>
class HierarchicalCommunicator;
}  // namespace strata::communicator

namespace strata::algorithms {
struct AllReduceReduceToOne;
struct AllReduceScatterGather;
struct AllReduceRing;
struct AllReduceRecursiveDoubling;
struct AllReduceHalvingDoubling;
struct BroadcastDirect;
struct BroadcastRing;
struct ReduceDirect;
struct ReduceRing;
struct AllGatherDirect;
struct AllGatherRing;
struct ReduceScatterDirect;
struct ReduceScatterRing;
struct BarrierDissemination;
}  // namespace strata::algorithms

namespace strata::cluster {
enum class TaskType : std::uint8_t;
struct Address;
struct Task;
class ClusterSpec;
struct TfConfig;
struct LauncherEnvironment;
struct ExchangedAddresses;
class ListeningSocket;
struct ResolveOptions;
struct ResolvedCluster;
}  // namespace strata::cluster

namespace strata::transport::tcp {
struct StoreOptions;
}  // namespace strata::transport::tcp

namespace strata::placement {
enum class UpdateSite : std::uint8_t;
struct CopyPerReplica;
struct SharedCopy;
struct Mirrored;
struct CentralStorage;
struct OneDevice;
struct Default;
enum class VariableAggregation;
template <std::floating_point T, class Allocator = std::allocator<T>>
class Variable;
}  // namespace strata::placement

namespace strata::sync {
struct Synchronous;
}  // namespace strata::sync
