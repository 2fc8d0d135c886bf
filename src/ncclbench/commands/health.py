"""`ncclbench health`: find the slow GPU, node, NIC rail or link of the job's hosts.

One launch holds every rank (`srun -N 64 --ntasks-per-node 8 ncclbench health`,
`mpirun ...`, or `--nprocs N` on one host); the scan's rounds run as groups
split off the world (`ncclbench.health`).  A coordinator hands out the
groups: world rank 0 by default, or a process outside the job
(`ncclbench health --serve PORT --ranks N` on a login node, ranks started
with `--coordinator HOST:PORT`), which is where a verdict survives a
launcher that ends the whole job when one rank dies.  `--nprocs` runs the
coordinator in the starting process for that reason.

Output: the verdict table on stdout, `--json FILE`, `--drain FILE` (one host
per line), `--metrics FILE`, `--junit FILE`, `--drain-action` (health/runtime/after_scan.py);
exit 8 (faults found), 9 (no fault confirmed, but some host not judged healthy;
0 with --accept-not-judged) or 0 (every host judged healthy).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ..core.config import BACKEND_CHOICES, Backend
from ..core.errors import ArgumentError
from .base import CommandParser

if TYPE_CHECKING:
    from ..health.core.scan import ScanConfig
    from ..health.runtime.mpi_group import GroupSpec
    from ..health.runtime.scan_service import ServiceOptions

NAME = "health"
HELP = "find the slow GPU, node, NIC rail or link: one job, phases as concurrent groups, verdicts with evidence"


def add_arguments(parser: CommandParser) -> None:
    from ..health.core.scan_schedule import ALL_PAIRS_MAX_HOSTS, PAIR_SHAPES, PHASES
    from ..health.runtime.group_measure import BW_SIZE
    from ..health.runtime.scan_service import TOKEN_ENV

    parser.description = __doc__.split("\n\n")[0].split(": ", 1)[1]
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"comma-separated subset of {','.join(PHASES)} (default: all that the fleet allows)")
    parser.add_argument("--pair-shape", choices=PAIR_SHAPES, default="rails",
                        help="rails: one 2-rank group per GPU slot of a host pair (each NIC alone); "
                             "full: all GPUs of both hosts in one group")
    parser.add_argument("--all-pairs", action=argparse.BooleanOptionalAction, default=None,
                        help="every host pair (a round-robin tournament, n-1 rounds, so a slow link between any "
                             f"two hosts is found; the default up to {ALL_PAIRS_MAX_HOSTS} hosts), or with "
                             "--no-all-pairs disjoint pairs + re-pairing (2-4 rounds; the default above)")
    parser.add_argument("--topology", default=None, metavar="FILE",
                        help="each host's leaf switch: 'HOST LEAF' lines, a JSON object {\"HOST\": \"LEAF\"}, or "
                             "Slurm's topology.conf (SwitchName=leaf1 Nodes=node[01-32]); HOST may be a Slurm hostlist. "
                             f"Above {ALL_PAIRS_MAX_HOSTS} hosts the pairs phase then crosses every pair of leaves "
                             "and judges the path between them (docs/health.md)")
    parser.add_argument("--bw-size", default=None,
                        help=f"bandwidth size of each group's all_reduce (default {BW_SIZE[Backend.NCCL]} on GPUs, "
                             f"{BW_SIZE[Backend.MPI]} on the CPU backend)")
    parser.add_argument("--lat-size", default="8", help="latency size (default 8 bytes)")
    parser.add_argument("--judge", choices=("both", "busbw"), default="both",
                        help="busbw: latency is measured and reported but gives no verdict (where small-message "
                             "times are known to follow the host's scheduler, e.g. the CPU backend on shared cores)")
    parser.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per cycle (default 20)")
    parser.add_argument("-w", "--warmup-iters", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=3, help="timed cycles per size; a group's figure is the median")
    parser.add_argument("--round-timeout", type=float, default=60.0,
                        help="seconds a phase's first round may take (later rounds: 3x the phase's typical group "
                             "time, at most this); a group cut while progressing is measured with an upper bound, "
                             "one whose member stopped is 'no answer' (default 60)")
    parser.add_argument("--join-timeout", type=float, default=60.0, help="seconds to wait for every rank to join")
    parser.add_argument("--json", dest="json_path", default=None, metavar="FILE", help="write the report as JSON")
    parser.add_argument("--drain", dest="drain_path", default=None, metavar="FILE",
                        help="write the hosts to drain, one per line (empty file when none)")
    parser.add_argument("--metrics", default=None, metavar="FILE",
                        help="write Prometheus text metrics: per host, GPU and rail verdicts, findings "
                             "(node_exporter's textfile collector reads *.prom)")
    parser.add_argument("--junit", default=None, metavar="FILE", help="write JUnit XML: one test case per host")
    parser.add_argument("--drain-action", choices=("slurm", "kubernetes"), default=None,
                        help="drain the hosts of confirmed faults: scontrol (Slurm) or kubectl taint+label")
    parser.add_argument("--dry-run", action="store_true", help="with --drain-action: print the commands, run none")
    parser.add_argument("--baseline", default=None, metavar="FILE",
                        help="a stored reference (JSON written by --save-baseline) to judge against as well")
    parser.add_argument("--save-baseline", default=None, metavar="FILE",
                        help="write this run's fleet references as a baseline file; a lone GPU or host "
                             "(no fleet statistics) adds its figure to FILE's samples: save from 3 healthy "
                             "scans to give it a spread of its own")
    parser.add_argument("--hosts", default=None, help="comma-separated host list the job should hold (checked)")
    parser.add_argument("--backend", choices=BACKEND_CHOICES, default="auto",
                        help="auto: NCCL where a GPU and libnccl are usable, else the CPU backend; with --serve "
                             "the ranks' backend, which auto learns from the ranks when they join")
    parser.add_argument("--nprocs", type=int, default=None, help="start N local ranks (no launcher needed)")
    parser.add_argument("--serve", default=None, metavar="[ADDR:]PORT",
                        help="be the coordinator only, outside the job; ranks join with --coordinator")
    parser.add_argument("--ranks", type=int, default=None, help="with --serve: how many ranks will join")
    parser.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                        help=f"join a coordinator started with --serve (token in ${TOKEN_ENV})")
    parser.add_argument("--accept-not-judged", action="store_true",
                        help="exit 0 instead of 9 when no fault is confirmed but some host could not be judged "
                             "(nothing to compare a group with, an unconfirmed suspect, a host not tested)")
    parser.add_argument("--no-store", action="store_true",
                        help="do not keep the scan in the result store (kept by default: history --health)")
    parser.add_argument("--db", metavar="PATH", default=None,
                        help="result store file (default: $NCCLBENCH_DB, else ~/.local/share/ncclbench)")


def run(args: argparse.Namespace) -> int:
    from ..backends.select import choose_backend, requested_backend
    from ..health.runtime import scan_service as service

    opts = _service_options(args)
    if args.serve is not None:
        # The coordinator runs no collective: the backend is the ranks'.  With `auto` it is not
        # guessed from this host (a login node has no GPU): the ranks say theirs when they join,
        # and the default bandwidth size follows it.
        requested = requested_backend(args.backend)
        cfg, spec = _config(args, gpus=requested is Backend.NCCL)
        return service.serve(opts, cfg, spec, requested, bw_size_given=args.bw_size is not None)
    from ..launch.detect import check_nprocs, detect_launch

    backend, note = choose_backend(args.backend)
    cfg, spec = _config(args, gpus=backend is Backend.NCCL)
    launch = detect_launch()
    check_nprocs(args.nprocs, launch)
    joining = bool(args.coordinator or os.environ.get(service.COORD_ENV))
    if backend is Backend.NCCL:
        if launch.kind == "single" and not joining:
            return service.nccl_self_launch(opts, cfg, spec)
        return service.nccl_rank(opts, cfg, spec, launch)
    if args.nprocs is None and launch.kind == "single" and note is not None and not joining:
        opts = _default_cpu_ranks(opts, note)
    if opts.nprocs is not None and launch.kind == "single":
        return service.mpi_self_launch(opts, cfg, spec)
    return service.mpi_rank(opts, cfg, spec)


def _default_cpu_ranks(opts: ServiceOptions, note: str) -> ServiceOptions:
    """`--backend auto` found no GPU, no launcher and no --nprocs: start the CPU ranks the benchmark
    would (one rank alone measures no link), where mpiexec is there to start them; say so on stderr."""
    import dataclasses

    from ..backends.select import default_cpu_ranks, default_cpu_ranks_note
    from ..launch.spawn import find_mpiexec

    if find_mpiexec() is None:
        return opts
    n = default_cpu_ranks(os.cpu_count())
    print(f"# health: {note}; {default_cpu_ranks_note(n, os.cpu_count())}", file=sys.stderr, flush=True)
    return dataclasses.replace(opts, nprocs=n)


# -- configuration --------------------------------------------------------------------------------


def _config(args: argparse.Namespace, gpus: bool = False) -> tuple[ScanConfig, GroupSpec]:
    """The scan's configuration and each group's spec; `gpus` (the NCCL backend) gives
    --bw-size's default."""
    from ..health.core.leaf_switches import load_topology
    from ..health.core.round_judge import thresholds_for
    from ..health.core.scan import ScanConfig
    from ..health.outputs.baseline_file import load_baseline
    from ..health.runtime.group_measure import BW_SIZE
    from ..health.runtime.mpi_group import GroupSpec
    from ..run.bench_args import parse_size

    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    for value, name in ((args.iters, "--iters"), (args.cycles, "--cycles")):
        if value < 1:
            raise ArgumentError(f"health: {name} must be at least 1")
    if args.warmup_iters < 0 or args.round_timeout <= 0 or args.join_timeout <= 0:
        raise ArgumentError("health: --warmup-iters must be >= 0 and the timeouts > 0")
    bw_size = args.bw_size or BW_SIZE[Backend.NCCL if gpus else Backend.MPI]
    spec = GroupSpec(parse_size(bw_size, "--bw-size"), parse_size(args.lat_size, "--lat-size"),
                     args.iters, args.warmup_iters, args.cycles)
    if spec.bw_bytes < 4 or spec.lat_bytes < 4:
        raise ArgumentError("health: --bw-size and --lat-size must be at least 4 bytes (one float)")
    if args.save_baseline and not args.json_path:
        raise ArgumentError("health: --save-baseline needs --json FILE (the references are read from it)")
    baseline = load_baseline(args.baseline) if args.baseline else None
    topology = load_topology(args.topology) if args.topology else None
    try:
        cfg = ScanConfig(phases=phases, pair_shape=args.pair_shape, all_pairs=args.all_pairs, baseline=baseline,
                         thresholds=thresholds_for(gpus, judge_latency=args.judge == "both"), topology=topology)
    except ValueError as exc:
        raise ArgumentError(f"health: {exc}") from None
    return cfg, spec


def _service_options(args: argparse.Namespace) -> ServiceOptions:
    from ..health.runtime.after_scan import AfterScan
    from ..health.runtime.scan_service import ServiceOptions

    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()] if args.hosts else None
    after = AfterScan(args.metrics, args.junit, args.drain_action, args.dry_run)
    if args.dry_run and not args.drain_action:
        raise ArgumentError("health: --dry-run needs --drain-action slurm|kubernetes")
    after.check()
    return ServiceOptions(json_path=args.json_path, drain_path=args.drain_path, save_baseline=args.save_baseline,
                          store=not args.no_store, db=args.db, accept_not_judged=args.accept_not_judged,
                          round_timeout_s=args.round_timeout,
                          join_timeout_s=args.join_timeout, expected_hosts=hosts, nprocs=args.nprocs,
                          ranks=args.ranks, serve=args.serve, coordinator=args.coordinator, argv=sys.argv[1:],
                          after_scan=after if after.wanted else None)
