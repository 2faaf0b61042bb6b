#!/usr/bin/python3
"""PyTorch DDP (gloo, default 25 MB buckets) all-reducing ResNet-50's gradients over loopback.

The peer of strata's fused all-reduce in benchmarks/fusion/fused_all_reduce_bench.cpp: the same
161 float32 tensors (torchvision's ResNet-50 parameter shapes), ranks as processes on 127.0.0.1.
A step is `loss.backward()` of a loss that gives every parameter a gradient of ones, so backward
computes almost nothing and its time is DDP's bucketing and all-reduce. The same backward under
`no_sync()` (no all-reduce) is timed too; the difference is what DDP's communication costs.

Usage: ddp_resnet50.py RANKS [STEPS]   prints one line: ranks, median ms with and without sync.
Needs Debian's python3-torch (not a build or test dependency of strata).
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def resnet50_shapes():
    """torchvision's ResNet-50 parameter shapes, in parameter order."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,)]
            shapes += [(planes, planes, 3, 3), (planes,), (planes,)]
            shapes += [(planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if block == 0:
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    shapes += [(1000, 2048), (1000,)]
    return shapes


class Parameters(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.zeros(shape)) for shape in resnet50_shapes())

    def forward(self):
        return sum(p.sum() for p in self.weights)


def run(rank, ranks, steps, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    model = torch.nn.parallel.DistributedDataParallel(Parameters())
    assert sum(p.numel() for p in model.parameters()) == 25557032

    def timed(no_sync):
        times = []
        for step in range(steps + 1):
            model.zero_grad(set_to_none=False)
            dist.barrier()
            start = time.perf_counter()
            if no_sync:
                with model.no_sync():
                    model().backward()
            else:
                model().backward()
            if step > 0:  # the first warms up
                times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    with_sync = timed(False)
    without = timed(True)
    if rank == 0:
        out.put((with_sync, without))
    dist.destroy_process_group()


def main():
    ranks = int(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    port = 29500 + os.getpid() % 1000
    context = mp.get_context("spawn")
    out = context.SimpleQueue()
    processes = [context.Process(target=run, args=(r, ranks, steps, port, out))
                 for r in range(ranks)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
        if process.exitcode != 0:
            sys.exit(f"rank exited with {process.exitcode}")
    with_sync, without = out.get()
    print(f"ddp ranks={ranks} backward_ms={with_sync:.2f} backward_no_sync_ms={without:.2f} "
          f"all_reduce_ms={with_sync - without:.2f}")


if __name__ == "__main__":
    main()
