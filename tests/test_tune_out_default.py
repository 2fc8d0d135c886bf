"""tune's files go to a documented folder beside the result store by default, not the working directory.

Why: `ncclbench tune` run from a checkout or $HOME wrote ncclbench-tune-<collective>.json/.env
there; the result store's folder is where ncclbench keeps what it writes unasked.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import child_env

from ncclbench.launch.spawn import find_mpiexec
from ncclbench.tune.options import parse_tune_args


def test_default_prefix_is_beside_the_store(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NCCLBENCH_DB", str(tmp_path / "s" / "r.sqlite"))
    topts = parse_tune_args("all_reduce", ["-b", "8", "-e", "64"])
    assert topts.out_prefix() == str(tmp_path / "s" / "tune" / "ncclbench-tune-all_reduce")
    assert parse_tune_args("all_reduce", ["--out", "x/y"]).out_prefix() == "x/y"


def test_a_cpu_tune_writes_nothing_into_the_working_directory(tmp_path: Path) -> None:
    if find_mpiexec() is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("the [mpi] extra (mpiexec, mpi4py) is not installed")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = child_env(NCCLBENCH_DB=str(tmp_path / "store" / "r.sqlite"))
    p = subprocess.run([sys.executable, "-m", "ncclbench", "tune", "all_reduce", "-b", "8", "-e", "64", "-f", "8",
                        "-n", "5", "-w", "1", "--backend", "mpi", "--nprocs", "2"], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert list(cwd.iterdir()) == []
    assert (tmp_path / "store" / "tune" / "ncclbench-tune-all_reduce.json").is_file(), p.stdout
