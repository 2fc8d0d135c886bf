"""The timed loop issued from C: the optional `ncclbench.nccl._timedloop` extension.

Why: a timed small-message op at one rank costs NCCL ~0.3 us of host time;
ncclbench's Python loop (a closure per op, the binding's call, the GIL
released and taken per call) and its Python stream polling added ~0.45 us
per op over nccl-tests on an H100 (bench/results/stability-h100-*).  With the
extension, the whole timed loop -- every op's NCCL calls and hypercube's
copies, with their arguments decided before the clock starts -- runs as one
C loop, followed by nccl-tests' completion wait (poll each stream, check the
communicator's async error, sched_yield), with the clock read around both.

The extension knows no header: each call is a *shape* (its C signature), a
function address taken from the libraries ncclbench already loaded (libnccl,
the driver's libcuda) and up to eight integer arguments.  Without a compiler
at install time the extension is absent and the pure-Python loop runs;
`NCCLBENCH_NATIVE=0` forces that path.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NATIVE_ENV = "NCCLBENCH_NATIVE"

# Shapes, as enumerated in _timedloop.c.
SHAPE_VOID, SHAPE_COLL7, SHAPE_REDUCE8, SHAPE_COLL6, SHAPE_P2P6, SHAPE_COPY4 = range(6)

SHAPE_OF: dict[str, int] = {
    "ncclGroupStart": SHAPE_VOID, "ncclGroupEnd": SHAPE_VOID,
    "ncclAllReduce": SHAPE_COLL7, "ncclReduceScatter": SHAPE_COLL7, "ncclBroadcast": SHAPE_COLL7,
    "ncclGather": SHAPE_COLL7, "ncclScatter": SHAPE_COLL7,
    "ncclReduce": SHAPE_REDUCE8,
    "ncclAllGather": SHAPE_COLL6, "ncclAlltoAll": SHAPE_COLL6,
    "ncclSend": SHAPE_P2P6, "ncclRecv": SHAPE_P2P6,
    "cuMemcpyDtoDAsync": SHAPE_COPY4,
}
ARITY = {SHAPE_VOID: 0, SHAPE_COLL7: 7, SHAPE_REDUCE8: 8, SHAPE_COLL6: 6, SHAPE_P2P6: 6, SHAPE_COPY4: 4}

_CALL = struct.Struct("=iiQ8Q")  # shape, reserved, function address, 8 arguments
_POLL = struct.Struct("=QQQQ")  # cuStreamQuery, stream, ncclCommGetAsyncError (or 0), comm

# Outcome kinds of `timed`, as in _timedloop.c.
OK, CALL_FAILED, QUERY_FAILED, TIMEOUT, ASYNC_ERROR = range(5)


def load_extension() -> tuple[Any, str]:
    """(the extension module, '') or (None, why it is not used)."""
    if os.environ.get(NATIVE_ENV, "1").strip() == "0":
        return None, f"{NATIVE_ENV}=0"
    try:
        module: Any = importlib.import_module("ncclbench.nccl._timedloop")  # optional, compiled: no stub
    except ImportError:
        return None, "the compiled part (ncclbench.nccl._timedloop) is not installed"
    if module.CALL_SIZE != _CALL.size or module.POLL_SIZE != _POLL.size:
        return None, "ncclbench.nccl._timedloop was built for another layout"
    return module, ""


@dataclass(frozen=True)
class Step:
    """One call of a timed op: what the C loop runs, and what an error names."""

    name: str  # NCCL function or "cuMemcpyDtoDAsync"
    shape: int
    fn: int  # function address
    args: tuple[int, ...]
    comm: int | None  # communicator handle, for NCCL's error message


def pack_steps(steps: Sequence[Step]) -> bytes:
    out = bytearray(_CALL.size * len(steps))
    for i, s in enumerate(steps):
        if len(s.args) != ARITY[s.shape]:
            raise ValueError(f"{s.name}: {len(s.args)} arguments for a shape that takes {ARITY[s.shape]}")
        args = [a & 0xFFFFFFFFFFFFFFFF for a in s.args] + [0] * (8 - len(s.args))
        _CALL.pack_into(out, i * _CALL.size, s.shape, 0, s.fn, *args)
    return bytes(out)


def pack_polls(polls: Sequence[tuple[int, int, int, int]]) -> bytes:
    """(cuStreamQuery address, stream, ncclCommGetAsyncError address or 0, comm) per stream."""
    return b"".join(_POLL.pack(*p) for p in polls)


def function_address(library: ctypes.CDLL, name: str) -> int:
    """The address of `name` in an already loaded library (AttributeError if absent)."""
    addr = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
    if not addr:
        raise AttributeError(name)
    return addr


class NativeLoop:
    """Builds `Step`s from recorded NCCL calls and runs packed batches.

    `nccl` is the loaded libnccl (a ctypes.CDLL on the very file ncclbench
    uses); `cuda` the driver library (libcuda) for stream polling and copies,
    None where there is no driver (CPU tests)."""

    def __init__(self, module: Any, nccl: ctypes.CDLL, cuda: ctypes.CDLL | None):
        self.module, self.nccl, self.cuda = module, nccl, cuda
        self._addr: dict[str, int] = {}

    def _fn(self, lib: ctypes.CDLL | None, name: str) -> int:
        addr = self._addr.get(name)
        if addr is None:
            if lib is None:
                raise AttributeError(name)
            addr = self._addr[name] = function_address(lib, name)
        return addr

    def nccl_step(self, name: str, args: tuple[int, ...], comm: int | None) -> Step:
        shape = SHAPE_OF[name]
        return Step(name, shape, self._fn(self.nccl, name), tuple(int(a) for a in args), comm)

    def copy_step(self, dst: int, src: int, nbytes: int, stream: int) -> Step:
        # The _v2 entry point takes 64-bit device pointers (what cuda.h maps the name to).
        fn = self._fn(self.cuda, "cuMemcpyDtoDAsync_v2")
        return Step("cuMemcpyDtoDAsync", SHAPE_COPY4, fn, (dst, src, nbytes, stream), None)

    def poll(self, stream: int, comm: int | None, check_async: bool) -> tuple[int, int, int, int]:
        query = self._fn(self.cuda, "cuStreamQuery")
        async_fn = self._fn(self.nccl, "ncclCommGetAsyncError") if (check_async and comm) else 0
        return (query, stream, async_fn, comm or 0)

    def issue(self, packed: bytes) -> tuple[int, int]:
        """Run the packed steps: (0, -1), or (return code, index of the failing step)."""
        result: tuple[int, int] = self.module.issue(packed)
        return result

    def timed(self, packed: bytes, polls: bytes, timeout_s: float,
              wait: bool = True) -> tuple[int, int, int, float, float, float]:
        """(kind, code, index, t_start, t_enqueued, t_done): see _timedloop.c."""
        result: tuple[int, int, int, float, float, float] = self.module.timed(packed, polls, float(timeout_s), bool(wait))
        return result
