"""The start's cuInit thread (cuda/driver_warmup.py): when it starts, and that it never gets in
the way of a process that has no driver or ends at once."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ncclbench.cuda import driver_warmup


@pytest.mark.parametrize("argv, env, want", [
    (["-b", "8"], {}, True),
    (["--backend", "nccl"], {}, True),
    (["--backend", "mpi", "-b", "8"], {}, False),
    (["-b", "8", "--backend=mpi"], {}, False),
    (["-b", "8"], {"NCCLBENCH_BACKEND": "mpi"}, False),
    (["-b", "8"], {"NCCLBENCH_BACKEND": "nccl"}, True),
    (["-b", "8"], {"NCCLBENCH_DRIVER_WARMUP": "0"}, False),
    (["--backend"], {}, True),  # the parser reports the missing value; nothing to decide here
])
def test_wanted_only_when_a_gpu_may_be_used(argv, env, want):
    assert driver_warmup.wanted(argv, env) is want


def test_started_once_and_the_thread_ends(monkeypatch):
    calls = []
    monkeypatch.setattr(driver_warmup, "_thread", None)
    monkeypatch.setattr(driver_warmup, "_init_driver", lambda: calls.append(1))
    assert driver_warmup.start() is True
    assert driver_warmup.start() is False
    thread = driver_warmup._thread
    assert thread is not None
    thread.join(5)
    assert not thread.is_alive() and calls == [1]


def test_a_usage_error_exits_with_its_code_while_the_warmup_runs():
    """The benchmark command starts the thread before parsing its options; an immediate exit (here
    an invalid --backend value) must still be one clean line (on a GPU host, with cuInit running)."""
    p = subprocess.run([sys.executable, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "--backend", "gpu"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "invalid backend" in p.stderr
