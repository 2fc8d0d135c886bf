"""`ncclbench report RUN... -o report.html`: a self-contained HTML report of runs."""

from __future__ import annotations

import argparse

from ._runs import REF_HELP, RunRefs, add_db_option, add_in_place_option, placement
from .base import CommandParser

NAME = "report"
HELP = "write a self-contained HTML report (plots + metadata) of runs"


def add_arguments(parser: CommandParser) -> None:
    add_db_option(parser)
    parser.add_argument("runs", metavar="RUN", nargs="+", help=REF_HELP)
    parser.add_argument("-o", "--output", default="report.html", metavar="FILE",
                        help="HTML file to write (default report.html)")
    parser.add_argument("--png", action="store_true",
                        help="also write the plots as PNG files next to the HTML (needs matplotlib)")
    parser.add_argument("--title", default=None)
    add_in_place_option(parser, "plot")


def run(args: argparse.Namespace) -> int:
    from ..report.html import write_report

    with RunRefs(args) as refs:
        runs = [refs.get(r) for r in args.runs]
    written = write_report(runs, args.output, png=args.png, title=args.title, placement=placement(args))
    for p in written:
        print(f"wrote {p}")
    return 0
