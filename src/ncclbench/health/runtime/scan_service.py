"""How a health scan is started: the coordinator and the ranks, for each way to run.

`ncclbench health` parses its options into a `ScanConfig`, a `GroupSpec` and a
`ServiceOptions`, and hands them to one of these:

* `serve`: the coordinator only, outside the job (`--serve PORT --ranks N`);
* `mpi_self_launch` / `nccl_self_launch`: ranks started here (`--nprocs`, or one
  per visible GPU), coordinated from this process - outside the job, so a rank
  that dies or stops cannot take the verdict with it;
* `mpi_rank` / `nccl_rank`: one rank of a launched job; world rank 0 coordinates
  too (in a thread) unless a coordinator is given.

They share their set-up: a coordinator of ranks started here is `_coordinate_local`
(loopback address and token in the ranks' environment; `LocalRanks` starts them:
`MpiexecRanks`, `SpawnedRanks`), every coordinator runs and closes through
`_coordinate_and_close`, and a rank finds its coordinator with `find_coordinator`
(given, or world rank 0's over the job's `HostComm`) and serves it through
`_join_and_measure`.

Whichever runs the coordinator writes the verdict, the JSON, the drain file, the
store entry and the baseline, and calls `ServiceOptions.after_scan` with the
typed `ScanOutcome` (for outputs that read the result: drain actions, metrics).
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from ...core.config import Backend
from ...core.errors import ArgumentError, BenchError, ExitCode
from ...launch.hostcomm import HostComm
from ..core.scan import ScanConfig
from .control_channel import Coordinator
from .coordinate import Outputs, ScanOutcome, coordinate
from .group_measure import GroupSpec
from .live_rounds import AnswerSetup, MeasureGroup
from .messages import End, Leave, Setup

if TYPE_CHECKING:
    from ...launch.detect import LaunchInfo
    from ...launch.spawn import LocalSpawnLauncher

COORD_ENV = "NCCLBENCH_HEALTH_COORD"
TOKEN_ENV = "NCCLBENCH_HEALTH_TOKEN"
PROGRAM = "ncclbench"
COMMAND = "health"

# options only the starting process acts on: the ranks it starts do not get them
_STARTER_ONLY = ("--nprocs", "--json", "--drain", "--save-baseline", "--db", "--baseline")


@dataclass(frozen=True)
class ServiceOptions:
    """What the command line said beyond the scan itself: where the outputs go and how
    the ranks meet."""

    json_path: str | None = None
    drain_path: str | None = None
    save_baseline: str | None = None
    store: bool = True
    accept_not_judged: bool = False  # exit 0 instead of 9 when no fault is confirmed but something was not judged
    db: str | None = None
    round_timeout_s: float = 60.0
    join_timeout_s: float = 60.0
    expected_hosts: list[str] | None = None
    nprocs: int | None = None
    ranks: int | None = None  # with serve: how many ranks will join
    serve: str | None = None  # [ADDR:]PORT
    coordinator: str | None = None  # HOST:PORT to join
    argv: Sequence[str] = ()  # the command line after the program name (recorded; ranks get theirs from it)
    # called with the scan's outcome by the process that coordinated it (after the outputs are written)
    after_scan: Callable[[ScanOutcome], None] | None = field(default=None, compare=False)

    def command_args(self) -> list[str]:
        """The arguments after `health` on this command line."""
        argv = list(self.argv)
        return argv[argv.index(COMMAND) + 1:] if COMMAND in argv else []


def run_coordinator(opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec, coord: Coordinator, backend: str,
                    spec_for: Callable[[Backend], GroupSpec] | None = None) -> int:
    """Run the scan over `coord`'s ranks and write every output: the exit code.  `backend`
    labels the run; `spec_for`: see `coordinate`."""
    from ..outputs.baseline_file import save_baseline

    progress = sys.stderr.isatty() or os.environ.get("NCCLBENCH_HEALTH_PROGRESS") == "1"
    outputs = Outputs(opts.json_path, opts.drain_path, sys.stdout, progress=progress,
                      accept_not_judged=opts.accept_not_judged)
    outcome = coordinate(coord, cfg, spec, opts.round_timeout_s, opts.join_timeout_s, outputs, backend,
                         argv=list(opts.argv), expected_hosts=opts.expected_hosts,
                         store=partial(store_scan, opts.db) if opts.store else None, spec_for=spec_for)
    if opts.save_baseline and opts.json_path:
        save_baseline(opts.save_baseline, opts.json_path)
    if opts.after_scan is not None:
        opts.after_scan(outcome)
    return outcome.code


def store_scan(db: str | None, doc: dict) -> str | None:
    """Keep the scan in the result store (`ncclbench history --health`, `show`, `report`);
    a store that cannot be written costs a line, never the scan's verdict."""
    from ...store.health_scans import save_scan

    if os.environ.get("NCCLBENCH_NO_STORE") == "1":
        return None
    try:
        scan_id = save_scan(doc, db)
    except (BenchError, OSError) as exc:
        message = exc.message if isinstance(exc, BenchError) else str(exc)
        return f"# health: the scan was not stored: {message}"
    return f"# health: stored as health:{scan_id} (ncclbench show health:{scan_id}; " \
           f"ncclbench report health:{scan_id} -o health.html)"


