#!/usr/bin/env python3
"""Where does ncclbench's start go?  Profiles one short run (default: one
all_reduce row, `-b 8 -e 8 -n 1 -w 0`) three ways and prints what costs most:

  1. `python -X importtime`: the slowest imports (cumulative, ms);
  2. cProfile of the whole run: the functions with the largest cumulative time;
  3. the wall time from spawn to the first result row (median of --runs).

  python bench/start_profile.py [--runs 5] [--top 25] [-- ncclbench args...]
"""

from __future__ import annotations

import argparse
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROW = re.compile(r"^\s+\d+\s+\d+\s+\S+")


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

    times = [t for t in (first_row_s([py, "-m", "ncclbench", *a.args]) for _ in range(a.runs)) if t is not None]
    if times:
        print(f"\n== spawn to first row: median {statistics.median(times):.3f} s over {len(times)} runs "
              f"(min {min(times):.3f}, max {max(times):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
