"""Finding and opening libnccl.so.2.

A validation tool must be able to test whichever libnccl a site runs, so the
search order puts the user's explicit choice first and the system loader
last:

1. an explicit path (``--nccl-lib``, `BenchOptions.nccl_lib`);
2. the ``NCCLBENCH_NCCL_LIB`` environment variable;
3. the ``nvidia-nccl-cu12`` / ``-cu13`` wheel (``nvidia/nccl/lib/libnccl.so.2``);
4. ``$NCCL_HOME/lib/libnccl.so.2``;
5. the dynamic loader (``libnccl.so.2`` through LD_LIBRARY_PATH / ldconfig).

An explicit path or variable that does not load is an error (we never fall
back silently from what the user asked for).  The chosen file, where it came
from and its ``+cudaXX.Y`` banner are reported so results can be traced to
the exact library.
"""

from __future__ import annotations

import ctypes
import importlib.util
import mmap
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..core.errors import BenchError, ExitCode

LIBNAME = "libnccl.so.2"
ENV_VAR = "NCCLBENCH_NCCL_LIB"


class NcclLibraryNotFound(BenchError):
    """No usable libnccl (the CLI may fall back to the MPI backend on this)."""

    def __init__(self, message: str):
        super().__init__(message, ExitCode.NCCL_ERROR)


@dataclass(frozen=True)
class LibraryCandidate:
    path: str  # file path, or a bare soname for the dynamic loader
    source: str  # "explicit", "env", "wheel", "NCCL_HOME", "system"


def wheel_library_path() -> str | None:
    """libnccl.so.2 inside the nvidia-nccl-cu12/cu13 wheel, if installed.

    `nvidia.nccl` is a namespace package in recent wheels and a regular one in
    older ones; `submodule_search_locations` covers both."""
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = os.path.join(base, "lib", LIBNAME)
        if os.path.isfile(path):
            return path
    return None


def candidates(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> list[LibraryCandidate]:
    """The search order above, as a list (pure apart from the wheel lookup)."""
    env = os.environ if environ is None else environ
    out: list[LibraryCandidate] = []
    if explicit:
        out.append(LibraryCandidate(_expand(explicit), "explicit"))
        return out
    if env.get(ENV_VAR):
        out.append(LibraryCandidate(_expand(env[ENV_VAR]), "env"))
        return out
    wheel = wheel_library_path()
    if wheel:
        out.append(LibraryCandidate(wheel, "wheel"))
    home = env.get("NCCL_HOME")
    if home:
        out.append(LibraryCandidate(os.path.join(home, "lib", LIBNAME), "NCCL_HOME"))
    out.append(LibraryCandidate(LIBNAME, "system"))
    return out


def _expand(path: str) -> str:
    """A directory means "the libnccl.so.2 inside it" (or inside its lib/)."""
    path = os.path.expanduser(path)
    if os.path.isdir(path):
        for sub in (LIBNAME, os.path.join("lib", LIBNAME), "libnccl.so"):
            if os.path.isfile(os.path.join(path, sub)):
                return os.path.join(path, sub)
    return path


def open_library(explicit: str | None = None,
                 environ: Mapping[str, str] | None = None) -> tuple[ctypes.CDLL, LibraryCandidate, str]:
    """dlopen the first candidate that loads: (handle, candidate, resolved path).

    RTLD_GLOBAL so that NCCL plugins loaded later see the same symbols."""
    tried: list[str] = []
    for cand in candidates(explicit, environ):
        if cand.source in ("explicit", "env") and not os.path.exists(cand.path):
            what = "--nccl-lib" if cand.source == "explicit" else ENV_VAR
            raise NcclLibraryNotFound(f"NCCL library not found: {what}={cand.path} does not exist")
        if cand.source == "NCCL_HOME" and not os.path.exists(cand.path):
            tried.append(f"{cand.path} (missing)")
            continue
        try:
            handle = ctypes.CDLL(cand.path, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            if cand.source in ("explicit", "env"):
                raise NcclLibraryNotFound(f"cannot load NCCL library {cand.path}: {exc}") from None
            tried.append(f"{cand.path} ({exc})")
            continue
        if not hasattr(handle, "ncclGetVersion"):
            if cand.source in ("explicit", "env"):
                raise NcclLibraryNotFound(f"{cand.path} is not an NCCL library (no ncclGetVersion)")
            tried.append(f"{cand.path} (no ncclGetVersion)")
            continue
        return handle, cand, resolved_path(handle, cand.path)
    raise NcclLibraryNotFound(
        "NCCL library not found (install ncclbench[cu12] or ncclbench[cu13], set NCCL_HOME, "
        f"or pass --nccl-lib PATH); tried: {'; '.join(tried)}")


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def resolved_path(handle: ctypes.CDLL, fallback: str) -> str:
    """The file the dynamic loader actually opened (dladdr on ncclGetVersion):
    a bare soname becomes the real path for the report."""
    try:
        libc = ctypes.CDLL(None)
        dladdr = libc.dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        info = _DlInfo()
        addr = ctypes.cast(handle.ncclGetVersion, ctypes.c_void_p).value
        if dladdr(addr, ctypes.byref(info)) and info.dli_fname:
            fname: bytes = info.dli_fname  # filled in by dladdr
            return os.path.realpath(fname.decode(errors="replace"))
    except (OSError, AttributeError):
        pass
    return os.path.realpath(fallback) if os.path.exists(fallback) else fallback


_BANNER = re.compile(rb"NCCL version (\d+\.\d+\.\d+)\+cuda(\d+\.\d+)")
_BANNER_PREFIX = b"NCCL version "


def read_banner(path: str) -> tuple[str | None, str | None]:
    """("2.28.9", "13.0") from the ``NCCL version 2.28.9+cuda13.0`` string
    compiled into the library; (None, None) when it cannot be read.

    Uses `find` (memmem) to jump between candidates: the library is hundreds
    of MiB and a regex scan of all of it would take seconds."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            idx = m.find(_BANNER_PREFIX)
            while idx != -1:
                match = _BANNER.match(m[idx:idx + 64])
                if match:
                    return match.group(1).decode(), match.group(2).decode()
                idx = m.find(_BANNER_PREFIX, idx + 1)
    except (OSError, ValueError):
        pass
    return None, None
