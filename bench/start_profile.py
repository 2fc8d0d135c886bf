#!/usr/bin/env python3
"""Where does ncclbench's start go?  Profiles one short run (default: one
all_reduce row, `-b 8 -e 8 -n 1 -w 0`) three ways and prints what costs most:

  1. `python -X importtime`: the slowest imports (cumulative, ms);
  2. cProfile of the whole run: the functions with the largest cumulative time;
  3. a timeline of one run up to its first row: every import in order with its time, the
     largest gaps between imports (C work: CUDA, NCCL) and what ran in them (audit hooks);
  4. the wall time from spawn to the first result row (median of --runs).

  python bench/start_profile.py [--runs 5] [--top 25] [-- ncclbench args...]
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROW = re.compile(r"^\s+\d+\s+\d+\s+\S+")

# Runs ncclbench in this interpreter with an audit hook on imports and a tee on stdout that
# notes when the first row is written; prints (seconds, event) lines as JSON to stderr at exit.
TIMELINE = r"""
import json, re, runpy, sys, threading, time
t0 = time.perf_counter(); events = []; ROW = re.compile(r"^\s+\d+\s+\d+\s+\S+")
def hook(ev, args):
    if ev == "import":
        events.append((time.perf_counter() - t0, args[0], threading.current_thread().name))
sys.addaudithook(hook)
real = sys.stdout; first = []
class Tee:
    def write(self, s):
        if not first and any(ROW.match(l) for l in s.splitlines()):
            first.append(time.perf_counter() - t0)
        return real.write(s)
    def __getattr__(self, k):
        return getattr(real, k)
sys.stdout = Tee(); sys.argv = ["ncclbench"] + sys.argv[1:]
try:
    runpy.run_module("ncclbench", run_name="__main__")
except SystemExit:
    pass
finally:
    print("TIMELINE " + json.dumps({"first_row": first[0] if first else None, "events": events}), file=sys.stderr)
"""


def timeline(py: str, args: list[str], env: dict[str, str], top: int) -> None:
    out = subprocess.run([py, "-c", TIMELINE, *args], env=env, capture_output=True, text=True)
    line = next((x for x in out.stderr.splitlines() if x.startswith("TIMELINE ")), None)
    if line is None:
        print("(no timeline: the run failed)", out.stderr[-500:])
        return
    data = json.loads(line[len("TIMELINE "):])
    first = data["first_row"]
    ev = [e for e in data["events"] if first is None or e[0] <= first]
    print(f"\n== timeline of one run: first row at {first:.3f} s (in-process clock), {len(ev)} imports before it"
          if first is not None else "\n== timeline (no row written)")
    gaps = sorted(((b[0] - a[0], a, b) for a, b in zip(ev, ev[1:])), reverse=True)[:top]
    print("largest gaps between consecutive imports (s, after -> before, thread):")
    for gap, a, b in gaps:
        print(f"  {gap:6.3f} at {a[0]:6.3f}  {a[1]} -> {b[1]}  ({b[2]})")
    if ev and first is not None:
        print(f"  {first - ev[-1][0]:6.3f} at {ev[-1][0]:6.3f}  {ev[-1][1]} -> first row")
    mine = [e for e in ev if e[1].startswith("ncclbench")]
    print(f"ncclbench modules imported before the first row ({len(mine)}): "
          + " ".join(sorted({e[1].removeprefix('ncclbench.') for e in mine})))


def first_row_s(cmd: list[str]) -> float | None:
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    found = None
    assert p.stdout is not None
    for line in p.stdout:
        if found is None and ROW.match(line):
            found = time.perf_counter() - t0
    p.wait()
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("args", nargs="*", default=["all_reduce_perf", "-b", "8", "-e", "8", "-n", "1", "-w", "0"])
    a = ap.parse_args()
    py = sys.executable
    env = dict(os.environ, NCCLBENCH_NO_STORE="1")

    out = subprocess.run([py, "-X", "importtime", "-m", "ncclbench", *a.args], env=env,
                         capture_output=True, text=True)
    rows = []
    for line in out.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(2)), len(m.group(3)), m.group(4)))
    print("== slowest imports (cumulative ms, top level first)")
    for cum, depth, name in sorted(rows, reverse=True)[: a.top]:
        print(f"{cum / 1000:8.1f}  {'  ' * (depth // 2)}{name}")

    with tempfile.TemporaryDirectory() as tmp:
        prof = os.path.join(tmp, "run.prof")
        subprocess.run([py, "-m", "cProfile", "-o", prof, "-m", "ncclbench", *a.args], env=env,
                       capture_output=True, text=True)
        print("\n== cProfile, largest cumulative time")
        stats = pstats.Stats(prof, stream=sys.stdout)
        stats.sort_stats("cumulative").print_stats(a.top)

    timeline(py, a.args, env, a.top)

    times = [t for t in (first_row_s([py, "-m", "ncclbench", *a.args]) for _ in range(a.runs)) if t is not None]
    if times:
        print(f"\n== spawn to first row: median {statistics.median(times):.3f} s over {len(times)} runs "
              f"(min {min(times):.3f}, max {max(times):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
