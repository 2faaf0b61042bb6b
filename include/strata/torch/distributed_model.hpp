// strata/torch/distributed_model.hpp — a libtorch model trained by a strategy: its parameters
// broadcast, adopted as the strategy's variables, and their gradients aggregated while the
// trainer keeps its own optimizer (what PyTorch's DistributedDataParallel does for Python
// trainers).
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <strata/core/error.hpp>
#include <strata/placement/adopted_variable.hpp>
#include <strata/placement/placement.hpp>
#include <strata/replica_context.hpp>
#include <strata/torch/tensors.hpp>

namespace strata::torch {

namespace detail {

// The module of a ModuleHolder (torch::nn::Linear, Sequential, TORCH_MODULE) or of a
// std::shared_ptr to a module.
template <class M>
::torch::nn::Module& module_of(const M& model) {
  if constexpr (requires { model.ptr(); })
    return *model.ptr();
  else
    return *model;
}

}  // namespace detail

/// Sets every parameter and buffer of `module` to replica `root`'s (inside Strategy::run, on
/// every replica): the start of data-parallel training when each replica built its own model.
/// @throws MismatchError (or the communicator's error) when the replicas' models differ;
///   UsageError for a tensor strata cannot send (not on the CPU, not contiguous).
template <class Context>
void broadcast_parameters(Context& context, ::torch::nn::Module& module, int root = 0) {
  const auto broadcast = [&](const at::Tensor& tensor, const std::string& name) {
    detail::visit_elements(tensor, name, [&](auto values) { context.broadcast(values, root); });
  };
  for (const auto& item : module.named_parameters())
    broadcast(item.value(), fmt::format("parameter '{}'", item.key()));
  for (const auto& item : module.named_buffers())
    broadcast(item.value(), fmt::format("buffer '{}'", item.key()));
}

/// The trainer's model, one copy per local replica, with its parameters adopted as a strategy's
/// variables (Strategy::adopt_variable): `apply_gradients` aggregates every parameter's
/// `.grad()` in place across the replicas (fused into buckets, StrategyOptions::fusion) and
/// then runs the trainer's own optimizer step, so that training equals single-process training
/// on the global batch. Construction broadcasts replica 0's parameters and buffers (worker 0's),
/// as DDP does.
///
///     strata::torch::DistributedModel model(strategy, replicas);   // one Net per replica
///     strategy.run([&](auto& ctx) {
///       auto& net = replicas[ctx.local_replica_id()];
///       optimizers[ctx.local_replica_id()].zero_grad();
///       loss_of(net->forward(strata::torch::split_batch(x, ctx)), ...).backward();
///       model.apply_gradients(ctx, [&] { optimizers[ctx.local_replica_id()].step(); });
///     });
///
/// `begin_step` overlaps the aggregation with backward, as DDP does: hooks on the parameters'
/// gradient accumulators hand each gradient to its bucket as soon as autograd has computed it,
/// and a full bucket starts its all-reduce while backward goes on:
///
///       auto step = model.begin_step(ctx);
///       loss.backward();                                  // buckets all-reduce meanwhile
///       step.apply([&] { optimizer.step(); });
///
/// Parameters hold float or double, on the CPU, contiguous; they must stay where they are
/// (moving the model to another device or dtype needs a new DistributedModel). Parameters that
/// do not require gradients are left out (they are broadcast at construction only). A parameter
/// the step left without a gradient counts as a zero gradient (every replica must contribute to
/// each bucket). Neither copyable nor movable: the hooks know where it is.
template <class Strategy>
class DistributedModel {
  using P = typename Strategy::placement_type;
  static_assert(P::kUpdateSite == placement::UpdateSite::every_replica || P::kMaxReplicas == 1,
                "strata::torch::DistributedModel: every replica trains its own copy of the "
                "model, so the placement must keep a copy per replica (MirroredStrategy, "
                "MultiWorkerMirroredStrategy) or run one replica (OneDevice, Default)");

 public:
  /// `replicas`: the model of each local replica (Strategy::num_local_replicas() of them, the
  /// same architecture), as std::shared_ptr to modules or module holders.
  /// @throws UsageError for a wrong number of models, models whose parameters differ, or a
  ///   parameter that is not float or double on the CPU; the communicator's errors.
  template <class M>
  DistributedModel(
      Strategy& strategy, const std::vector<M>& replicas,
      placement::VariableAggregation aggregation = placement::VariableAggregation::mean) {
    const auto local = static_cast<std::size_t>(strategy.num_local_replicas());
    if (replicas.size() != local)
      throw UsageError(-1, "torch::DistributedModel",
                       fmt::format("got {} models for {} local replicas", replicas.size(), local),
                       "pass one model per local replica (Strategy::num_local_replicas())");
    for (const M& replica : replicas)
      modules_.push_back(&detail::module_of(replica));
    adopt_parameters(aggregation);
    if (strategy.num_replicas_in_sync() > 1)
      strategy.run([this](auto& context) {
        broadcast_parameters(context, module(context.local_replica_id()), 0);
      });
    register_hooks();
  }

