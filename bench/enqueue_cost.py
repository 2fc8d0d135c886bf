#!/usr/bin/env python3
"""Where does host time per small collective go?  Run under `mpirun -np N`
(one process per GPU):  python bench/enqueue_cost.py [N_OPS] [COLLECTIVE]

Times N_OPS back-to-back ops of COLLECTIVE (default broadcast) at its
smallest size (float, 2 elements per rank), host clock, enqueue only and
until completion, through:

  harness          Placement.issue -> Collective.launch -> NcclCommunicator methods
  timed:ctypes     what the timed loop runs with NCCLBENCH_CALLS=ctypes
                   (pre-converted arguments, nccl/callpath.py)
  timed:nccl4py    the same with nccl4py's Cython layer (when installed)
  raw-ctypes       broadcast only: the binding's CDLL function, argtypes set
  raw-pydll        broadcast only: the same symbol through ctypes.PyDLL

Variants alternate within each of 3 rounds; rank 0 prints the last round
(max over ranks) and the number of NCCL calls one op makes.
"""

from __future__ import annotations

import ctypes
import sys
import time

from ncclbench.backends.nccl_setup import create_nccl_workers
from ncclbench.collectives import COLLECTIVES
from ncclbench.core.config import BenchOptions
from ncclbench.core.datatypes import DATATYPE_BY_NAME, NO_OP, REDOP_BY_NAME
from ncclbench.launch.hostcomm import MpiHostComm
from ncclbench.nccl.callpath import CtypesCallPath, Nccl4pyCallPath
from ncclbench.run.recording import CallRecorder
from ncclbench.run.timing import Placement


def main() -> int:
    n_ops = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    name = sys.argv[2] if len(sys.argv) > 2 else "broadcast"
    host = MpiHostComm()
    opts = BenchOptions(collective=name, min_bytes=8, max_bytes=1 << 20, check=0)
    (w,) = create_nccl_workers(opts, host, name)
    comm, lib = w.slots[0].comm, w.lib
    coll = COLLECTIVES[name]
    f32 = DATATYPE_BY_NAME["float"]
    op = REDOP_BY_NAME["sum"] if coll.reduces else NO_OP
    counts = coll.counts(8 * w.nranks, w.nranks, 4)
    pl = Placement(w, coll, f32, op, 0 if coll.rooted else -1, counts, False)
    calls = [pl.calls(k) for k in range(n_ops)]
    rec = CallRecorder(comm.rank, comm.nranks)
    coll.launch(rec, *calls[0][0][1:])
    ncalls = len(rec.calls)

    def harness():
        for c in calls:
            pl.issue(c)

    variants = {"harness": harness}
    paths = {"ctypes": CtypesCallPath(lib)}
    nccl4py, why = Nccl4pyCallPath.open(lib)
    if nccl4py is not None:
        paths["nccl4py"] = nccl4py
    elif host.rank == 0:
        print(f"(timed:nccl4py not run: {why})", flush=True)
    for pname, path in paths.items():
        lib.call_path = path
        prepared = [pl.prepared(k) for k in range(n_ops)]

        def timed(prepared=prepared):
            for f in prepared:
                f()

        variants[f"timed:{pname}"] = timed

    if name == "broadcast":
        pyfn = ctypes.PyDLL(lib.path).ncclBroadcast
        pyfn.argtypes = lib._bcast.argtypes
        pyfn.restype = ctypes.c_int

        def bare(fn):
            def run():
                h, st = comm.handle, comm.stream
                for c in calls:
                    fn(c[0][1], c[0][2], 2, 7, 0, h, st)
            return run

        variants["raw-ctypes"] = bare(lib._bcast)
        variants["raw-pydll"] = bare(pyfn)

    for rep in range(3):
        for vname, body in variants.items():
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
                print(f"{name} ({ncalls} NCCL calls/op) {vname:14s} enqueue {enq:6.2f} us/op   "
                      f"completion {done:6.2f} us/op", flush=True)
    w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
