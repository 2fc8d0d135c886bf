"""`ncclbench show RUN`: a stored or imported run, reprinted as the nccl-tests table."""

from __future__ import annotations

import argparse
import sys

from ..core.errors import ArgumentError
from ..store.db import StoredRun
from ..store.importers import ImportedRun
from ._runs import REF_HELP, RunRefs, add_db_option
from .base import CommandParser

NAME = "show"
HELP = "reprint a stored run as the nccl-tests table"


def add_arguments(parser: CommandParser) -> None:
    add_db_option(parser)
    parser.add_argument("run", metavar="RUN", help=REF_HELP + "; or a health scan: health:N, health:latest, "
                        "or its --json file")
    parser.add_argument("--csv", nargs="?", const="-", default=None, metavar="FILE",
                        help="the run's table as CSV instead, on stdout or into FILE")
    parser.add_argument("--metrics", default=None, metavar="FILE",
                        help="also write the run's or the scan's Prometheus text, as --metrics did when it ran")
    parser.add_argument("--junit", default=None, metavar="FILE", help="also write a health scan's JUnit XML")


def show_text(run: StoredRun | ImportedRun) -> str:
    """A stored or imported run as the nccl-tests text it printed, through the live
    formatter (`ncclbench.output.text.render_run`; no footer for an interrupted run).
    The `# Writing JSON output to` line comes back for runs that printed it, not for
    runs read from the JSON file itself."""
    from ..output.text import render_run

    opts = run.options
    json_path = None
    if opts.json_enabled and run.info.extra.get("format") != "json":
        json_path = opts.output_file
    return render_run(run.info, opts, run.rows, run.summary, json_path=json_path)


def run(args: argparse.Namespace) -> int:
    from ..output.metrics import check_writable
    from ..store.health_scans import is_scan_ref

    for path, option in ((args.metrics, "--metrics"), (args.junit, "--junit")):
        if path:
            check_writable(path, option)
    if is_scan_ref(args.run):
        return _show_scan(args)
    if args.junit:
        raise ArgumentError("show: --junit is for health scans (health:N); a run's gate: ncclbench check --junit")
    with RunRefs(args) as refs:
        stored = refs.get(args.run)
    if args.metrics:
        from ..output.metrics import run_metrics, unix_time, write_textfile

        # a run recorded live was stored as it ended; an imported log's time is unknown (no timestamp)
        ended = None if str(getattr(stored, "source", "import")).startswith("import") else \
            unix_time(getattr(stored, "created_at", None))
        write_textfile(args.metrics, run_metrics(stored.info, stored.options, stored.rows, stored.summary, ended,
                                                 live=False))
    if args.csv is not None:
        return _show_csv(stored, args.csv)
    sys.stdout.write(show_text(stored))
    if stored.status != "complete":
        why = getattr(stored, "end_reason", None)
        print(f"ncclbench: {stored.label} is {stored.status} ({len(stored.rows)} rows recorded)"
              + (f": {why}" if why else ""), file=sys.stderr)
    return 0


def _show_scan(args: argparse.Namespace) -> int:
    """A stored health scan (`health:N`) or its JSON file, reprinted as its verdict table."""
    from ..health.core.scan import report_from_json
    from ..health.outputs.scan_output import verdict_table
    from ..store.health_scans import load_scan

    scan = load_scan(args.run, getattr(args, "db", None))
    if args.metrics or args.junit:
        from ..output import junit, metrics

        if args.metrics:
            metrics.write_textfile(args.metrics, metrics.health_metrics(scan.doc))
        if args.junit:
            junit.write(args.junit, junit.health_junit(scan.doc))
    sys.stdout.write(verdict_table(report_from_json(scan.doc), scan.doc))
    return 0


def _show_csv(run: StoredRun | ImportedRun, path: str) -> int:
    from ..output.csvout import rows_csv
    from ..output.metrics import collective_name, write_textfile

    text = rows_csv(collective_name(run.info.program), run.rows)
    if path == "-":
        sys.stdout.write(text)
    else:
        try:
            write_textfile(path, text)
        except OSError as exc:
            raise ArgumentError(f"--csv {path}: {exc.strerror or exc}") from None
    return 0
