"""The step the benchmark and tune share (`run.rank_job.RankJob`): the job formed, checked and
given its workers, its observer told each step, and every way it ends (a signal, an anticipated
error, a closed pipe, anything else) closing the same things in the same order."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from ncclbench.backends.select import gpu_count
from ncclbench.core.config import Backend, BenchOptions
from ncclbench.core.errors import BenchError, ExitCode
from ncclbench.launch.detect import detect_launch
from ncclbench.launch.shutdown import LAUNCHER_PID_ENV, JobInterrupted
from ncclbench.run import rank_job
from ncclbench.run.events import NullObserver
from ncclbench.run.rank_job import CLOSED_PIPE, RankJob


class Log(list):
    """What happened, in order, across the fakes."""


class Recorder(NullObserver):
    def __init__(self, log: Log):
        self.log = log

    def job_formed(self, job: RankJob) -> None:
        self.log.append("job_formed")

    def workers_starting(self, job: RankJob) -> None:
        self.log.append("workers_starting")

    def comm_init(self) -> None:
        self.log.append("comm_init")

    def failed(self, exc: BaseException) -> None:
        self.log.append(f"failed {type(exc).__name__}")

    def close(self) -> None:
        self.log.append("observer closed")


class FakeHost:
    """One process; keeps the failure callback the job registers."""

    rank, size = 0, 1

    def __init__(self, log: Log):
        self.log = log
        self.callbacks: list[Any] = []

    def add_failure_callback(self, cb: Any) -> None:
        self.callbacks.append(cb)

    def close(self) -> None:
        self.log.append("host closed")


class FakeWorker:
    is_reporter = True

    def __init__(self, log: Log, name: str = "worker"):
        self.log, self.name = log, name

    def abort(self) -> None:
        self.log.append(f"{self.name} aborted")

    def close(self) -> None:
        self.log.append(f"{self.name} closed")


class FakeRecord:
    run_id = 7
    rows_written = 3

    def __init__(self) -> None:
        self.outcome: tuple[str, str | None] | None = None

    def set_outcome(self, status: str, reason: str | None) -> None:
        self.outcome = self.outcome or (status, reason)


@pytest.fixture
def job_parts(monkeypatch):
    """A RankJob over a fake host communicator, its log and its observer."""
    monkeypatch.delenv(LAUNCHER_PID_ENV, raising=False)
    log = Log()
    host = FakeHost(log)
    monkeypatch.setattr("ncclbench.launch.bootstrap.make_host_comm", lambda *a, **k: host)
    job = RankJob(BenchOptions(), Backend.MPI, detect_launch({}), Recorder(log))
    return job, log, host


def test_a_signal_ends_the_job_with_its_status_and_one_line(job_parts, capsys):
    job, log, _ = job_parts
    handler = signal.getsignal(signal.SIGINT)
    with job:
        assert signal.getsignal(signal.SIGINT) is not handler  # the job's handler, for its length
        job.keep([FakeWorker(log)])
        job.on_end(lambda: log.append("candidates closed"))
        job.signals.signum = signal.SIGINT  # what the handler records before it raises
        raise JobInterrupted(signal.SIGINT)
    assert job.exit_status == 130
    assert log == ["failed JobInterrupted", "candidates closed", "worker closed", "observer closed", "host closed"]
    assert job.signals.describe.startswith("rank 0 (host ")
    assert capsys.readouterr().err == f"ncclbench: {job.signals.describe}: SIGINT received\n"
    assert signal.getsignal(signal.SIGINT) is handler  # given back


def test_a_signal_keeps_the_runs_outcome_in_its_record(job_parts, capsys):
    job, log, _ = job_parts
    record = FakeRecord()
    with job:
        job.record = record
        job.signals.signum = signal.SIGTERM
        raise JobInterrupted(signal.SIGTERM)
    assert job.exit_status == 143 and record.outcome is not None and record.outcome[0] == "interrupted"
    assert "3 rows kept, run 7 stored as interrupted" in capsys.readouterr().err


def test_an_anticipated_error_is_one_line_and_its_exit_status(job_parts, capsys):
    job, log, _ = job_parts
    with job:
        raise BenchError("the library said no", ExitCode.NCCL_ERROR)
    assert job.exit_status == int(ExitCode.NCCL_ERROR)
    assert capsys.readouterr().err == "ncclbench: the library said no\n"
    assert log == ["failed BenchError", "observer closed", "host closed"]


def test_a_closed_pipe_goes_on_up_with_its_outcome_kept(job_parts):
    job, log, _ = job_parts
    record = FakeRecord()
    with pytest.raises(BrokenPipeError), job:
        job.record = record
        raise BrokenPipeError
    assert record.outcome == ("interrupted", CLOSED_PIPE)
    assert log == ["failed BrokenPipeError", "observer closed", "host closed"]


def test_anything_else_goes_on_up_and_everything_is_still_closed(job_parts):
    job, log, _ = job_parts
    with pytest.raises(ZeroDivisionError), job:
        job.keep([FakeWorker(log)])
        raise ZeroDivisionError
    assert log == ["failed ZeroDivisionError", "worker closed", "observer closed", "host closed"]


def test_a_run_that_ends_well_hears_no_failure(job_parts):
    job, log, _ = job_parts
    with job:
        job.keep([FakeWorker(log)])
    assert job.exit_status == 0 and log == ["worker closed", "observer closed", "host closed"]


def test_a_dead_peer_aborts_the_workers_and_what_the_tool_registered(job_parts):
    job, log, host = job_parts
    with job:
        job.keep([FakeWorker(log, "w0"), FakeWorker(log, "w1")])
        job.on_end(lambda: None, abort=lambda: log.append("candidates aborted"))
        assert len(host.callbacks) == 1
        host.callbacks[0](BenchError("rank 1 died"))  # what the host communicator's watch thread does
        assert log == ["w0 aborted", "w1 aborted", "candidates aborted"]


def test_the_observer_hears_the_jobs_steps_in_order(job_parts, monkeypatch):
    job, log, _ = job_parts

    def fake_workers(opts, backend, host, collective, on_comm_init=None):
        log.append(f"workers of {collective.name}")
        on_comm_init()
        return [FakeWorker(log)]

    monkeypatch.setattr(rank_job, "launch_checks", lambda *a: rank_job.LaunchChecks(places=[0]))
    monkeypatch.setattr(rank_job, "make_workers", fake_workers)
    with job:
        job.preflight()
        workers = job.start_workers()
        assert job.workers == workers and job.reporting and job.on_host == 0 and job.hosts == 1
    assert log == ["job_formed", "workers_starting", "workers of all_reduce", "comm_init", "worker closed",
                   "observer closed", "host closed"]


@pytest.mark.skipif(gpu_count() > 0, reason="a GPU is visible here: the GPU backend's requirement is met")
def test_a_preflight_trap_ends_the_job_before_any_worker(monkeypatch, capsys):
    """The launch checks run for real: the GPU backend on a host without a GPU is refused
    (exit 6, what to fix), before a worker exists or the observer hears the job formed."""
    monkeypatch.delenv(LAUNCHER_PID_ENV, raising=False)
    log = Log()
    with RankJob(BenchOptions(), Backend.NCCL, detect_launch({}), Recorder(log)) as job:
        job.preflight()
        log.append("went on")
    assert job.exit_status == int(ExitCode.INVALID_USAGE)
    assert "sees no GPU" in capsys.readouterr().err
    assert log == ["failed BenchError", "observer closed"]


def test_live_explain_hears_the_jobs_steps_on_the_gpu_backend(monkeypatch):
    """Explain as the job's observer on NCCL's backend: the launch checks decide which rank of a
    host reads its topology (the launcher's local rank 1 is NCCL's first on its host here), the
    capture is set before the workers, the read starts at the communicators' init."""
    from ncclbench.explain.live import LiveExplain, TopologyReader

    monkeypatch.delenv(LAUNCHER_PID_ENV, raising=False)
    log = Log()
    monkeypatch.setattr("ncclbench.launch.bootstrap.make_host_comm", lambda *a, **k: FakeHost(log))
    monkeypatch.setattr("ncclbench.explain.live.TopologyReader",
                        lambda gpus: log.append(f"topology read (gpus {gpus})") or TopologyReader(read=lambda: (None, "")))
    monkeypatch.setattr(LiveExplain, "_begin_capture", lambda self, lib: log.append("capture set"))
    monkeypatch.setattr(rank_job, "launch_checks", lambda *a: rank_job.LaunchChecks(places=[0]))

    def nccl_workers(opts, backend, host, collective, on_comm_init=None):
        log.append("workers made")
        on_comm_init()  # what create_nccl_workers does right before ncclCommInitRank
        log.append("communicators formed")
        return [FakeWorker(log)]

    monkeypatch.setattr(rank_job, "make_workers", nccl_workers)
    launch = detect_launch({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "1"})
    explain = LiveExplain(BenchOptions(), Backend.NCCL, launch.local_rank, environ={})
    assert explain.local_rank == 1
    with RankJob(BenchOptions(), Backend.NCCL, launch, explain) as job:
        job.preflight()
        assert explain.local_rank == 0
        job.start_workers()
    assert log[:4] == ["capture set", "workers made", "topology read (gpus True)", "communicators formed"]