  DistributedModel(const DistributedModel&) = delete;
  DistributedModel& operator=(const DistributedModel&) = delete;
  ~DistributedModel() { remove_hooks(); }

  /// The one-model form, for a strategy with one local replica (MultiWorkerMirroredStrategy's
  /// default, OneDeviceStrategy).
  template <class M>
  DistributedModel(
      Strategy& strategy, const M& model,
      placement::VariableAggregation aggregation = placement::VariableAggregation::mean)
      : DistributedModel(strategy, std::vector<M>{model}, aggregation) {}

  /// Local replica `local_replica`'s model.
  ::torch::nn::Module& module(int local_replica) const noexcept {
    return *modules_[static_cast<std::size_t>(local_replica)];
  }
  /// The adopted parameters: float ones, then double ones.
  std::size_t num_parameters() const noexcept { return floats_.size() + doubles_.size(); }

  /// Aggregates the gradients of the calling replica's model (every parameter's `.grad()`, in
  /// place, by the aggregation the model was adopted with) across the replicas, then calls
  /// `update()`, the trainer's optimizer step on those gradients. Call it on every replica,
  /// once per step, after backward.
  /// @throws the errors of ReplicaContext::apply_gradients (MismatchError when replicas'
  ///   models differ); UsageError for a gradient strata cannot reduce in place.
  template <class Context, class Update>
  requires std::invocable<Update&>
  void apply_gradients(Context& context, Update&& update) {
    const int local = context.local_replica_id();
    std::vector<GradientAndVariable<float, placement::AdoptedVariable<float>>> floats;
    std::vector<GradientAndVariable<double, placement::AdoptedVariable<double>>> doubles;
    for (Parameter<float>& parameter : floats_)
      floats.push_back({gradient_of<float>(parameter, local), &parameter.variable});
    for (Parameter<double>& parameter : doubles_)
      doubles.push_back({gradient_of<double>(parameter, local), &parameter.variable});
    if (doubles.empty()) {
      context.apply_gradients(std::forward<Update>(update), floats);
    } else {
      if (!floats.empty()) context.apply_gradients([] {}, floats);
      context.apply_gradients(std::forward<Update>(update), doubles);
    }
  }

  /// A step whose gradients are aggregated while backward computes them (`begin_step`).
  template <class Context>
  class Step;

  /// Starts the calling replica's overlapped step: call it before backward (after zero_grad),
  /// then backward once, then `apply(update)`. A model whose parameters mix float and double
  /// aggregates them when `apply` is called instead (one bucket order per step on every
  /// replica).
  /// @throws the collectives' errors, as `apply_gradients`.
  template <class Context>
  Step<Context> begin_step(Context& context) {
    return Step<Context>(*this, context);
  }

 private:
  template <class T>
  struct Parameter;

  // What a hook tells the replica's step in progress: parameter `index`'s gradient is computed.
  struct ActiveStep {
    virtual void gradient_ready(std::size_t index) = 0;

   protected:
    ~ActiveStep() = default;
  };

 public:
  template <class Context>
  class Step final : ActiveStep {
    // T is float or double; unconstrained: clang 14 crashes checking constraints of member
    // templates of this nested class.
    template <class T>
    using Entry = GradientAndVariable<T, placement::AdoptedVariable<T>>;
    // Calls the update given to apply(), which the sync policy's step runs where it should.
    struct CallUpdate {
      std::function<void()>* update;
      void operator()() const { (*update)(); }
    };
    template <class T>
    using ListStep = typename Context::sync_type::template ListStep<Context, CallUpdate, Entry<T>>;

   public:
    Step(DistributedModel& model, Context& context)
        : model_(&model), context_(&context), local_(context.local_replica_id()) {
      if (model.doubles_.empty())
        start(floats_, model.floats_);
      else if (model.floats_.empty())
        start(doubles_, model.doubles_);
    }
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;
    ~Step() { stop_listening(); }

