#!/usr/bin/env python3
"""Run-to-run spread, small-message time, start time and memory: ncclbench
against an nccl-tests build, both tools run alternately as separate processes.

Each *run* is one whole process (`all_reduce_perf -b 8 -e 64K -f 4`, say) of one
tool; runs alternate tool by tool (A B A B ...), so slow phases of the machine
hit both.  Per run it records the mean out-of-place and in-place time over the
sizes, the per-size times, the time from spawn to the first result row, the
whole-process wall time and the peak RSS of the process tree's main process
(`wait4`).  Per tool and variant it reports the max/min ratio of per-run means,
the runs above 1.5x the tool's median run, and per collective the median over
sizes of (ncclbench - nccl-tests) per-size medians.

Usage (one GPU; several with --launcher "mpirun -np 4 ..."):
  python bench/stability.py --nccl-tests-build /tmp/nccl-tests/build \
      --collectives all_reduce,reduce_scatter,scatter --args "-b 8 -e 64K -f 4" \
      --runs 10 --out bench/results/stability-h100 \
      [--variant nostore:NCCLBENCH_NO_STORE=1] [--wrap "taskset -c 0-7"]

A variant is NAME:VAR=VALUE,VAR=VALUE (environment for the ncclbench runs only);
the plain `ncclbench` variant always runs.  The nccl-tests build is not part of
this project: build it from NVIDIA's repository yourself and pass its build dir.
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
import time
from pathlib import Path

ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S*)\s+(-?\d+)\s+(.*)$")


def parse_rows(text: str) -> dict[int, tuple[float, float]]:
    """size -> (out-of-place time us, in-place time us) from an nccl-tests-format table."""
    rows: dict[int, tuple[float, float]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = ROW.match(line)
        if not m:
            continue
        f = m.group(6).split()
        try:
            rows[int(m.group(1))] = (float(f[0]), float(f[4]))
        except (IndexError, ValueError):
            continue
    return rows


def row_keys(text: str) -> list[tuple[str, ...]]:
    """(size, count, type, redop, root) of every row, in order: what must match nccl-tests'."""
    return [m.groups()[:5] for m in map(ROW.match, text.splitlines()) if m and not m.group(0).startswith("#")]


def run_once(cmd: list[str], env: dict[str, str], timeout: float) -> dict:
    """One whole process: its table, time to first row, wall time, peak RSS (kB)."""
    started = time.time()
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first_row = None
    lines = []
    assert p.stdout is not None
    deadline = t0 + timeout
    for line in p.stdout:
        lines.append(line)
        if first_row is None and not line.startswith("#") and ROW.match(line):
            first_row = time.perf_counter() - t0
        if time.perf_counter() > deadline:
            p.kill()
            break
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    text = "".join(lines)
    return {"rc": p.returncode, "wall_s": wall, "first_row_s": first_row, "started": started,
            "maxrss_kb": usage.ru_maxrss, "rows": parse_rows(text), "keys": row_keys(text), "text": text}


def mean_time(rows: dict[int, tuple[float, float]]) -> float | None:
    vals = [t for pair in rows.values() for t in pair]
    return statistics.fmean(vals) if vals else None


def spread(values: list[float]) -> dict:
    if not values:
        return {}
    med = statistics.median(values)
    return {"n": len(values), "min": min(values), "median": med, "max": max(values),
            "max_over_min": max(values) / min(values) if min(values) > 0 else None,
            "runs_over_1.5x_median": sum(1 for v in values if v > 1.5 * med)}


