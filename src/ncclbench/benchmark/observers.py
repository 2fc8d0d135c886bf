"""What follows a benchmark run besides the run itself, each a `run.events.RunObserver`:

* the outputs (text table, -J JSON, --metrics, --csv) and the progress bar: Reporters, opened
  once the plan exists on the reporting rank (an unwritable -J fails before the first row);
* the result store (`StoreObserver`): a Reporter too, and the job's record (`RankJob.record`),
  where a signal, an error or a closed pipe leaves the run's outcome;
* the gate: `BaselineGate` (--baseline NAME: refused before the sweep when it cannot judge,
  then the stored run gated: exit 7 or 9) and `GateRounds` (the gate's latency rounds after
  the timed loops);
* live explain (`explain.live.LiveExplain`).

`run_observers` puts a run's together (`RunObservers`: told in order); a feature that is off
is a `NullObserver`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..core.config import Backend, BenchOptions
from ..core.errors import BenchError, ExitCode
from ..core.results import ResultRow, RunInfo, RunSummary
from ..explain.live import LiveExplain
from ..explain.live import wanted as explain_wanted
from ..launch.detect import LaunchInfo
from ..output import MultiReporter, Reporter
from ..run.events import NullObserver, RunObserver
from ..run.rank_job import RankJob

if TYPE_CHECKING:  # the store is imported when a run opens it, not at every rank's start
    from ..store.reporter import StoreReporter

PROGRESS_ENV = "NCCLBENCH_PROGRESS"  # 1/0: the starting launcher's terminal decides the ranks' progress bar


def wants_progress_bar() -> bool:
    """A bar on stderr when that is a terminal and the table goes elsewhere (on one
    terminal the bar would interleave with the table)."""
    return sys.stderr.isatty() and not sys.stdout.isatty()


def storing(opts: BenchOptions) -> bool:
    """Whether this run goes into the result store (not --no-store, not NCCLBENCH_NO_STORE=1)."""
    return opts.store and os.environ.get("NCCLBENCH_NO_STORE") != "1"


class RunObservers(NullObserver):
    """Several observers told each event in order (the exit status passes through them in
    order too).  `failed` and `close` reach every one even if one of them fails; the first
    failure is raised after the others were told.  Also a Reporter for the harness
    (`run.plan_runner.run_workers`: message, row)."""

    def __init__(self, observers: Iterable[RunObserver]):
        self.observers = list(observers)

    def job_formed(self, job: RankJob) -> None:
        for o in self.observers:
            o.job_formed(job)

    def workers_starting(self, job: RankJob) -> None:
        for o in self.observers:
            o.workers_starting(job)

    def comm_init(self) -> None:
        for o in self.observers:
            o.comm_init()

    def planned(self, job: RankJob, info: RunInfo) -> None:
        for o in self.observers:
            o.planned(job, info)

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        for o in self.observers:
            o.begin(info, opts)

    def message(self, line: str) -> None:
        for o in self.observers:
            o.message(line)

    def row(self, row: ResultRow) -> None:
        for o in self.observers:
            o.row(row)

    def measured(self, job: RankJob, summary: RunSummary | None) -> None:
        for o in self.observers:
            o.measured(job, summary)

    def end(self, summary: RunSummary) -> None:
        for o in self.observers:
            o.end(summary)

    def exit_status(self, code: int) -> int:
        for o in self.observers:
            code = o.exit_status(code)
        return code

    def failed(self, exc: BaseException) -> None:
        self._every("failed", exc)

    def close(self) -> None:
        self._every("close")

    def _every(self, event: str, *args: object) -> None:
        first: BaseException | None = None
        for o in self.observers:
            try:
                getattr(o, event)(*args)
            except BaseException as exc:  # tell the others first
                first = first or exc
        if first is not None:
            raise first


class ReporterObserver(NullObserver):
    """A Reporter following the run: `open_reporter(job)` once the plan exists, on the reporting
    rank, after the observers before it (explain's banner facts); then the banner, the rows and
    the footer, and closed at the footer or when the run fails.  Nothing before it opens."""

    def __init__(self, open_reporter: Callable[[RankJob], Reporter]):
        self._open = open_reporter
        self.reporter: Reporter = MultiReporter([])

    def planned(self, job: RankJob, info: RunInfo) -> None:
        if job.reporting:
            self.reporter = self._open(job)

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        self.reporter.begin(info, opts)

    def message(self, line: str) -> None:
        self.reporter.message(line)

    def row(self, row: ResultRow) -> None:
        self.reporter.row(row)

    def end(self, summary: RunSummary) -> None:
        self.reporter.end(summary)
        self.reporter.close()

    def failed(self, exc: BaseException) -> None:
        self.reporter.close()

    def close(self) -> None:
        self.reporter.close()


def output_observer(env: dict[str, str] | None) -> ReporterObserver:
    """Text (+ JSON with -J, metrics, CSV); `env`: the environment the JSON records."""
    from ..output import open_output_reporters

    return ReporterObserver(lambda job: open_output_reporters(job.opts, env=env))


def progress_observer() -> ReporterObserver:
    """A progress bar on stderr, only on a terminal (the starting launcher's, for started ranks)."""

    def open_bar(job: RankJob) -> Reporter:
        from ..report.progress import ProgressReporter

        decided = os.environ.get(PROGRESS_ENV)
        if decided is not None:  # started by ncclbench: its launcher saw the terminal
            return ProgressReporter(job.plan.expected_rows(), force=True) if decided == "1" else MultiReporter([])
        return ProgressReporter(job.plan.expected_rows()) if wants_progress_bar() else MultiReporter([])

    return ReporterObserver(open_bar)


class StoreObserver(ReporterObserver):
    """The result store's run (`store.reporter.StoreReporter`), opened with the other reporters
    when the run is stored; it becomes the job's record (`RankJob.record`)."""

    def __init__(self, opts: BenchOptions, env: dict[str, str] | None):
        super().__init__(self._open_store)
        self.env = env
        self.store: StoreReporter | None = None
        self._storing = storing(opts)

    def _open_store(self, job: RankJob) -> Reporter:
        if not self._storing:
            return self.reporter
        from ..store.reporter import StoreReporter

        self.store = StoreReporter.open(env=self.env)
        job.record = self.store
        return self.store


class BaselineGate(NullObserver):
    """--baseline NAME: a baseline that is not there fails the run at its start, on every rank,
    not after the sweep; after it, the stored run is gated (0, 7, or 9: not judged), unless the
    run failed by itself first."""

    def __init__(self, name: str, opts: BenchOptions, store: StoreObserver):
        self.name, self.store, self._storing = name, store, storing(opts)

    def job_formed(self, job: RankJob) -> None:
        from ..store.reporter import baseline_problem

        host = job.host
        problem = host.bcast(baseline_problem(self.name, self._storing) if host.rank == 0 else None, 0)
        if problem:
            err = BenchError(problem, ExitCode.ARGUMENT, all_ranks=True)
            err.relayed = host.rank != 0  # type: ignore[attr-defined]  # rank 0 says it, the others stay quiet
            raise err

    def exit_status(self, code: int) -> int:
        if self.store.store is None:
            return code
        gated = self.store.store.check_baseline(self.name)  # the run's own failure comes first
        return code or gated


class GateRounds(NullObserver):
    """--gate-rounds: the gate's latency rounds, after explain read NCCL's account of the run
    (they make communicators of their own), into the summary and its footer.  Where the command
    line measured them before the run, each a job of its own (run/gate_processes.py), they are read,
    not measured; a round job measures its one round on its own communicator and hands it back."""

    def measured(self, job: RankJob, summary: RunSummary | None) -> None:
        from ..run import gate_processes as gp
        from ..run.gate_rounds import gate_lines, run_gate_rounds
        from ..store.noise import RoundFigure, round_figure

        if gp.is_round_job():
            mine = run_gate_rounds(job.plan, job.workers, fresh=False)
            if mine is not None:
                gp.write_round(mine)
            return
        before = gp.read_rounds()
        rounds: dict[str, Any] | None
        if before is not None and before.get("series"):
            rounds = before
        else:
            rounds = run_gate_rounds(job.plan, job.workers)
            if rounds is not None and before is not None and before.get("failed"):
                rounds["fresh"] = f"{rounds['fresh']} ({before['failed']}: measured in this run instead)"
        if summary is not None and rounds is not None:
            summary.gate_latency = rounds
            summary.gate_lines = gate_lines(rounds, round_figure(job.plan.backend.value) is RoundFigure.MEDIAN)


def run_observers(opts: BenchOptions, backend: Backend, launch: LaunchInfo) -> RunObservers:
    """A benchmark's observers, in the order they hear each event: explain first (its banner
    lines before the banner, its judgement before the gate's rounds and before the exit
    status the gate may raise), then the outputs, the store, the bar and the gate."""
    # The run judged (explain/): from now on; nothing of it runs in the timed loops.
    explain = LiveExplain(opts, backend, launch.local_rank) if explain_wanted(opts) else None
    env = explain.user_env if explain is not None else None  # the user's settings, not explain's capture
    store = StoreObserver(opts, env)
    observers: list[RunObserver] = [
        explain or NullObserver(), output_observer(env), store, progress_observer(),
        BaselineGate(opts.baseline, opts, store) if opts.baseline else NullObserver(),
        GateRounds() if opts.gate_rounds else NullObserver(),
    ]
    return RunObservers(observers)
