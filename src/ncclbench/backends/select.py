"""Which backend runs: `--backend auto` picks NCCL when a GPU and libnccl are
usable here, else the CPU (MPI) backend, and says so plainly."""

from __future__ import annotations

import importlib.util
import os

from ..config import Backend
from ..errors import BenchError

# Set by a parent that starts ranks: the backend it chose, used for `--backend auto`.
BACKEND_ENV = "NCCLBENCH_BACKEND"


def gpu_count() -> int:
    """Visible CUDA devices, 0 when there is no driver, no GPU or no cuda-bindings."""
    try:
        from ..cuda.runtime import get_runtime

        return get_runtime().device_count
    except (BenchError, ImportError):  # no cuda-bindings, no driver, no GPU
        return 0


def nccl_available(path: str | None = None) -> str | None:
    """Path of a loadable libnccl, or None."""
    try:
        from ..nccl.binding import get_library

        return get_library(path).describe()
    except (BenchError, ImportError, OSError):
        return None


def mpi_available() -> bool:
    return importlib.util.find_spec("mpi4py") is not None


def choose_backend(requested: str, nccl_lib: str | None = None) -> tuple[Backend, str | None]:
    """(backend, note): the backend to use and a line explaining an automatic choice."""
    if requested in ("nccl", "mpi"):
        return Backend(requested), None
    inherited = os.environ.get(BACKEND_ENV)
    if inherited in ("nccl", "mpi"):
        return Backend(inherited), None
    ngpu = gpu_count()
    if ngpu and nccl_available(nccl_lib):
        return Backend.NCCL, None
    why = "no NVIDIA GPU visible" if not ngpu else "no libnccl found"
    return Backend.MPI, f"{why}: running the CPU backend (MPI collectives on host memory)"


def timed_calls_description() -> str:
    """Which binding the timed loop would call libnccl through (nccl/callpath.py)."""
    try:
        from ..nccl.binding import get_library
        from ..nccl.callpath import timed_calls_text

        return timed_calls_text(get_library(None))
    except (BenchError, ImportError, OSError) as exc:
        return f"unknown ({exc})"


def describe_backends() -> list[str]:
    lines = []
    ngpu = gpu_count()
    lib = nccl_available()
    lines.append(f"nccl  GPUs visible: {ngpu}; libnccl: {lib or 'not found'}")
    if lib:
        lines.append(f"      timed NCCL calls: {timed_calls_description()}")
    lines.append(f"mpi   mpi4py: {'installed' if mpi_available() else 'not installed'}")
    return lines
