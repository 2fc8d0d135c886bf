"""`health` with `--backend auto` and no GPU starts the CPU ranks the benchmark starts.

Why: it used to run one rank ("one GPU only": nothing measured between ranks) where
`ncclbench all_reduce_perf` on the same machine starts 2 to 4 (one per core), so the two
commands disagreed on the first thing a user tries on a laptop.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import child_env

from ncclbench.backends.select import default_cpu_ranks, gpu_count
from ncclbench.launch.spawn import find_mpiexec


def test_health_auto_without_gpu_starts_the_benchmarks_cpu_ranks(tmp_path: Path) -> None:
    if gpu_count():
        pytest.skip("a GPU is visible: --backend auto takes NCCL here")
    if find_mpiexec() is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("the [mpi] extra (mpiexec, mpi4py) is not installed")
    out = tmp_path / "h.json"
    env = child_env(NCCLBENCH_DB=str(tmp_path / "db.sqlite"))
    p = subprocess.run([sys.executable, "-m", "ncclbench", "health", "--no-store", "--json", str(out)], env=env,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode in (0, 9), p.stderr[-2000:]
    want = default_cpu_ranks(os.cpu_count())
    assert len(json.loads(out.read_text())["ranks"]) == want
    assert f"started {want} CPU ranks on this host" in p.stderr
