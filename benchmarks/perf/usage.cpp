// benchmarks/perf/usage.cpp — the text of `strata-perf --help` (options.hpp).
#include <perf/options.hpp>

namespace strata::perf {

std::string usage() {
  return R"(usage: strata-perf COLLECTIVE [options]
       strata-perf push_pull [--transport ps] [--ranks W] [--ps P] [options]

Measures a strata collective the way nccl-tests does: for every size of a sweep, the average
time of ITERS calls after WARMUP calls (the slowest rank's), out of place and in place, the
algorithm and bus bandwidth (GB = 1e9 bytes), and a data check. Rank 0 prints the table.
push_pull measures strata's parameter servers instead (--transport ps, below).

COLLECTIVE: all_reduce | all_gather | reduce_scatter | broadcast | reduce | push_pull

  -b, --minbytes SIZE      smallest size (default 8); K, M, G suffixes are binary
  -e, --maxbytes SIZE      largest size (default 256M)
  -f, --stepfactor N       multiply the size by N between rows (default 2)
  -w, --warmup_iters N     untimed calls before each timing (default 5)
  -n, --iters N            timed calls per size and placement (default 20)
  -d, --datatype TYPE      int8 uint8 int32 int64 half|float16 bfloat16 float|float32
                           double|float64 (default float)
  -o, --op OP              sum prod|product min max avg|mean (default sum)
  -r, --root N             root of broadcast and reduce (default 0)
  -c, --check 0|1          check every result against an independent reference (default 1)
      --transport T        local: ranks are threads of this process (default)
                           tcp: ranks are processes on 127.0.0.1, started by strata-perf, or
                           this process is one rank of the cluster that TF_CONFIG, torchrun,
                           OpenMPI or SLURM describe (e.g. under strata-launch); every
                           byte over TCP, also between processes of one host
                           shm: as tcp, with TcpCommunicator's default: ranks that share a
                           host move data through shared memory (TcpOptions::shared_memory)
                           nccl: ranks are threads of this process, one per GPU (--ranks
                           defaults to the GPUs it sees), with NcclCommunicator; raw NCCL
                           calls and strata with its call check off are measured in the
                           same run, and the footer compares them
                           ps: push_pull (named or not): --ranks worker processes, each
                           pushing SIZE bytes and pulling them back in one round trip per
                           call, to --ps parameter-server processes holding the variable in
                           one shard each (UpdateRule::sum), all on 127.0.0.1 and started by
                           strata-perf; time is the slowest worker's median; busbw =
                           2 SIZE max(1, W/P) / time; the footer sets it against a plain TCP
                           stream of SIZE bytes and a ping-pong on the same CPUs, and gives
                           the servers' CPU time per call and per byte
      --ranks N            number of ranks (default 2; under a launcher, its world size;
                           ps: the workers)
      --ps P               ps: parameter servers (default 1)
      --ps-shm 1|0         ps: 1 (default): calls of 64 KiB and up go through shared memory,
                           as between any worker and ps task of one host; 0: every byte over
                           TCP (ps::ClientOptions::shared_memory)
      --algo A             all-reduce algorithm. local: auto (scatter_gather),
                           scatter_gather, reduce_to_one. tcp: auto (recursive doubling up to
                           512 KiB / (ceil(log2 N) (N-1)), ring above), ring,
                           rd|recursive_doubling, hd|halving_doubling
      --congestion NAME    tcp: TCP congestion control of strata's connections, e.g. bbr or
                           cubic (default: reno within one host, the kernel's between hosts)
      --lend-from SIZE|off tcp: calls that send SIZE bytes or more lend their messages of 64K
                           and up instead of copying them (TcpOptions::lend_from_bytes; 0:
                           every call; default off)
      --shared-buffers     shm: the buffers come from each rank's arena of the region
                           (TcpCommunicator::allocate_shared, TcpOptions::shared_buffer_bytes),
                           which the processes of a host read in place: an all-reduce stages
                           nothing
      --bind core|none     core (default): each rank strata-perf starts runs on a CPU of
                           its own, or with more ranks than CPUs, consecutive ranks share one
                           (as mpirun --map-by ppr:K:core); none: wherever the scheduler puts
                           it. The header shows each rank's CPUs
      --csv FILE|-         also write the rows as CSV ('-': stdout, the table goes to stderr)
      --json FILE|-        also write the run and its rows as JSON
      --progress           progress line on stderr even when it is not a terminal
      --ceiling            first measure this machine's limits (full-duplex loopback TCP,
                           TCP round trip sleeping and polling, one core's memcpy and add),
                           on the CPUs the run was given, and print them in the header; a
                           2-rank tcp all_reduce's footer gives its largest size's share
      --compare            all_reduce only: run strata over tcp, shm and local, then the installed
                           peers (Gloo's ring, ring_chunked, halving_doubling and bcube over
                           TCP; OpenMPI forced onto TCP and with its defaults) on the same
                           sweep, and print one table with strata's ratios (--csv: its rows)
      --launches K         --compare: run every contender K times, interleaved, each
                           launch starting with the next contender; medians (default 1)
      --run-timeout S      --compare: deadline of each contender's run (default 1800 s)
  -h, --help               this text

Every blocking call has a deadline: STRATA_TIMEOUT (e.g. 30s; default 60s).
Exit status: 0 all values correct; 1 wrong values found; 2 bad command line; 3 a collective or
the group failed (the message names the rank and the call).
)";
}

}  // namespace strata::perf
