"""`ncclbench preflight`: the launch check, the "MPI hello world" maintainers
ask for.  The checks themselves are `ncclbench.launch.preflight_checks`; this module
reads the command line and, with `--nprocs N` and no launcher around, starts
N local ranks of the same command."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..core.config import BACKEND_CHOICES, Backend
from ..core.errors import ArgumentError
from .base import PROGRAM, CommandParser

if TYPE_CHECKING:
    from ..launch.detect import LaunchInfo
    from ..launch.facts import RankFacts
    from ..launch.preflight_checks import ExtraFacts

NAME = "preflight"
HELP = "check the launch (ranks, hosts, GPUs, versions, env traps, topology) without running collectives"


def add_arguments(parser: CommandParser) -> None:
    parser.description = (
        "Form the job as a benchmark would (under mpirun, srun, torchrun, RANK/WORLD_SIZE, or --nprocs) and "
        "check it without running collectives; prints the host/rank/GPU table and exits non-zero on a trap.")
    parser.add_argument("-g", "--ngpus", type=int, default=1, help="GPUs per thread (as the benchmark's -g)")
    parser.add_argument("-t", "--nthreads", type=int, default=1, help="threads per process (as -t)")
    parser.add_argument("-T", "--timeout", type=float, default=0.0, help="seconds to wait for every rank "
                        "(default NCCLBENCH_RDZV_TIMEOUT or 60)")
    parser.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")
    parser.add_argument("--nprocs", type=int, default=None, help="start N local processes (no launcher needed)")
    parser.add_argument("--json", dest="json_path", default=None, help="also write facts and findings to PATH")
    parser.add_argument("--nccl-lib", default=None, help="libnccl to report the version of")


def child_argv(args: argparse.Namespace) -> list[str]:
    """The command line of each started rank: this one without --nprocs."""
    argv = [NAME, "-g", str(args.ngpus), "-t", str(args.nthreads), "-T", repr(args.timeout),
            "--backend", args.backend]
    if args.json_path is not None:
        argv += ["--json", args.json_path]
    if args.nccl_lib is not None:
        argv += ["--nccl-lib", args.nccl_lib]
    return argv


def run(args: argparse.Namespace) -> int:
    from ..backends.select import requested_backend
    from ..launch.detect import check_nprocs, detect_launch
    from ..launch.preflight_checks import run_checks

    if args.ngpus < 1 or args.nthreads < 1:
        raise ArgumentError("preflight: -g and -t must be at least 1")
    backend = requested_backend(args.backend)
    info = detect_launch()
    check_nprocs(args.nprocs, info)
    if args.nprocs is not None and info.kind == "single":
        if args.nprocs < 1:
            raise ArgumentError("preflight: --nprocs must be at least 1")
        from ..launch.spawn import LocalSpawnLauncher, spawn_mpiexec

        if backend is Backend.MPI:
            return spawn_mpiexec(args.nprocs, child_argv(args), module=PROGRAM)
        return LocalSpawnLauncher(args.nprocs, child_argv(args), module=PROGRAM).run()
    return run_checks(info, timeout_s=args.timeout or None, backend=backend,
                      gpus_per_rank=args.ngpus * args.nthreads, nccl_lib=args.nccl_lib, json_path=args.json_path,
                      extra=topology_facts())


def topology_facts() -> ExtraFacts:
    """Each host's topology (explain/): read by its first local rank, two `#` lines per host layout
    under the rank table, and `topology` in the JSON."""
    from ..launch.preflight_checks import ExtraFacts

    def collect(info: LaunchInfo) -> tuple[dict[str, Any] | None, str] | None:
        if info.local_rank != 0:
            return None
        from ..explain.gather_topology import read_topology

        return read_topology()

    def report(_facts: list[RankFacts],
               collected: list[tuple[dict[str, Any] | None, str] | None]) -> tuple[list[str], dict[str, Any]]:
        from ..explain.topology import format_topology_lines, hosts_from_gathered

        hosts, whys = hosts_from_gathered(collected)
        lines = format_topology_lines(hosts) + [f"# Topology unknown: {why}" for why in whys]
        return lines, {"topology": [h.to_dict() for h in hosts], "topology_unknown": whys}

    return ExtraFacts(collect, report)
