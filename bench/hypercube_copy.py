#!/usr/bin/env python3
"""Where does hypercube's out-of-place time go?  Run under `mpirun -np N`
(one process per GPU, N a power of two):

    python bench/hypercube_copy.py [ROUNDS] [NBYTES]

Hypercube's op is a device-to-device copy of the rank's own block followed by
log2(N) grouped send/recv rounds; nccl-tests makes the copy with
cudaMemcpyAsync from C.  At 64 B on 4 H200s its out-of-place rows sat ~1.4 us
above nccl-tests' while the in-place rows (no copy) did not (the repeats runs), so
this script times the same op with the copy made each way, timed as
nccl-tests times (barrier, host clock around 20 ops, stream sync):

  no-copy            the NCCL rounds alone (the in-place cost)
  timed-loop         what ncclbench's timed loop runs (Placement.prepared)
  driver:bound       CudaRuntime.bound_dtod_copy (cuda-bindings' driver call)
  runtime:bare       cuda.bindings.runtime.cudaMemcpyAsync
  ctypes:libcudart   the real libcudart's cudaMemcpyAsync through ctypes
  ctypes:libcuda     libcuda's cuMemcpyDtoDAsync_v2 through ctypes
  copy-only          the copy alone (driver:bound), no NCCL
  timed-loop:rotated ops 0..19 as the tool issues them (own closures, rotated
                     buffer pointers) instead of op 0 twenty times
  between:STEPS      timed-loop:rotated after what the tool does between
                     timed loops (untimed op; -c 1's check and fill; parts)
  flat:nccl4py       libcuda's copy and nccl4py's calls in one flat loop of
                     pre-built (function, arguments) pairs: the Python floor

Variants alternate within each of ROUNDS rounds (default 100); rank 0 prints
per variant the median over rounds (max over ranks within a round) of time
per op, enqueue time per op and GPU time per op (events around the 20 ops),
as JSON lines.
"""

from __future__ import annotations

import ctypes
import gc
import json
import statistics
import sys
import time

from copy_cost import real_libcudart  # bench/ is this script's directory

from ncclbench.backends.nccl_setup import create_nccl_workers
from ncclbench.collectives import COLLECTIVES
from ncclbench.core.config import BenchOptions
from ncclbench.core.datatypes import DATATYPE_BY_NAME, NO_OP
from ncclbench.launch.hostcomm import MpiHostComm
from ncclbench.nccl.callpath import timed_call_path
from ncclbench.nccl.communicator import NcclCommunicator
from ncclbench.run.timing import Placement

