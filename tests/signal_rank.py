"""A rank for the signal tests (`python -m signal_rank DB MODE`), for the paths a
CPU machine cannot run the real benchmark on: the TCP rendezvous (ncclbench's
GPU path: `--nprocs` / one process per GPU without MPI) and a main thread stuck
in an MPI call.  It does what `ncclbench.benchmark.orchestrate.run_here` does around a run --
the same RankSignals, StoreReporter and `end_run` -- with host operations
standing in for the measurements: every round is a barrier and an allreduce
across the ranks, and rank 0 stores one row per round.

MODE
  loop        rounds until a signal ends the job
  mpi-stuck   under mpiexec: after 3 rounds rank 0 waits in MPI_Barrier for
              ranks that never come (a main thread stuck in C); the others sleep
"""

from __future__ import annotations

import math
import os
import sys
import time

from ncclbench.core.config import BenchOptions
from ncclbench.core.errors import BenchError
from ncclbench.core.results import DeviceInfo, HalfResult, ResultRow, RunInfo
from ncclbench.launch import detect_launch, make_host_comm
from ncclbench.launch.shutdown import LAUNCHER_PID_ENV, JobInterrupted, RankSignals, end_run, rank_identity
from ncclbench.store import StoreReporter


def _row(i: int) -> ResultRow:
    h = HalfResult(1.0 + i, math.nan, 2.0, 3.0, 0)
    return ResultRow(size=8 << i, count=2 << i, type="float", redop="sum", root=-1, out_of_place=h, in_place=h)


def main(argv: list[str]) -> int:
    db, mode = argv[0], argv[1]
    signals = RankSignals(f"pid {os.getpid()}", quiet=LAUNCHER_PID_ENV in os.environ).install()
    info = detect_launch()
    host = make_host_comm(info, 30, prefer_mpi=mode.startswith("mpi"), require_mpi=mode.startswith("mpi"))
    signals.describe = rank_identity(host.rank)
    store = None
    try:
        if host.rank == 0:
            store = StoreReporter.open(db)
            store.begin(RunInfo("all_reduce_perf", ["signal_rank", mode], "test", "0", None, None, "test",
                                devices=[DeviceInfo(0, 0, os.getpid(), "h", -1, "cpu", "CPU")],
                                nranks=host.size), BenchOptions())
        i = 0
        while True:
            host.barrier()
            host.allreduce(i, "sum")
            if store is not None:
                store.row(_row(i % 20))
                print(f"row {i}", flush=True)
            i += 1
            if mode == "mpi-stuck" and i == 3:
                if host.rank == 0:
                    host.comm.Barrier()  # the others never come: stuck in C until the job ends
                else:
                    time.sleep(3600)
            time.sleep(0.02)
    except (JobInterrupted, BenchError) as exc:
        return end_run(exc, signals, host, store)
    finally:
        signals.disarm()
        if store is not None:
            store.close()
        host.close()
        signals.restore()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
