"""`ncclbench check RUN --against NAME`: the regression gate (exit 7 when worse, 9 when the
checked run is too noisy to confirm anything)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ..core.errors import ArgumentError
from ._runs import REF_HELP, RunRefs, add_db_option, add_in_place_option, placement
from .base import CommandParser

NAME = "check"
HELP = "regression gate: exit 7 when RUN is worse than a baseline"


def add_arguments(parser: CommandParser) -> None:
    from ..store.gate import GATE_DEFINITION

    parser.epilog = ("What is judged: " + GATE_DEFINITION.replace("%", "%%") + ".  Exit status: 0 ok, 7 regression, "
                     "9 not judged (an unstable candidate: re-run; or cannot confirm: the baseline's noise is wider than the "
                     "limit asked), 255 bad arguments or a baseline that is no "
                     "reference for RUN (another collective, rank count, backend, datatype or operation, another "
                     "ncclbench release, one rank, a baseline of one size, a RUN missing sizes of the baseline's "
                     "figures).")
    add_db_option(parser)
    parser.add_argument("run", metavar="RUN", help=REF_HELP)
    parser.add_argument("--against", required=True, metavar="NAME",
                        help="baseline name (its runs are its history) or any run reference")
    parser.add_argument("--max-drop", default="5%", metavar="PCT",
                        help="largest allowed drop of the plateau busbw (default 5%%); a larger drop fails "
                             "only when it is also beyond the noise")
    parser.add_argument("--max-rise", default=None, metavar="PCT",
                        help="largest allowed rise of the latency floor, sizes <= 64 KiB; the baseline must be "
                             "precise enough to see it, else exit 9 (default: none asked: the latency floor fails "
                             "only beyond its noise and --max-drop, and prints the smallest rise it detects)")
    parser.add_argument("--every-size", action="store_true",
                        help="also judge every size on its own (against its noise across the baseline's runs "
                             "or the -N cycles)")
    add_in_place_option(parser, "gate on")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--junit", default=None, metavar="FILE",
                        help="also write JUnit XML: one test case per judged figure (output/junit.py)")
    parser.add_argument("--metrics", default=None, metavar="FILE",
                        help="also write Prometheus text: the outcome and each figure (output/metrics.py)")


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
    from ..output.metrics import check_writable
    from ..store.baseline_gate import baseline_history
    from ..store.gate import gate
    from ..store.gate_format import format_gate, gate_to_dict

    for path, option in ((args.junit, "--junit"), (args.metrics, "--metrics")):
        if path:
            check_writable(path, option)
    max_drop = parse_pct(args.max_drop, "--max-drop")
    max_rise = parse_pct(args.max_rise, "--max-rise") if args.max_rise else None
    history = []
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
            if bid is not None:
                checked_id = getattr(checked, "id", None)
                history = [store.get_run(r) for r in baseline_history(store, name)[1] if r != checked_id]
    g = gate(checked, baseline, max_drop, max_rise, placement(args), history=history,
             every_size=args.every_size)
    if args.junit or args.metrics:
        from ..output import junit, metrics

        if args.junit:
            junit.write(args.junit, junit.check_junit(gate_to_dict(g), args.run))
        if args.metrics:
            metrics.write_textfile(args.metrics, metrics.check_metrics(gate_to_dict(g), args.run, args.against))
    if args.format == "json":
        print(json.dumps(gate_to_dict(g), indent=1))
    else:
        sys.stdout.write(format_gate(g, base_name))
    return g.exit_code
