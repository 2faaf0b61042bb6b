// strata/coordinator/functions.hpp — the functions a ClusterCoordinator can schedule, registered
// by name in the program that every task runs.
//
// TF's coordinator ships a traced function to the workers; C++ cannot ship closures, so every
// task registers the same functions under the same names, and the coordinator sends a name and
// the arguments' bytes (codec.hpp). A function takes the Worker it runs on first: its identity
// and its per-worker resources (TF's `create_per_worker_dataset`), built on each worker by a
// registered resource function and rebuilt on a worker that restarted.
#pragma once

#include <any>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/coordinator/codec.hpp>
#include <strata/core/detail/fnv1a.hpp>
#include <strata/core/error.hpp>

namespace strata::coordinator {

/// A per-worker resource: on each worker its own T, built there by a resource function
/// (ClusterCoordinator::create_per_worker). It ships as its id; a function reads its worker's
/// T with `worker.get(resource)`.
template <class T>
struct PerWorker {
  std::uint64_t id = 0;
};

template <class T>
struct Codec<PerWorker<T>> {
  static void encode(Writer& writer, const PerWorker<T>& value) { writer.le(value.id); }
  static PerWorker<T> decode(Reader& reader) { return {reader.le<std::uint64_t>()}; }
};

/// What a function sees of the worker it runs on.
class Worker {
 public:
  Worker(cluster::ClusterSpec cluster, int index)
      : cluster_(std::move(cluster)),
        index_(index),
        rank_(cluster_.collective_rank({cluster::TaskType::worker, index}).value_or(-1)) {}

  const cluster::ClusterSpec& cluster() const noexcept { return cluster_; }
  /// The worker task's index ("worker" job).
  int index() const noexcept { return index_; }
  /// Its rank in the collective group (chief first, then workers): a ps client's rank.
  int rank() const noexcept { return rank_; }
  /// The id of the scheduled function running now (the same on every attempt of it).
  std::uint64_t closure_id() const noexcept { return closure_id_; }

  /// This worker's instance of `resource`.
  /// @throws UsageError when the resource was not created on this worker, or is not a T.
  template <class T>
  T& get(PerWorker<T> resource) {
    const auto found = resources_.find(resource.id);
    if (found == resources_.end())
      throw UsageError(
          rank_, "Worker::get",
          fmt::format("per-worker resource {} does not exist on worker {}", resource.id, index_),
          "pass a PerWorker that ClusterCoordinator::create_per_worker returned");
    auto* value = std::any_cast<std::shared_ptr<T>>(&found->second);
    if (value == nullptr)
      throw UsageError(
          rank_, "Worker::get",
          fmt::format("per-worker resource {} is not a {}", resource.id, typeid(T).name()),
          "ask for the type its resource function returns");
    return **value;
  }

  // ---- for the worker's server (worker_server.hpp) -----------------------------------------

  void set_closure_id(std::uint64_t id) noexcept { closure_id_ = id; }
  bool has(std::uint64_t id) const { return resources_.contains(id); }
  void put(std::uint64_t id, std::any resource) { resources_[id] = std::move(resource); }
  /// Drops every resource (destroyed in reverse order of creation).
  void clear() {
    while (!resources_.empty())
      resources_.erase(std::prev(resources_.end()));
  }

 private:
  cluster::ClusterSpec cluster_;
  int index_;
  int rank_;
  std::uint64_t closure_id_ = 0;
  std::map<std::uint64_t, std::any> resources_;
};

namespace detail {

template <class F>
struct signature_of : signature_of<decltype(&F::operator())> {};
template <class R, class W, class... A>
struct signature_of<R (*)(W, A...)> {
  using result = R;
  using args = std::tuple<std::decay_t<A>...>;
  static constexpr bool takes_worker = std::is_same_v<W, Worker&>;
};
template <class C, class R, class W, class... A>
struct signature_of<R (C::*)(W, A...) const> : signature_of<R (*)(W, A...)> {};
template <class C, class R, class W, class... A>
struct signature_of<R (C::*)(W, A...)> : signature_of<R (*)(W, A...)> {};

template <class T>
inline constexpr bool shippable_result = std::is_void_v<T> || Shippable<T>;

template <class Tuple>
struct all_shippable;
template <class... A>
struct all_shippable<std::tuple<A...>> : std::bool_constant<(Shippable<A> && ...)> {};

/// A function's name with its signature: the worker checks that its own function of that name
/// has the same, so that no argument bytes are read as another type.
template <class R, class Args>
std::uint64_t signature_hash(std::string_view name) {
  std::uint64_t hash = strata::detail::fnv1a(strata::detail::kFnv1aBasis, name);
  hash = strata::detail::fnv1a(hash, std::string_view(typeid(R(*)(Args)).name()));
  return hash;
}

}  // namespace detail

/// A registered function that returns R from arguments Args...; what `schedule` takes.
template <class R, class... Args>
class Function {
 public:
  using result_type = R;
  const std::string& name() const noexcept { return name_; }
  std::uint64_t signature() const noexcept { return signature_; }

 private:
  friend class Functions;
  Function(std::string name, std::uint64_t signature)
      : name_(std::move(name)), signature_(signature) {}
  std::string name_;
  std::uint64_t signature_;
};

/// A registered resource function that builds a T on a worker from arguments Args...; what
/// `create_per_worker` takes.
template <class T, class... Args>
class ResourceFunction {
 public:
  const std::string& name() const noexcept { return name_; }
  std::uint64_t signature() const noexcept { return signature_; }

