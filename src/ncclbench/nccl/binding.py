"""A small ctypes binding to libnccl: exactly the calls nccl-tests makes.

Why ctypes and not nccl4py: it works with every libnccl from 2.14 to today
(symbols are looked up one by one; what is missing becomes a capability
flag, not an import failure), takes raw pointers/counts/streams as ints, and
needs no compiler.  Set-up, checks and teardown call through here; the timed
loop's calls go through `callpath` (nccl4py when it drives this very
library), where the per-call cost matters: ctypes costs 0.2-0.6 µs more per
NCCL call than nccl4py on the 4xH200 host (bench/results/gpu-h200x4-2026-11-21-callpaths.md).

Every failing call raises `NcclError` (exit status 3) whose message follows
nccl-tests: ``<host>: Test NCCL failure <call> '<ncclGetErrorString> / <ncclGetLastError>'``.
"""

from __future__ import annotations

import ctypes
import socket
from collections.abc import Mapping
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_void_p
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..core.datatypes import DataType
from ..core.errors import BenchError, ExitCode
from . import config_struct
from .loader import LibraryCandidate, open_library, read_banner
from .version_text import version_text

NCCL_UNIQUE_ID_BYTES = 128
NCCL_WIN_COLL_SYMMETRIC = 0x01
SCALAR_HOST_IMMEDIATE = 1  # ncclScalarHostImmediate

RESULT_NAMES = {
    0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
    4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
    8: "ncclTimeout",
}


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * NCCL_UNIQUE_ID_BYTES)]

    @classmethod
    def from_bytes(cls, data: bytes) -> UniqueId:
        if len(data) != NCCL_UNIQUE_ID_BYTES:
            raise ValueError(f"an NCCL unique id has {NCCL_UNIQUE_ID_BYTES} bytes, got {len(data)}")
        uid = cls()
        ctypes.memmove(uid.internal, data, NCCL_UNIQUE_ID_BYTES)
        return uid


_P, _I, _S = c_void_p, c_int, c_size_t
_PP = POINTER(c_void_p)

# name -> (argtypes, first NCCL version that has it; 0 = every supported version)
SIGNATURES: dict[str, tuple[list[type[Any]], int]] = {
    "ncclGetVersion": ([POINTER(c_int)], 0),
    "ncclGetUniqueId": ([POINTER(UniqueId)], 0),
    "ncclCommInitRank": ([_PP, _I, UniqueId, _I], 0),
    "ncclCommInitRankConfig": ([_PP, _I, UniqueId, _I, _P], 21400),
    "ncclCommDestroy": ([_P], 0),
    "ncclCommAbort": ([_P], 0),
    "ncclCommGetAsyncError": ([_P, POINTER(c_int)], 20400),
    "ncclCommCount": ([_P, POINTER(c_int)], 0),
    "ncclCommCuDevice": ([_P, POINTER(c_int)], 0),
    "ncclCommUserRank": ([_P, POINTER(c_int)], 0),
    "ncclAllReduce": ([_P, _P, _S, _I, _I, _P, _P], 0),
    "ncclBroadcast": ([_P, _P, _S, _I, _I, _P, _P], 0),
    "ncclReduce": ([_P, _P, _S, _I, _I, _I, _P, _P], 0),
    "ncclAllGather": ([_P, _P, _S, _I, _P, _P], 0),
    "ncclReduceScatter": ([_P, _P, _S, _I, _I, _P, _P], 0),
    "ncclAlltoAll": ([_P, _P, _S, _I, _P, _P], 22800),
    "ncclGather": ([_P, _P, _S, _I, _I, _P, _P], 22800),
    "ncclScatter": ([_P, _P, _S, _I, _I, _P, _P], 22800),
    "ncclSend": ([_P, _S, _I, _I, _P, _P], 20700),
    "ncclRecv": ([_P, _S, _I, _I, _P, _P], 20700),
    "ncclGroupStart": ([], 0),
    "ncclGroupEnd": ([], 0),
    "ncclRedOpCreatePreMulSum": ([POINTER(c_int), _P, _I, _I, _P], 21100),
    "ncclRedOpDestroy": ([_I, _P], 21100),
    "ncclMemAlloc": ([_PP, _S], 21900),
    "ncclMemFree": ([_P], 21900),
    "ncclCommRegister": ([_P, _P, _S, _PP], 21900),
    "ncclCommDeregister": ([_P, _P], 21900),
    "ncclCommWindowRegister": ([_P, _P, _S, _PP, _I], 22700),
    "ncclCommWindowDeregister": ([_P, _P], 22700),
    "ncclCommSplit": ([_P, _I, _I, _PP, _P], 21800),
}
# Without these nothing can run; the rest are capabilities.
REQUIRED = ("ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy",
            "ncclCommAbort", "ncclCommCount", "ncclCommUserRank", "ncclAllReduce",
            "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter",
            "ncclGroupStart", "ncclGroupEnd")


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


