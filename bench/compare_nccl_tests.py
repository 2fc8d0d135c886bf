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
    nccl-tests-format table (either tool).  A size printed several times (`-N`
    cycles, e.g. `--extra "-N 20"` for small-message time with 20 samples per
    size) gets each number's median and the first nonzero #wrong."""
    seen: dict[int, list[dict]] = {}
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
            row = {"oop_time": float(f[0]), "oop_busbw": float(f[2]), "oop_wrong": f[3],
                   "ip_time": float(f[4]), "ip_busbw": float(f[6]), "ip_wrong": f[7]}
        except ValueError:
            continue
        seen.setdefault(int(m.group(1)), []).append(row)
    return {size: _median_row(rows) for size, rows in seen.items()}


def _median_row(rows: list[dict]) -> dict:
    if len(rows) == 1:
        return rows[0]
    out = {}
    for key in rows[0]:
        if key.endswith("_wrong"):
            out[key] = next((r[key] for r in rows if r[key] not in ("0", "N/A")), rows[0][key])
        else:
            out[key] = statistics.median(r[key] for r in rows)
    return out


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


def run_pair(pair: list[tuple[str, list[str]]], out: Path, tag: str, env: dict,
             repeats: int) -> dict[str, list[dict]]:
    """Run both tools `repeats` times, alternating which goes first: name -> runs."""
    runs: dict[str, list[dict]] = {name: [] for name, _ in pair}
    for rep in range(repeats):
        order = pair if rep % 2 == 0 else list(reversed(pair))
        for name, cmd in order:
            suffix = f".{rep}" if repeats > 1 else ""
            runs[name].append(run_tool(cmd, out / f"{tag}.{name}{suffix}.txt", env))
    return runs


LOG_HEAD = re.compile(r"^# exit (-?\d+), wall ([\d.]+) s, peak GPU memory per rank (\d+) MiB")


def read_logged_run(path: Path) -> dict:
    """A run back from the log `run_tool` wrote (for --reanalyse)."""
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    m = LOG_HEAD.match(lines[1]) if len(lines) > 1 else None
    if not m:
        raise SystemExit(f"{path}: not a log written by this script")
    return {"rc": int(m.group(1)), "wall_s": float(m.group(2)), "peak_mib": int(m.group(3)),
            "rows": parse_rows(text.split("\n--- stderr ---\n")[0]), "cmd": lines[0][2:]}


def logged_runs(out: Path, tag: str) -> dict[str, list[dict]]:
    runs = {}
    for name in ("nccl_tests", "ncclbench"):
        files = sorted(out.glob(f"{tag}.{name}.[0-9]*.txt"), key=lambda f: int(f.name.split(".")[-2])) \
            or [out / f"{tag}.{name}.txt"]
        runs[name] = [read_logged_run(f) for f in files if f.exists()]
    return runs


def busbw_agreement(a: dict, b: dict, large_min: int, tol: float = 0.01) -> dict:
    """How many (size >= large_min, placement) busbw points of run `a` lie within
    `tol` of run `b`, and the largest relative deviation."""
    devs = []
    for size in set(a["rows"]) & set(b["rows"]):
        if size < large_min:
            continue
        for half in ("oop", "ip"):
            ref = b["rows"][size][f"{half}_busbw"]
            if ref > 0:
                devs.append(a["rows"][size][f"{half}_busbw"] / ref - 1)
    return {"points": len(devs), "within": sum(abs(d) <= tol for d in devs),
            "max_dev": max((abs(d) for d in devs), default=None)}


def compare_runs(runs: dict[str, list[dict]], small_max: int, large_min: int) -> dict:
    """Summary of one collective from both tools' runs, with the ratio of the
    per-size medians and, given two runs or more, each tool's agreement with
    itself (first run vs second): the noise floor the ±1 % figure sits on."""
    ours, theirs = combine_runs(runs["ncclbench"]), combine_runs(runs["nccl_tests"])
    entry = summarise(ours, theirs, small_max, large_min)
    entry["busbw_agreement"] = busbw_agreement(ours, theirs, large_min)
    for name in ("nccl_tests", "ncclbench"):
        if len(runs[name]) >= 2:
            entry[f"{name}_self_agreement"] = busbw_agreement(runs[name][0], runs[name][1], large_min)
            entry[f"{name}_busbw_spread"] = busbw_spread(runs[name], large_min)
    return entry


def busbw_spread(runs: list[dict], large_min: int) -> float | None:
    """One tool's run-to-run scatter: the largest (max - min) / median of busbw
    over its runs at any size >= large_min, either half.  With three runs or
    more it says how far apart single runs land, which the pairwise
    agreement above (first vs second run) can understate."""
    sizes = set.intersection(*(set(r["rows"]) for r in runs))
    worst = None
    for size in sizes:
        if size < large_min:
            continue
        for half in ("oop", "ip"):
            vals = [r["rows"][size][f"{half}_busbw"] for r in runs]
            mid = statistics.median(vals)
            if mid > 0:
                spread = (max(vals) - min(vals)) / mid
                worst = spread if worst is None else max(worst, spread)
    return worst


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
        if 0 < size <= small_max:
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