def per_size_median(runs: list[dict]) -> dict[int, tuple[float, float]]:
    sizes = sorted({s for r in runs for s in r["rows"]})
    out = {}
    for s in sizes:
        oop = [r["rows"][s][0] for r in runs if s in r["rows"]]
        ip = [r["rows"][s][1] for r in runs if s in r["rows"]]
        out[s] = (statistics.median(oop), statistics.median(ip))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nccl-tests-build", required=True)
    ap.add_argument("--collectives", default="all_reduce")
    ap.add_argument("--args", default="-b 8 -e 64K -f 4")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--launcher", default="", help="prefix for both tools, e.g. 'mpirun -np 4'")
    ap.add_argument("--wrap", default="", help="prefix for both tools' processes, e.g. 'taskset -c 0-7'")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME:VAR=VALUE,... extra ncclbench variant (environment)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out", required=True, help="output path prefix (.json, .md, .log)")
    a = ap.parse_args()

    variants: list[tuple[str, dict[str, str]]] = [("ncclbench", {})]
    for v in a.variant:
        name, _, assigns = v.partition(":")
        env = dict(kv.split("=", 1) for kv in assigns.split(",") if kv)
        variants.append((name, env))
    prefix = shlex.split(a.launcher) + shlex.split(a.wrap)
    base_env = dict(os.environ)
    results: dict = {"args": a.args, "launcher": a.launcher, "wrap": a.wrap, "runs": a.runs,
                     "collectives": {}, "host": os.uname().nodename,
                     "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    log = open(f"{a.out}.log", "w")
    for coll in a.collectives.split(","):
        tools = [("nccl-tests", prefix + [f"{a.nccl_tests_build}/{coll}_perf"] + shlex.split(a.args), {})]
        for name, env in variants:
            tools.append((name, prefix + [a.python, "-m", "ncclbench", f"{coll}_perf"] + shlex.split(a.args), env))
        runs: dict[str, list[dict]] = {name: [] for name, _, _ in tools}
        for i in range(a.runs):
            order = tools if i % 2 == 0 else tools[::-1]
            for name, cmd, env in order:
                r = run_once(cmd, {**base_env, **env}, a.timeout)
                log.write(f"### {coll} {name} run {i} rc={r['rc']} cmd={shlex.join(cmd)}\n{r['text']}\n")
                r.pop("text")
                r["keys"] = [list(k) for k in r["keys"]]
                r["mean_us"] = mean_time(r["rows"])
                runs[name].append(r)
                print(f"{coll:15} {name:14} run {i:2} rc={r['rc']} mean={r['mean_us']} "
                      f"first_row={r['first_row_s']} rss={r['maxrss_kb']}", file=sys.stderr, flush=True)
        ref = per_size_median([r for r in runs["nccl-tests"] if r["rows"]]) if runs["nccl-tests"] else {}
        ref_keys = next((r["keys"] for r in runs["nccl-tests"] if r["keys"]), None)
        summary = {}
        nt_runs = runs["nccl-tests"]
        for name, rs in runs.items():
            # First row against nccl-tests' run of the same round: the machine's state drifts between
            # rounds (first rows of one tool range 0.5-0.8 s), a pair shares it.
            paired = [r["first_row_s"] - n["first_row_s"] for r, n in zip(rs, nt_runs)
                      if r["first_row_s"] is not None and n["first_row_s"] is not None]
            ok = [r for r in rs if r["rows"] and r["mean_us"] is not None]
            med = per_size_median(ok) if ok else {}
            deltas = [med[s][h] - ref[s][h] for s in med if s in ref for h in (0, 1)]
            summary[name] = {
                "mean_us_per_run": [r["mean_us"] for r in ok],
                "run_started_epoch": [r["started"] for r in ok],
                "rows_equal_nccl_tests": None if ref_keys is None else all(r["keys"] == ref_keys for r in ok),
                "mean_spread": spread([r["mean_us"] for r in ok]),
                "first_row_s": spread([r["first_row_s"] for r in ok if r["first_row_s"] is not None]),
                "first_row_per_run_s": [r["first_row_s"] for r in rs],
                "first_row_delta_paired_median_s": statistics.median(paired) if paired else None,
                "wall_s": spread([r["wall_s"] for r in ok]),
                "maxrss_kb": spread([float(r["maxrss_kb"]) for r in ok]),
                "median_delta_vs_nccl_tests_us": statistics.median(deltas) if deltas else None,
                "per_size_median_us": {str(s): v for s, v in med.items()},
                "failed_runs": len(rs) - len(ok),
            }
        results["collectives"][coll] = summary
    log.close()
    Path(f"{a.out}.json").write_text(json.dumps(results, indent=1))
    lines = [f"# stability: `{a.args}`, {a.runs} alternating runs per tool, launcher `{a.launcher or 'none'}`"
             f", wrap `{a.wrap or 'none'}` ({results['date']}, {results['host']})", "",
             "| collective | tool | per-run mean us (min / median / max) | max/min | runs > 1.5x median | "
             "median delta vs nccl-tests us | first row s (median) | first row - nccl-tests' of its round, s "
             "(median) | peak RSS MB (median) | rows = nccl-tests' |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for coll, summary in results["collectives"].items():
        for name, s in summary.items():
            ms, fr, rss = s["mean_spread"], s["first_row_s"], s["maxrss_kb"]
            if not ms:
                lines.append(f"| {coll} | {name} | failed | | | | | | | |")
                continue
            d, fd = s["median_delta_vs_nccl_tests_us"], s["first_row_delta_paired_median_s"]
            lines.append(f"| {coll} | {name} | {ms['min']:.2f} / {ms['median']:.2f} / {ms['max']:.2f} | "
                         f"{ms['max_over_min']:.3f} | {ms['runs_over_1.5x_median']} | "
                         f"{'' if d is None else f'{d:+.2f}'} | {fr.get('median', float('nan')):.3f} | "
                         f"{'' if fd is None else f'{fd:+.3f}'} | "
                         f"{rss.get('median', 0) / 1024:.0f} | {s['rows_equal_nccl_tests']} |")
    Path(f"{a.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