ITERS = 20  # nccl-tests' default -n


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    nbytes = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    host = MpiHostComm()
    # check=1: the checking kernels are loaded, for the "between:" variants
    opts = BenchOptions(collective="hypercube", min_bytes=nbytes, max_bytes=nbytes, check=1)
    (w,) = create_nccl_workers(opts, host, "hypercube")
    slot, cuda = w.slots[0], w.cuda
    comm = slot.comm
    coll = COLLECTIVES["hypercube"]
    f32 = DATATYPE_BY_NAME["float"]
    counts = coll.counts(nbytes // 4, w.nranks, 4)  # nccl-tests: count = bytes / itemsize
    pl = Placement(w, coll, f32, NO_OP, -1, counts, False)
    recorded = pl._recorded(*pl.calls(0)[0])
    copies = [a for n, a in recorded if n == "local_copy"]
    assert len(copies) == 1, recorded
    dst, src, size = copies[0]
    rounds_only = NcclCommunicator.compile_group([(comm, n, a) for n, a in recorded if n != "local_copy"])
    stream = comm.stream

    bound = cuda.bound_dtod_copy(dst, src, size, stream)
    rt, kind = cuda.rt, cuda._kind_d2d
    c_dst, c_src, c_n, c_st = (ctypes.c_void_p(dst), ctypes.c_void_p(src), ctypes.c_size_t(size),
                               ctypes.c_void_p(stream))
    libcuda = ctypes.CDLL("libcuda.so.1").cuMemcpyDtoDAsync_v2
    libcuda.restype = ctypes.c_int
    d_args = (ctypes.c_uint64(dst), ctypes.c_uint64(src), c_n, c_st)
    cudart, d2d = real_libcudart(slot.device) or (None, None)
    timed_loop = pl.prepared(0)

    def with_copy(copy):
        def op():
            copy()
            rounds_only()
        return op

    variants = {
        "no-copy": rounds_only,
        "timed-loop": timed_loop,
        "driver:bound": with_copy(bound),
        "runtime:bare": with_copy(lambda: rt.cudaMemcpyAsync(dst, src, size, kind, stream)),
        "ctypes:libcuda": with_copy(lambda: libcuda(*d_args)),
        "copy-only": bound,
    }
    # The floor of a Python loop: one flat tuple of (function, arguments) for the
    # copy and every NCCL call, no closures in between, no error checks.
    path = timed_call_path(w.lib)
    if hasattr(path, "module"):
        from ncclbench.nccl.callpath import _NCCL4PY_NAMES

        raw = [comm._raw_step(n, a) for n, a in recorded if n != "local_copy"]
        nccl_steps = tuple((getattr(path.module, _NCCL4PY_NAMES[name]), path._args(name, args))
                           for name, args, _c in raw)
        flat = ((libcuda, d_args),) + nccl_steps

        def flat_op():
            for fn, a in flat:
                fn(*a)

        variants["flat:nccl4py"] = flat_op
    if cudart is not None:
        r_args = (c_dst, c_src, c_n, d2d, c_st)
        variants["ctypes:libcudart"] = with_copy(lambda: cudart(*r_args))
    elif host.rank == 0:
        print("(ctypes:libcudart not run: no libcudart found)", flush=True)

    # The tool's timed loop issues ops 0..19, each its own closure over its own
    # rotated buffer pointers (docs/behaviour.md §2.9); every variant above repeats op 0.
    rotated = [pl.prepared(k) for k in range(ITERS)]
    runs = {name: (None, [op] * ITERS) for name, op in variants.items()}
    runs["timed-loop:rotated"] = (None, rotated)

    # What the tool does between two timed loops, before the barrier (docs/behaviour.md §3.1):
    # with -c 0 only the untimed op; with -c 1 also the previous placement's
    # check and this one's input fill (the hypercube runs: -c 1 timed ~0.6 us/op slower).
    def untimed():
        pl.issue(pl.calls(0))
        w.wait()

    def check_run():
        pl.prepare_data(1)
        untimed()
        host.allreduce(pl.count_wrong(1), "sum")

    def fill():
        pl.prepare_data(99)

    def count():
        pl.count_wrong(1)

    def allreduce():
        host.allreduce(0, "sum")

    for name, steps in {"untimed": [untimed], "check+fill+untimed": [check_run, fill, untimed],
                        "fill+untimed": [fill, untimed], "count+untimed": [count, untimed],
                        "allreduce+untimed": [allreduce, untimed]}.items():
        runs[f"between:{name}"] = (steps, rotated)

    e0, e1 = cuda.event_create(), cuda.event_create()
    gc.disable()  # as in the tool's timed loop
    samples: dict[str, list[tuple[float, float, float]]] = {v: [] for v in runs}
    for _, ops in runs.values():  # warm every path once
        for op in ops:
            op()
    w.wait()
    for _ in range(rounds):
        for name, (before, ops) in runs.items():
            for step in before or ():
                step()
            w.barrier()
            cuda.event_record(e0, stream)
            t0 = time.perf_counter()
            for op in ops:
                op()
            t1 = time.perf_counter()
            cuda.event_record(e1, stream)
            w.wait()
            t2 = time.perf_counter()
            gpu = cuda.event_elapsed_ms(e0, e1) * 1e3 / ITERS
            row = [host.allreduce(x, "max") for x in ((t2 - t0) / ITERS * 1e6, (t1 - t0) / ITERS * 1e6, gpu)]
            samples[name].append(tuple(row))
    if host.rank == 0:
        for name, rows in samples.items():
            print(json.dumps({
                "variant": name, "ranks": w.nranks, "nbytes": nbytes, "copy_bytes": size, "rounds": rounds,
                "time_us": round(statistics.median(r[0] for r in rows), 2),
                "enqueue_us": round(statistics.median(r[1] for r in rows), 2),
                "gpu_us": round(statistics.median(r[2] for r in rows), 2)}), flush=True)
    for e in (e0, e1):
        cuda.event_destroy(e)
    w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