def add_graph(entry: dict, graph_runs: dict[str, list[dict]]) -> None:
    g = compare_runs(graph_runs, 65536, 1 << 62)
    entry["graph_small_time_delta_median_us"] = g["small_time_delta_median_us"]
    entry["graph_rc"] = g["rc"]


def reanalyse(out: Path, ngpus: int) -> int:
    """Rebuild summary.json/summary.md from the logs of an earlier run in `out`."""
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "ngpus": ngpus, "reanalysed_from": str(out),
              "runs": {}}
    for coll in ALL:
        runs = logged_runs(out, coll)
        if not runs["ncclbench"] or not runs["nccl_tests"]:
            continue
        report["repeats"] = len(runs["ncclbench"])
        entry = compare_runs(runs, 65536, 64 << 20)
        graph = logged_runs(out, f"{coll}.graph")
        if graph["ncclbench"] and graph["nccl_tests"]:
            add_graph(entry, graph)
        report["runs"][coll] = entry
    if not report["runs"]:
        raise SystemExit(f"{out}: no logs of this script found")
    (out / "summary.json").write_text(json.dumps(report, indent=1))
    (out / "summary.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nccl-tests-build", type=Path, help="nccl-tests build directory (required to run)")
    ap.add_argument("--reanalyse", action="store_true",
                    help="run nothing: rebuild the summary from the logs already in --out")
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
    if args.reanalyse:
        return reanalyse(args.out, args.ngpus)
    if args.nccl_tests_build is None:
        ap.error("--nccl-tests-build is required (or --reanalyse)")

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
        entry = compare_runs(run_pair(pair, args.out, coll, env, args.repeats), 65536, 64 << 20)
        if args.graph:
            gopts = ["-b", args.min, "-e", args.graph_max, "-f", "2", "-g", "1", "-G", str(args.graph)] + extra
            gpair = [("nccl_tests", mpirun + [binary] + gopts),
                     ("ncclbench", mpirun + [args.python, "-m", "ncclbench", f"{coll}_perf"] + gopts)]
            add_graph(entry, run_pair(gpair, args.out, f"{coll}.graph", env, args.repeats))
        report["runs"][coll] = entry
        print(format_line(coll, entry), flush=True)
    (args.out / "summary.json").write_text(json.dumps(report, indent=1))
    (args.out / "summary.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def _f(x, fmt="{:.4f}"):
    return "—" if x is None else fmt.format(x)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.1f} %"


def _agree(a: dict | None, dev: bool = False) -> str:
    if not a or not a["points"]:
        return "—"
    text = f"{a['within']}/{a['points']}"
    return f"{text}, {a['max_dev'] * 100:.1f} %" if dev else text


def format_line(coll: str, e: dict) -> str:
    return (f"{coll:15s} busbw ratio {_f(e['busbw_ratio_min'])}..{_f(e['busbw_ratio_max'])} "
            f"small dt {_f(e['small_time_delta_median_us'], '{:+.2f}')} us "
            f"graph dt {_f(e.get('graph_small_time_delta_median_us'), '{:+.2f}')} us "
            f"wall {_f(e['wall_ratio'], '{:.2f}')}x mem {e['peak_mib']} rc {e['rc']}")


def markdown(report: dict) -> str:
    lines = [f"# ncclbench vs nccl-tests, {report['ngpus']} GPUs, {report['date']}", "",
             "| collective | busbw ratio >= 64 MiB (min..max) | points within ±1 % "
             "| nccl-tests vs itself: within ±1 %, max dev "
             "| busbw spread over runs, max: nccl-tests / ncclbench "
             "| small-msg time delta, median 8 B-64 KiB (us) "
             "| same with -G | sweep wall time ncclbench / nccl-tests (s) | peak GPU MiB per rank "
             "ncclbench / nccl-tests | #wrong != 0 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for coll, e in report["runs"].items():
        lines.append(
            f"| {coll} | {_f(e['busbw_ratio_min'])}..{_f(e['busbw_ratio_max'])} "
            f"| {_agree(e.get('busbw_agreement'))} | {_agree(e.get('nccl_tests_self_agreement'), True)} "
            f"| {_pct(e.get('nccl_tests_busbw_spread'))} / {_pct(e.get('ncclbench_busbw_spread'))} "
            f"| {_f(e['small_time_delta_median_us'], '{:+.2f}')} "
            f"| {_f(e.get('graph_small_time_delta_median_us'), '{:+.2f}')} "
            f"| {e['wall_s']['ncclbench']:.1f} / {e['wall_s']['nccl_tests']:.1f} "
            f"| {e['peak_mib']['ncclbench']} / {e['peak_mib']['nccl_tests']} "
            f"| {len(e['ncclbench_wrong'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
