"""`ncclbench check RUN --against NAME`: the regression gate (exit 7 when worse)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ..errors import ArgumentError, ExitCode
from ._runs import REF_HELP, RunRefs, add_db_option, add_in_place_option, placement
from .base import CommandParser

NAME = "check"
HELP = "regression gate: exit 7 when RUN is worse than a baseline"


def add_arguments(parser: CommandParser) -> None:
    add_db_option(parser)
    parser.add_argument("run", metavar="RUN", help=REF_HELP)
    parser.add_argument("--against", required=True, metavar="NAME",
                        help="baseline name (or any run reference)")
    parser.add_argument("--max-drop", default="5%", metavar="PCT",
                        help="largest allowed busbw drop at large sizes (default 5%%)")
    parser.add_argument("--max-rise", default=None, metavar="PCT",
                        help="largest allowed time rise at sizes <= 64 KiB (default: --max-drop)")
    add_in_place_option(parser, "gate on")
    parser.add_argument("--format", choices=("text", "json"), default="text")


def parse_pct(text: str, what: str = "limit") -> float:
    """'5%', '5' -> 5.0 (percent)."""
    t = text.strip().rstrip("%").strip()
    try:
        v = float(t)
    except ValueError:
        raise ArgumentError(f"bad {what} {text!r}: expected a percentage like 5%") from None
    if not (0 <= v < 100) or math.isnan(v):
        raise ArgumentError(f"bad {what} {text!r}: must be between 0% and 100%")
    return v


def run(args: argparse.Namespace) -> int:
    from ..store.compare import format_gate, gate, gate_to_dict

    max_drop = parse_pct(args.max_drop, "--max-drop")
    max_rise = parse_pct(args.max_rise, "--max-rise") if args.max_rise else max_drop
    with RunRefs(args) as refs:
        checked = refs.get(args.run)
        name = args.against
        if os.path.isfile(name) or "#" in name:
            baseline, base_name = refs.get(name), None
        else:
            store = refs.store
            bid = store.get_baseline(name)
            if bid is None and not name.isdigit() and name.lower() not in ("latest", "last"):
                raise ArgumentError(f"no baseline named {name!r} (see `ncclbench baseline list`)")
            baseline = store.get_run(bid if bid is not None else store.resolve(name))
            base_name = name if bid is not None else None
    g = gate(checked, baseline, max_drop, max_rise, placement(args))
    if args.format == "json":
        print(json.dumps(gate_to_dict(g), indent=1))
    else:
        sys.stdout.write(format_gate(g, base_name))
    return 0 if g.ok else int(ExitCode.DATA_ERRORS)
