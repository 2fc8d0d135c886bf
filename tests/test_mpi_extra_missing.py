"""Without the `[mpi]` extra (no mpi4py, no mpiexec) the MPI paths say so in one line, at once.

Why: a fresh `pip install .` has neither; `health --backend mpi --nprocs 2` used to print a
thread's traceback and wait 60 s for ranks that could never start, and the benchmark printed
one line per rank.  Here mpi4py is hidden (None in sys.modules through a sitecustomize, which
makes find_spec answer "not installed"), and mpiexec too: the interpreter runs from a directory
of its own (the venv's mpiexec sits beside the venv's python) with a PATH that has none.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from launch_helpers import SRC, child_env


def _bare_python(tmp: Path, hide_mpiexec: bool) -> tuple[list[str], dict[str, str]]:
    """An interpreter and environment with mpi4py hidden (and mpiexec, if asked)."""
    block = tmp / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text('import sys\nsys.modules["mpi4py"] = None\n')
    paths = [str(SRC), str(block)]
    exe = sys.executable
    env = child_env(NCCLBENCH_DB=str(tmp / "db.sqlite"), NCCLBENCH_NO_STORE="1")
    if hide_mpiexec:
        bindir = tmp / "bin"
        bindir.mkdir()
        os.symlink(sys.executable, bindir / "python")
        exe = str(bindir / "python")
        paths.append(sysconfig.get_paths()["purelib"])  # the venv's packages, outside its layout
        env["PATH"] = os.pathsep.join(d for d in ("/usr/bin", "/bin") if not (Path(d) / "mpiexec").exists())
        if shutil.which("mpiexec", path=env["PATH"]) or shutil.which("mpirun", path=env["PATH"]):
            pytest.skip("mpiexec is installed system-wide: it cannot be hidden here")
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return [exe, "-m", "ncclbench"], env


def _run(cmd: list[str], env: dict[str, str]) -> tuple[int, str, float]:
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
    return p.returncode, p.stderr, time.monotonic() - t0


def test_health_without_mpiexec_is_exit_5_at_once(tmp_path: Path) -> None:
    cmd, env = _bare_python(tmp_path, hide_mpiexec=True)
    rc, err, took = _run([*cmd, "health", "--backend", "mpi", "--nprocs", "2"], env)
    assert rc == 5, err
    assert err.strip().splitlines() == ["ncclbench: --nprocs with --backend mpi needs mpiexec: pip install "
                                        "'ncclbench[mpi]' (MPICH's mpiexec) or install an MPI"], err
    assert took < 20, f"took {took:.1f} s: waited for ranks that could not start"


def test_health_without_mpi4py_is_exit_5_at_once(tmp_path: Path) -> None:
    cmd, env = _bare_python(tmp_path, hide_mpiexec=False)
    rc, err, took = _run([*cmd, "health", "--backend", "mpi", "--nprocs", "2"], env)
    assert rc == 5, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "pip install 'ncclbench[mpi]'" in err and took < 20


def test_benchmark_without_mpi4py_names_the_extra_once(tmp_path: Path) -> None:
    cmd, env = _bare_python(tmp_path, hide_mpiexec=False)
    rc, err, _ = _run([*cmd, "all_reduce_perf", "--backend", "mpi", "--nprocs", "2", "-b", "8", "-e", "64"], env)
    assert rc == 5, err
    assert err.strip().splitlines() == ["ncclbench: --backend mpi needs mpi4py: pip install 'ncclbench[mpi]'"], err


def test_one_rank_without_mpi4py_names_the_extra(tmp_path: Path) -> None:
    cmd, env = _bare_python(tmp_path, hide_mpiexec=True)
    rc, err, _ = _run([*cmd, "all_reduce_perf", "--backend", "mpi", "-b", "8", "-e", "64"], env)
    assert rc in (5, 6), err
    assert "Traceback" not in err and "pip install 'ncclbench[mpi]'" in err, err
