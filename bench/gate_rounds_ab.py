#!/usr/bin/env python3
"""Side by side, one machine: the gate's latency rounds as jobs of their own (run/gate_processes.py)
against rounds on fresh communicators inside the run (NCCLBENCH_GATE_ROUND_JOBS=0), alternating run by
run, so both see the same machine over the same minutes.

Per mode it reports what decides the gate's latency limit: how far a run's gated figure moves between
runs (1 sd of log, leave one out), how far a round moves against the other rounds of its run, what
the run's figure would move if its rounds were independent draws (round spread x sqrt(1.571 / R)),
and the part the rounds share (the difference in quadrature), for two figures of rounds: the median
(the gate's) and the minimum; and the wall time a gated run costs.

    python bench/gate_rounds_ab.py OUT [--runs 10] [--rounds 5] [--ngpus 1] [--budget-s 300]
                                       [--modes "round jobs,fresh communicators"]

`--modes "unbound,bind numa,bind core"` compares the CPU binding of the ranks instead.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from provenance import commit  # noqa: E402

# mode -> (environment, more options): rounds as jobs against fresh communicators (the default), and the
# launching thread's CPU binding (launch/affinity.py) with fresh communicators
MODES: dict[str, tuple[dict[str, str], list[str]]] = {
    "round jobs": ({}, []),
    "fresh communicators": ({"NCCLBENCH_GATE_ROUND_JOBS": "0"}, []),
    "unbound": ({"NCCLBENCH_GATE_ROUND_JOBS": "0"}, ["--cpu-bind", "none"]),
    "bind numa": ({"NCCLBENCH_GATE_ROUND_JOBS": "0"}, ["--cpu-bind", "numa"]),
    "bind core": ({"NCCLBENCH_GATE_ROUND_JOBS": "0"}, ["--cpu-bind", "core"]),
    # the timed loop's calls from C (ncclbench.nccl._timedloop, where built) or through nccl4py
    "c loop": ({"NCCLBENCH_GATE_ROUND_JOBS": "0"}, []),
    "nccl4py": ({"NCCLBENCH_GATE_ROUND_JOBS": "0", "NCCLBENCH_NATIVE": "0"}, []),
}


def figure(rounds: list[list[float]], how) -> float:
    """Per size `how` over rounds, then the median over sizes (as the gate: store/summary_stats)."""
    return statistics.median(how([r[i] for r in rounds]) for i in range(len(rounds[0])))


def loo_sd(xs: list[float]) -> float:
    """1 sd per run of log figures, each against the median of the others."""
    d = [math.log(x) - math.log(statistics.median(xs[:i] + xs[i + 1:])) for i, x in enumerate(xs)]
    return 1.4826 * statistics.median(abs(v - statistics.median(d)) for v in d)


def round_sd(runs: list[list[list[float]]]) -> float:
    d = []
    for rounds in runs:
        figs = [statistics.median(r) for r in rounds]
        m = statistics.median(figs)
        d += [math.log(f / m) for f in figs]
    return 1.4826 * statistics.median(abs(v) for v in d)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ngpus", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=300)
    ap.add_argument("--modes", default="round jobs,fresh communicators", help=f"of {', '.join(MODES)}")
    a = ap.parse_args()
    modes = [m.strip() for m in a.modes.split(",")]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"gate_rounds_ab: unknown mode(s) {bad}; of {list(MODES)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    coll = "all_reduce_perf" if a.ngpus > 1 else "broadcast_perf"
    cmd = [sys.executable, "-m", "ncclbench", coll, "-b", "8", "-e", "64K", "-f", "2", "-n", "20", "-w", "5", "-c", "0",
           "--no-explain", "--no-store", "--gate-rounds", str(a.rounds), "--nprocs", str(a.ngpus)]
    got: dict[str, list[dict]] = {m: [] for m in modes}
    t0 = time.monotonic()
    for i in range(a.runs):
        for mode in modes:
            env, more = MODES[mode]
            if time.monotonic() - t0 > a.budget_s:
                break
            j = out / f"{mode.replace(' ', '_')}-{i}.json"
            s = time.monotonic()
            p = subprocess.run([*cmd, *more, "-J", str(j)], env={**os.environ, **env}, capture_output=True,
                               text=True, timeout=300)
            wall = time.monotonic() - s
            if p.returncode != 0:
                print(f"{mode} run {i}: exit {p.returncode}: {p.stderr[-300:]}", flush=True)
                continue
            g = json.loads(j.read_text())["ncclbench"]["gate_latency"]
            rounds = g["series"][0]["out_of_place"]
            bound = [ln.strip("# ") for ln in p.stdout.splitlines()
                     if "bound" in ln or "--cpu-bind" in ln or "timed loop:" in ln][:3]
            got[mode].append({"wall_s": round(wall, 2), "rounds": rounds, "fresh": g["fresh"], "binding": bound})
            print(f"{mode} run {i}: {wall:.1f} s, median {figure(rounds, statistics.median):.2f} us, "
                  f"min {figure(rounds, min):.2f} us", flush=True)
    lines = [f"# Gate rounds side by side ({time.strftime('%Y-%m-%d')}, commit {commit()})", "",
             f"`python bench/gate_rounds_ab.py {' '.join(sys.argv[1:])}`; each run: `{' '.join(cmd[2:])}`, "
             "alternating modes.", "",
             "| mode | runs | wall s (median) | round sd % | figure | run-to-run sd % | if rounds independent % | shared % |",
             "|---|---:|---:|---:|---|---:|---:|---:|"]
    for mode, runs in got.items():
        if len(runs) < 3:
            continue
        rsd = round_sd([r["rounds"] for r in runs])
        for name, how in (("median of rounds", statistics.median), ("min of rounds", min)):
            figs = [figure(r["rounds"], how) for r in runs]
            sd = loo_sd(figs)
            ind = rsd * math.sqrt((1.2533 ** 2) / a.rounds)
            shared = math.sqrt(max(0.0, sd ** 2 - ind ** 2))
            lines.append(f"| {mode} | {len(runs)} | {statistics.median(r['wall_s'] for r in runs):.1f} | {100 * rsd:.1f} | "
                         f"{name} | {100 * sd:.1f} | {100 * ind:.1f} | {100 * shared:.1f} |")
    text = "\n".join(lines) + "\n"
    (out / "gate-rounds-ab.md").write_text(text)
    (out / "gate-rounds-ab.json").write_text(json.dumps(got, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
