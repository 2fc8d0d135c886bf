"""One rank's part of a job, up to its run plan: the step the benchmark
(`benchmark.orchestrate.run_here`) and tune (`tune.job.run_tune_here`) share.

    with RankJob(opts, backend, launch, observer) as job:  # signals handled, host communicator formed
        job.preflight()                  # the launch checks: a trap ends the run on every rank (exit 6)
        workers = job.start_workers()    # a plain run's workers (tune's own candidates: job.keep/on_end)
        plan = job.make_plan(workers[0])
        ... the tool's run ...
        return code
    return job.exit_status               # a signal or an anticipated error ended it

How it ends, whichever way.  SIGTERM/SIGINT/SIGHUP (`launch.shutdown.RankSignals`, installed
for the job's length) and a BenchError end through `launch.shutdown.end_run`: the outcome kept
in the job's `record` (the result store's run, when one is open), one line, the other ranks
told; `with` then goes on with `job.exit_status`.  Any other exception goes on up (a closed
pipe: the dispatcher ends quietly).  Then, in this order: the observer hears `failed` (after
an early end), what the tool registered with `on_end` is closed, the workers are closed, the
observer hears `close`, the host communicator closes and the signal handlers go.

The observer (`JobObserver`, the job's part of `run.events.RunObserver`) hears the job's
steps: `job_formed` after the launch checks, `workers_starting` and `comm_init` around the
workers' set-up, `failed` and `close` at the end.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

from ..backends.worker import Worker
from ..collectives import lookup
from ..collectives.collective import Collective
from ..core.config import Backend, BenchOptions
from ..core.errors import ArgumentError, BenchError, ExitCode
from ..launch.detect import LaunchInfo
from ..launch.facts import RankFacts
from ..launch.hostcomm import HostComm
from ..launch.shutdown import LAUNCHER_PID_ENV, JobInterrupted, RankSignals, end_run, rank_identity
from .plan import RunPlan, make_plan

CLOSED_PIPE = "the reader of its output went away (a closed pipe)"


class JobObserver(Protocol):
    """The job's own steps, as a `run.events.RunObserver` hears them (that interface is this
    one plus the run's steps; a tool without observers passes `run.events.NullObserver()`)."""

    def job_formed(self, job: RankJob) -> None: ...

    def workers_starting(self, job: RankJob) -> None: ...

    def comm_init(self) -> None: ...

    def failed(self, exc: BaseException) -> None: ...

    def close(self) -> None: ...


class RunRecord(Protocol):
    """Where a run's outcome is kept (the result store's run: `store.reporter.StoreReporter`)."""

    run_id: int | None

    def set_outcome(self, status: str, reason: str | None) -> None: ...

    @property
    def rows_written(self) -> int: ...


@dataclass(frozen=True)
class LaunchChecks:
    """What `ncclbench preflight`'s checks said about this job (the same on every rank but
    `facts`): `host_lines` (one version line per host, GPU backend), `warnings` ('WARN: ...'),
    every rank's `facts` (at rank 0, else None) and this rank's place on its host as NCCL
    groups hosts (`places[rank]`; 0: it reads the host's topology)."""

    host_lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: list[RankFacts] | None = None
    places: list[int] = field(default_factory=lambda: [0])


def launch_checks(opts: BenchOptions, backend: Backend, launch: LaunchInfo, host: HostComm) -> LaunchChecks:
    """The launch checks of `ncclbench preflight`, at the start of every job: a trap
    (independent copies, one GPU taken twice, too few GPUs, no GPU for the GPU backend, ...)
    ends the run on every rank with exit 6 and what to fix."""
    from ..launch.bootstrap import host_comm_name
    from ..launch.facts import collect_rank_facts
    from ..launch.hostid import local_ranks_by_host
    from ..launch.preflight_checks import ERROR, WARN, check_facts, format_host_lines

    gpu = backend is Backend.NCCL
    facts = collect_rank_facts(launch, hostcomm=host_comm_name(host), nccl_lib=opts.nccl_lib,
                               probe_gpus=gpu, probe_nccl=None if gpu else False)
    gathered = host.gather(facts, 0)
    verdict = None
    if gathered is not None:
        findings = check_facts(gathered, launch.size, opts.nthreads * opts.ngpus, gpu)
        errors = [f.message for f in findings if f.level == ERROR]
        verdict = ("; ".join(errors) or None, format_host_lines(gathered) if gpu else [],
                   [str(f) for f in findings if f.level == WARN], local_ranks_by_host([f.host_label for f in gathered]))
    error, host_lines, warnings, places = host.bcast(verdict, 0)
    if error:
        raise BenchError(error, ExitCode.INVALID_USAGE, all_ranks=True)
    return LaunchChecks(host_lines, warnings, gathered, places)


def make_workers(opts: BenchOptions, backend: Backend, host: HostComm, collective: Collective,
                 on_comm_init: Callable[[], None] | None = None) -> list[Worker]:
    """This process's workers (one per -t thread).  Collective over `host`.
    `on_comm_init`: see create_nccl_workers (the CPU backend has no such moment)."""
    if backend is Backend.MPI:
        from ..backends.mpi_cpu import MpiWorker

        return [MpiWorker(opts, host)]
    from ..backends.nccl_setup import create_nccl_workers

    return list(create_nccl_workers(opts, host, collective, on_comm_init=on_comm_init))


