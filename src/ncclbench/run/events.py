"""The events of one rank's run, and who hears them.

A run goes through the same steps on every rank (`run.rank_job`: the job formed, the launch
checks, the workers, the plan; then the tool's own part).  What is not the run itself -- the
reporters, the result store, live explain, the gate -- follows it as a `RunObserver`: it is
told each step as it happens and adds its part there, in one place, instead of the run asking
"is explain on?" at each step.  A feature that is off is a `NullObserver` (every event does
nothing).  The benchmark tells several in order (`benchmark.observers.RunObservers`).

The events, in the order a benchmark sends them (tune sends the first three and `close`):

    job_formed(job)          every rank: the host communicator and the launch checks' facts;
                             no worker yet
    workers_starting(job)    every rank: right before the workers (before NCCL's first log line)
    comm_init()              every rank: right before the communicators' init (its C time, GIL
                             released, hides work started here); not on the CPU backend
    planned(job, info)       every rank: the plan made; `info` (the banner's facts) may still
                             be added to; opens what the run writes (reporting rank)
    begin(info, opts)        reporting rank: the banner; then, as they exist,
    message(line), row(row)  reporting rank: the table (a Reporter's calls: the harness makes them)
    measured(job, summary)   every rank, after the timed loops: collective follow-ups that add
                             to `summary` (the reporting rank's; None elsewhere)
    end(summary)             reporting rank: the footer; what the run wrote is complete
    exit_status(code)        every rank: the exit status so far -> this observer's say
    failed(exc)              the run ended early (a signal, an error, a closed pipe), after its
                             one line was printed and the other ranks told; the workers still exist
    close()                  last, after the workers are closed, however the run ended

The first four are collective where an observer makes them so (a gather, a broadcast): every
rank sends every event, in this order.
"""

from __future__ import annotations

from typing import Protocol

from ..core.config import BenchOptions
from ..core.results import ResultRow, RunInfo, RunSummary
from .rank_job import JobObserver, RankJob


class RunObserver(JobObserver, Protocol):
    """Something that follows a run: told each step of it (the module docstring).  The job's
    steps (job_formed, workers_starting, comm_init, failed, close) are `run.rank_job.JobObserver`'s,
    which `RankJob` sends; the run's steps below, the tool that runs the plan sends."""

    def planned(self, job: RankJob, info: RunInfo) -> None: ...

    def begin(self, info: RunInfo, opts: BenchOptions) -> None: ...

    def message(self, line: str) -> None: ...

    def row(self, row: ResultRow) -> None: ...

    def measured(self, job: RankJob, summary: RunSummary | None) -> None: ...

    def end(self, summary: RunSummary) -> None: ...

    def exit_status(self, code: int) -> int: ...


class NullObserver:
    """Hears every event and does nothing: a feature that is off.  An observer that needs
    a few events derives from it and overrides those."""

    def job_formed(self, job: RankJob) -> None:
        pass

    def workers_starting(self, job: RankJob) -> None:
        pass

    def comm_init(self) -> None:
        pass

    def planned(self, job: RankJob, info: RunInfo) -> None:
        pass

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        pass

    def message(self, line: str) -> None:
        pass

    def row(self, row: ResultRow) -> None:
        pass

    def measured(self, job: RankJob, summary: RunSummary | None) -> None:
        pass

    def end(self, summary: RunSummary) -> None:
        pass

    def exit_status(self, code: int) -> int:
        return code

    def failed(self, exc: BaseException) -> None:
        pass

    def close(self) -> None:
        pass
