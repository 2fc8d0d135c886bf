"""`NcclCommunicator`: the `Communicator` protocol for one rank on one GPU.

Calls are enqueued on the rank's stream, exactly as nccl-tests issues them:
premultiplied sum (`mulsum`) creates its op right before the call and
destroys it right after (with the host scalar 1 on even ranks, 2 on odd
ranks); alltoall/gather/scatter use the native NCCL call when the library
has it (2.28+) and grouped send/recv otherwise.  Any NCCL failure first
calls `on_error` (the worker aborts its communicators so no process hangs)
and then raises `NcclError` naming the rank.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..core.datatypes import DataType, RedOp, premulsum_scalar
from ..core.errors import UnsupportedError
from .binding import NcclError, NcclLibrary, scalar_bytes
from .callpath import RawCall, timed_call_path


class NcclCommunicator:
    """One rank of an NCCL communicator, bound to its CUDA stream."""

    def __init__(self, lib: NcclLibrary, handle: int, rank: int, nranks: int, stream: int,
                 device: int, copy: Callable[[int, int, int, int], None] | None = None,
                 on_error: Callable[[], None] | None = None,
                 bind_copy: Callable[[int, int, int, int], Callable[[], None]] | None = None):
        self.lib = lib
        self.handle = handle  # ncclComm_t
        self.rank = rank
        self.nranks = nranks
        self.stream = stream
        self.device = device
        self._copy = copy  # (dst, src, nbytes, stream): cudaMemcpyAsync device to device
        self._on_error = on_error
        # (dst, src, nbytes, stream) -> a copy with its arguments bound, for compiled
        # timed ops; without it they bind `copy` with functools.partial.
        self._bind_copy = bind_copy

    def _failed(self, exc: NcclError) -> NcclError:
        if self._on_error is not None:
            try:
                self._on_error()
            except Exception:  # the original NCCL error is what matters
                pass
        return exc.at_rank(self.rank)

    def _op(self, op: RedOp, dtype: DataType) -> tuple[int, bool]:
        """(ncclRedOp_t, created): built-in ops map directly; mulsum is created per call."""
        if op.nccl_id >= 0:
            return op.nccl_id, False
        if op.name == "mulsum":
            if not self.lib.caps.premulsum:
                raise UnsupportedError(f"op mulsum needs NCCL >= 2.11 (library is {self.lib.version})")
            scalar = scalar_bytes(dtype, premulsum_scalar(self.rank))
            return self.lib.redop_create_premulsum(scalar, dtype.nccl_id, self.handle), True
        raise UnsupportedError(f"reduction op {op.name!r} cannot be used with NCCL")

    # -- reductions ----------------------------------------------------------------------
    def all_reduce(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp) -> None:
        if op.nccl_id >= 0:  # the common case, kept short: this is the timed loop
            try:
                self.lib.all_reduce(send, recv, count, dtype.nccl_id, op.nccl_id, self.handle, self.stream)
            except NcclError as exc:
                raise self._failed(exc) from None
            return
        try:
            nop, created = self._op(op, dtype)
            self.lib.all_reduce(send, recv, count, dtype.nccl_id, nop, self.handle, self.stream)
            if created:
                self.lib.redop_destroy(nop, self.handle)
        except NcclError as exc:
            raise self._failed(exc) from None

    def reduce(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp, root: int) -> None:
        try:
            nop, created = self._op(op, dtype)
            self.lib.reduce(send, recv, count, dtype.nccl_id, nop, root, self.handle, self.stream)
            if created:
                self.lib.redop_destroy(nop, self.handle)
        except NcclError as exc:
            raise self._failed(exc) from None

    def reduce_scatter(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp) -> None:
        try:
            nop, created = self._op(op, dtype)
            self.lib.reduce_scatter(send, recv, count, dtype.nccl_id, nop, self.handle, self.stream)
            if created:
                self.lib.redop_destroy(nop, self.handle)
        except NcclError as exc:
            raise self._failed(exc) from None

    # -- data movement -------------------------------------------------------------------
    def broadcast(self, send: int, recv: int, count: int, dtype: DataType, root: int) -> None:
        try:
            self.lib.broadcast(send, recv, count, dtype.nccl_id, root, self.handle, self.stream)
        except NcclError as exc:
            raise self._failed(exc) from None

    def all_gather(self, send: int, recv: int, count: int, dtype: DataType) -> None:
        try:
            self.lib.all_gather(send, recv, count, dtype.nccl_id, self.handle, self.stream)
        except NcclError as exc:
            raise self._failed(exc) from None

    def alltoall(self, send: int, recv: int, count: int, dtype: DataType) -> None:
        lib, comm, stream, t = self.lib, self.handle, self.stream, dtype.nccl_id
        try:
            if lib.caps.alltoall:
                lib.alltoall(send, recv, count, t, comm, stream)
                return
            block = count * dtype.itemsize
            lib.group_start()
            try:
                for r in range(self.nranks):
                    lib.send(send + r * block, count, t, r, comm, stream)
                    lib.recv(recv + r * block, count, t, r, comm, stream)
            finally:
                lib.group_end()
        except NcclError as exc:
            raise self._failed(exc) from None

    def gather(self, send: int, recv: int, count: int, dtype: DataType, root: int) -> None:
        lib, comm, stream, t = self.lib, self.handle, self.stream, dtype.nccl_id
        try:
            if lib.caps.gather:
                lib.gather(send, recv, count, t, root, comm, stream)
                return
            block = count * dtype.itemsize
            lib.group_start()
            try:
                lib.send(send, count, t, root, comm, stream)
                if self.rank == root:
                    for r in range(self.nranks):
                        lib.recv(recv + r * block, count, t, r, comm, stream)
            finally:
                lib.group_end()
        except NcclError as exc:
            raise self._failed(exc) from None

    def scatter(self, send: int, recv: int, count: int, dtype: DataType, root: int) -> None:
        lib, comm, stream, t = self.lib, self.handle, self.stream, dtype.nccl_id
        try:
            if lib.caps.scatter:
                lib.scatter(send, recv, count, t, root, comm, stream)
                return
            block = count * dtype.itemsize
            lib.group_start()
            try:
                if self.rank == root:
                    for r in range(self.nranks):
                        lib.send(send + r * block, count, t, r, comm, stream)
                lib.recv(recv, count, t, root, comm, stream)
            finally:
                lib.group_end()
        except NcclError as exc:
            raise self._failed(exc) from None

    def send(self, buf: int, count: int, dtype: DataType, peer: int) -> None:
        try:
            self.lib.send(buf, count, dtype.nccl_id, peer, self.handle, self.stream)
        except NcclError as exc:
            raise self._failed(exc) from None

    def recv(self, buf: int, count: int, dtype: DataType, peer: int) -> None:
        try:
            self.lib.recv(buf, count, dtype.nccl_id, peer, self.handle, self.stream)
        except NcclError as exc:
            raise self._failed(exc) from None

    def group_start(self) -> None:
        try:
            self.lib.group_start()
        except NcclError as exc:
            raise self._failed(exc) from None

    def group_end(self) -> None:
        try:
            self.lib.group_end()
        except NcclError as exc:
            raise self._failed(exc) from None

    # -- pre-bound calls for the timed loop ---------------------------------------------------
    def compile(self, calls: list[tuple[str, tuple[Any, ...]]]) -> Callable[[], None] | None:
        """Turn recorded primitive calls (run.timing.CallRecorder) into one
        closure over the library's timed-loop call path (`callpath`): every
        argument already converted, so a timed op costs the NCCL call(s) and
        nothing else.  Local copies (hypercube's own block) become pre-bound
        device-to-device copies (`bind_copy`) between the NCCL runs.  Returns
        None (use the ordinary methods) for anything that needs work per call:
        premultiplied-sum ops, send/recv fallbacks."""
        return _compile([(self, name, args) for name, args in calls])

    @staticmethod
    def compile_group(items: list[tuple[NcclCommunicator, str, tuple[Any, ...]]]) -> Callable[[], None] | None:
        """Several local ranks' recorded calls (-g/-t), already in issue order with
        their enclosing group brackets (`run.recording.rounds_across_ranks`;
        brackets carry any local communicator), as one compiled op: one run of
        the call path per stretch of NCCL calls, a Python loop over pre-built
        calls rather than a method call per rank and per group bracket (-g 4
        all_reduce at 8 B was ~2 us over nccl-tests that way)."""
        return _compile(items)

    def _bound_copy(self, dst: int, src: int, nbytes: int) -> Callable[[], None]:
        if self._bind_copy is not None:
            return self._bind_copy(dst, src, nbytes, self.stream)
        assert self._copy is not None, "a communicator without a copy has no local_copy"
        return partial(self._copy, dst, src, nbytes, self.stream)

    def raw_step(self, name: str, a: tuple[Any, ...]) -> RawCall | None:
        """(NCCL function, its C arguments as ints, comm for the error) or None."""
        h, st, caps = self.handle, self.stream, self.lib.caps
        if name in ("all_reduce", "reduce_scatter", "reduce") and a[4].nccl_id < 0:
            return None  # mulsum: the op is created and destroyed around every call
        if name == "all_reduce":
            return "ncclAllReduce", (a[0], a[1], a[2], a[3].nccl_id, a[4].nccl_id, h, st), h
        if name == "reduce_scatter":
            return "ncclReduceScatter", (a[0], a[1], a[2], a[3].nccl_id, a[4].nccl_id, h, st), h
        if name == "reduce":
            return "ncclReduce", (a[0], a[1], a[2], a[3].nccl_id, a[4].nccl_id, a[5], h, st), h
        if name == "broadcast":
            return "ncclBroadcast", (a[0], a[1], a[2], a[3].nccl_id, a[4], h, st), h
        if name == "all_gather":
            return "ncclAllGather", (a[0], a[1], a[2], a[3].nccl_id, h, st), h
        if name == "alltoall" and caps.alltoall:
            return "ncclAlltoAll", (a[0], a[1], a[2], a[3].nccl_id, h, st), h
        if name == "gather" and caps.gather:
            return "ncclGather", (a[0], a[1], a[2], a[3].nccl_id, a[4], h, st), h
        if name == "scatter" and caps.scatter:
            return "ncclScatter", (a[0], a[1], a[2], a[3].nccl_id, a[4], h, st), h
        if name in ("send", "recv") and caps.send_recv:
            return ("ncclSend" if name == "send" else "ncclRecv"), (a[0], a[1], a[2].nccl_id, a[3], h, st), h
        if name == "group_start":
            return "ncclGroupStart", (), None
        if name == "group_end":
            return "ncclGroupEnd", (), None
        return None

    def local_copy(self, dst: int, src: int, nbytes: int) -> None:
        """Device-to-device copy on this rank's stream (hypercube's own block)."""
        if nbytes <= 0:
            return
        if self._copy is None:
            raise UnsupportedError("local_copy needs the CUDA runtime")
        self._copy(dst, src, nbytes, self.stream)


def _compile(items: list[tuple[NcclCommunicator, str, tuple[Any, ...]]]) -> Callable[[], None] | None:
    """(communicator, primitive call, args) in issue order -> one closure, or None.

    Consecutive NCCL calls become one run of the call path; a local copy splits
    the runs.  A failure is reported at the rank whose communicator made the
    failing call (the first rank's for group brackets) after that rank's
    worker aborted its communicators."""
    first = items[0][0] if items else None
    if first is None:
        return None
    path = timed_call_path(first.lib)
    by_handle: dict[int | None, NcclCommunicator] = {comm.handle: comm for comm, _, _ in items}

    def failed(exc: NcclError) -> NcclError:
        return by_handle.get(exc.comm, first)._failed(exc)

    parts: list[Callable[[], None]] = []
    run: list[RawCall] = []
    for comm, name, args in items:
        if name == "local_copy":
            if comm._copy is None and comm._bind_copy is None:
                return None  # no CUDA runtime to copy with
            dst, src, nbytes = args
            if nbytes > 0:
                if run:
                    parts.append(path.build(run, failed))
                    run = []
                parts.append(comm._bound_copy(dst, src, nbytes))
            continue
        step = comm.raw_step(name, args)
        if step is None:
            return None
        run.append(step)
    if run:
        parts.append(path.build(run, failed))
    if len(parts) == 1:
        return parts[0]
    frozen = tuple(parts)

    def run_parts() -> None:
        for part in frozen:
            part()

    return run_parts
