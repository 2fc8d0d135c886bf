"""`ncclbench list`: collectives, datatypes, ops, and the backends usable here."""

from __future__ import annotations

import argparse

from .base import CommandParser

NAME = "list"
HELP = "collectives, datatypes, ops and backends here (GPUs, libnccl, MPI)"


def add_arguments(parser: CommandParser) -> None:
    """No options."""


def run(args: argparse.Namespace) -> int:
    from ..backends.select import describe_backends
    from ..collectives import COLLECTIVES
    from ..core.datatypes import DATATYPES, REDOPS

    print("collectives:")
    for name, c in COLLECTIVES.items():
        traits = [t for t, on in (("reduces", c.reduces and name != "sendrecv"), ("rooted", c.rooted)) if on]
        print(f"  {name:<15} {c.program:<20} {' '.join(traits)}")
    print("datatypes:   " + " ".join(d.name for d in DATATYPES))
    print("ops:         " + " ".join(o.name for o in REDOPS))
    print("backends:")
    for line in describe_backends():
        print("  " + line)
    return 0
