"""A rank that dies (kill -9) or stops answering (SIGSTOP) is named by ncclbench
itself -- rank, host and pid -- not only by MPICH's banner (which, with MPICH
5.0.2, can name the wrong process: it reported rank 0's pid when rank 1 was
killed).  And a rank whose main thread is stuck in C when the signal comes
still ends, through the watcher, with its run marked.  Real processes, real
signals (tests/signal_helpers.py)."""

from __future__ import annotations

import re
import signal
import time

import pytest
from signal_helpers import finish, kill_leftovers, ncclbench_lines, send, start, stored_run, wait_for_rows, wait_gone

from ncclbench.launch.shutdown import GRACE_S
from ncclbench.launch.spawn import STOP_BOUND_S

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("path", ["nprocs-mpi", "nprocs-tcp"])
@pytest.mark.parametrize("rank", [0, 2])
def test_a_killed_rank_is_named_by_rank_host_and_pid(tmp_path, path, rank):
    job = start(path, tmp_path / "r.sqlite")
    try:
        wait_for_rows(job, 4)
        pid = job.ranks[rank]
        since = send(job, f"rank {rank}", signal.SIGKILL)
        took = wait_gone(job, since)
        finish(job)
    finally:
        left = kill_leftovers(job)
    assert took is not None and took <= STOP_BOUND_S and not left, (took, left)
    named = [line for line in ncclbench_lines(job.err) if f"rank {rank} (host " in line and f"pid {pid})" in line]
    assert named, job.err
    assert re.search(r"died first|was killed by SIGKILL", named[-1]), named
    status, reason, nrows = stored_run(job.db)
    assert status == "interrupted" and nrows >= 4, (status, reason)
    assert f"rank {rank} (host " in reason and f"pid {pid})" in reason, reason


@pytest.mark.parametrize("path", ["nprocs-mpi", "nprocs-tcp"])
def test_a_stopped_rank_is_named_and_the_job_ends_after_the_limit(tmp_path, path):
    job = start(path, tmp_path / "r.sqlite", extra_env={"NCCLBENCH_STOPPED_LIMIT": "5"})
    try:
        wait_for_rows(job, 4)
        pid = job.ranks[1]
        since = send(job, "rank 1", signal.SIGSTOP)
        took = wait_gone(job, since, limit=40)
        codes = finish(job)
    finally:
        left = kill_leftovers(job)
    assert took is not None and not left, (took, left, job.err)
    assert 5.0 <= took <= 5.0 + STOP_BOUND_S, took
    lines = ncclbench_lines(job.err)
    assert any(line.startswith("ncclbench: rank 1 (host ") and f"pid {pid}) is stopped" in line for line in lines), \
        job.err
    assert codes[0] == 4, job.err  # nccl-tests' timeout status
    status, reason, nrows = stored_run(job.db)
    assert status == "timeout", (status, reason)
    assert f"pid {pid}) stayed stopped" in reason, reason


def test_a_rank_stuck_in_an_mpi_call_still_ends_and_marks_its_run(tmp_path, mpiexec):
    """Rank 0 waits in MPI_Barrier for ranks that never come (a main thread in C
    never returns to Python, so the signal handler cannot run): the watcher thread
    ends it after the grace period and marks the run through its own connection."""
    import subprocess

    from launch_helpers import PY, child_env

    db = tmp_path / "r.sqlite"
    p = subprocess.Popen([mpiexec, "-n", "3", PY, "-m", "signal_rank", str(db), "mpi-stuck"],
                         env=child_env(PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    from signal_helpers import Job, process_tree

    job = Job("mpiexec", [p], db, time.monotonic())
    try:
        wait_for_rows(job, 3)
        time.sleep(0.5)  # rank 0 is in the barrier now
        job.tree = process_tree([p.pid])
        rank0 = [pid for pid in job.tree if "PMI_RANK=0" in open(f"/proc/{pid}/environ", "rb").read()
                 .decode(errors="replace").split("\0") and b"signal_rank" in open(f"/proc/{pid}/cmdline", "rb").read()]
        assert len(rank0) == 1, job.tree
        job.ranks[0] = rank0[0]
        since = send(job, "rank 0", signal.SIGTERM)
        took = wait_gone(job, since)
        finish(job)
    finally:
        left = kill_leftovers(job)
    assert took is not None and not left, (took, left)
    assert GRACE_S <= took <= GRACE_S + 3.0, took
    assert any(f"did not unwind within {GRACE_S:g} s" in line for line in ncclbench_lines(job.err)), job.err
    status, reason, nrows = stored_run(db)
    assert status == "interrupted" and nrows == 3, (status, reason, nrows)
    assert reason.startswith("SIGTERM received by rank 0 "), reason


def test_a_T_timeout_is_stored_as_timeout(tmp_path):
    """-T 3 and a rank that stops answering: the -T watchdog ends the job with
    nccl-tests' timeout status, and the run is stored as 'timeout', not
    'interrupted' (the rows measured before it are kept)."""
    job = start("nprocs-mpi", tmp_path / "r.sqlite", extra_args=("-T", "3"))
    try:
        wait_for_rows(job, 4)
        since = send(job, "rank 2", signal.SIGSTOP)
        took = wait_gone(job, since, limit=40)
        codes = finish(job)
    finally:
        left = kill_leftovers(job)
    assert took is not None and not left, (took, left, job.err)
    assert 3.0 <= took <= 3.0 + STOP_BOUND_S, took
    assert codes[0] == 4, job.out[-2000:] + job.err
    assert "Test timeout (3s)" in job.out + job.err
    status, reason, nrows = stored_run(job.db)
    assert status == "timeout" and nrows >= 4, (status, reason)
    assert "Test timeout (3s)" in reason, reason
