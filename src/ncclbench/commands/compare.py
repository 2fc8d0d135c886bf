"""`ncclbench compare A B`: per-size busbw and time of two runs, deltas beyond noise marked."""

from __future__ import annotations

import argparse
import json
import sys

from ._runs import REF_HELP, RunRefs, add_db_option, add_in_place_option, placement
from .base import CommandParser

NAME = "compare"
HELP = "per-size busbw and time of two runs, with deltas beyond noise marked"


def add_arguments(parser: CommandParser) -> None:
    add_db_option(parser)
    parser.add_argument("a", metavar="A", help=REF_HELP)
    parser.add_argument("b", metavar="B", help=REF_HELP)
    add_in_place_option(parser, "compare")
    parser.add_argument("--format", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    from ..store.comparison import compare_runs
    from ..store.comparison_format import comparison_to_dict, format_comparison

    with RunRefs(args) as refs:
        a, b = refs.get(args.a), refs.get(args.b)
    c = compare_runs(a, b, placement(args))
    if args.format == "json":
        print(json.dumps(comparison_to_dict(c), indent=1))
    else:
        sys.stdout.write(format_comparison(c))
    return 0
