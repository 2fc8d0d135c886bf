"""`ncclbench tune COLLECTIVE [nccl-tests options] [tune options]`: find faster
collective settings per message size and write them in forms the library
reads (docs/tuning.md).

This module parses and decides where the job runs, like a plain benchmark
(`commands/_benchmark.py`): under a launcher this process is one rank
(`tune.job.run_tune_here`); otherwise the environment is checked once, then
N ranks of `ncclbench tune ...` are started here (`--nprocs N`, or one per
visible GPU: `benchmark.orchestrate.local_ranks_to_start`/`spawn`) or this process is the
only rank, and after a successful job `--verify` runs ordinary runs
(`tune.verify.verify_result_file`: they need a parent that can start jobs,
hence not under an external launcher)."""

from __future__ import annotations

import argparse
from pathlib import Path

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
    from ..backends.select import choose_backend
    from ..benchmark.orchestrate import local_ranks_to_start, spawn
    from ..core.atomic_file import check_output_path
    from ..launch.detect import check_nprocs, detect_launch
    from ..launch.spawn import strip_nprocs
    from ..run.bench_args import HelpRequested
    from ..tune.job import check_environment, run_tune_here
    from ..tune.options import TUNE_HELP, parse_tune_args
    from ..tune.verify import verify_result_file

    try:
        topts = parse_tune_args(args.collective, list(args.args))
    except HelpRequested as h:
        print(h.text.replace("USAGE: ", "USAGE: ncclbench tune ", 1), end="")
        print(TUNE_HELP, end="", flush=True)
        return int(h.exit_code)
    backend, note = choose_backend(topts.bench.backend, topts.bench.nccl_lib)
    launch = detect_launch()
    check_nprocs(topts.bench.nprocs, launch)
    if launch.kind != "single":
        return run_tune_here(topts, backend, launch, note)
    check_environment(topts, backend)  # once, before anything starts
    topts.make_default_dir()
    result_path = Path(topts.out_prefix() + ".json")
    check_output_path(result_path, "tune --out")  # (under a launcher the writing rank checks at the end)
    before = _mtime(result_path)  # a tune that measures nothing (one rank) writes no result
    nprocs, _ = local_ranks_to_start(topts.bench, backend, launch)
    if nprocs:
        child = strip_nprocs(topts.child_args())
        if "--backend" not in child:
            child += ["--backend", backend.value]
        code = spawn(backend, nprocs, child, note)
    else:
        code = run_tune_here(topts, backend, launch, note)
    if code == 0 and topts.verify:
        if _mtime(result_path) in (None, before):
            print("# tune --verify: nothing to verify: this tune wrote no result (see the line above)", flush=True)
            return code
        code = verify_result_file(topts, backend, nprocs or None)
    return code


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None
