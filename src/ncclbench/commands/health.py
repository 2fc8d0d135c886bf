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
per line); exit 0 (no fault confirmed) or 8 (faults found).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import threading
import time
from functools import partial

from ..errors import ArgumentError, BenchError
from .base import PROGRAM, CommandParser

NAME = "health"
HELP = "find the slow GPU, node, NIC rail or link: one job, phases as concurrent groups, verdicts with evidence"

COORD_ENV = "NCCLBENCH_HEALTH_COORD"
TOKEN_ENV = "NCCLBENCH_HEALTH_TOKEN"

# The bandwidth size: where a GPU's or a link's figure repeats.  One H100 alone, 6 scans each
# (bench/results/health-gpu-h100-2026-11-24.md): 4 MiB 539-833 GB/s (41 % max-min, L2 and launch
# bound), 64 MiB 2.2 %, 256 MiB 0.2 %; the judge's floor and the simulator assume the >= 64 MiB
# spread.  The CPU backend keeps 4 MiB: MPI over shared cores and TCP, where larger sizes only
# lengthen the scan.
GPU_BW_SIZE = "256M"
CPU_BW_SIZE = "4M"


def add_arguments(parser: CommandParser) -> None:
    from ..health.schedule import PAIR_SHAPES, PHASES

    parser.description = __doc__.split("\n\n")[0].split(": ", 1)[1]
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"comma-separated subset of {','.join(PHASES)} (default: all that the fleet allows)")
    parser.add_argument("--pair-shape", choices=PAIR_SHAPES, default="rails",
                        help="rails: one 2-rank group per GPU slot of a host pair (each NIC alone); "
                             "full: all GPUs of both hosts in one group")
    parser.add_argument("--all-pairs", action="store_true",
                        help="every host pair (a round-robin tournament, n-1 rounds) instead of pairs + re-pairing")
    parser.add_argument("--bw-size", default=None,
                        help=f"bandwidth size of each group's all_reduce (default {GPU_BW_SIZE} on GPUs, "
                             f"{CPU_BW_SIZE} on the CPU backend)")
    parser.add_argument("--lat-size", default="8", help="latency size (default 8 bytes)")
    parser.add_argument("--judge", choices=("both", "busbw"), default="both",
                        help="busbw: latency is measured and reported but gives no verdict (where small-message "
                             "times are known to follow the host's scheduler, e.g. the CPU backend on shared cores)")
    parser.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per cycle (default 20)")
    parser.add_argument("-w", "--warmup-iters", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=3, help="timed cycles per size; a group's figure is the median")
    parser.add_argument("--round-timeout", type=float, default=60.0,
                        help="seconds a round may take; a group not done by then is 'no answer' (default 60)")
    parser.add_argument("--join-timeout", type=float, default=60.0, help="seconds to wait for every rank to join")
    parser.add_argument("--json", dest="json_path", default=None, metavar="FILE", help="write the report as JSON")
    parser.add_argument("--drain", dest="drain_path", default=None, metavar="FILE",
                        help="write the hosts to drain, one per line (empty file when none)")
    parser.add_argument("--baseline", default=None, metavar="FILE",
                        help="a stored reference (JSON written by --save-baseline) to judge against as well")
    parser.add_argument("--save-baseline", default=None, metavar="FILE",
                        help="write this run's fleet references as a baseline file; a lone GPU or host "
                             "(no fleet statistics) adds its figure to FILE's samples: save from 3 healthy "
                             "scans to give it a spread of its own")
    parser.add_argument("--hosts", default=None, help="comma-separated host list the job should hold (checked)")
    parser.add_argument("--backend", choices=("auto", "nccl", "mpi"), default="auto")
    parser.add_argument("--nprocs", type=int, default=None, help="start N local ranks (no launcher needed)")
    parser.add_argument("--serve", default=None, metavar="[ADDR:]PORT",
                        help="be the coordinator only, outside the job; ranks join with --coordinator")
    parser.add_argument("--ranks", type=int, default=None, help="with --serve: how many ranks will join")
    parser.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                        help=f"join a coordinator started with --serve (token in ${TOKEN_ENV})")
    parser.add_argument("--no-store", action="store_true",
                        help="do not keep the scan in the result store (kept by default: history --health)")
    parser.add_argument("--db", metavar="PATH", default=None,
                        help="result store file (default: $NCCLBENCH_DB, else ~/.local/share/ncclbench)")


