"""`ncclbench explain RUN`: judge a stored run, or an nccl-tests log, again.

The same lines a live run prints after `# Avg bus bandwidth` (NCCL's path,
its choice per size, the plateau against the expected ceiling, the traps),
computed from what was kept of the run (`explain.stored`): a run ncclbench
measured keeps its hosts' topology and NCCL's account; an imported
nccl-tests log keeps the NCCL INFO lines it had.  What was not kept is said
to be unknown, never filled in from this machine.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..core.errors import BenchError, ExitCode
from ._runs import REF_HELP, RunRefs, add_db_option
from .base import CommandParser
from .import_ import add_collective_option

NAME = "explain"
HELP = "judge a stored run or an nccl-tests log: NCCL's path and choices, expected ceiling, verdict, traps"


def add_arguments(parser: CommandParser) -> None:
    add_db_option(parser)
    parser.add_argument("run", metavar="RUN", help=REF_HELP)
    parser.add_argument("--json", dest="json_path", metavar="FILE", help="also write the judgement as JSON to FILE")
    parser.add_argument("--fail-on-trap", choices=("error", "warn"), default=None,
                        help="exit 7 when a trap of that severity or worse is found")
    add_collective_option(parser)


def run(args: argparse.Namespace) -> int:
    from ..explain.run_explain import explain_run
    from ..explain.stored import run_facts
    from ..explain.topology import format_topology_lines

    with RunRefs(args) as refs:
        stored = refs.get(args.run)
    facts = run_facts(stored)
    explained = explain_run(facts)
    info = stored.info
    topo = facts.log_topology
    nranks = info.nranks if topo is None else (topo.nranks or "?")  # an import: what its lines say, or unknown
    print(f"# ncclbench explain: {stored.label} ({info.program}, {nranks} rank(s), "
          f"{len(stored.rows)} row(s), {stored.status}{', ' + info.start_time if info.start_time else ''})")
    for line in format_topology_lines(facts.hosts):
        print(line)
    for line in explained.lines:
        print(line)
    if args.json_path:
        doc = {"run": stored.label, "program": info.program,
               "topology": [h.to_dict() for h in facts.hosts], "topology_unknown": facts.topology_unknown,
               **explained.data}
        try:
            with open(args.json_path, "w") as f:
                json.dump(doc, f, indent=1, default=str)
        except OSError as exc:
            raise BenchError(f"explain: cannot write {args.json_path}: {exc.strerror or exc}",
                             ExitCode.ARGUMENT) from None
    sys.stdout.flush()
    traps = explained.judgement.traps
    if args.fail_on_trap and traps.fails(args.fail_on_trap):
        names = ", ".join(dict.fromkeys(t.name for t in traps.raised))
        print(f"ncclbench: trap(s) found with --fail-on-trap {args.fail_on_trap}: {names}", file=sys.stderr)
        return int(ExitCode.DATA_ERRORS)
    return 0
