"""`ncclbench history`: the stored runs, newest first (text table or JSON)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TextIO

from ._runs import add_db_option, db_path
from .base import CommandParser

NAME = "history"
HELP = "list stored runs, newest first"


def add_arguments(parser: CommandParser) -> None:
    add_db_option(parser)
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--limit", type=int, default=20, help="show at most N runs (0 = all; default 20)")
    parser.add_argument("--program", help="only runs of this test (e.g. all_reduce_perf)")
    parser.add_argument("--health", action="store_true", help="list the stored health scans instead of runs")
    parser.add_argument("--tune", action="store_true",
                        help="list tune's candidate runs too (hidden by default: a tune stores one per candidate)")


def run(args: argparse.Namespace) -> int:
    from ..store import summary_stats as stats
    from ..store.db import TUNE_SOURCE, ResultStore

    path = db_path(args)
    if args.health:
        return _health_history(path, args)
    baselines: dict[int, list[str]] = {}
    hidden = 0
    if not path.exists():
        headers, runs_summ = [], {}
    else:
        with ResultStore(path, create=False) as store:
            hide = None if args.tune else TUNE_SOURCE
            headers = store.list_runs(limit=args.limit, program=args.program, without_source=hide)
            hidden = store.count_source(TUNE_SOURCE) if hide else 0
            runs_summ = {h.id: stats.run_summary(store.get_run(h.id).rows) for h in headers}
            for name, rid, _, _ in store.list_baselines():
                baselines.setdefault(rid, []).append(name)
    if args.format == "json":
        out = []
        for h in headers:
            plateau, lat = runs_summ[h.id]
            out.append({"id": h.id, "created_at": h.created_at, "start_time": h.start_time,
                        "status": h.status, "end_reason": h.end_reason, "program": h.program,
                        "collective": h.collective,
                        "nranks": h.nranks, "hosts": h.hosts, "gpus": h.gpus, "rows": h.nrows,
                        "plateau_busbw": plateau, "latency_us": lat, "source": h.source,
                        "source_path": h.source_path, "argv": h.argv,
                        "baselines": baselines.get(h.id, [])})
        print(json.dumps(out, indent=1))
        return 0
    if not headers:
        print(f"ncclbench: no runs recorded in {path}" + (" matching " + args.program
              if args.program else ""), file=sys.stderr)
        if path.exists():
            _note_tune(hidden, sys.stderr)
            _note_scans(path, sys.stderr)
        return 0
    fmt = "%5s  %-19s  %-11s  %-20s  %5s  %-20s  %4s  %9s  %8s  %s"
    print(fmt % ("ID", "DATE", "STATUS", "TEST", "RANKS", "GPU", "ROWS", "PLAT GB/s", "LAT us",
                 "SOURCE / BASELINE"))
    for h in headers:
        plateau, lat = runs_summ[h.id]
        gpu = sorted(set(h.gpus))
        gpu_s = (gpu[0] + (f" +{len(gpu) - 1}" if len(gpu) > 1 else "")) if gpu else "-"
        if h.source == TUNE_SOURCE:  # one of a tune session's candidates: never `latest`
            src = "tune candidate"
        else:
            src = "ncclbench" if h.source == "ncclbench" else \
                f"{h.source.split(':')[-1]}:{os.path.basename(h.source_path or '')}"
        if h.id in baselines:
            src += "  [" + ", ".join(baselines[h.id]) + "]"
        date = (h.start_time or h.created_at.replace("T", " "))[:19]
        print((fmt % (h.id, date, h.status, h.program[:20], h.nranks or "-", gpu_s[:20], h.nrows,
                      "-" if plateau is None else f"{plateau:.2f}",
                      "-" if lat is None else f"{lat:.2f}", src)).rstrip())
    print(f"# {stats.PLATEAU_DEFINITION}; {stats.LATENCY_DEFINITION} (out-of-place, first series)")
    _note_tune(hidden)
    _note_scans(path)
    return 0


def _note_tune(hidden: int, stream: TextIO | None = None) -> None:
    """One line saying how many tune candidate runs the list leaves out, if any."""
    if hidden:
        print(f"# {hidden} tune candidate run(s) not listed: ncclbench history --tune", file=stream or sys.stdout)


def _note_scans(path: Path, stream: TextIO | None = None) -> None:
    """One line pointing at the health scans kept in the same store, if any."""
    from ..store.db import ResultStore
    from ..store.health_scans import list_scans

    with ResultStore(path, create=False) as store:
        scans = list_scans(store, limit=1)
    if scans:
        print(f"# health scans are listed apart: ncclbench history --health (newest {scans[0].label})",
              file=stream or sys.stdout)


def _health_history(path: Path, args: argparse.Namespace) -> int:
    """The stored health scans, newest first."""
    from ..store.db import ResultStore
    from ..store.health_scans import list_scans

    scans = []
    if path.exists():
        with ResultStore(path, create=False) as store:
            scans = list_scans(store, limit=args.limit or None)
    if args.format == "json":
        print(json.dumps([{"id": h.label, "created_at": h.created_at, "start_time": h.start_time,
                           "backend": h.backend, "hosts": h.nhosts, "ranks": h.nranks,
                           "faults_found": h.faults_found, "outcome": h.outcome, "summary": h.summary,
                           "findings": h.findings, "exit_code": h.exit_code,
                           "drain": h.drain, "wall_s": h.wall_s, "argv": h.argv} for h in scans], indent=1))
        return 0
    if not scans:
        print(f"ncclbench: no health scans recorded in {path}", file=sys.stderr)
        return 0
    fmt = "%-10s  %-19s  %5s  %5s  %-6s  %-10s  %8s  %7s  %s"
    print(fmt % ("ID", "DATE", "HOSTS", "RANKS", "FAULTS", "NOT JUDGED", "FINDINGS", "TIME s", "BACKEND / DRAIN"))
    for h in scans:
        date = (h.start_time or h.created_at).replace("T", " ")[:19]
        extra = (h.backend or "-") + (f"; drain {', '.join(h.drain)}" if h.drain else "")
        # hosts not judged: unknown ("-") for a scan stored before they were counted
        unjudged = "-" if h.summary is None else str(sum(n for k, n in h.summary.items()
                                                          if k not in ("healthy", "faulty")))
        print((fmt % (h.label, date, h.nhosts, h.nranks, "yes" if h.faults_found else "no", unjudged, h.findings,
                      "-" if h.wall_s is None else f"{h.wall_s:.1f}", extra)).rstrip())
    return 0