class NcclError(BenchError):
    """A failed NCCL call (exit status 3, like nccl-tests' NCCLCHECK)."""

    def __init__(self, function: str, result: int, error_string: str, last_error: str,
                 rank: int | None = None, comm: int | None = None):
        self.function, self.result = function, result
        self.error_string, self.last_error, self.rank = error_string, last_error, rank
        self.comm = comm  # the ncclComm_t handle of the failed call, when it had one
        where = f" (rank {rank})" if rank is not None else ""
        super().__init__(f"{short_hostname()}: Test NCCL failure {function} "
                         f"'{error_string} / {last_error}'{where}", ExitCode.NCCL_ERROR)

    def at_rank(self, rank: int) -> NcclError:
        if self.rank is not None:
            return self
        return NcclError(self.function, self.result, self.error_string, self.last_error, rank, self.comm)


@dataclass(frozen=True)
class Capabilities:
    """What the loaded library can do (a missing symbol = False)."""

    config_init: bool  # ncclCommInitRankConfig (2.14)
    async_error: bool  # ncclCommGetAsyncError (2.4)
    last_error: bool  # ncclGetLastError (2.13)
    send_recv: bool  # ncclSend/ncclRecv (2.7)
    premulsum: bool  # ncclRedOpCreatePreMulSum (2.11)
    mem_alloc: bool  # ncclMemAlloc/Free (2.19)
    comm_register: bool  # ncclCommRegister (2.19)
    window_register: bool  # ncclCommWindowRegister (2.27)
    alltoall: bool  # ncclAlltoAll (2.28)
    gather: bool  # ncclGather (2.28)
    scatter: bool  # ncclScatter (2.28)


def scalar_bytes(dtype: DataType, value: int) -> bytes:
    """`value` (a small non-negative integer, a power of two for floats) in
    `dtype`'s host representation: the premultiplied-sum scalar that
    nccl-tests passes by address (1 on even ranks, 2 on odd ranks)."""
    if not dtype.is_float:
        return int(value).to_bytes(dtype.itemsize, "little", signed=dtype.signed)
    if value == 0:
        return bytes(dtype.itemsize)
    k = int(value).bit_length() - 1
    if value != 1 << k:
        raise ValueError(f"scalar {value} is not a power of two")
    bias = (1 << (dtype.exponent_bits - 1)) - 1
    bits = (bias + k) << dtype.mantissa_bits
    return bits.to_bytes(dtype.itemsize, "little")


