#!/usr/bin/env python3
"""Where does host time per small collective go?  Run under `mpirun -np N`
(one process per GPU).  Times ncclBroadcast of 8 bytes, N ops back to back,
host clock (enqueue only, and until completion), through:

  harness   ncclbench's Placement.issue -> Collective.launch -> NcclCommunicator
  compiled  what the timed loop runs: Placement.prepared (pre-bound ctypes calls)
  ctypes    the binding's CDLL function (GIL released around the call)
  pydll     the same symbol through ctypes.PyDLL (GIL kept during the call)

Prints one line per variant on rank 0.
"""

from __future__ import annotations

import ctypes
import sys
import time

from ncclbench.backends.nccl_gpu import create_nccl_workers
from ncclbench.collectives import COLLECTIVES
from ncclbench.config import BenchOptions
from ncclbench.datatypes import DATATYPE_BY_NAME, NO_OP
from ncclbench.harness.timing import Placement
from ncclbench.launch.hostcomm import MpiHostComm


def main() -> int:
    n_ops = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    host = MpiHostComm()
    opts = BenchOptions(collective="broadcast", min_bytes=8, max_bytes=1 << 20, check=0)
    (w,) = create_nccl_workers(opts, host, "broadcast")
    slot = w.slots[0]
    comm, lib = slot.comm, w.lib
    coll = COLLECTIVES["broadcast"]
    f32 = DATATYPE_BY_NAME["float"]
    counts = coll.counts(2, w.nranks, 4)
    pl = Placement(w, coll, f32, NO_OP, 0, counts, False)
    calls = [pl.calls(k) for k in range(n_ops)]
    pyfn = ctypes.PyDLL(lib.path).ncclBroadcast
    pyfn.argtypes = lib._bcast.argtypes
    pyfn.restype = ctypes.c_int
    cfn = lib._bcast

    def harness():
        for c in calls:
            pl.issue(c)

    def bare(fn):
        def run():
            h, st = comm.handle, comm.stream
            for c in calls:
                fn(c[0][1], c[0][2], 2, 7, 0, h, st)
        return run

    prepared = [pl.prepared(k) for k in range(n_ops)]

    def compiled():
        for op in prepared:
            op()

    variants = {"harness": harness, "compiled": compiled, "ctypes": bare(cfn), "pydll": bare(pyfn)}
    for rep in range(3):
        for name, body in variants.items():
            w.wait()
            w.barrier()
            t0 = time.perf_counter()
            body()
            t1 = time.perf_counter()
            w.wait()
            t2 = time.perf_counter()
            enq = host.allreduce((t1 - t0) / n_ops * 1e6, "max")
            done = host.allreduce((t2 - t0) / n_ops * 1e6, "max")
            if host.rank == 0 and rep == 2:
                print(f"{name:8s} enqueue {enq:6.2f} us/op   completion {done:6.2f} us/op", flush=True)
    w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
