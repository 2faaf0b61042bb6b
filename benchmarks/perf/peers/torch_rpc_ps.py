#!/usr/bin/python3
"""PyTorch RPC's parameter-server pattern, measured as `strata-perf push_pull` measures strata's.

W worker processes and P ps processes on 127.0.0.1, joined by torch.distributed.rpc (TensorPipe,
as PyTorch's parameter-server tutorial does). Each call, a worker sends its gradient of S bytes,
split in P equal shards, to the P servers at once (rpc_async); each server adds its shard to its
tensor and returns the tensor: a push and a pull in one round trip, as Operation::push_pull with
UpdateRule::sum. Every value pulled back is checked (all equal, and at least this worker's own
pushes). The workers run on CPU 0 and the servers on CPU 1, as `strata-perf --bind core` places
them; each process runs one torch thread.

  /usr/bin/python3 benchmarks/perf/peers/torch_rpc_ps.py --workers 1 --servers 1 -b 4 -e 64M -f 4

Prints per size the slowest worker's median call, busbw = 2 * S * max(1, W / P) / time (the
bytes through the busiest end, strata-perf's definition) and #wrong. Needs Debian's
python3-torch (1.13), whose libtorch is built with RPC and TensorPipe.
"""

import argparse
import os
import socket
import statistics
import sys
import threading
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

_SHARDS = {}
_LOCK = threading.Lock()  # RPC serves on a thread pool: one update at a time, as the tutorial's


def push_pull(key, gradient):
    """On a server: adds `gradient` to shard `key` (created as zeros) and returns its values
    after that push (a copy, as strata's servers reply with a snapshot)."""
    with _LOCK:
        shard = _SHARDS.get(key)
        if shard is None:
            shard = _SHARDS[key] = torch.zeros_like(gradient)
        shard.add_(gradient)
        return shard.clone()


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def sizes_of(begin, end, factor):
    size = begin
    while size <= end:
        yield size
        size *= factor


def task(rank, args, port, results):
    torch.set_num_threads(1)
    is_server = rank < args.servers
    try:
        os.sched_setaffinity(0, {1 if is_server else 0})
    except OSError:
        pass  # fewer CPUs: left to the scheduler
    name = f"ps{rank}" if is_server else f"worker{rank - args.servers}"
    options = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=4, rpc_timeout=300, init_method=f"tcp://127.0.0.1:{port}"
    )
    rpc.init_rpc(name, rank=rank, world_size=args.servers + args.workers,
                 rpc_backend_options=options)
    if not is_server:
        worker = rank - args.servers
        for size in sizes_of(args.begin, args.end, args.factor):
            elements = max(1, size // 4)
            per_server = max(1, elements // args.servers)
            shards = [torch.ones(per_server) for _ in range(args.servers)]
            key = f"w{size}"
            times, wrong = [], 0
            for call in range(args.warmup + args.iters):
                began = time.perf_counter()
                futures = [rpc.rpc_async(f"ps{s}", push_pull, args=(key, shards[s]))
                           for s in range(args.servers)]
                pulled = [future.wait() for future in futures]
                times.append(time.perf_counter() - began)
                for values in pulled:
                    first = float(values[0])
                    if first < call + 1 or not bool(torch.all(values == first)):
                        wrong += 1
            results.put((worker, size, statistics.median(times[args.warmup:]), wrong))
    rpc.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("-b", "--begin", type=parse_size, default=4)
    parser.add_argument("-e", "--end", type=parse_size, default=64 << 20)
    parser.add_argument("-f", "--factor", type=int, default=4)
    parser.add_argument("-w", "--warmup", type=int, default=5)
    parser.add_argument("-n", "--iters", type=int, default=20)
    args = parser.parse_args()
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=task, args=(rank, args, port, results))
                 for rank in range(args.servers + args.workers)]
    for process in processes:
        process.start()
    sizes = list(sizes_of(args.begin, args.end, args.factor))
    rows = {}
    for _ in range(len(sizes) * args.workers):
        worker, size, seconds, wrong = results.get(timeout=1800)
        slowest, wrongs = rows.get(size, (0.0, 0))
        rows[size] = (max(slowest, seconds), wrongs + wrong)
    for process in processes:
        process.join()
    print(f"# torch {torch.__version__} RPC (TensorPipe) parameter server: "
          f"{args.workers} worker(s), {args.servers} ps, push_pull of S bytes, "
          f"warmup {args.warmup}, iters {args.iters}")
    print(f"# {'size':>10} {'time':>10} {'busbw':>8} {'#wrong':>6}")
    print(f"# {'(B)':>10} {'(us)':>10} {'(GB/s)':>8}")
    for size in sizes:
        seconds, wrong = rows[size]
        busbw = 2 * size * max(1, args.workers / args.servers) / seconds / 1e9
        print(f"  {size:>10} {seconds * 1e6:>10.2f} {busbw:>8.3f} {wrong:>6}")
    return 0 if all(wrong == 0 for _, wrong in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