def run(args: argparse.Namespace) -> int:
    if args.serve is not None:
        cfg, spec = _config(args, gpus=args.backend == "nccl")
        return _serve(args, cfg, spec)
    from ..backends.select import choose_backend
    from ..config import Backend
    from ..launch.detect import detect_launch

    backend, _ = choose_backend(args.backend)
    cfg, spec = _config(args, gpus=backend is Backend.NCCL)
    launch = detect_launch()
    joining = bool(args.coordinator or os.environ.get(COORD_ENV))
    if backend is Backend.NCCL:
        if launch.kind == "single" and not joining:
            return _nccl_self_launch(args, cfg, spec)
        return _nccl_rank(args, cfg, spec, launch)
    if args.nprocs is not None and launch.kind == "single":
        return _self_launch(args, cfg, spec)
    return _rank(args, cfg, spec)


# -- configuration --------------------------------------------------------------------------------


def _config(args: argparse.Namespace, gpus: bool = False):
    from ..health.judge import Thresholds
    from ..health.mpi_group import GroupSpec
    from ..health.scan import ScanConfig
    from ..options import parse_size

    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    for value, name in ((args.iters, "--iters"), (args.cycles, "--cycles")):
        if value < 1:
            raise ArgumentError(f"health: {name} must be at least 1")
    if args.warmup_iters < 0 or args.round_timeout <= 0 or args.join_timeout <= 0:
        raise ArgumentError("health: --warmup-iters must be >= 0 and the timeouts > 0")
    bw_size = args.bw_size or (GPU_BW_SIZE if gpus else CPU_BW_SIZE)
    spec = GroupSpec(parse_size(bw_size, "--bw-size"), parse_size(args.lat_size, "--lat-size"),
                     args.iters, args.warmup_iters, args.cycles)
    if spec.bw_bytes < 4 or spec.lat_bytes < 4:
        raise ArgumentError("health: --bw-size and --lat-size must be at least 4 bytes (one float)")
    if args.save_baseline and not args.json_path:
        raise ArgumentError("health: --save-baseline needs --json FILE (the references are read from it)")
    baseline = _load_baseline(args.baseline) if args.baseline else None
    try:
        cfg = ScanConfig(phases=phases, pair_shape=args.pair_shape, all_pairs=args.all_pairs, baseline=baseline,
                         thresholds=Thresholds(judge_latency=args.judge == "both"))
    except ValueError as exc:
        raise ArgumentError(f"health: {exc}") from None
    return cfg, spec


def _load_baseline(path: str):
    import json

    from ..health.judge import Baseline

    try:
        doc = json.loads(open(path).read())
        return Baseline({k: tuple(v) for k, v in doc["busbw"].items()},
                        {k: tuple(v) for k, v in doc.get("lat_us", {}).items()}, name=doc.get("name", path))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArgumentError(f"health: cannot read baseline {path}: {exc}") from None


def _expected_hosts(args: argparse.Namespace) -> list[str] | None:
    if not args.hosts:
        return None
    return [h.strip() for h in args.hosts.split(",") if h.strip()]


def _coordinate(args, cfg, spec, coord, backend: str) -> int:
    from ..health.coordinate import Outputs, coordinate

    progress = sys.stderr.isatty() or os.environ.get("NCCLBENCH_HEALTH_PROGRESS") == "1"
    outputs = Outputs(args.json_path, args.drain_path, sys.stdout, progress=progress)
    code = coordinate(coord, cfg, spec, args.round_timeout, args.join_timeout, outputs, backend,
                      argv=sys.argv[1:], expected_hosts=_expected_hosts(args),
                      store=None if args.no_store else partial(_store_scan, args))
    if args.save_baseline and args.json_path:
        _save_baseline(args.save_baseline, args.json_path)
    return code


def _store_scan(args: argparse.Namespace, doc: dict) -> str | None:
    """Keep the scan in the result store (`ncclbench history --health`, `show`, `report`);
    a store that cannot be written costs a line, never the scan's verdict."""
    from ..store.health import save_scan

    if os.environ.get("NCCLBENCH_NO_STORE") == "1":
        return None
    try:
        scan_id = save_scan(doc, getattr(args, "db", None))
    except (BenchError, OSError) as exc:
        message = exc.message if isinstance(exc, BenchError) else str(exc)
        return f"# health: the scan was not stored: {message}"
    return f"# health: stored as health:{scan_id} (ncclbench show health:{scan_id}; " \
           f"ncclbench report health:{scan_id} -o health.html)"


