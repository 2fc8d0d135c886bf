"""`ncclbench tune COLLECTIVE [nccl-tests options] [tune options]`: find faster
collective settings per message size and write them in forms the library
reads.  The work is in `ncclbench.tune` (see docs/tuning.md)."""

from __future__ import annotations

import argparse

from .base import CommandParser

NAME = "tune"
HELP = ("measure algorithm/protocol/CTA settings against the library's default per message size; "
        "write env lines, an NCCL tuner config and JSON")


def add_arguments(parser: CommandParser) -> None:
    from ..tune.options import TUNE_HELP

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = TUNE_HELP + ("\nexample: ncclbench tune all_reduce -b 8 -e 64M -f 2 --backend mpi --nprocs 4 "
                                 "--verify\nexit: 0 ok; 7 when --verify did not confirm a gain; others as a "
                                 "plain run")
    parser.add_argument("collective", help="the collective to tune (all_reduce, all_gather, ... or *_perf)")
    parser.add_argument("args", nargs=argparse.REMAINDER,
                        help="nccl-tests options (-b -e -f -n -w -d -o -c -T ...) and tune options")


def run(args: argparse.Namespace) -> int:
    from ..tune.command import run_tune

    return run_tune(args.collective, list(args.args))