class NcclLibrary:
    """One loaded libnccl: version, capabilities and checked calls.

    Handles (communicators, streams, buffers, windows) are plain ints."""

    def __init__(self, handle: ctypes.CDLL, candidate: LibraryCandidate, path: str):
        self.handle = handle
        self.source = candidate.source
        self.requested = candidate.path
        self.path = path
        self._fn: dict[str, Any] = {}
        for name, (argtypes, _since) in SIGNATURES.items():
            fn = getattr(handle, name, None)
            if fn is None:
                continue
            fn.argtypes = argtypes
            fn.restype = c_int
            self._fn[name] = fn
        last = getattr(handle, "ncclGetLastError", None)
        if last is not None:
            last.argtypes, last.restype = [c_void_p], c_char_p
        self._last = last
        err = getattr(handle, "ncclGetErrorString", None)
        if err is not None:
            err.argtypes, err.restype = [c_int], c_char_p
        self._errstr = err
        missing = [n for n in REQUIRED if n not in self._fn]
        if missing:
            from .loader import NcclLibraryNotFound

            raise NcclLibraryNotFound(f"{path} lacks required NCCL symbols: {', '.join(missing)}")
        v = c_int(0)
        self._call("ncclGetVersion", byref(v))
        self.version_code = v.value
        has = self.has
        self.caps = Capabilities(
            config_init=has("ncclCommInitRankConfig") and self.version_code >= 21400,
            async_error=has("ncclCommGetAsyncError"),
            last_error=self._last is not None,
            send_recv=has("ncclSend") and has("ncclRecv"),
            premulsum=has("ncclRedOpCreatePreMulSum") and has("ncclRedOpDestroy"),
            mem_alloc=has("ncclMemAlloc") and has("ncclMemFree"),
            comm_register=has("ncclCommRegister") and has("ncclCommDeregister"),
            window_register=has("ncclCommWindowRegister") and has("ncclCommWindowDeregister"),
            alltoall=has("ncclAlltoAll"),
            gather=has("ncclGather"),
            scatter=has("ncclScatter"),
        )
        # Hot-path shortcuts (skip the dict lookup per call).
        f = self._fn
        self._allreduce, self._bcast, self._reduce = f["ncclAllReduce"], f["ncclBroadcast"], f["ncclReduce"]
        self._allgather, self._reducescatter = f["ncclAllGather"], f["ncclReduceScatter"]
        self._gstart, self._gend = f["ncclGroupStart"], f["ncclGroupEnd"]
        self._send, self._recv = f.get("ncclSend"), f.get("ncclRecv")
        self._alltoall, self._gather, self._scatter = f.get("ncclAlltoAll"), f.get("ncclGather"), f.get("ncclScatter")
        # The binding the timed loop calls through, chosen once per library by
        # `callpath.timed_call_path` (which sits above this module) and kept here.
        self.call_path: Any = None
        self.call_path_note = ""

    # -- loading and identity ----------------------------------------------------------
    @classmethod
    def load(cls, explicit: str | None = None, environ: Mapping[str, str] | None = None) -> NcclLibrary:
        """Find and open libnccl (see `loader` for the search order)."""
        handle, cand, path = open_library(explicit, environ)
        return cls(handle, cand, path)

    def has(self, name: str) -> bool:
        return name in self._fn

    @property
    def version(self) -> str:
        return version_text(self.version_code)

    @cached_property
    def cuda_variant(self) -> str | None:
        """The CUDA version libnccl was built for ("13.0"), from its banner."""
        return read_banner(self.path)[1]

    def describe(self) -> str:
        """``libnccl 2.28.9+cuda13.0 (wheel: /…/libnccl.so.2)`` for banners and logs."""
        cuda = f"+cuda{self.cuda_variant}" if self.cuda_variant else ""
        return f"libnccl {self.version}{cuda} ({self.source}: {self.path})"

    # -- errors ------------------------------------------------------------------------
    def error_string(self, result: int) -> str:
        if self._errstr is None:
            return RESULT_NAMES.get(result, f"NCCL error {result}")
        s = self._errstr(result)
        return s.decode(errors="replace") if s else f"NCCL error {result}"

    def last_error(self, comm: int | None = None) -> str:
        if self._last is None:
            return ""
        s = self._last(comm)
        return s.decode(errors="replace") if s else ""

    def error(self, function: str, result: int, comm: int | None = None) -> NcclError:
        return NcclError(function, result, self.error_string(result), self.last_error(comm), comm=comm)

    def _call(self, name: str, *args: object, comm: int | None = None) -> None:
        fn = self._fn.get(name)
        if fn is None:
            raise BenchError(f"{name} is not available in libnccl {self.version} ({self.path})",
                             ExitCode.NOT_IMPLEMENTED)
        r = fn(*args)
        if r:
            raise self.error(name, r, comm)

    # -- communicators -----------------------------------------------------------------
    def get_unique_id(self) -> bytes:
        uid = UniqueId()
        self._call("ncclGetUniqueId", byref(uid))
        return bytes(uid.internal)

    def make_config(self, **values: int) -> ctypes.Structure:
        """An ncclConfig_t laid out for this library (see `config_struct`)."""
        return config_struct.make_config(self.version_code, **values)

    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int,
                       config: ctypes.Structure | None = None) -> int:
        """ncclCommInitRankConfig (or ncclCommInitRank without a config / before 2.14).

        Inside an open group the communicator is only usable after group_end()."""
        comm = c_void_p()
        uid = UniqueId.from_bytes(unique_id)
        if config is not None and self.caps.config_init:
            self._call("ncclCommInitRankConfig", byref(comm), nranks, uid, rank, ctypes.addressof(config))
        else:
            self._call("ncclCommInitRank", byref(comm), nranks, uid, rank)
        return comm.value or 0

    def comm_destroy(self, comm: int) -> None:
        self._call("ncclCommDestroy", comm, comm=comm)

    def comm_abort(self, comm: int) -> None:
        self._call("ncclCommAbort", comm)

    # -- communicators that may still be forming (non-blocking config) ---------------------
    def comm_init_rank_started(self, nranks: int, unique_id: bytes, rank: int, config: ctypes.Structure) -> int:
        """ncclCommInitRankConfig that may return ncclInProgress (a config with blocking=0):
        the handle, to poll with comm_get_async_error and to abort.  Raises on real errors."""
        comm = c_void_p()
        r = self._fn["ncclCommInitRankConfig"](byref(comm), nranks, UniqueId.from_bytes(unique_id), rank,
                                               ctypes.addressof(config))
        if r not in (0, 7):  # 7 = ncclInProgress
            raise self.error("ncclCommInitRankConfig", r, comm.value)
        return comm.value or 0

    def comm_split_started(self, comm: int, color: int, key: int,
                           config: ctypes.Structure | None = None) -> ctypes.c_void_p:
        """ncclCommSplit (2.18+) that may return ncclInProgress (a non-blocking parent): NCCL
        writes the child when the split completes, so this returns the holder - keep it and
        read `.value` once comm_get_async_error(parent) says ncclSuccess.  Raises on real errors."""
        fn = self._fn.get("ncclCommSplit")
        if fn is None:
            raise BenchError(f"ncclCommSplit needs NCCL >= 2.18 (library is {self.version})", ExitCode.NOT_IMPLEMENTED)
        child = c_void_p()
        r = fn(comm, color, key, byref(child), None if config is None else ctypes.addressof(config))
        if r not in (0, 7):
            raise self.error("ncclCommSplit", r, comm)
        return child

    def comm_get_async_error(self, comm: int) -> int:
        """The communicator's asynchronous error (0 = none; 7 = in progress)."""
        if not self.caps.async_error:
            return 0
        v = c_int(0)
        self._call("ncclCommGetAsyncError", comm, byref(v), comm=comm)
        return v.value

    def _comm_int(self, name: str, comm: int) -> int:
        v = c_int(0)
        self._call(name, comm, byref(v), comm=comm)
        return v.value

    def comm_count(self, comm: int) -> int:
        return self._comm_int("ncclCommCount", comm)

    def comm_cu_device(self, comm: int) -> int:
        return self._comm_int("ncclCommCuDevice", comm)

    def comm_user_rank(self, comm: int) -> int:
        return self._comm_int("ncclCommUserRank", comm)

    # -- groups and collectives (hot path: minimal Python per call) ----------------------
    def group_start(self) -> None:
        r = self._gstart()
        if r:
            raise self.error("ncclGroupStart", r)

    def group_end(self) -> None:
        r = self._gend()
        if r:
            raise self.error("ncclGroupEnd", r)

    def all_reduce(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> None:
        r = self._allreduce(send, recv, count, dtype, op, comm, stream)
        if r:
            raise self.error("ncclAllReduce", r, comm)

    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, comm: int, stream: int) -> None:
        r = self._bcast(send, recv, count, dtype, root, comm, stream)
        if r:
            raise self.error("ncclBroadcast", r, comm)

    def reduce(self, send: int, recv: int, count: int, dtype: int, op: int, root: int, comm: int,
               stream: int) -> None:
        r = self._reduce(send, recv, count, dtype, op, root, comm, stream)
        if r:
            raise self.error("ncclReduce", r, comm)

    def all_gather(self, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> None:
        r = self._allgather(send, recv, count, dtype, comm, stream)
        if r:
            raise self.error("ncclAllGather", r, comm)

    def reduce_scatter(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int,
                       stream: int) -> None:
        r = self._reducescatter(send, recv, count, dtype, op, comm, stream)
        if r:
            raise self.error("ncclReduceScatter", r, comm)

    def alltoall(self, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> None:
        if self._alltoall is None:
            raise BenchError(f"ncclAlltoAll needs NCCL >= 2.28 (library is {self.version})", ExitCode.NOT_IMPLEMENTED)
        r = self._alltoall(send, recv, count, dtype, comm, stream)
        if r:
            raise self.error("ncclAlltoAll", r, comm)

    def gather(self, send: int, recv: int, count: int, dtype: int, root: int, comm: int, stream: int) -> None:
        if self._gather is None:
            raise BenchError(f"ncclGather needs NCCL >= 2.28 (library is {self.version})", ExitCode.NOT_IMPLEMENTED)
        r = self._gather(send, recv, count, dtype, root, comm, stream)
        if r:
            raise self.error("ncclGather", r, comm)

    def scatter(self, send: int, recv: int, count: int, dtype: int, root: int, comm: int, stream: int) -> None:
        if self._scatter is None:
            raise BenchError(f"ncclScatter needs NCCL >= 2.28 (library is {self.version})", ExitCode.NOT_IMPLEMENTED)
        r = self._scatter(send, recv, count, dtype, root, comm, stream)
        if r:
            raise self.error("ncclScatter", r, comm)

    def send(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> None:
        if self._send is None:
            raise BenchError(f"ncclSend needs NCCL >= 2.7 (library is {self.version})", ExitCode.NOT_IMPLEMENTED)
        r = self._send(buf, count, dtype, peer, comm, stream)
        if r:
            raise self.error("ncclSend", r, comm)

    def recv(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> None:
        if self._recv is None:
            raise BenchError(f"ncclRecv needs NCCL >= 2.7 (library is {self.version})", ExitCode.NOT_IMPLEMENTED)
        r = self._recv(buf, count, dtype, peer, comm, stream)
        if r:
            raise self.error("ncclRecv", r, comm)

    # -- reduction ops -----------------------------------------------------------------
    def redop_create_premulsum(self, scalar: bytes, dtype: int, comm: int) -> int:
        """ncclRedOpCreatePreMulSum with a host-immediate scalar (its bytes in `dtype`)."""
        op = c_int(0)
        buf = ctypes.create_string_buffer(scalar, 16)
        self._call("ncclRedOpCreatePreMulSum", byref(op), buf, dtype, SCALAR_HOST_IMMEDIATE, comm, comm=comm)
        return op.value

    def redop_destroy(self, op: int, comm: int) -> None:
        self._call("ncclRedOpDestroy", op, comm, comm=comm)

    # -- memory and registration -------------------------------------------------------
    def mem_alloc(self, nbytes: int) -> int:
        """ncclMemAlloc on the current CUDA device (2.19+)."""
        ptr = c_void_p()
        self._call("ncclMemAlloc", byref(ptr), nbytes)
        return ptr.value or 0

    def mem_free(self, ptr: int) -> None:
        self._call("ncclMemFree", ptr)

    def comm_register(self, comm: int, ptr: int, nbytes: int) -> int:
        handle = c_void_p()
        self._call("ncclCommRegister", comm, ptr, nbytes, byref(handle), comm=comm)
        return handle.value or 0

    def comm_deregister(self, comm: int, handle: int) -> None:
        self._call("ncclCommDeregister", comm, handle, comm=comm)

    def window_register(self, comm: int, ptr: int, nbytes: int,
                        flags: int = NCCL_WIN_COLL_SYMMETRIC) -> ctypes.c_void_p:
        """ncclCommWindowRegister (collective).  NCCL writes the window when the
        enclosing group ends, so this returns the holder: keep it alive and read
        `.value` after group_end() (None/0 = NCCL chose not to register, e.g.
        no symmetric-memory support)."""
        win = c_void_p()
        self._call("ncclCommWindowRegister", comm, ptr, nbytes, byref(win), flags, comm=comm)
        return win

    def window_deregister(self, comm: int, win: int) -> None:
        self._call("ncclCommWindowDeregister", comm, win, comm=comm)


_LOADED: dict[tuple[str | None, str | None], NcclLibrary] = {}


def get_library(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> NcclLibrary:
    """The process-wide NcclLibrary for this request (loaded once)."""
    import os

    env = os.environ if environ is None else environ
    key = (explicit, env.get("NCCLBENCH_NCCL_LIB"))
    lib = _LOADED.get(key)
    if lib is None:
        lib = _LOADED[key] = NcclLibrary.load(explicit, environ)
    return lib
