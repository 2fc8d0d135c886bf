#!/usr/bin/env python3
"""Does every process of a job end within the bound when a scheduler signals it?

Each launch path (tests/signal_helpers.py: ncclbench --nprocs with MPICH's
mpiexec, ncclbench --nprocs over the TCP rendezvous, a user's own mpiexec, a
torchrun-style RANK/WORLD_SIZE job) is started REPEATS times per target and
signal: SIGTERM/SIGINT/SIGHUP to the process the user started, SIGTERM to a
random rank, SIGTERM to the process group.  After the first rows, the signal
is sent and the time until the last process of the job is gone is measured
(every process seen in the job's process tree before the signal).  Recorded:
how many tries ended every process within STOP_BOUND_S, the times, the exit
status, ncclbench's lines naming the signal, and the stored run's status.

Run:  python bench/signals_bound.py [--repeats 20] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')
from signal_helpers import finish, kill_leftovers, ncclbench_lines, send, start, stored_run, wait_for_rows, wait_gone  # noqa: E402

from ncclbench.launch.spawn import STOP_BOUND_S  # noqa: E402

CASES = [
    ("nprocs-mpi", "launcher", "SIGTERM"), ("nprocs-mpi", "launcher", "SIGINT"), ("nprocs-mpi", "launcher", "SIGHUP"),
    ("nprocs-mpi", "rank", "SIGTERM"), ("nprocs-mpi", "group", "SIGTERM"),
    ("nprocs-tcp", "launcher", "SIGTERM"), ("nprocs-tcp", "launcher", "SIGINT"), ("nprocs-tcp", "launcher", "SIGHUP"),
    ("nprocs-tcp", "rank", "SIGTERM"), ("nprocs-tcp", "group", "SIGTERM"),
    ("mpiexec", "launcher", "SIGTERM"), ("mpiexec", "rank", "SIGTERM"), ("mpiexec", "group", "SIGTERM"),
    ("tcp-env", "rank", "SIGTERM"), ("tcp-env", "launcher", "SIGINT"),
]


def one(path: str, target: str, signame: str, rng: random.Random) -> dict:
    with tempfile.TemporaryDirectory(prefix="ncclbench-sigbench-") as tmp:
        db = Path(tmp) / "r.sqlite"
        job = start(path, db)
        rec: dict = {"path": path, "target": target, "signal": signame}
        try:
            wait_for_rows(job, 2)
            tgt = f"rank {rng.randrange(4)}" if target == "rank" else target
            rec["target"] = tgt
            since = send(job, tgt, getattr(signal, signame))
            took = wait_gone(job, since)
            codes = finish(job)
        except AssertionError as e:
            rec.update(error=str(e)[:500], took_s=None, ended=False)
            kill_leftovers(job)
            return rec
        left = kill_leftovers(job)
        stored = stored_run(db)
        lines = ncclbench_lines(job.err)
        rec.update(took_s=None if took is None else round(took, 3), ended=took is not None and not left,
                   within_bound=took is not None and not left and took <= STOP_BOUND_S, exit=codes[0],
                   stored_status=stored[0] if stored else None, stored_reason=stored[1] if stored else None,
                   rows_kept=stored[2] if stored else 0,
                   lines_naming_signal=sum(1 for ln in lines if signame in ln), ncclbench_lines=lines[-3:])
        return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--only", default=None, help="comma list of paths to run")
    ap.add_argument("--from-json", default=None, help="only write the tables again from a signals-bound.json")
    args = ap.parse_args()
    if args.from_json:
        doc = json.loads(Path(args.from_json).read_text())
        return write(Path(args.out), doc["meta"], doc["tries"], [tuple(c) for c in doc.get("cases", CASES)])
    rng = random.Random(13)
    cases = [c for c in CASES if not args.only or c[0] in args.only.split(",")]
    load0 = os.getloadavg()
    t0 = time.time()
    results = []
    for rep in range(args.repeats):  # interleaved, so a busy spell of the machine hits every case alike
        for path, target, sig in cases:
            r = one(path, target, sig, rng)
            r["repeat"] = rep + 1
            results.append(r)
            print(json.dumps(r)[:300], flush=True)
    meta = {"date": datetime.now().isoformat(timespec="seconds"), "commit": commit(),
            "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "bound_s": STOP_BOUND_S,
            "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in os.getloadavg()],
            "wall_s": round(time.time() - t0)}
    return write(Path(args.out), meta, results, cases)


def write(out: Path, meta: dict, results: list[dict], cases: list[tuple[str, str, str]]) -> int:
    """The summary table (md) and everything (json) under `out`."""
    summary = []
    for path, target, sig in cases:
        rs = [r for r in results if r["path"] == path and r["signal"] == sig
              and (r["target"] == target or (target == "rank" and r["target"].startswith("rank ")))]
        times = [r["took_s"] for r in rs if r.get("took_s") is not None]
        summary.append({
            "path": path, "target": target, "signal": sig, "tries": len(rs),
            "ended_within_bound": sum(1 for r in rs if r.get("within_bound")),
            "median_s": round(statistics.median(times), 3) if times else None,
            "max_s": max(times) if times else None,
            "stored_interrupted": sum(1 for r in rs if r.get("stored_status") == "interrupted"),
            # the reason written by ncclbench (rank 0 or the launcher), not read off a dead writer's pid
            "outcome_written": sum(1 for r in rs if r.get("stored_status") == "interrupted" and
                                   "ended without finishing it" not in (r.get("stored_reason") or "")),
            "rows_kept_min": min((r.get("rows_kept", 0) for r in rs), default=0),
            "exit_statuses": sorted({r.get("exit") for r in rs if r.get("exit") is not None}),
            "one_ncclbench_line_naming_it": sum(1 for r in rs if r.get("lines_naming_signal", 0) >= 1),
        })
    out.mkdir(parents=True, exist_ok=True)
    (out / "signals-bound.json").write_text(json.dumps({"meta": meta, "cases": cases, "summary": summary,
                                                        "tries": results}, indent=1))
    lines = [f"# Signals end every process of the job ({meta['date']})", "",
             f"Machine: {meta['machine']}; commit {meta['commit']}; load average {meta['load_before'][0]} before, "
             f"{meta['load_after'][0]} after ({meta['wall_s']} s). Command: `python bench/{meta['command']}`.",
             f"Bound: every process of the job gone within {STOP_BOUND_S:g} s of the signal (the ranks' own "
             "2 s grace, then SIGTERM, SIGKILL and a sweep for orphans). Each try: 4 ranks, all_reduce "
             "8 B - 256 KiB over and over (-N 0), the signal after the first 2 rows; times from the signal to "
             "the last process of the job gone.", "",
             "| path | target | signal | ended all within bound | median s | max s | stored interrupted | "
             "... with ncclbench's reason | exit status | one line naming it |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for s in summary:
        lines.append(f"| {s['path']} | {s['target']} | {s['signal']} | {s['ended_within_bound']} of {s['tries']} | "
                     f"{s['median_s']} | {s['max_s']} | {s['stored_interrupted']} of {s['tries']} | "
                     f"{s['outcome_written']} of {s['tries']} | {', '.join(map(str, s['exit_statuses']))} | "
                     f"{s['one_ncclbench_line_naming_it']} of {s['tries']} |")
    lines += ["", "'stored interrupted' is the status `history` shows on rank 0's host. Under a user's own mpiexec, "
              "MPICH kills every rank (SIGKILL) as soon as one ends, and rank 0 is often killed before it writes "
              "why its run ended: the store then shows the run interrupted because its writer's pid is gone "
              "('... with ncclbench's reason' counts the runs whose reason ncclbench wrote: rank 0, or ncclbench's "
              "launcher after the job). Exit status 1 on tcp-env is rank 0's, told by the rank that got the "
              "signal (which exits 143)."]
    (out / "signals-bound.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
