"""`ncclbench import FILE...`: nccl-tests text logs and -J JSON files into the store."""

from __future__ import annotations

import argparse

from ._runs import add_db_option, open_store
from .base import CommandParser

NAME = "import"
HELP = "import nccl-tests text logs and -J JSON files into the store"


def add_arguments(parser: CommandParser) -> None:
    add_db_option(parser)
    parser.add_argument("files", metavar="FILE", nargs="+")
    add_collective_option(parser)


def add_collective_option(parser: CommandParser) -> None:
    """--collective: the user's word for a text log that does not name its collective (else the table's)."""
    from ..collectives import COLLECTIVES

    parser.add_argument("--collective", choices=sorted(COLLECTIVES), default=None,
                        help="the collective of a text log (default: the log's own line, its launch line, or "
                             "what its table's columns decide)")


def run(args: argparse.Namespace) -> int:
    from ..store.importers import ImportedRun, load_file
    from ..store.reporter import store_imported

    parsed: list[ImportedRun] = []
    for f in args.files:
        parsed += load_file(f, args.collective)  # all files parse before anything is written
    with open_store(args, create=True) as store:
        done = store_imported(store, parsed)
    for imported, rid, new in done:
        what = f"run {rid}" if new else f"already stored as run {rid}"
        print(f"{imported.label}: {what} ({imported.info.program}, {len(imported.rows)} rows, {imported.status})")
        how = imported.info.extra.get("collective_source", "")
        if how and not how.startswith(("the log's", "--collective")):
            print(f"  collective: {imported.options.collective} from {how}")
        if imported.status != "complete" or not imported.rows:
            print(f"  {imported.info.extra.get('end_reason') or imported.status}")
    return 0
