"""`ncclbench report RUN... -o report.html`: a self-contained HTML report of runs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._runs import REF_HELP, RunRefs, add_db_option, add_in_place_option, placement
from .base import CommandParser

if TYPE_CHECKING:
    from ..report.html import RunJudged
    from ..store.db import StoredRun
    from ..store.imported import ImportedRun

NAME = "report"
HELP = "write a self-contained HTML report (plots + metadata) of runs"


def add_arguments(parser: CommandParser) -> None:
    add_db_option(parser)
    parser.add_argument("runs", metavar="RUN", nargs="+", help=REF_HELP + "; or one health scan (health:N, "
                        "health:latest, or its --json file): its page")
    parser.add_argument("-o", "--output", default="report.html", metavar="FILE",
                        help="HTML file to write (default report.html)")
    parser.add_argument("--png", action="store_true",
                        help="also write the plots as PNG files next to the HTML (needs matplotlib)")
    parser.add_argument("--title", default=None)
    add_in_place_option(parser, "plot")


def judged_runs(runs: Sequence[StoredRun | ImportedRun]) -> dict[str, RunJudged]:
    """Each run's judgement as the report shows it (`ncclbench explain`'s lines, verdict, ceiling)."""
    from ..explain.run_explain import explain_run
    from ..explain.stored import run_facts
    from ..explain.topology import format_topology_lines
    from ..report.html import RunJudged

    out: dict[str, RunJudged] = {}
    for r in runs:
        facts = run_facts(r)
        ex = explain_run(facts)
        c = ex.judgement.ceiling
        src = c.algorithm_source
        algo = f"{c.algorithm} {src if src in ('', 'predicted') else 'from ' + src}".strip() if c.algorithm else ""
        exp = ex.judgement.expected
        curve = tuple((int(s), float(b)) for s, b in exp.get("per_size") or [] if b is not None)
        out[r.label] = RunJudged(lines=format_topology_lines(facts.hosts) + ex.lines, verdict=ex.judgement.verdict.label,
                                 ceiling=c.ceiling, ceiling_text=f"ceiling ({c.bound}{', ' + algo if algo else ''})",
                                 expected=curve, expected_text=f"expected (healthy {exp.get('label')})")
    return out


def run(args: argparse.Namespace) -> int:
    from ..store.health_scans import is_scan_ref

    scans = [r for r in args.runs if is_scan_ref(r)]
    if scans:
        return _report_scan(args, scans)
    from ..report.html import write_report

    with RunRefs(args) as refs:
        runs = [refs.get(r) for r in args.runs]
    written = write_report(runs, args.output, png=args.png, title=args.title, placement=placement(args),
                           judged=judged_runs(runs))
    for p in written:
        print(f"wrote {p}")
    return 0


def _report_scan(args: argparse.Namespace, scans: list[str]) -> int:
    """`report health:N -o health.html`: the scan's page (one scan per page)."""
    from ..core.errors import ArgumentError
    from ..report.health_html import write_health_page
    from ..store.health_scans import load_scan

    if len(scans) != len(args.runs) or len(scans) > 1:
        raise ArgumentError("report: a health scan gets a page of its own: give one health scan "
                            "(health:N or its JSON file) and no runs")
    scan = load_scan(scans[0], getattr(args, "db", None))
    print(f"wrote {write_health_page(scan.doc, scan.label, args.output, args.title)}")
    return 0
