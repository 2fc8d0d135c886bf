"""Ctrl-C on a CPU job started with --nprocs ends with ncclbench's one line, not MPICH's after it.

Why: mpiexec printed "Sending Ctrl-C to processes as requested" and "Press Ctrl-C again to force
abort", and each rank's MPI_Abort "Abort(130) on node ...", around the launcher's own summary
line; a user read those as the job's last word.  Once the launcher passes a signal on, it drops
them (the ranks' own lines still pass).
"""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time

import pytest
from launch_helpers import child_env

from ncclbench.launch.spawn import find_mpiexec


def test_sigint_ends_with_ncclbenchs_line_alone(tmp_path) -> None:
    if find_mpiexec() is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("the [mpi] extra (mpiexec, mpi4py) is not installed")
    env = child_env(NCCLBENCH_DB=str(tmp_path / "r.sqlite"))
    p = subprocess.Popen([sys.executable, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2",
                          "-n", "200", "--backend", "mpi", "--nprocs", "2"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stdout is not None
        deadline = time.monotonic() + 60
        for line in p.stdout:  # the first result row: the ranks are inside MPI, timing
            if line.strip()[:1].isdigit() or time.monotonic() > deadline:
                break
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does to the foreground group
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == 130, err
    assert lines and lines[-1].startswith("ncclbench: SIGINT received: ended all 2 ranks"), err
    assert not [ln for ln in lines if ln.startswith(("[mpiexec@", "Abort(", "===="))], err
