"""Does an MPICH algorithm cvar written through MPI_T change MPI_Allreduce
inside one running job, and does it need MPIR_CVAR_DEVICE_COLLECTIVES=none?

Run: .venv/bin/mpiexec -n 4 .venv/bin/python bench/tune_mpich_probe.py [OUT.json]

Each setting is written through MPI_T on every rank (the cvars are ALL_EQ),
then timed on the same communicator, settings interleaved round by round so
drift hits all of them alike.  Prints a table of median us per call; a cvar
that MPICH ignores shows as the same time as 'auto'.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

from ncclbench.tune.mpich import MpiT, cvar_choices

SIZES = [1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22]
ROUNDS = 5


def timed(comm, send, recv, iters: int) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.Allreduce(send, recv, MPI.SUM)
    dt = (time.perf_counter() - t0) / iters
    return comm.allreduce(dt, MPI.MAX) * 1e6


def main() -> None:
    comm = MPI.COMM_WORLD
    t = MpiT()
    algo = "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"
    choices = cvar_choices(t.info(algo))
    dev = cvar_choices(t.info("MPIR_CVAR_DEVICE_COLLECTIVES"))
    settings = [("percoll", "auto")] + [(d, a) for d in ("percoll", "none")
                                        for a in ("recursive_doubling", "reduce_scatter_allgather", "ring", "tree")]
    settings.insert(1, ("none", "auto"))
    results: dict[str, dict[int, list[float]]] = {f"{d}/{a}": {s: [] for s in SIZES} for d, a in settings}
    wrong: dict[str, int] = {}
    for size in SIZES:
        n = size // 4
        send = np.full(n, comm.rank + 1, dtype=np.float32)
        recv = np.zeros(n, dtype=np.float32)
        iters = max(5, min(200, (1 << 22) // size * 5))
        for r in range(ROUNDS):
            order = settings[r % len(settings):] + settings[:r % len(settings)]
            for d, a in order:
                t.write("MPIR_CVAR_DEVICE_COLLECTIVES", dev[d])
                t.write(algo, choices[a])
                recv[:] = 0
                results[f"{d}/{a}"][size].append(timed(comm, send, recv, iters))
                expect = comm.size * (comm.size + 1) / 2
                if not np.all(recv == expect):
                    wrong[f"{d}/{a}"] = wrong.get(f"{d}/{a}", 0) + 1
    t.write("MPIR_CVAR_DEVICE_COLLECTIVES", dev["percoll"])
    t.write(algo, choices["auto"])
    t.close()
    if comm.rank == 0:
        head = "setting".ljust(40) + "".join(f"{s:>12}" for s in SIZES)
        print(head)
        table = {}
        for key, by_size in results.items():
            meds = {s: statistics.median(v) for s, v in by_size.items()}
            table[key] = {"median_us": meds, "samples_us": by_size}
            print(key.ljust(40) + "".join(f"{meds[s]:12.1f}" for s in SIZES))
        print("wrong results:", wrong or "none")
        if len(sys.argv) > 1:
            with open(sys.argv[1], "w") as f:
                json.dump({"library": MPI.Get_library_version().splitlines()[0], "nprocs": comm.size,
                           "rounds": ROUNDS, "sizes": SIZES, "results": table, "wrong": wrong}, f, indent=1)


if __name__ == "__main__":
    main()
