// strata/torch.hpp — libtorch trainers on strata: tensors as spans (torch/tensors.hpp), and a
// model whose gradients a strategy aggregates while the trainer keeps its own optimizer
// (torch/distributed_model.hpp), what PyTorch's DistributedDataParallel does for Python trainers.
//
// Optional: include it in a program linked with libtorch (Debian's libtorch-dev,
// `find_package(Torch)`); <strata/strata.hpp> does not include it. docs/torch.md shows a trainer.
#pragma once

#include <strata/torch/distributed_model.hpp>
#include <strata/torch/tensors.hpp>