def child_args(argv: Sequence[str]) -> list[str]:
    """The ranks' command line: this one without what only the starter does."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in _STARTER_ONLY:
            skip = True
            continue
        if a.startswith(tuple(f"{o}=" for o in _STARTER_ONLY)):
            continue
        out.append(a)
    return out


# -- the ways to run ------------------------------------------------------------------------------
def serve(opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec, backend: Backend | None = None,
          bw_size_given: bool = True) -> int:
    """The coordinator alone, outside the job; ranks join with --coordinator.  It runs no
    collective, so `backend` (None: --backend auto) only names the run until the ranks say
    theirs at set-up; unless --bw-size was given, the bandwidth size follows the ranks' backend."""
    if not opts.ranks or opts.ranks < 1:
        raise ArgumentError("health: --serve needs --ranks N (how many ranks will join)")
    addr, _, port = (opts.serve or "").rpartition(":")
    try:
        port_no = int(port)
    except ValueError:
        raise ArgumentError(f"health: --serve expects [ADDR:]PORT, not {opts.serve!r}") from None
    token = os.environ.get(TOKEN_ENV)
    if not token:
        token = secrets.token_hex(16)
        print(f"# health: token for the ranks: {TOKEN_ENV}={token}", file=sys.stderr, flush=True)
    coord = Coordinator(opts.ranks, token, bind=addr or "0.0.0.0", port=port_no)
    print(f"# health: coordinator listening on {addr or '0.0.0.0'}:{coord.port} for {opts.ranks} rank(s)",
          file=sys.stderr, flush=True)
    label = backend.label if backend is not None else "backend of the ranks"
    return _coordinate_and_close(opts, cfg, spec, coord, f"{label}, external coordinator",
                                 spec_for=None if bw_size_given else spec.with_default_bw)


def mpi_self_launch(opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec) -> int:
    """Start N ranks under mpiexec, and coordinate them from here (outside the MPI job)."""
    from ...launch.bootstrap import require_mpi4py
    from ...launch.spawn import require_mpiexec

    if opts.nprocs is None or opts.nprocs < 1:
        raise ArgumentError("health: --nprocs must be at least 1")
    require_mpiexec()  # before the coordinator waits: a missing launcher is exit 5 now, not a join timeout
    require_mpi4py()
    ranks = MpiexecRanks(opts.nprocs, [COMMAND, *child_args(opts.command_args())])
    return _coordinate_local(opts, cfg, spec, Backend.MPI, ranks)


def mpi_rank(opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec) -> int:
    """One rank of a launched job (and, on world rank 0, the coordinator unless one is given)."""
    from ...launch.bootstrap import require_mpi4py

    require_mpi4py()
    from mpi4py import MPI

    from ...launch.hostcomm import MpiHostComm
    from .live_rounds import mpi_measure

    world = MPI.COMM_WORLD
    world.Set_errhandler(MPI.ERRORS_RETURN)
    join = find_coordinator(opts, cfg, spec, Backend.MPI, world.Get_rank(), lambda: MpiHostComm(world))
    code, how = _join_and_measure(join, opts, mpi_measure(world), _mpi_facts)
    if how == Leave.ABORT:
        world.Abort(code)
    if how == Leave.EXIT:
        os._exit(code)
    return code


def _mpi_facts(request: Setup) -> dict[str, Any]:
    """A CPU rank's answer to Setup: its backend, NCCL_* settings and machine (health/core/crowding.py)."""
    from ..core.causes import nccl_settings
    from ..core.crowding import machine_facts

    return {"backend": Backend.MPI.value, "env": nccl_settings(), **machine_facts()}