    /// Waits for the step's collectives, then calls `update()` (the optimizer step) on the
    /// aggregated gradients. Gradients backward did not compute count as they stand (zeros
    /// after zero_grad).
    /// @throws UsageError when a parameter's gradient was replaced during the step
    ///   (zero_grad(set_to_none = true), or a new .grad() assigned); the collectives' errors.
    template <class Update>
    requires std::invocable<Update&>
    void apply(Update&& update) {
      stop_listening();
      if (floats_.step == nullptr && doubles_.step == nullptr) {
        model_->apply_gradients(*context_, std::forward<Update>(update));
        return;
      }
      update_ = std::forward<Update>(update);
      if (floats_.step != nullptr)
        finish(floats_, model_->floats_);
      else
        finish(doubles_, model_->doubles_);
    }

   private:
    template <class T>
    struct Pending {
      std::vector<Entry<T>> entries;
      std::unique_ptr<std::atomic<bool>[]> ready;
      std::unique_ptr<ListStep<T>> step;
    };

    template <class T>
    void start(Pending<T>& pending, std::vector<Parameter<T>>& parameters) {
      for (Parameter<T>& parameter : parameters)
        pending.entries.push_back({gradient_of<T>(parameter, local_), &parameter.variable});
      pending.ready = std::make_unique<std::atomic<bool>[]>(parameters.size());
      pending.step = std::make_unique<ListStep<T>>(*context_, CallUpdate{&update_},
                                                   std::span<const Entry<T>>(pending.entries));
      model_->active_[static_cast<std::size_t>(local_)].store(this);
    }

    template <class T>
    void finish(Pending<T>& pending, std::vector<Parameter<T>>& parameters) {
      for (std::size_t i = 0; i < parameters.size(); ++i)
        if (!pending.ready[i].exchange(true)) {
          check_unmoved(pending, parameters, i);
          pending.step->ready(i);
        }
      pending.step->apply();
    }

    void gradient_ready(std::size_t index) override {
      if (floats_.step != nullptr)
        mark(floats_, model_->floats_, index);
      else
        mark(doubles_, model_->doubles_, index);
    }

    template <class T>
    void mark(Pending<T>& pending, std::vector<Parameter<T>>& parameters, std::size_t index) {
      if (pending.ready[index].exchange(true))
        throw UsageError(context_->replica_id_in_sync_group(), "torch::DistributedModel::Step",
                         fmt::format("parameter '{}' got a second gradient in one step "
                                     "(backward ran twice)",
                                     parameters[index].name),
                         "run backward once per step; to accumulate several backward passes, "
                         "call apply_gradients after the last one instead of begin_step");
      check_unmoved(pending, parameters, index);
      pending.step->ready(index);
    }

    // The step reduces the gradient buffers it was given: a gradient that moved would be left
    // out silently.
    template <class T>
    void check_unmoved(const Pending<T>& pending, std::vector<Parameter<T>>& parameters,
                       std::size_t index) const {
      const at::Tensor& grad = parameters[index].tensors[static_cast<std::size_t>(local_)].grad();
      if (grad.defined() && grad.data_ptr() == pending.entries[index].gradient.data()) return;
      throw UsageError(context_->replica_id_in_sync_group(), "torch::DistributedModel::Step",
                       fmt::format("the gradient of parameter '{}' was replaced during the step",
                                   parameters[index].name),
                       "zero gradients in place before begin_step (optimizer.zero_grad(), "
                       "module.zero_grad() without set_to_none) and do not assign .grad()");
    }

    void stop_listening() noexcept {
      ActiveStep* self = this;
      model_->active_[static_cast<std::size_t>(local_)].compare_exchange_strong(self, nullptr);
    }

    DistributedModel* model_;
    Context* context_;
    int local_;
    std::function<void()> update_;
    Pending<float> floats_;
    Pending<double> doubles_;
  };

 private:
  template <class T>
  struct Parameter {
    std::string name;
    std::vector<at::Tensor> tensors;  // one per local replica
    placement::AdoptedVariable<T> variable;
  };

