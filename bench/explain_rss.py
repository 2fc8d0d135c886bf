#!/usr/bin/env python3
"""Where explain's peak memory goes: one sweep run whole, alternating variants that
each switch one part of explain off, peak RSS per process from wait4().

    PYTHONPATH=src python bench/explain_rss.py --runs 5 --out DIR [-- BENCH ARGS]

Variants (the run's own command is `python -m ncclbench all_reduce_perf ARGS`):
  explain-on     the default
  explain-off    NCCLBENCH_EXPLAIN=0
  no-profiler    NCCL_PROFILER_PLUGIN=none-such.so: NCCL loads no profiler plugin
                 (a user's setting, which explain leaves alone: the log route only)
  no-log         NCCL_DEBUG=WARN: a user's level, so NCCL writes no INFO lines for
                 explain to read (the profiler route only)
  no-nvml        a `pynvml` that fails to import first on PYTHONPATH: the topology
                 read has sysfs only (the NVML part of the thread off)
Writes DIR/explain_rss.json and .md (machine, commit, date, medians).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')


def variants(tmp: Path) -> dict[str, dict[str, str]]:
    fake = tmp / "no_pynvml"
    (fake / "pynvml").mkdir(parents=True, exist_ok=True)
    (fake / "pynvml" / "__init__.py").write_text("raise ImportError('pynvml switched off by bench/explain_rss.py')\n")
    path = os.environ.get("PYTHONPATH", "")
    return {"explain-on": {}, "explain-off": {"NCCLBENCH_EXPLAIN": "0"},
            "no-profiler": {"NCCL_PROFILER_PLUGIN": "none-such.so"}, "no-log": {"NCCL_DEBUG": "WARN"},
            "no-nvml": {"PYTHONPATH": f"{fake}{os.pathsep}{path}" if path else str(fake)}}


def peak_rss_mb(cmd: list[str], env: dict[str, str]) -> tuple[int, float]:
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss / 1024.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", required=True)
    ap.add_argument("bench", nargs="*", default=["-b", "8", "-e", "1G", "-f", "4"])
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "ncclbench", "all_reduce_perf", *a.bench]
    with tempfile.TemporaryDirectory() as tmp:
        vs = variants(Path(tmp))
        got: dict[str, list[float]] = {k: [] for k in vs}
        codes: dict[str, list[int]] = {k: [] for k in vs}
        for _ in range(a.runs):
            for name, extra in vs.items():
                rc, mb = peak_rss_mb(cmd, {**os.environ, "NCCLBENCH_NO_STORE": "1", **extra})
                got[name].append(round(mb, 1))
                codes[name].append(rc)
    doc = {"machine": platform.node(), "commit": commit(), "command": " ".join(cmd), "runs": a.runs,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "peak_rss_mb": got, "exit_codes": codes}
    (out / "explain_rss.json").write_text(json.dumps(doc, indent=1) + "\n")
    base = statistics.median(got["explain-off"])
    lines = [f"# explain's peak memory by part ({doc['date']}, commit {doc['commit']})", "",
             f"`{doc['command']}`, {a.runs} alternating runs per variant, peak RSS from wait4 (MB), "
             "NCCLBENCH_NO_STORE=1.", "", "| variant | median | vs explain-off | runs | exit codes |",
             "|---|---:|---:|---|---|"]
    for name, v in got.items():
        lines.append(f"| {name} | {statistics.median(v):.1f} | {statistics.median(v) - base:+.1f} | "
                     f"{', '.join(f'{x:.0f}' for x in v)} | {sorted(set(codes[name]))} |")
    (out / "explain_rss.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