# -- the NCCL (GPU) runtime -------------------------------------------------------------------------
def nccl_self_launch(opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec) -> int:
    """No launcher: one rank per visible GPU (or --nprocs), started here, coordinated from
    here (outside the job, so a rank that dies or stops cannot take the verdict with it)."""
    from ...backends.select import gpu_count

    n = opts.nprocs if opts.nprocs is not None else max(1, gpu_count())
    if n < 1:
        raise ArgumentError("health: --nprocs must be at least 1")
    ranks = SpawnedRanks(n, [COMMAND, *child_args(opts.command_args()), "--no-store"])
    return _coordinate_local(opts, cfg, spec, Backend.NCCL, ranks)


def nccl_rank(opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec, launch: LaunchInfo) -> int:
    """One GPU rank: of a launched job (world rank 0 also coordinates unless one is given),
    of ranks started here, or joining an external coordinator (--coordinator)."""
    from .live_rounds import host_name
    from .nccl_group import GpuRankService

    def form_job() -> HostComm:
        from ...launch.bootstrap import make_host_comm

        return make_host_comm(launch, timeout_s=opts.join_timeout_s)

    # connections are made while the group's communicator forms, where a missing peer can be
    # given up on, not inside the first timed collective (health/runtime/nccl_group.py)
    os.environ.setdefault("NCCL_RUNTIME_CONNECT", "0")
    join = find_coordinator(opts, cfg, spec, Backend.NCCL, launch.rank, form_job)
    service = GpuRankService(join.rank, host_name(join.rank))
    code, how = _join_and_measure(join, opts, service.measure, service.setup)
    host = join.job
    if how == Leave.ABORT and host is not None:
        host.abort(code, "health: a rank stopped; ending the job")
        time.sleep(1.0)
    if how in (Leave.ABORT, Leave.EXIT):
        os._exit(code)
    if host is not None:
        host.close()
    return code


# -- what the ways to run share ---------------------------------------------------------------------
class LocalRanks(Protocol):
    """Ranks this process starts and coordinates from outside their job."""

    nprocs: int

    def start(self, env: dict[str, str]) -> None:
        """Start them (in a thread); `env` holds the coordinator's address and token."""

    def finish(self, scanned: bool) -> None:
        """Once the coordinator is closed: wait for them or end them; `scanned`: the scan ended
        with an exit code (not an error)."""


@dataclass
class MpiexecRanks:
    """`mpiexec -n N ncclbench health ...`: told how to leave, its ranks leave by themselves."""

    nprocs: int
    argv: list[str]
    thread: threading.Thread | None = None

    def start(self, env: dict[str, str]) -> None:
        from ...launch.spawn import spawn_mpiexec

        self.thread = threading.Thread(target=partial(spawn_mpiexec, self.nprocs, self.argv, env=env), daemon=True,
                                       name="health-mpiexec")
        self.thread.start()

    def finish(self, scanned: bool) -> None:
        if scanned and self.thread is not None:
            self.thread.join(timeout=30)


@dataclass
class SpawnedRanks:
    """One process per rank, started here without a launcher (the GPU runtime)."""

    nprocs: int
    argv: list[str]
    launcher: LocalSpawnLauncher | None = None
    thread: threading.Thread | None = None

    def start(self, env: dict[str, str]) -> None:
        from ...backends.select import BACKEND_ENV
        from ...launch.spawn import LocalSpawnLauncher

        self.launcher = LocalSpawnLauncher(self.nprocs, self.argv, env={**env, BACKEND_ENV: Backend.NCCL.value})
        self.thread = threading.Thread(target=self.launcher.run, daemon=True, name="health-ranks")
        self.thread.start()

    def finish(self, scanned: bool) -> None:
        if self.launcher is not None and self.thread is not None:
            _end_ranks(self.launcher, self.thread)


def _coordinate_local(opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec, backend: Backend,
                      ranks: LocalRanks) -> int:
    """Start `ranks` here with the address and token of a coordinator on loopback, and coordinate
    them from this process: the exit code."""
    token = secrets.token_hex(16)
    coord = Coordinator(ranks.nprocs, token, bind="127.0.0.1")
    ranks.start({**os.environ, COORD_ENV: f"127.0.0.1:{coord.port}", TOKEN_ENV: token})
    return _coordinate_and_close(opts, cfg, spec, coord, f"{backend.label}, coordinator outside the job",
                                 then=ranks.finish)