# A lone measurement (one GPU, one host) has no spread of its own: until a baseline holds
# LONE_MIN_SCANS scans of it, the spread used is this fraction of its median.  Two healthy
# scans of one H100 gave 668 and 604 GB/s for the local 4 MiB figure (-10 %,
# bench/results/health-gpu-h100-2026-11-24.md): at 5 %, a z of -3.5 is a 17.5 % drop.
LONE_BW_SPREAD = 0.05
LONE_MIN_SCANS = 3


def _save_baseline(path: str, json_path: str) -> None:
    """The run's fleet references per group shape.  A shape with too few groups for
    fleet statistics (one GPU, one host) keeps its measured median as a sample; saving
    again to the same file adds a sample, and from LONE_MIN_SCANS samples on their
    median and robust spread are the reference (before that the spread is unknown and
    LONE_BW_SPREAD / the latency floor stand in).  "measured" says which case holds."""
    import json
    import statistics

    from ..health.judge import robust_reference

    with open(json_path) as f:
        doc = json.load(f)
    try:
        with open(path) as f:
            old_samples = json.load(f).get("samples", {})
    except (OSError, ValueError):
        old_samples = {}
    refs = doc.get("references", {})
    tables: dict[str, dict[str, list[float]]] = {"busbw": {}, "lat_us": {}}
    for shape, r in refs.items():
        for metric, table in tables.items():
            if r.get(metric) and r[metric]["source"] == "fleet":
                table[shape] = [r[metric]["center"], r[metric]["spread"]]
    samples: dict[str, dict[str, list[float]]] = {"busbw": {}, "lat_us": {}}
    measured: dict[str, str] = {}
    for shape, groups in _unreferenced_groups(doc).items():
        for metric, table in tables.items():
            values = [g[metric] for g in groups if g.get(metric) is not None]
            if shape in table or not values:
                continue
            kept = [float(v) for v in old_samples.get(metric, {}).get(shape, [])] + [statistics.median(values)]
            samples[metric][shape] = kept
            ref = robust_reference(kept, 0.0, LONE_MIN_SCANS)
            if ref is not None:
                table[shape] = [ref.center, ref.spread]
                measured[shape] = (f"{len(groups)} group(s) per scan, too few for fleet statistics: the median "
                                   f"and spread of {len(kept)} saved scans")
            else:
                center = statistics.median(kept)
                table[shape] = [center, LONE_BW_SPREAD * center if metric == "busbw" else 0.0]
                measured[shape] = (f"{len(groups)} group(s) per scan, too few for fleet statistics; "
                                   f"{len(kept)} of {LONE_MIN_SCANS} scans saved: their median, spread unknown "
                                   f"(taken as {LONE_BW_SPREAD:.0%} busbw, the judge's floor for latency); "
                                   f"save again to this file from healthy scans to measure it")
    with open(path, "w") as f:
        json.dump({"name": os.path.basename(path), **tables, "measured": measured, "samples": samples}, f,
                  indent=1)


def _unreferenced_groups(doc: dict) -> dict[str, list[dict]]:
    """shape -> the fleet round's groups of that shape that were measured but had no
    reference for lack of groups (not those whose cycles disagreed or that failed)."""
    out: dict[str, list[dict]] = {}
    for rec in doc.get("measurements", []):
        if not str(rec.get("purpose", "")).startswith("fleet") or str(rec.get("purpose")).endswith("rails"):
            continue
        for g in rec.get("groups", []):
            if g.get("wrong") or not str(g.get("why") or "").startswith("no reference"):
                continue
            out.setdefault(str(g.get("shape")), []).append(g)
    return out