class RankJob:
    """This rank's job from the host communicator to the run plan (see the module docstring)."""

    def __init__(self, opts: BenchOptions, backend: Backend, launch: LaunchInfo, observer: JobObserver):
        self.opts, self.backend, self.launch, self.observer = opts, backend, launch, observer
        self.signals = RankSignals(f"pid {os.getpid()}", quiet=LAUNCHER_PID_ENV in os.environ)
        self.host: HostComm
        self.checks = LaunchChecks(places=[launch.local_rank])
        self.workers: list[Worker] = []
        self.record: RunRecord | None = None  # set by the observer that keeps the run, when it opens it
        self.exit_status = 0  # how a signal or an anticipated error ended the run (end_run)
        self._plan: RunPlan | None = None
        self._on_end: list[Callable[[], None]] = []
        self._on_abort: list[Callable[[], None]] = []

    # -- forming the job -------------------------------------------------------------------------
    def __enter__(self) -> RankJob:
        from ..launch.bootstrap import make_host_comm

        mpi = self.backend is Backend.MPI
        # SIGTERM/SIGINT/SIGHUP end the run through __exit__ (launch/shutdown.py)
        self.signals.install()
        try:
            timeout = self.opts.timeout or None
            self.host = make_host_comm(self.launch, timeout, prefer_mpi=mpi, require_mpi=mpi, op_timeout_s=timeout)
        except BaseException:
            self.signals.restore()
            raise
        self.signals.describe = rank_identity(self.host.rank)
        self.host.add_failure_callback(self._abort)
        return self

    def preflight(self) -> LaunchChecks:
        """The launch checks (`launch_checks`); then the observer hears `job_formed`."""
        self.checks = launch_checks(self.opts, self.backend, self.launch, self.host)
        self.observer.job_formed(self)
        return self.checks

    @property
    def rank_facts(self) -> list[RankFacts] | None:
        return self.checks.facts

    @property
    def on_host(self) -> int:
        """This rank's place on its host as NCCL groups hosts (0: the host's first rank)."""
        return self.checks.places[self.host.rank] if len(self.checks.places) > self.host.rank else self.launch.local_rank

    @property
    def hosts(self) -> int:
        """How many hosts the job spans, as NCCL groups them (NCCL_HOSTID, else the host name)."""
        return max(1, self.checks.places.count(0))

    @property
    def collective(self) -> Collective:
        coll = lookup(self.opts.collective)
        if coll is None:
            raise ArgumentError(f"unknown collective {self.opts.collective!r}")
        return coll

    # -- the workers and the plan ----------------------------------------------------------------
    def start_workers(self) -> list[Worker]:
        """A plain run's workers (one per -t thread); the observer hears `workers_starting`
        and, on the GPU backend, `comm_init`.  Kept: see `keep`."""
        self.observer.workers_starting(self)
        workers = make_workers(self.opts, self.backend, self.host, self.collective,
                               on_comm_init=self.observer.comm_init)
        self.keep(workers)
        return workers

    def keep(self, workers: Sequence[Worker]) -> None:
        """Workers this job aborts when a peer dies (so no rank stays stuck in a device wait)
        and closes at its end."""
        self.workers.extend(workers)

    def on_end(self, close: Callable[[], None], abort: Callable[[], None] | None = None) -> None:
        """Something else the tool made for the job (tune's candidates): closed at the end,
        before the workers; `abort` when a peer dies."""
        if abort is not None:
            self._on_abort.append(abort)
        self._on_end.append(close)

    def _abort(self, _error: BenchError) -> None:
        """A peer died: abort our communicators so no rank stays stuck in a device wait."""
        for w in self.workers:
            w.abort()
        for abort in self._on_abort:
            abort()

    def make_plan(self, worker: Worker) -> RunPlan:
        """`run.plan.make_plan` on `worker` (any of the job's: they share the world's buffer size)."""
        self._plan = make_plan(self.opts, self.collective, self.backend, worker)
        return self._plan

    @property
    def plan(self) -> RunPlan:
        if self._plan is None:
            raise BenchError("no run plan made yet", ExitCode.INTERNAL)
        return self._plan

    @property
    def reporting(self) -> bool:
        """Whether this rank writes the run's outputs (world rank 0's first worker)."""
        return bool(self.workers) and self.workers[0].is_reporter

    # -- the end ---------------------------------------------------------------------------------
    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        handled = False
        try:
            if isinstance(exc, (JobInterrupted, BenchError)):
                # one line, the run's outcome kept, and the other ranks told (they may be waiting for us)
                self.exit_status = end_run(exc, self.signals, self.host, self.record)
                handled = True
            elif isinstance(exc, BrokenPipeError) and self.record is not None:
                self.record.set_outcome("interrupted", CLOSED_PIPE)  # `| head`: the dispatcher ends quietly
            self.signals.disarm()
            if exc is not None:
                self.observer.failed(exc)
        finally:
            self._close()
        return handled

    def _close(self) -> None:
        try:
            for close in reversed(self._on_end):
                close()
            for w in self.workers:
                w.close()
            self.observer.close()
            self.host.close()
        finally:
            self.signals.restore()