 private:
  friend class Functions;
  ResourceFunction(std::string name, std::uint64_t signature)
      : name_(std::move(name)), signature_(signature) {}
  std::string name_;
  std::uint64_t signature_;
};

/// The registry. Build it the same way on every task, before the coordinator or the workers'
/// servers start:
/// @code
///   strata::coordinator::Functions functions;
///   const auto data = functions.add_resource("data", [](Worker& w, std::uint64_t seed) {
///     return Batches(seed + w.index());
///   });
///   const auto step = functions.add("step", [](Worker& w, PerWorker<Batches> b, int n) {
///     return train_step(w.get(b), n);  // the loss, shipped back
///   });
/// @endcode
class Functions {
 public:
  /// Runs a function's argument bytes on `worker` and returns the result's bytes.
  using Invoke = std::function<std::vector<std::byte>(Worker&, std::span<const std::byte>)>;
  /// Builds a resource on `worker` from argument bytes.
  using Build = std::function<std::any(Worker&, std::span<const std::byte>)>;

  struct Entry {
    std::uint64_t signature = 0;
    bool resource = false;
    Invoke invoke;
    Build build;
  };

  /// Registers `function`, callable as `R(Worker&, Args...)`: Args and R (or void) shippable.
  /// @throws UsageError when `name` is taken.
  template <class F>
  auto add(std::string name, F function) {
    using Signature = detail::signature_of<F>;
    using R = typename Signature::result;
    using Args = typename Signature::args;
    static_assert(Signature::takes_worker,
                  "a scheduled function takes the Worker it runs on first: (Worker&, args...)");
    static_assert(detail::all_shippable<Args>::value,
                  "every argument of a scheduled function must be shippable (codec.hpp: numbers, "
                  "strings, vectors, arrays, pairs, tuples, PerWorker, or a Codec of yours)");
    static_assert(detail::shippable_result<R>,
                  "a scheduled function returns void or a shippable value (codec.hpp)");
    const std::uint64_t signature = detail::signature_hash<R, Args>(name);
    Entry entry;
    entry.signature = signature;
    entry.invoke = [function = std::move(function)](Worker& worker,
                                                    std::span<const std::byte> bytes) mutable {
      Args args = from_bytes<Args>(bytes);
      if constexpr (std::is_void_v<R>) {
        std::apply([&](auto&... arg) { function(worker, std::move(arg)...); }, args);
        return std::vector<std::byte>{};
      } else {
        return to_bytes<R>(
            std::apply([&](auto&... arg) { return function(worker, std::move(arg)...); }, args));
      }
    };
    insert(name, std::move(entry));
    return make_function<R>(std::move(name), signature, static_cast<Args*>(nullptr));
  }

  /// Registers a resource function, callable as `T(Worker&, Args...)`: Args shippable, T
  /// anything movable (it stays on the worker).
  /// @throws UsageError when `name` is taken.
  template <class F>
  auto add_resource(std::string name, F make) {
    using Signature = detail::signature_of<F>;
    using T = std::decay_t<typename Signature::result>;
    using Args = typename Signature::args;
    static_assert(Signature::takes_worker,
                  "a resource function takes the Worker it runs on first: (Worker&, args...)");
    static_assert(!std::is_void_v<T>, "a resource function returns the resource");
    static_assert(detail::all_shippable<Args>::value,
                  "every argument of a resource function must be shippable (codec.hpp)");
    const std::uint64_t signature = detail::signature_hash<PerWorker<T>, Args>(name);
    Entry entry;
    entry.signature = signature;
    entry.resource = true;
    entry.build = [make = std::move(make)](Worker& worker,
                                           std::span<const std::byte> bytes) mutable {
      Args args = from_bytes<Args>(bytes);
      return std::any(std::make_shared<T>(
          std::apply([&](auto&... arg) { return make(worker, std::move(arg)...); }, args)));
    };
    insert(name, std::move(entry));
    return make_resource<T>(std::move(name), signature, static_cast<Args*>(nullptr));
  }

  /// The entry registered as `name`, or nullptr.
  const Entry* find(std::string_view name) const {
    const auto found = entries_.find(name);
    return found == entries_.end() ? nullptr : &found->second;
  }

 private:
  void insert(const std::string& name, Entry entry) {
    if (name.empty() || name.size() > 0xFFFF)
      throw UsageError(-1, "Functions::add", fmt::format("a name of {} bytes", name.size()),
                       "name each function with 1 to 65535 bytes");
    if (!entries_.emplace(name, std::move(entry)).second)
      throw UsageError(-1, "Functions::add", fmt::format("'{}' is registered already", name),
                       "give every function and resource function its own name");
  }
  template <class R, class... A>
  static Function<R, A...> make_function(std::string name, std::uint64_t signature,
                                         std::tuple<A...>*) {
    return Function<R, A...>(std::move(name), signature);
  }
  template <class T, class... A>
  static ResourceFunction<T, A...> make_resource(std::string name, std::uint64_t signature,
                                                 std::tuple<A...>*) {
    return ResourceFunction<T, A...>(std::move(name), signature);
  }

  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace strata::coordinator
