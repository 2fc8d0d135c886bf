#!/usr/bin/env python3
"""Harness overhead on the CPU backend: ncclbench's time per all_reduce against
a bare mpi4py loop making the same Allreduce calls, side by side in one job.

Both sides: float32 sum, one warm-up, a barrier, 20 timed calls between two
host-clock reads, time per call averaged over ranks (nccl-tests' -a 1).  The
two are interleaved size by size and repeated; the medians are compared.
Target: ncclbench within 5 % of the bare loop at every size.

Run:  python bench/harness_overhead.py [--nprocs 4] [--repeats 7] [--out bench/results]
(it re-launches itself under the mpiexec next to the Python interpreter).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = [8 << i for i in range(0, 24, 2)] + [64 << 20]  # 8 B, 32 B, ... 32 MiB, 64 MiB


def bare_loop(comm, MPI, np, size: int, iters: int) -> float:
    n = max(1, size // 4)
    send = np.ones(n, dtype=np.float32)
    recv = np.empty_like(send)
    comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], MPI.SUM)  # warm-up
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], MPI.SUM)
    t = (time.perf_counter() - t0) / iters * 1e6
    return comm.allreduce(t, MPI.SUM) / comm.Get_size()


class Capture:
    def __init__(self):
        self.rows = []

    def row(self, r):
        self.rows.append(r)


def ncclbench_time(size: int, iters: int) -> float:
    from ncclbench.backends.mpi_cpu import MpiWorker
    from ncclbench.collectives import COLLECTIVES
    from ncclbench.core.config import Backend, BenchOptions
    from ncclbench.run.plan import make_plan
    from ncclbench.run.plan_runner import run_workers

    opts = BenchOptions(collective="all_reduce", min_bytes=size, max_bytes=size, iters=iters,
                        warmup_iters=1, check=0)
    worker = MpiWorker(opts)
    cap = Capture()
    try:
        run_workers(make_plan(opts, COLLECTIVES["all_reduce"], Backend.MPI, worker), [worker], cap)
    finally:
        worker.close()
    return cap.rows[0].out_of_place.time_us if cap.rows else float("nan")


def child(args) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    iters, reps = args.iters, args.repeats
    results = []
    for size in SIZES:
        bare, ours = [], []
        for r in range(reps):
            if r % 2 == 0:
                bare.append(bare_loop(comm, MPI, np, size, iters))
                ours.append(ncclbench_time(size, iters))
            else:
                ours.append(ncclbench_time(size, iters))
                bare.append(bare_loop(comm, MPI, np, size, iters))
        b, o = statistics.median(bare), statistics.median(ours)
        results.append({"size": size, "bare_us": b, "ncclbench_us": o, "ratio": o / b,
                        "bare_all_us": bare, "ncclbench_all_us": ours})
        if comm.Get_rank() == 0:
            print(f"{size:>10} B  bare {b:10.2f} us  ncclbench {o:10.2f} us  ratio {o / b:.3f}",
                  flush=True)
    if comm.Get_rank() == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        doc = {
            "benchmark": "harness overhead, CPU backend, all_reduce float sum",
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                        "python": platform.python_version(), "mpi": MPI.Get_library_version().splitlines()[0]},
            "nprocs": comm.Get_size(), "iters": iters, "repeats": reps,
            "command": " ".join(sys.argv),
            "target": "ncclbench time within 5 % of the bare mpi4py loop at every size",
            "max_ratio": max(r["ratio"] for r in results),
            "results": results,
        }
        (out / "harness_overhead_cpu.json").write_text(json.dumps(doc, indent=1))
        lines = [f"# Harness overhead, CPU backend ({doc['date']})", "",
                 f"{comm.Get_size()} MPI ranks on {os.cpu_count()} cores, {doc['machine']['mpi']}, "
                 f"{iters} timed calls, median of {reps} interleaved repeats. Command: `{doc['command']}`", "",
                 "| size (B) | bare mpi4py (us) | ncclbench (us) | ratio |", "|---:|---:|---:|---:|"]
        lines += [f"| {r['size']} | {r['bare_us']:.2f} | {r['ncclbench_us']:.2f} | {r['ratio']:.3f} |"
                  for r in results]
        (out / "harness_overhead_cpu.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nprocs", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    cmd = [mpiexec, "-n", str(args.nprocs), sys.executable, __file__, "--child",
           "--iters", str(args.iters), "--repeats", str(args.repeats), "--out", args.out]
    return subprocess.call(cmd)


if __name__ == "__main__":
    raise SystemExit(main())
