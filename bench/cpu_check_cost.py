#!/usr/bin/env python3
"""What -c costs on the CPU backend: the same sweep checked and unchecked, before and after.

Runs `ncclbench all_reduce_perf -b 16M -e 64M -f 2 --backend mpi --nprocs 2` (issue 24's
case; --args to change it) with `-c 1` (the default) and `-c 0`, for two source trees side
by side: BEFORE (a git revision's src/, extracted to a temp dir) and AFTER (this checkout's
src/).  The four variants run interleaved, round after round, so that a busy machine slows
all of them alike; per variant it records the wall time and the CPU time of the whole job
(every rank, user + sys), and reports medians and the checked/unchecked ratios.
Target (issue 24 item 2): checked wall time at most 1.5x the unchecked one, every element
still compared bit for bit.

Also a breakdown, in this process, of what one rank's check work costs after the change:
the data generator per element, and the whole sweep's fill/check calls with the fill cache.

Run:  python bench/cpu_check_cost.py [--before REV] [--rounds 5] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASE = "all_reduce_perf -b 16M -e 64M -f 2 --backend mpi --nprocs 2 --no-store"


def extract_src(rev: str, into: Path) -> Path:
    """src/ of `rev` (a commit of this repository) under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def run_once(src: Path, args: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of every child process, stdout) of one ncclbench run from `src`."""
    env = dict(os.environ, PYTHONPATH=str(src), NCCLBENCH_NO_STORE="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ncclbench", *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"ncclbench {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def wrong_column(stdout: str) -> list[str]:
    """The #wrong cells of every result row (both placements)."""
    cells = []
    for line in stdout.splitlines():
        parts = line.split()
        if parts and parts[0].isdigit() and len(parts) >= 13:
            cells += [parts[8], parts[12]]
    return cells


def breakdown() -> list[str]:
    """One rank's check work in this process, after the change (float sum, 2 ranks, the sweep)."""
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np

    from ncclbench.backends.mpi_cpu import HostMemoryWorker
    from ncclbench.core import verifiable as v
    from ncclbench.core.datatypes import DATATYPE_BY_NAME, REDOP_BY_NAME
    from ncclbench.core.fills import reduce_input, reduce_result

    dt, op, n = DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"], 2
    lines = []
    big = 16 << 20
    for name, fill in (("reduce_input", reduce_input(0, big, 99, 1)), ("reduce_result", reduce_result(0, big, 1))):
        v.generate_bits(fill, dt, op, n)  # warm the allocator
        t = time.process_time()
        v.generate_bits(fill, dt, op, n)
        lines.append(f"| generator, {name} of 16Mi floats | {time.process_time() - t:.2f} s CPU "
                     f"({(time.process_time() - t) / big * 1e9:.0f} ns per element) |")
    cache = v.FillCache(3 * (64 << 20) + (1 << 20))
    send, recv = np.zeros(64 << 20, np.uint8), np.zeros(64 << 20, np.uint8)
    t = time.process_time()
    for count in (4 << 20, 8 << 20, 16 << 20):
        for _placement in range(2):  # out of place, in place: the harness' calls per placement
            v.host_fill(send, [reduce_input(0, count, HostMemoryWorker.timed_data_seed, 1)], dt, op, n, cache)
            recv[:] = 0
            v.host_fill(send, [reduce_input(0, count, 1, 1)], dt, op, n, cache)
            v.host_fill(recv, [reduce_result(0, count, 1)], dt, op, n, cache)  # stands in for the all_reduce
            assert v.host_count_wrong(recv, count, [reduce_result(0, count, 1)], dt, op, n, cache) == 0
    lines.append(f"| one rank's fills and checks of the whole sweep (16, 32, 64 MiB x 2 placements) | "
                 f"{time.process_time() - t:.2f} s CPU, {cache.generated / 2**20:.0f} Mi elements generated "
                 f"(without the cache and with the timed loop's own seed: {2 * 3 * (4 + 8 + 16)} Mi) |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="86e8b1e", help="git revision measured as BEFORE (default: issue 24's main)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--args", default=CASE, help=f"ncclbench arguments (default: {CASE})")
    ap.add_argument("--out", type=Path, help="write the markdown table here (else stdout only)")
    a = ap.parse_args()
    args = shlex.split(a.args)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": extract_src(a.before, Path(tmp)), "after": ROOT / "src"}
        for r in range(a.rounds):
            for tree, src in trees.items():
                for check in ("-c 1", "-c 0"):
                    wall, cpu, out = run_once(src, [*args, *check.split()])
                    cells = wrong_column(out)
                    if check == "-c 1" and (not cells or any(c != "0" for c in cells)):
                        raise SystemExit(f"{tree} {check}: #wrong cells {cells}, expected every one 0")
                    results.setdefault((tree, check), []).append((wall, cpu))
                    print(f"round {r + 1} {tree:6} {check}: {wall:6.2f} s wall, {cpu:6.2f} s CPU", flush=True)
    load = os.getloadavg()
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in results.items()}
    lines = [f"`ncclbench {a.args}`, {a.rounds} interleaved rounds; medians. BEFORE = `{a.before}`, AFTER = this tree.",
             f"Host: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end.", "",
             "| tree | -c 1 wall (s) | -c 0 wall (s) | wall ratio | -c 1 CPU (s) | -c 0 CPU (s) | CPU ratio |",
             "|---|---|---|---|---|---|---|"]
    for tree in ("before", "after"):
        (w1, c1), (w0, c0) = med[(tree, "-c 1")], med[(tree, "-c 0")]
        lines.append(f"| {tree} | {w1:.2f} | {w0:.2f} | {w1 / w0:.2f}x | {c1:.2f} | {c0:.2f} | {c1 / c0:.2f}x |")
    # each round's own ratio: a busy 2-core host moves whole rounds, which medians of walls mix
    lines.append("")
    for tree in ("before", "after"):
        ratios = [w1 / w0 for (w1, _), (w0, _) in zip(results[(tree, "-c 1")], results[(tree, "-c 0")])]
        lines.append(f"Per-round wall ratio, {tree}: {' '.join(f'{r:.2f}' for r in ratios)} "
                     f"(median {statistics.median(ratios):.2f}x).  ")
    lines += ["", "One rank's check work after the change (this process):", "", "| what | cost |", "|---|---|",
              *breakdown()]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
