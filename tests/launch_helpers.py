"""Shared by the launch tests: environment and process helpers (not a test module)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
TESTS = ROOT / "tests"
PY = sys.executable


def child_env(**extra: str) -> dict[str, str]:
    """os.environ without any launcher variables, with src/ and tests/ importable."""
    drop = ("OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_", "NCCLBENCH_", "MPI_LOCAL", "HYDI_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NCCL_COMM_ID")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(TESTS)])
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([PY, *args], env=env or child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def finish(p: subprocess.Popen, timeout: float) -> tuple[int, str, str]:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"process {p.args} did not end within {timeout} s; stderr: {err[-2000:]}") from None
    return p.returncode, out, err