def _coordinate_and_close(opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec, coord: Coordinator, label: str,
                          spec_for: Callable[[Backend], GroupSpec] | None = None,
                          then: Callable[[bool], None] | None = None) -> int:
    """`run_coordinator` over `coord`, which is closed after, error or not; then `then(scanned)`
    (LocalRanks.finish)."""
    scanned = False
    try:
        code = run_coordinator(opts, cfg, spec, coord, label, spec_for=spec_for)
        scanned = True
    finally:
        coord.close()
        if then is not None:
            then(scanned)
    return code


def _end_ranks(launcher: LocalSpawnLauncher, thread: threading.Thread, grace_s: float = 15.0) -> None:
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


@dataclass
class JoinPoint:
    """Where rank `rank` joins the coordinator (`where`: HOST:PORT, `token`) and what it holds
    besides: the job's host channel where it was formed to find the coordinator (`job`), and on
    the rank that coordinates too, the coordinator's thread and its exit code (`result`)."""

    where: str
    token: str
    rank: int
    job: HostComm | None = None
    thread: threading.Thread | None = None
    result: dict[str, int] = field(default_factory=dict)


def find_coordinator(opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec, backend: Backend, rank: int,
                     form_job: Callable[[], HostComm]) -> JoinPoint:
    """The coordinator this rank joins: --coordinator or $NCCLBENCH_HEALTH_COORD (its token in
    $NCCLBENCH_HEALTH_TOKEN), else one the job's world rank 0 runs in a thread and tells the
    others of (`form_job()` forms the job's host channel for that)."""
    where = opts.coordinator or os.environ.get(COORD_ENV)
    if where is not None:
        token = os.environ.get(TOKEN_ENV, "")
        if not token:
            raise ArgumentError(f"health: --coordinator needs the coordinator's token in ${TOKEN_ENV}")
        return JoinPoint(where, token, rank)
    job = form_job()
    join = _coordinator_thread(job.size, opts, cfg, spec, backend.label) if job.rank == 0 else \
        JoinPoint("", os.environ.get(TOKEN_ENV, ""), job.rank)
    join.job = job
    join.where, join.token = job.bcast((join.where, join.token), 0)
    return join


def _join_and_measure(join: JoinPoint, opts: ServiceOptions, measure: MeasureGroup,
                      setup: AnswerSetup | None) -> tuple[int, Leave]:
    """This rank joins the coordinator and measures what it is told until the scan ends:
    (exit code, how to leave).  On the coordinating rank, the coordinator's code wins."""
    from .control_channel import RankLink
    from .live_rounds import rank_info, serve_rank

    addr, _, port = join.where.rpartition(":")
    link = RankLink(addr, int(port), join.token, rank_info(join.rank), timeout_s=opts.join_timeout_s)
    code, how = serve_rank(link, measure, silence_s=2 * opts.round_timeout_s + 30, setup=setup)
    if join.thread is not None:
        join.thread.join(timeout=30)
        code = join.result.get("code", code)
    link.close()
    sys.stdout.flush()
    sys.stderr.flush()
    return code, how


def _coordinator_thread(size: int, opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec,
                        label: str) -> JoinPoint:
    """World rank 0 of a launched job coordinates too, in a thread beside its own rank's work:
    its join point (the address the ranks join, the token, the thread; the exit code lands in
    its `result`)."""
    from .live_rounds import advertised_address

    token = secrets.token_hex(16)
    coord = Coordinator(size, token)
    join = JoinPoint("", token, 0)
    join.thread = threading.Thread(target=partial(_coordinate_in_thread, opts, cfg, spec, coord, join.result, label),
                                   daemon=True, name="health-coordinator")
    join.thread.start()
    join.where = f"{advertised_address()}:{coord.port}"
    return join


def _coordinate_in_thread(opts: ServiceOptions, cfg: ScanConfig, spec: GroupSpec, coord: Coordinator,
                          result: dict[str, int], label: str) -> None:
    """The thread's body: an error ends the scan on every rank now and is one line here (the
    thread has no caller to print it, and a traceback is not a message); `coordinate` turns a
    bug inside the scan into such an error, anything after it (an output hook) is caught here."""
    try:
        result["code"] = run_coordinator(opts, cfg, spec, coord, label)
    except Exception as exc:
        err = exc if isinstance(exc, BenchError) else BenchError(
            f"health: internal error in the coordinator: {type(exc).__name__}: {exc}", ExitCode.INTERNAL)
        print(f"{PROGRAM}: {err.message}", file=sys.stderr, flush=True)
        result["code"] = int(err.code)
        for r in coord.ranks:
            coord.send(r, End(int(err.code), Leave.EXIT))
