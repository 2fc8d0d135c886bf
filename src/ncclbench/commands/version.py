"""`ncclbench --version` (or `ncclbench version`): what a bug report needs.

The first line stays `ncclbench <version>` for scripts that read it; then the
libnccl a run would load (version, where from) and the CUDA driver, each
"not found" with the reason when absent.  Cheap: nothing is initialised on a
GPU (no cuInit), libnccl is only opened.
"""

from __future__ import annotations

import argparse

from .. import __version__
from .base import PROGRAM, CommandParser

NAME = "version"
HELP = "ncclbench's version, the libnccl it would load, the CUDA driver"


def add_arguments(parser: CommandParser) -> None:
    parser.add_argument("--nccl-lib", default=None, metavar="PATH", help="the libnccl to report instead")


def version_lines(nccl_lib: str | None = None) -> list[str]:
    from ..core.errors import BenchError
    from ..launch.facts import cuda_driver_version, driver_version
    from ..nccl.binding import get_library

    try:
        nccl = get_library(nccl_lib).describe()
    except BenchError as exc:  # not found, or not a usable libnccl: that is the answer
        nccl = f"not found ({exc.message})"
    except OSError as exc:
        nccl = f"not found ({exc})"
    cuda = cuda_driver_version()
    kernel = driver_version()
    if cuda is None and kernel is None:
        driver = "not found (no NVIDIA driver)"
    else:
        driver = f"CUDA {cuda or '?'}" + (f" (NVIDIA kernel module {kernel})" if kernel else "")
    return [f"{PROGRAM} {__version__}", f"libnccl: {nccl}", f"driver: {driver}"]


def run(args: argparse.Namespace) -> int:
    print("\n".join(version_lines(args.nccl_lib)))
    return 0
