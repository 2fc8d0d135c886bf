"""Signals and dead ranks on the GPU backend (needs >= 2 GPUs): ncclbench starts
one process per GPU itself (the TCP rendezvous path), and SIGTERM to it, to a
rank or to the group ends every process within the bound, prints one line naming
the signal and stores the run as interrupted; a rank killed with SIGKILL is
named by rank, host and pid.  The same machinery as tests/test_signals*.py, with
real NCCL ranks, whose main threads may be inside a CUDA/NCCL wait when the
signal arrives (the watcher thread then ends them).

Run on the GPU machine:  python -m pytest tests/gpu/test_signals_gpu.py -q
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ncclbench.backends.select import gpu_count  # noqa: E402

if gpu_count() < 2:
    pytest.skip("needs 2 or more NVIDIA GPUs", allow_module_level=True)

from launch_helpers import PY, child_env  # noqa: E402
from signal_helpers import Job, finish, kill_leftovers, ncclbench_lines, send, stored_run, wait_for_rows, wait_gone  # noqa: E402

from ncclbench.launch.spawn import STOP_BOUND_S  # noqa: E402

NGPUS = min(gpu_count(), 4)
CMD = ["all_reduce_perf", "-b", "8", "-e", "64M", "-f", "2", "-n", "20", "-N", "0", "-c", "0"]


def _start(db: Path) -> Job:
    env = child_env(NCCLBENCH_DB=str(db), PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0",
                    CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(NGPUS)))
    p = subprocess.Popen([PY, "-m", "ncclbench", *CMD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    return Job("gpu-self-launch", [p], db, time.monotonic())


def _run(tmp_path, target: str, sig: int):
    job = _start(tmp_path / "r.sqlite")
    try:
        wait_for_rows(job, 6, timeout=180)
        if target.startswith("rank") and not job.ranks:
            raise AssertionError(f"no '# Rank N ... Pid P' lines: {job.out[-2000:]}")
        since = send(job, target, sig)
        took = wait_gone(job, since, limit=60)
        codes = finish(job)
    finally:
        left = kill_leftovers(job)
    assert took is not None and not left, (took, left, job.err[-3000:])
    assert took <= STOP_BOUND_S, took
    return job, codes


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_to_the_gpu_launcher(tmp_path, sig):
    job, codes = _run(tmp_path, "launcher", sig)
    name = signal.Signals(sig).name
    assert codes[0] == 128 + sig, job.err[-3000:]
    assert [ln for ln in ncclbench_lines(job.err) if f"{name} received" in ln], job.err[-3000:]
    status, reason, rows = stored_run(job.db)
    assert status == "interrupted" and rows >= 6, (status, reason)


@pytest.mark.parametrize("target", ["rank 1", "group"])
def test_sigterm_to_a_gpu_rank_or_the_group(tmp_path, target):
    job, codes = _run(tmp_path, target, signal.SIGTERM)
    assert codes[0] == 143, job.err[-3000:]
    status, reason, rows = stored_run(job.db)
    assert status == "interrupted" and rows >= 6, (status, reason)
    if target == "rank 1":
        assert f"pid {job.ranks[1]})" in reason, reason


def test_a_killed_gpu_rank_is_named(tmp_path):
    job, codes = _run(tmp_path, f"rank {NGPUS - 1}", signal.SIGKILL)
    pid = job.ranks[NGPUS - 1]
    named = [ln for ln in ncclbench_lines(job.err) if f"rank {NGPUS - 1} (host " in ln and f"pid {pid})" in ln]
    assert named, job.err[-3000:]
    status, reason, rows = stored_run(job.db)
    assert status == "interrupted" and f"pid {pid})" in reason, (status, reason)
    assert os.path.exists(job.db)
