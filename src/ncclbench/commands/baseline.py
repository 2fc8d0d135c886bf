"""`ncclbench baseline set NAME RUN | list | rm NAME`: named runs for `check` and `--baseline`."""

from __future__ import annotations

import argparse
import sys

from ..core.errors import ArgumentError
from ._runs import add_db_option, db_path, open_store
from .base import CommandParser

NAME = "baseline"
HELP = "name runs as baselines for `check` and `--baseline`"


def add_arguments(parser: CommandParser) -> None:
    add_db_option(parser)
    actions = parser.add_subparsers(dest="action", required=True, metavar="{set,list,rm}",
                                    parser_class=CommandParser)
    a = actions.add_parser("set", help="set NAME to RUN (or to several runs of one test: its history)")
    a.add_argument("name", metavar="NAME")
    a.add_argument("run", metavar="RUN", nargs="+",
                   help="run reference(s); several runs of one command give `check` a noise estimate")
    a.add_argument("--runs", type=int, default=None, metavar="N",
                   help="take the N newest finished runs of RUN's experiment (same test, measured options, "
                        "ranks, hosts, NCCL settings; -J/--csv/--metrics files aside) up to RUN as the "
                        "baseline's history")
    a.add_argument("--note", default=None)
    a.add_argument("--max-drop", default=None, metavar="PCT",
                   help="the plateau busbw drop the baseline should let `check` see (default 5%%): more runs are "
                        "suggested when it cannot")
    a.add_argument("--max-rise", default=None, metavar="PCT",
                   help="the small-message latency rise it should let `check` see (default 30%%): more runs, "
                        "measured with --gate, are suggested when it cannot")
    actions.add_parser("list", help="list baselines")
    a = actions.add_parser("rm", help="remove a baseline")
    a.add_argument("name", metavar="NAME")
    for ap in actions.choices.values():
        add_db_option(ap, default=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    from ..store.baseline_advice import DROP_TO_SEE, RISE_TO_SEE, baseline_noise_note
    from ..store.baseline_rules import refuse_as_baseline
    from ..store.db import ResultStore
    from .check import parse_pct

    if args.action == "list":
        path = db_path(args)
        if not path.exists():
            print(f"ncclbench: no baselines: no result store at {path}", file=sys.stderr)
            return 0
        with ResultStore(path, create=False) as store:
            items = store.list_baselines()
            if not items:
                print(f"ncclbench: no baselines set in {path}", file=sys.stderr)
                return 0
            for name, rid, created, note in items:
                h = store.get_run_header(rid)
                print(f"{name:<20}  run {rid:<5}  {h.program:<20}  set {created[:19]}"
                      + (f"  {note}" if note else ""))
        return 0
    if not db_path(args).exists():
        raise ArgumentError(f"no result store at {db_path(args)} (nothing recorded yet)")
    with open_store(args) as store:
        if args.action == "set":
            ids = [store.resolve(r) for r in args.run]
            if args.runs is not None:
                if args.runs < 1 or len(ids) != 1:
                    raise ArgumentError("--runs N needs N >= 1 and one RUN")
                ids = store.runs_of_same_command(ids[0], args.runs)
                if len(ids) < args.runs:
                    print(f"ncclbench: warning: --runs {args.runs}: only {len(ids)} finished run"
                          f"{'s' if len(ids) != 1 else ''} of that command (same test, measured options, ranks, hosts, "
                          "NCCL settings) in the store", file=sys.stderr)
            runs = [store.get_run(r) for r in ids]
            refuse_as_baseline(runs)
            drop = parse_pct(args.max_drop, "--max-drop") if args.max_drop else DROP_TO_SEE
            rise = parse_pct(args.max_rise, "--max-rise") if args.max_rise else RISE_TO_SEE
            store.set_baseline(args.name, ids, args.note)
            more = f" and its history: runs {', '.join(map(str, ids[:-1]))}" if len(ids) > 1 else ""
            print(f"baseline '{args.name}' = run {max(ids)}{more}")
            for line in baseline_noise_note(runs, drop, rise):
                print(f"note: {line}")
        else:
            store.delete_baseline(args.name)
            print(f"baseline '{args.name}' removed")
    return 0
