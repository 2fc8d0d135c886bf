#!/usr/bin/env python3
"""Where does a small-message *measurement* lose time?  Run under `mpirun -np N`
(one process per GPU):  python bench/loop_anatomy.py [COLLECTIVE] [REPS]

A timed measurement is: barrier, clock, N ops, clock (enqueued), wait, clock
(completed).  At the collective's smallest size this repeats the harness's
procedure REPS times for N = 20 (nccl-tests' default -n) and N = 200, and
for three ways of waiting for the stream:

  poll     the harness's Worker.wait (cudaStreamQuery + ncclCommGetAsyncError
           + sched_yield, like nccl-tests' testStreamSynchronize)
  query    cudaStreamQuery only, in a tight loop
  sync     cudaStreamSynchronize

and prints, on rank 0, medians over REPS of the per-op enqueue and
completion times (max over ranks), plus the fixed cost per measurement
(completion(N=20) * 20 - per-op completion(N=200) * 20), and the spread of
the ranks' barrier exit times (one host only: perf_counter is CLOCK_MONOTONIC).
"""

from __future__ import annotations

import statistics
import sys
import time

from ncclbench.backends.nccl_setup import create_nccl_workers
from ncclbench.collectives import COLLECTIVES
from ncclbench.core.config import BenchOptions
from ncclbench.core.datatypes import DATATYPE_BY_NAME, NO_OP, REDOP_BY_NAME
from ncclbench.launch.hostcomm import MpiHostComm
from ncclbench.nccl.callpath import timed_call_path
from ncclbench.run.timing import Placement


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "broadcast"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    host = MpiHostComm()
    opts = BenchOptions(collective=name, min_bytes=8, max_bytes=1 << 20, check=0)
    (w,) = create_nccl_workers(opts, host, name)
    slot, cuda = w.slots[0], w.cuda
    coll = COLLECTIVES[name]
    op = REDOP_BY_NAME["sum"] if coll.reduces else NO_OP
    counts = coll.counts(8 * w.nranks, w.nranks, 4)
    pl = Placement(w, coll, DATATYPE_BY_NAME["float"], op, 0 if coll.rooted else -1, counts, False)

    def wait_query():
        while not cuda.stream_query(slot.stream):
            pass

    def wait_sync():
        cuda.stream_synchronize(slot.stream)

    waits = {"poll": w.wait, "query": wait_query, "sync": wait_sync}
    if host.rank == 0:
        print(f"# {name}, {w.nranks} ranks, {reps} reps; call path: {timed_call_path(w.lib).describe()}")
    per_op: dict[tuple[str, int], float] = {}
    for n in (20, 200):
        ops = [pl.prepared(k) for k in range(n)]
        for wname, wait in waits.items():
            enq, done, skew = [], [], []
            for _ in range(reps):
                pl.issue(pl.calls(0))
                w.wait()
                host.barrier()
                t0 = time.perf_counter()
                for f in ops:
                    f()
                t1 = time.perf_counter()
                wait()
                t2 = time.perf_counter()
                enq.append(host.allreduce((t1 - t0) / n * 1e6, "max"))
                done.append(host.allreduce((t2 - t0) / n * 1e6, "max"))
                # one host: perf_counter is CLOCK_MONOTONIC, comparable across processes
                skew.append(host.allreduce(t0, "max") - host.allreduce(t0, "min"))
            e, d = statistics.median(enq), statistics.median(done)
            per_op[(wname, n)] = d
            if host.rank == 0:
                print(f"n={n:3d} wait={wname:5s} enqueue {e:6.2f} us/op  completion {d:6.2f} us/op  "
                      f"(p90 {sorted(done)[int(0.9 * len(done))]:6.2f})  "
                      f"barrier exit spread {statistics.median(skew) * 1e6:6.1f} us",
                      flush=True)
    if host.rank == 0:
        for wname in waits:
            fixed = (per_op[(wname, 20)] - per_op[(wname, 200)]) * 20
            print(f"fixed cost per 20-op measurement, wait={wname}: {fixed:6.1f} us", flush=True)
    w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