# -- the three ways to run --------------------------------------------------------------------------
def _serve(args, cfg, spec) -> int:
    from ..health.control import Coordinator

    if not args.ranks or args.ranks < 1:
        raise ArgumentError("health: --serve needs --ranks N (how many ranks will join)")
    addr, _, port = args.serve.rpartition(":")
    try:
        port_no = int(port)
    except ValueError:
        raise ArgumentError(f"health: --serve expects [ADDR:]PORT, not {args.serve!r}") from None
    token = os.environ.get(TOKEN_ENV)
    if not token:
        token = secrets.token_hex(16)
        print(f"# health: token for the ranks: {TOKEN_ENV}={token}", file=sys.stderr, flush=True)
    coord = Coordinator(args.ranks, token, bind=addr or "0.0.0.0", port=port_no)
    print(f"# health: coordinator listening on {addr or '0.0.0.0'}:{coord.port} for {args.ranks} rank(s)",
          file=sys.stderr, flush=True)
    try:
        return _coordinate(args, cfg, spec, coord, "CPU backend (MPI), external coordinator")
    finally:
        coord.close()


def _self_launch(args, cfg, spec) -> int:
    """Start N ranks under mpiexec, and coordinate them from here (outside the MPI job)."""
    from ..health.control import Coordinator
    from ..launch.spawn import spawn_mpiexec

    if args.nprocs < 1:
        raise ArgumentError("health: --nprocs must be at least 1")
    token = secrets.token_hex(16)
    coord = Coordinator(args.nprocs, token, bind="127.0.0.1")
    env = dict(os.environ)
    env[COORD_ENV] = f"127.0.0.1:{coord.port}"
    env[TOKEN_ENV] = token
    child = [NAME, *_child_args(sys.argv[sys.argv.index(NAME) + 1:] if NAME in sys.argv else [])]
    status: dict[str, int] = {}

    def launch() -> None:
        status["mpiexec"] = spawn_mpiexec(args.nprocs, child, env=env)

    t = threading.Thread(target=launch, daemon=True, name="health-mpiexec")
    t.start()
    try:
        code = _coordinate(args, cfg, spec, coord, "CPU backend (MPI), coordinator outside the job")
    finally:
        coord.close()
    t.join(timeout=30)
    return code