  void adopt_parameters(placement::VariableAggregation aggregation) {
    std::vector<std::vector<std::pair<std::string, at::Tensor>>> per_replica;
    for (::torch::nn::Module* module : modules_) {
      std::vector<std::pair<std::string, at::Tensor>> parameters;
      for (const auto& item : module->named_parameters())
        if (item.value().requires_grad()) parameters.emplace_back(item.key(), item.value());
      per_replica.push_back(std::move(parameters));
    }
    const auto& first = per_replica.front();
    for (std::size_t r = 1; r < per_replica.size(); ++r)
      if (per_replica[r].size() != first.size())
        throw UsageError(-1, "torch::DistributedModel",
                         fmt::format("replica {}'s model has {} parameters, replica 0's {}", r,
                                     per_replica[r].size(), first.size()),
                         "give every local replica a model of the same architecture");
    for (std::size_t i = 0; i < first.size(); ++i) {
      const auto& [name, tensor] = first[i];
      std::vector<at::Tensor> tensors;
      for (std::size_t r = 0; r < per_replica.size(); ++r) {
        const at::Tensor& mine = per_replica[r][i].second;
        if (!mine.sizes().equals(tensor.sizes()) || mine.scalar_type() != tensor.scalar_type())
          throw UsageError(-1, "torch::DistributedModel",
                           fmt::format("parameter '{}' of replica {} differs in shape or type "
                                       "from replica 0's",
                                       name, r),
                           "give every local replica a model of the same architecture");
        tensors.push_back(mine);
      }
      if (tensor.scalar_type() == c10::ScalarType::Float)
        floats_.push_back(adopt<float>(name, std::move(tensors), aggregation));
      else if (tensor.scalar_type() == c10::ScalarType::Double)
        doubles_.push_back(adopt<double>(name, std::move(tensors), aggregation));
      else
        throw UsageError(
            -1, "torch::DistributedModel",
            fmt::format("parameter '{}' holds {}", name, c10::toString(tensor.scalar_type())),
            "train float or double parameters (keep master weights in float)");
    }
  }

  template <class T>
  static Parameter<T> adopt(const std::string& name, std::vector<at::Tensor> tensors,
                            placement::VariableAggregation aggregation) {
    std::vector<std::span<T>> copies;
    for (const at::Tensor& tensor : tensors)
      copies.push_back(as_span<T>(tensor, fmt::format("parameter '{}'", name)));
    placement::AdoptedVariable<T> variable(std::move(copies), aggregation);
    return Parameter<T>{name, std::move(tensors), std::move(variable)};
  }

  // The parameter's gradient on `local_replica`, made a zero one where backward left none.
  template <class T>
  static std::span<T> gradient_of(Parameter<T>& parameter, int local_replica) {
    at::Tensor& tensor = parameter.tensors[static_cast<std::size_t>(local_replica)];
    at::Tensor& grad = tensor.mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(tensor);
    return as_span<T>(grad, fmt::format("the gradient of parameter '{}'", parameter.name));
  }

  // A post hook on every parameter's gradient accumulator of every local replica: it runs
  // once autograd has accumulated the parameter's gradient, and tells the replica's overlapped
  // step, if one is in progress.
  void register_hooks() {
    active_ = std::make_unique<std::atomic<ActiveStep*>[]>(modules_.size());
    const auto add = [this](const at::Tensor& tensor, std::size_t local, std::size_t index) {
      std::shared_ptr<::torch::autograd::Node> accumulator =
          ::torch::autograd::impl::grad_accumulator(tensor);
      const std::uintptr_t key =
          accumulator->add_post_hook(std::make_unique<::torch::autograd::utils::LambdaPostHook>(
              [this, local, index](const ::torch::autograd::variable_list& outputs,
                                   const ::torch::autograd::variable_list& /*inputs*/) {
                if (ActiveStep* step = active_[local].load()) step->gradient_ready(index);
                return outputs;
              }));
      hooks_.push_back({std::move(accumulator), key});
    };
    try {
      for (std::size_t local = 0; local < modules_.size(); ++local) {
        for (std::size_t i = 0; i < floats_.size(); ++i)
          add(floats_[i].tensors[local], local, i);
        for (std::size_t i = 0; i < doubles_.size(); ++i)
          add(doubles_[i].tensors[local], local, i);
      }
    } catch (...) {
      remove_hooks();  // no destructor runs for a model whose construction failed
      throw;
    }
  }

  void remove_hooks() noexcept {
    for (const Hook& hook : hooks_)
      hook.accumulator->del_post_hook(hook.key);
    hooks_.clear();
  }

  struct Hook {
    std::shared_ptr<::torch::autograd::Node> accumulator;
    std::uintptr_t key;
  };

  std::vector<::torch::nn::Module*> modules_;
  std::vector<Parameter<float>> floats_;
  std::vector<Parameter<double>> doubles_;
  std::vector<Hook> hooks_;
  // Each local replica's overlapped step in progress, or nullptr.
  std::unique_ptr<std::atomic<ActiveStep*>[]> active_;
};

}  // namespace strata::torch
