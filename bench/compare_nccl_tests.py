#!/usr/bin/env python3
"""Side-by-side comparison of ncclbench with an existing nccl-tests build.

Runs both tools in the same session, one process per GPU for both (under the
same `mpirun`), collective by collective, alternating which tool goes first,
and writes a ratio table:

* busbw ratio (ncclbench / nccl-tests) at every size >= 64 MiB, out-of-place
  and in-place (acceptance: within +-1 %);
* small-message time difference (ncclbench - nccl-tests) over 8 B - 64 KiB,
  median over sizes (acceptance: <= +0.5 us), eager and with -G;
* wall time of the whole sweep with checking (acceptance: <= nccl-tests');
* peak GPU memory per rank from nvidia-smi while each run is going
  (acceptance: <= nccl-tests').

Usage:
  python bench/compare_nccl_tests.py --nccl-tests-build /tmp/nccl-tests/build \
      --ngpus 4 --out bench/results/compare-4gpu [--collectives all_reduce,all_gather] \
      [--min 8 --max 8G] [--graph-max 1M --graph 20] [--mpirun "mpirun --allow-run-as-root"]

The nccl-tests build is not part of this project: build it yourself from
NVIDIA's repository (`make MPI=1`) and pass its build directory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ALL = ["all_reduce", "all_gather", "broadcast", "reduce_scatter", "reduce", "alltoall",
       "alltoallv", "scatter", "gather", "sendrecv", "hypercube"]
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S*)\s+(-?\d+)\s+(.*)$")


def parse_rows(text: str) -> dict[int, dict]:
    """size -> {oop_time, oop_busbw, oop_wrong, ip_time, ip_busbw, ip_wrong} from a
    nccl-tests-format table (either tool).  The last row of a size wins."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = ROW.match(line)
        if not m:
            continue
        f = m.group(6).split()
        if len(f) < 8:
            continue
        try:
            rows[int(m.group(1))] = {
                "oop_time": float(f[0]), "oop_busbw": float(f[2]), "oop_wrong": f[3],
                "ip_time": float(f[4]), "ip_busbw": float(f[6]), "ip_wrong": f[7]}
        except ValueError:
            continue
    return rows


class MemoryPoller(threading.Thread):
    """Peak `used_gpu_memory` (MiB) per pid seen by nvidia-smi while a run goes."""

    def __init__(self, period: float = 0.25):
        super().__init__(daemon=True)
        self.period, self.peak, self._halt = period, {}, threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_gpu_memory",
                                      "--format=csv,noheader,nounits"], capture_output=True,
                                     text=True, timeout=10).stdout
                for line in out.splitlines():
                    parts = [p.strip() for p in line.split(",")]
                    if len(parts) == 2 and parts[1].isdigit():
                        self.peak[parts[0]] = max(self.peak.get(parts[0], 0), int(parts[1]))
            except (OSError, subprocess.SubprocessError):
                pass
            self._halt.wait(self.period)

    def stop(self) -> int:
        self._halt.set()
        self.join(timeout=5)
        return max(self.peak.values(), default=0)


def run_tool(cmd: list[str], log: Path, env: dict) -> dict:
    poller = MemoryPoller()
    poller.start()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    peak = poller.stop()
    log.write_text(f"$ {shlex.join(cmd)}\n# exit {proc.returncode}, wall {wall:.2f} s, "
                   f"peak GPU memory per rank {peak} MiB\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return {"rc": proc.returncode, "wall_s": wall, "peak_mib": peak, "rows": parse_rows(proc.stdout),
            "cmd": shlex.join(cmd)}


def combine_runs(runs: list[dict]) -> dict:
    """Several runs of one tool -> one: per size and field the median (the usual
    way to take run-to-run noise out of busbw), median wall time, max peak memory,
    the worst exit status, and every run's #wrong cells (any non-zero is kept)."""
    if len(runs) == 1:
        return runs[0]
    sizes = set.intersection(*(set(r["rows"]) for r in runs))
    rows = {}
    for size in sizes:
        cells = [r["rows"][size] for r in runs]
        merged = {k: statistics.median(c[k] for c in cells) for k in cells[0] if not k.endswith("_wrong")}
        for k in ("oop_wrong", "ip_wrong"):
            bad = [c[k] for c in cells if c[k] not in ("0", "N/A")]
            merged[k] = bad[0] if bad else cells[0][k]
        rows[size] = merged
    return {"rc": max(r["rc"] for r in runs), "wall_s": statistics.median(r["wall_s"] for r in runs),
            "peak_mib": max(r["peak_mib"] for r in runs), "rows": rows,
            "cmd": runs[0]["cmd"], "repeats": len(runs)}


def run_pair(pair: list[tuple[str, list[str]]], out: Path, tag: str, env: dict, repeats: int) -> dict:
    """Run both tools `repeats` times, alternating which goes first, and combine."""
    runs: dict[str, list[dict]] = {name: [] for name, _ in pair}
    for rep in range(repeats):
        order = pair if rep % 2 == 0 else list(reversed(pair))
        for name, cmd in order:
            suffix = f".{rep}" if repeats > 1 else ""
            runs[name].append(run_tool(cmd, out / f"{tag}.{name}{suffix}.txt", env))
    return {name: combine_runs(r) for name, r in runs.items()}


