"""NCCL's choice per collective from ncclbench's profiler plugin (optional compiled part; NCCL >= 2.27).

The plugin (`csrc/ncclbench_profiler.c`, built by `pip install` into this
package as `_ncclbench_profiler*.so` where a compiler or a prebuilt wheel
is there) records, for each collective NCCL starts while ncclbench lets it,
the algorithm, protocol and channel count NCCL chose.  NCCL loads it
through NCCL_PROFILER_PLUGIN=<path>; ncclbench loads the same file with
ctypes (dlopen returns the already-loaded object) to switch recording on
around untimed probe ops only and to drain what was recorded.

Never loaded over the user's own profiler plugin (NCCL_PROFILER_PLUGIN
already set), and never needed: without it the log route
(`log_capture`, `nccl_log`) gives the same facts.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .nccl_log import CallChoice

PROFILE_COLL = 1 << 1  # ncclProfileColl
ABI = 1
_HERE = os.path.dirname(os.path.abspath(__file__))
# ncclDatatypeToString (src/collectives.cc, v2.24.3-1 .. v2.30.7-1) -> element size
DATATYPE_SIZES = {"ncclInt8": 1, "ncclUint8": 1, "ncclInt32": 4, "ncclUint32": 4, "ncclInt64": 8, "ncclUint64": 8,
                  "ncclFloat16": 2, "ncclFloat32": 4, "ncclFloat64": 8, "ncclBfloat16": 2,
                  "ncclFloat8e4m3": 1, "ncclFloat8e5m2": 1}


class CollRecord(ctypes.Structure):
    """nb_coll_record in the C file, field for field."""

    _fields_ = [("comm_id", ctypes.c_uint64), ("seq_number", ctypes.c_uint64), ("count", ctypes.c_uint64),
                ("rank", ctypes.c_int32), ("nranks", ctypes.c_int32), ("root", ctypes.c_int32),
                ("n_channels", ctypes.c_uint8), ("n_warps", ctypes.c_uint8), ("api_version", ctypes.c_uint8),
                ("reserved", ctypes.c_uint8), ("func", ctypes.c_char * 24), ("algo", ctypes.c_char * 24),
                ("proto", ctypes.c_char * 16), ("datatype", ctypes.c_char * 24)]


@dataclass(frozen=True)
class CollEvent:
    """One collective as NCCL described it to the plugin."""

    comm_id: int
    seq_number: int
    rank: int
    nranks: int
    func: str
    count: int
    datatype: str
    root: int
    algo: str
    proto: str
    nchannels: int
    nwarps: int
    api_version: int


def built_plugin() -> str | None:
    """The plugin built into this package, or None (no compiler at install and no prebuilt wheel)."""
    found = sorted(glob.glob(os.path.join(glob.escape(_HERE), "_ncclbench_profiler*.so")))
    return found[0] if found else None


@dataclass(frozen=True)
class ProfilerPlan:
    use: bool
    env: dict[str, str]
    reason: str  # why not, or what is used


def plan_profiler(environ: Mapping[str, str], nccl_version: tuple[int, int] | None,
                  path: str | None = None) -> ProfilerPlan:
    """Whether to load the plugin into NCCL, and the NCCL_PROFILER_PLUGIN to set before NCCL loads it."""
    if environ.get("NCCL_PROFILER_PLUGIN"):
        return ProfilerPlan(False, {}, f"NCCL_PROFILER_PLUGIN={environ['NCCL_PROFILER_PLUGIN']} set by you: "
                                       "ncclbench does not replace your profiler plugin (the log route is used)")
    if nccl_version is not None and nccl_version < (2, 27):
        return ProfilerPlan(False, {}, f"NCCL {nccl_version[0]}.{nccl_version[1]} predates profiler API v4 "
                                       "(NCCL 2.27), the oldest this plugin speaks")
    path = path or built_plugin()
    if path is None:
        return ProfilerPlan(False, {}, "the profiler plugin is not built in this install (no compiler and no "
                                       "prebuilt wheel): the log route is used")
    return ProfilerPlan(True, {"NCCL_PROFILER_PLUGIN": path}, f"profiler plugin {path}")


class ProfilerControl:
    """ncclbench's handle on the plugin NCCL loaded (load it with the same path NCCL was given)."""

    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.CDLL(path)
        if self.lib.ncclbench_profiler_abi() != ABI:
            raise OSError(f"{path}: profiler plugin ABI {self.lib.ncclbench_profiler_abi()}, expected {ABI}")
        if self.lib.ncclbench_profiler_record_size() != ctypes.sizeof(CollRecord):
            raise OSError(f"{path}: record layout differs from this ncclbench's")
        self.lib.ncclbench_profiler_set_mask.argtypes = [ctypes.c_int]
        self.lib.ncclbench_profiler_drain.argtypes = [ctypes.POINTER(CollRecord), ctypes.c_int]
        self.lib.ncclbench_profiler_dropped.restype = ctypes.c_uint64

    def set_mask(self, mask: int) -> None:
        self.lib.ncclbench_profiler_set_mask(mask)

    @contextlib.contextmanager
    def collecting(self) -> Iterator[None]:
        """Record collectives NCCL starts inside the block (untimed ops only), then stop."""
        self.set_mask(PROFILE_COLL)
        try:
            yield
        finally:
            self.set_mask(0)

    def drain(self) -> list[CollEvent]:
        out: list[CollEvent] = []
        buf = (CollRecord * 512)()
        while (n := self.lib.ncclbench_profiler_drain(buf, len(buf))) > 0:
            out += [_event(buf[i]) for i in range(n)]
        return out

    @property
    def dropped(self) -> int:
        return int(self.lib.ncclbench_profiler_dropped())

    @property
    def api_version(self) -> int:
        """The profiler API NCCL chose (4: NCCL 2.27, 5: 2.28, 6: 2.29+); 0 before any communicator."""
        return self.lib.ncclbench_profiler_api_version()

    @property
    def live_comms(self) -> int:
        return self.lib.ncclbench_profiler_live_comms()


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _event(r: CollRecord) -> CollEvent:
    return CollEvent(comm_id=r.comm_id, seq_number=r.seq_number, rank=r.rank, nranks=r.nranks, func=_text(r.func),
                     count=r.count, datatype=_text(r.datatype), root=r.root, algo=_text(r.algo),
                     proto=_text(r.proto), nchannels=r.n_channels, nwarps=r.n_warps, api_version=r.api_version)


def events_to_choices(events: list[CollEvent]) -> tuple[list[CallChoice], list[str]]:
    """CallChoices in the log route's terms (bytes = count x type size, as 2.24+ logs them), and
    what could not be turned into one."""
    from . import nccl_log_formats as F
    from .nccl_log import CallChoice

    choices, unknown = [], []
    for e in events:
        size = DATATYPE_SIZES.get(e.datatype)
        algo, proto = F.canonical_algo(e.algo), F.canonical_proto(e.proto)
        if size is None or algo is None or proto is None:
            unknown.append(f"profiler event not understood: {e.func} {e.datatype} {e.algo}/{e.proto}")
            continue
        choices.append(CallChoice(func=e.func, nbytes=e.count * size, algo=algo, proto=proto, nchannels=e.nchannels,
                                  fmt="profiler", bytes_kind="count"))
    return choices, unknown