def _child_args(argv: list[str]) -> list[str]:
    """The ranks' command line: this one without what only the starter does."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--nprocs", "--json", "--drain", "--save-baseline", "--db", "--baseline"):
            skip = True
            continue
        if a.startswith(("--nprocs=", "--json=", "--drain=", "--save-baseline=", "--db=", "--baseline=")):
            continue
        out.append(a)
    return out


def _rank(args, cfg, spec) -> int:
    """One rank of a launched job (and, on world rank 0, the coordinator unless one is given)."""
    from mpi4py import MPI

    from ..health.runtime import mpi_measure

    world = MPI.COMM_WORLD
    world.Set_errhandler(MPI.ERRORS_RETURN)
    rank, size = world.Get_rank(), world.Get_size()
    where = args.coordinator or os.environ.get(COORD_ENV)
    token = os.environ.get(TOKEN_ENV, "")
    thread: threading.Thread | None = None
    result: dict[str, int] = {}
    if where is None:
        if rank == 0:
            where, token, thread = _coordinator_thread(size, args, cfg, spec, result, "CPU backend (MPI)")
        where, token = world.bcast((where, token), root=0)
    elif not token:
        raise ArgumentError(f"health: --coordinator needs the coordinator's token in ${TOKEN_ENV}")
    code, how = _join_and_measure(where, token, rank, args, mpi_measure(world), lambda request: {"backend": "mpi"},
                       thread, result)
    if how == "abort":
        world.Abort(code)
    if how == "exit":
        os._exit(code)
    return code


# -- the NCCL (GPU) runtime ---------------------------------------------------------------------------
def _nccl_self_launch(args, cfg, spec) -> int:
    """No launcher: one rank per visible GPU (or --nprocs), started here, coordinated from
    here (outside the job, so a rank that dies or stops cannot take the verdict with it)."""
    from ..backends.select import BACKEND_ENV, gpu_count
    from ..health.control import Coordinator
    from ..launch.spawn import LocalSpawnLauncher

    n = args.nprocs if args.nprocs is not None else max(1, gpu_count())
    if n < 1:
        raise ArgumentError("health: --nprocs must be at least 1")
    token = secrets.token_hex(16)
    coord = Coordinator(n, token, bind="127.0.0.1")
    env = dict(os.environ)
    env.update({COORD_ENV: f"127.0.0.1:{coord.port}", TOKEN_ENV: token, BACKEND_ENV: "nccl"})
    child = [NAME, *_child_args(sys.argv[sys.argv.index(NAME) + 1:] if NAME in sys.argv else []), "--no-store"]
    launcher = LocalSpawnLauncher(n, child, env=env)
    t = threading.Thread(target=launcher.run, daemon=True, name="health-ranks")
    t.start()
    try:
        code = _coordinate(args, cfg, spec, coord, "NCCL (GPU), coordinator outside the job")
    finally:
        coord.close()
        _end_ranks(launcher, t)
    return code


def _end_ranks(launcher, thread: threading.Thread, grace_s: float = 15.0) -> None:
    """The ranks were told how to leave; one that stopped (SIGSTOP) or hangs in a driver
    call cannot, and the launcher would wait for it forever: after `grace_s` the ranks this
    process started and that are still there are killed."""
    thread.join(grace_s)
    if not thread.is_alive():
        return
    for p in list(launcher.procs):
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGKILL)
            except OSError:
                pass
    thread.join(10.0)


def _nccl_rank(args, cfg, spec, launch) -> int:
    """One GPU rank: of a launched job (world rank 0 also coordinates unless one is given),
    of ranks started here, or joining an external coordinator (--coordinator)."""
    from ..health.nccl_group import GpuRankService
    from ..health.runtime import host_name

    # connections are made while the group's communicator forms, where a missing peer can be
    # given up on, not inside the first timed collective (health/nccl_group.py)
    os.environ.setdefault("NCCL_RUNTIME_CONNECT", "0")
    where = args.coordinator or os.environ.get(COORD_ENV)
    token = os.environ.get(TOKEN_ENV, "")
    host = None
    thread: threading.Thread | None = None
    result: dict[str, int] = {}
    rank = launch.rank
    if where is None:
        from ..launch.bootstrap import make_host_comm

        host = make_host_comm(launch, timeout_s=args.join_timeout)
        rank = host.rank
        if rank == 0:
            where, token, thread = _coordinator_thread(host.size, args, cfg, spec, result, "NCCL (GPU)")
        where, token = host.bcast((where, token), 0)
    elif not token:
        raise ArgumentError(f"health: --coordinator needs the coordinator's token in ${TOKEN_ENV}")
    service = GpuRankService(rank, host_name(rank))
    code, how = _join_and_measure(where, token, rank, args, service.measure, service.setup, thread, result)
    if how == "abort" and host is not None:
        host.abort(code, "health: a rank stopped; ending the job")
        time.sleep(1.0)
    if how in ("abort", "exit"):
        os._exit(code)
    if host is not None:
        host.close()
    return code


def _join_and_measure(where: str, token: str, rank: int, args, measure, setup, thread: threading.Thread | None,
           result: dict[str, int]) -> tuple[int, str]:
    """This rank joins the coordinator at `where` and measures what it is told until the scan
    ends: (exit code, how to leave).  On the coordinating rank, the coordinator's code wins."""
    from ..health.control import RankLink
    from ..health.runtime import rank_info, serve_rank

    addr, _, port = where.rpartition(":")
    link = RankLink(addr, int(port), token, rank_info(rank), timeout_s=args.join_timeout)
    code, how = serve_rank(link, measure, silence_s=2 * args.round_timeout + 30, setup=setup)
    if thread is not None:
        thread.join(timeout=30)
        code = result.get("code", code)
    link.close()
    sys.stdout.flush()
    sys.stderr.flush()
    return code, how


def _coordinator_thread(size: int, args, cfg, spec, result: dict[str, int],
                        label: str) -> tuple[str, str, threading.Thread]:
    """World rank 0 of a launched job coordinates too, in a thread beside its own rank's work:
    (the address ranks join, the token, the thread); the exit code lands in `result`."""
    from ..health.control import Coordinator
    from ..health.runtime import advertised_address

    token = secrets.token_hex(16)
    coord = Coordinator(size, token)
    thread = threading.Thread(target=partial(_coordinate_in_thread, args, cfg, spec, coord, result, label),
                              daemon=True, name="health-coordinator")
    thread.start()
    return f"{advertised_address()}:{coord.port}", token, thread


def _coordinate_in_thread(args, cfg, spec, coord, result: dict[str, int], label: str) -> None:
    try:
        result["code"] = _coordinate(args, cfg, spec, coord, label)
    except BenchError as exc:
        print(f"{PROGRAM}: {exc.message}", file=sys.stderr, flush=True)
        result["code"] = int(exc.code)
        for r in coord.ranks:
            coord.send(r, ("end", int(exc.code), "exit"))
