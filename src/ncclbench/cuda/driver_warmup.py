"""Start the CUDA driver's initialisation in a thread while Python imports the rest.

A GPU run's start is mostly serial: ~0.1 s of Python imports (ncclbench, then
cuda-bindings), then `cuInit` (~0.1 s of C on an H100 host), then the primary
context, then NCCL's communicator.  `cuInit` needs nothing from those imports,
so the benchmark command calls `start()` first thing: libcuda is opened with
ctypes (already imported) and `cuInit(0)` runs in a daemon thread with the GIL
released, overlapping the imports; the runtime's own first call
(`cudaGetDeviceCount`) then finds the driver initialised.  The result is not
used: cuda-bindings makes the real calls and reports any failure with its
error text, so a missing driver here is silently nothing to do.

At exit the thread is given a bounded join, so a process that ends at once
(a usage error, `-h`) does not tear libcuda down while `cuInit` still runs.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading

ENV_SWITCH = "NCCLBENCH_DRIVER_WARMUP"  # 0: no early cuInit (a side-by-side figure, or a driver that minds)
JOIN_AT_EXIT_S = 10.0  # cuInit takes ~0.1 s; a driver stuck longer is not waited for

_thread: threading.Thread | None = None


def _init_driver() -> None:
    try:
        ctypes.CDLL("libcuda.so.1").cuInit(0)
    except (OSError, AttributeError):  # no driver: the runtime says so with its own words later
        pass


def start() -> bool:
    """Begin `cuInit` in the background (once per process); False when already started."""
    global _thread
    if _thread is not None:
        return False
    _thread = threading.Thread(target=_init_driver, name="ncclbench-cuinit", daemon=True)
    _thread.start()
    atexit.register(_thread.join, JOIN_AT_EXIT_S)
    return True


def wanted(argv: list[str], environ: dict[str, str] | None = None) -> bool:
    """Would this benchmark command line use a GPU?  Not when the CPU backend is asked for
    (`--backend mpi`, `--backend=mpi`, or NCCLBENCH_BACKEND=mpi from a parent), nor when
    NCCLBENCH_DRIVER_WARMUP=0.  A quick look, not the parser: a form it misses (an abbreviated
    option) only costs an unneeded cuInit."""
    env = os.environ if environ is None else environ
    if env.get("NCCLBENCH_BACKEND") == "mpi" or env.get(ENV_SWITCH, "1").strip() == "0":
        return False
    for i, arg in enumerate(argv):
        if arg == "--backend=mpi" or (arg == "--backend" and i + 1 < len(argv) and argv[i + 1] == "mpi"):
            return False
    return True
