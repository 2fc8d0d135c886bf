"""One wheel for every CPython >= 3.10: built here, installed into another Python minor version.

Why: the optional C parts (`ncclbench.nccl._timedloop`, the NCCL profiler plugin) made `pip wheel`
give a cp311-cp311 wheel that a 3.12 venv refuses, while the README says the wheel installs
wherever it is copied.  Built on the stable ABI (limited API of 3.10) the wheel is tagged
cp310-abi3; this builds it, installs it into a venv of a different minor version and runs
`ncclbench --version` and the compiled part there.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _clean_env() -> dict[str, str]:
    """The environment without PYTHONPATH: a checkout on it would stand in for the installed wheel."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _other_python() -> str | None:
    """A CPython >= 3.10 of another minor version than this one (pyenv's or on PATH)."""
    here = sys.version_info[:2]
    found = sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3"))
    found += [p for p in (shutil.which(f"python3.{m}") for m in range(10, 20)) if p]
    for exe in found:
        p = subprocess.run([exe, "-c", "import sys, venv; print(*sys.version_info[:2])"], capture_output=True,
                           text=True)
        if p.returncode == 0:
            major, minor = map(int, p.stdout.split())
            if (major, minor) >= (3, 10) and (major, minor) != here:
                return exe
    return None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the wheel would carry no compiled part to check")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=600, env=_clean_env())
    assert p.returncode == 0, p.stderr[-3000:]
    [whl] = out.glob("*.whl")
    return whl


def test_the_wheel_is_tagged_for_every_cpython_from_3_10(wheel: Path) -> None:
    assert wheel.name.endswith("-cp310-abi3-linux_x86_64.whl") or "-cp310-abi3-" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert "ncclbench/nccl/_timedloop.abi3.so" in names, names
    assert "ncclbench/explain/_ncclbench_profiler.abi3.so" in names


def test_the_wheel_runs_under_another_minor_version(wheel: Path, tmp_path: Path) -> None:
    other = _other_python()
    if other is None:
        pytest.skip(f"no CPython >= 3.10 other than {sys.version_info.major}.{sys.version_info.minor} here")
    venv = tmp_path / "venv"
    subprocess.run([other, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                       capture_output=True, text=True, timeout=300, env=_clean_env())
    assert p.returncode == 0, p.stderr[-2000:]
    v = subprocess.run([str(venv / "bin" / "ncclbench"), "--version"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env=_clean_env())
    assert v.returncode == 0 and v.stdout.startswith("ncclbench "), v.stdout + v.stderr
    code = ("import ncclbench.nccl._timedloop as m, ncclbench.nccl.native_loop as n; "
            "assert m.CALL_SIZE > 0; print(n.__name__)")
    c = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env=_clean_env())
    assert c.returncode == 0, c.stderr[-2000:]
