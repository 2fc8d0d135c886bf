"""Which backend runs: `--backend auto` picks NCCL when a GPU and libnccl are
usable here, else the CPU (MPI) backend, and says so plainly."""

from __future__ import annotations

import importlib.util
import os

from ..core.config import BACKEND_CHOICES, Backend
from ..core.errors import ArgumentError, BenchError

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


def requested_backend(value: str) -> Backend | None:
    """`--backend`'s value typed: a Backend, or None for `auto` (resolved by `choose_backend`
    where the collectives run; a coordinator outside the job learns the ranks' own)."""
    if value == "auto":
        return None
    try:
        return Backend(value)
    except ValueError:
        raise ArgumentError(f"invalid backend '{value}' for '--backend'; valid: {', '.join(BACKEND_CHOICES)}") from None


def choose_backend(requested: str, nccl_lib: str | None = None) -> tuple[Backend, str | None]:
    """(backend, note): the backend to use and a line explaining an automatic choice."""
    chosen = requested_backend(requested)
    if chosen is not None:
        return chosen, None
    inherited = os.environ.get(BACKEND_ENV, "")
    if inherited in {b.value for b in Backend}:
        return Backend(inherited), None
    ngpu = gpu_count()
    if ngpu and nccl_available(nccl_lib):
        return Backend.NCCL, None
    why = "no NVIDIA GPU visible" if not ngpu else "no libnccl found"
    return Backend.MPI, f"{why}: running the CPU backend (MPI collectives on host memory)"


# The CPU backend started by itself (`--backend auto` found no GPU, no launcher, no --nprocs):
# one rank moves no data (busbw 0, algbw a local copy), so it starts this many ranks, one per
# core so that they do not share a core, at least 2 and at most CPU_RANKS_MAX.
CPU_RANKS_MAX = 4


def default_cpu_ranks(cores: int | None) -> int:
    """Ranks the CPU backend starts when nothing says how many (see CPU_RANKS_MAX)."""
    return max(2, min(CPU_RANKS_MAX, cores or 1))


def default_cpu_ranks_note(n: int, cores: int | None) -> str:
    """The banner's line on why `n` ranks were started."""
    return (f"started {n} CPU ranks on this host, since one rank moves no data: one per core "
            f"({cores or 'unknown'} here), at least 2, at most {CPU_RANKS_MAX} (--nprocs N to choose)")


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