def summarise(a: dict, b: dict, small_max: int, large_min: int) -> dict:
    """a = ncclbench, b = nccl-tests."""
    large, small = [], []
    for size in sorted(set(a["rows"]) & set(b["rows"])):
        ra, rb = a["rows"][size], b["rows"][size]
        if size >= large_min:
            for half in ("oop", "ip"):
                if rb[f"{half}_busbw"] > 0:
                    large.append({"size": size, "half": half,
                                  "ratio": ra[f"{half}_busbw"] / rb[f"{half}_busbw"],
                                  "ncclbench": ra[f"{half}_busbw"], "nccl_tests": rb[f"{half}_busbw"]})
        if 0 < size <= small_max or (size == 0 and False):
            small.append(ra["oop_time"] - rb["oop_time"])
    wrong = [r[k] for r in a["rows"].values() for k in ("oop_wrong", "ip_wrong") if r[k] not in ("0", "N/A")]
    return {
        "busbw_large": large,
        "busbw_ratio_min": min((x["ratio"] for x in large), default=None),
        "busbw_ratio_max": max((x["ratio"] for x in large), default=None),
        "small_time_delta_median_us": statistics.median(small) if small else None,
        "wall_ratio": a["wall_s"] / b["wall_s"] if b["wall_s"] else None,
        "wall_s": {"ncclbench": a["wall_s"], "nccl_tests": b["wall_s"]},
        "peak_mib": {"ncclbench": a["peak_mib"], "nccl_tests": b["peak_mib"]},
        "ncclbench_wrong": wrong,
        "rc": {"ncclbench": a["rc"], "nccl_tests": b["rc"]},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nccl-tests-build", required=True, type=Path)
    ap.add_argument("--ngpus", type=int, required=True, help="processes (one GPU each)")
    ap.add_argument("--collectives", default=",".join(ALL))
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="8G")
    ap.add_argument("--graph", type=int, default=20, help="-G launches for the small-size graph run (0: skip)")
    ap.add_argument("--graph-max", default="1M")
    ap.add_argument("--extra", default="", help="extra options for both tools")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run each tool this many times (alternating) and compare per-size medians")
    ap.add_argument("--mpirun", default="mpirun --allow-run-as-root --oversubscribe --bind-to none")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    build = args.nccl_tests_build
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1", NCCLBENCH_NO_STORE="1")
    mpirun = shlex.split(args.mpirun) + ["-np", str(args.ngpus)]
    if "mpirun" in args.mpirun:  # Open MPI forwards only what -x names
        for var in sorted(env):
            if var.startswith(("NCCL_", "NCCLBENCH_", "CUDA_")) or var in (
                    "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "PYTHONPATH", "LD_LIBRARY_PATH"):
                mpirun += ["-x", var]
    extra = shlex.split(args.extra)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "ngpus": args.ngpus, "repeats": args.repeats,
              "command": shlex.join(sys.argv), "runs": {}}
    for i, coll in enumerate(args.collectives.split(",")):
        binary = str(build / f"{coll}_perf")
        opts = ["-b", args.min, "-e", args.max, "-f", "2", "-g", "1"] + extra
        ours = mpirun + [args.python, "-m", "ncclbench", f"{coll}_perf"] + opts
        theirs = mpirun + [binary] + opts
        pair = [("nccl_tests", theirs), ("ncclbench", ours)]
        if i % 2:
            pair.reverse()
        res = run_pair(pair, args.out, coll, env, args.repeats)
        entry = summarise(res["ncclbench"], res["nccl_tests"], 65536, 64 << 20)
        if args.graph:
            gopts = ["-b", args.min, "-e", args.graph_max, "-f", "2", "-g", "1", "-G", str(args.graph)] + extra
            gpair = [("nccl_tests", mpirun + [binary] + gopts),
                     ("ncclbench", mpirun + [args.python, "-m", "ncclbench", f"{coll}_perf"] + gopts)]
            gres = run_pair(gpair, args.out, f"{coll}.graph", env, args.repeats)
            g = summarise(gres["ncclbench"], gres["nccl_tests"], 65536, 1 << 62)
            entry["graph_small_time_delta_median_us"] = g["small_time_delta_median_us"]
            entry["graph_rc"] = g["rc"]
        report["runs"][coll] = entry
        print(format_line(coll, entry), flush=True)
    (args.out / "summary.json").write_text(json.dumps(report, indent=1))
    (args.out / "summary.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def _f(x, fmt="{:.4f}"):
    return "—" if x is None else fmt.format(x)


def format_line(coll: str, e: dict) -> str:
    return (f"{coll:15s} busbw ratio {_f(e['busbw_ratio_min'])}..{_f(e['busbw_ratio_max'])} "
            f"small dt {_f(e['small_time_delta_median_us'], '{:+.2f}')} us "
            f"graph dt {_f(e.get('graph_small_time_delta_median_us'), '{:+.2f}')} us "
            f"wall {_f(e['wall_ratio'], '{:.2f}')}x mem {e['peak_mib']} rc {e['rc']}")


def markdown(report: dict) -> str:
    lines = [f"# ncclbench vs nccl-tests, {report['ngpus']} GPUs, {report['date']}", "",
             "| collective | busbw ratio >= 64 MiB (min..max) | small-msg time delta, median 8 B-64 KiB (us) "
             "| same with -G | sweep wall time ncclbench / nccl-tests (s) | peak GPU MiB per rank "
             "ncclbench / nccl-tests | #wrong != 0 |",
             "|---|---|---|---|---|---|---|"]
    for coll, e in report["runs"].items():
        lines.append(
            f"| {coll} | {_f(e['busbw_ratio_min'])}..{_f(e['busbw_ratio_max'])} "
            f"| {_f(e['small_time_delta_median_us'], '{:+.2f}')} "
            f"| {_f(e.get('graph_small_time_delta_median_us'), '{:+.2f}')} "
            f"| {e['wall_s']['ncclbench']:.1f} / {e['wall_s']['nccl_tests']:.1f} "
            f"| {e['peak_mib']['ncclbench']} / {e['peak_mib']['nccl_tests']} "
            f"| {len(e['ncclbench_wrong'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
