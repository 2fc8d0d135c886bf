"""Runs end the way schedulers end them: SIGTERM, SIGINT and SIGHUP to the
launcher, to any rank, or to the process group end every process of the job
within the bound, print one line naming the signal, keep the rows measured so
far and leave the stored run "interrupted".  Real signals to real processes,
on each launch path (tests/signal_helpers.py describes them)."""

from __future__ import annotations

import signal

import pytest
from signal_helpers import finish, kill_leftovers, ncclbench_lines, send, start, stored_run, wait_for_rows, wait_gone

from ncclbench.launch.spawn import STOP_BOUND_S

pytestmark = pytest.mark.mpi


def _started(tmp_path, path, rows):
    """A job that printed `rows` rows.  A tcp-env job (four processes meeting at a port
    picked beforehand) is started once more if it ended before its first rows: what is
    tested here is how it ends on a signal, and the start's own failures are the
    rendezvous tests' subject.  Both starts' stderr is kept for the assertion."""
    first = ""
    for attempt in (1, 2):
        job = start(path, tmp_path / f"r{attempt}.sqlite")
        try:
            wait_for_rows(job, rows)  # on failure it has ended every process it started
            return job
        except AssertionError as e:
            if path != "tcp-env" or "ended early" not in str(e) or attempt == 2:
                raise AssertionError(f"{e}\n{first}") from None
            first = f"(the first start also ended early: {e})"
    raise AssertionError("unreachable")


def _run(tmp_path, path, target, sig, rows=4):
    job = _started(tmp_path, path, rows)
    try:
        since = send(job, target, sig)
        took = wait_gone(job, since)
        codes = finish(job)
    finally:
        left = kill_leftovers(job)
    assert took is not None and not left, f"{path}: processes {left} still alive 30 s after {target} got {sig!r}"
    assert took <= STOP_BOUND_S, f"{path}: the job took {took:.2f} s to end (bound {STOP_BOUND_S} s)"
    status, reason, nrows = stored_run(job.db)
    assert status == "interrupted", (status, reason, job.err)
    assert nrows >= rows if path != "mpiexec" or target == "launcher" else nrows >= 1
    return job, codes, reason


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
@pytest.mark.parametrize("path", ["nprocs-mpi", "nprocs-tcp"])
def test_signal_to_ncclbench_launcher_ends_every_process(tmp_path, path, sig):
    job, codes, reason = _run(tmp_path, path, "launcher", sig)
    name = signal.Signals(sig).name
    assert codes[0] == 128 + sig, job.err
    lines = ncclbench_lines(job.err)
    assert lines == [lines[-1]] and lines[-1].startswith(f"ncclbench: {name} received: ended all 4 ranks in "), \
        job.err
    assert "stored as interrupted" in lines[-1]
    assert reason.startswith(f"{name} received by ncclbench's launcher")


@pytest.mark.parametrize("path", ["nprocs-mpi", "nprocs-tcp"])
@pytest.mark.parametrize("rank", [0, 2])
def test_sigterm_to_one_rank_under_ncclbench_launcher(tmp_path, path, rank):
    job, codes, reason = _run(tmp_path, path, f"rank {rank}", signal.SIGTERM)
    pid = job.ranks[rank]
    assert codes[0] == 143, job.err
    lines = ncclbench_lines(job.err)
    assert len(lines) == 1, job.err
    assert lines[0].startswith(f"ncclbench: SIGTERM received by rank {rank} (host "), job.err
    assert f"pid {pid})" in lines[0]
    assert reason.startswith(f"SIGTERM received by rank {rank} ") and f"pid {pid})" in reason


@pytest.mark.parametrize("path", ["nprocs-mpi", "nprocs-tcp"])
def test_sigterm_to_the_process_group(tmp_path, path):
    job, codes, reason = _run(tmp_path, path, "group", signal.SIGTERM)
    assert codes[0] == 143, job.err
    lines = ncclbench_lines(job.err)
    assert len(lines) == 1 and "SIGTERM received" in lines[0], job.err


def test_sigterm_to_a_users_mpiexec(tmp_path):
    """mpiexec passes SIGTERM to every rank; rank 0 records why the run ended."""
    job, codes, reason = _run(tmp_path, "mpiexec", "launcher", signal.SIGTERM)
    assert codes[0] != 0
    assert any("SIGTERM received" in line for line in ncclbench_lines(job.err)), job.err


def test_sigterm_to_one_rank_of_a_users_mpiexec(tmp_path):
    job, codes, reason = _run(tmp_path, "mpiexec", "rank 1", signal.SIGTERM)
    assert codes[0] == 143, job.err  # MPI_Abort(143): mpiexec's status is the signal's
    lines = ncclbench_lines(job.err)
    assert any(line.startswith("ncclbench: rank 1 (host ") and "SIGTERM received" in line for line in lines), \
        job.err


@pytest.mark.parametrize("rank", [0, 3])
def test_sigterm_to_one_rank_of_a_tcp_rendezvous_job(tmp_path, rank):
    """No ncclbench launcher (torchrun-style RANK/WORLD_SIZE): the rendezvous tells everyone."""
    job, codes, reason = _run(tmp_path, "tcp-env", f"rank {rank}", signal.SIGTERM)
    assert codes[rank] == 143, (codes, job.err)
    assert all(c != 0 for c in codes), codes
    lines = ncclbench_lines(job.err)
    assert any(line.startswith(f"ncclbench: rank {rank} (host ") and "SIGTERM received" in line
               for line in lines), job.err
    assert reason.startswith(f"SIGTERM received by rank {rank} ") or f"aborted the job: SIGTERM received by " \
        f"rank {rank} " in reason, reason
