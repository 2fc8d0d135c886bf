"""The NCCL worker's timed loop in C (when `ncclbench.nccl._timedloop` is built).

`build_native_batch(worker, ops)` turns the timed ops of one measurement --
each a list of (communicator, primitive call, args) in issue order, exactly
what `Placement.prepared` compiles for the Python loop -- into one packed
batch for `nccl.native_loop`; `NativeBatch.run()` then reads the clock, issues
every op, waits for every stream like nccl-tests' testStreamSynchronize and
reads the clock again, all in C, and turns any failure into the same error
the Python path raises (NcclError at the failing rank, CudaError, -T timeout).

Used only where the C loop does exactly what the Python loop would: the plain
timed loop (-z 0, -m 1, no -I, no -G) of a worker whose ranks share one
device (a -g N worker polls its streams from Python, which sets each device).
Anything the communicator cannot pre-bind (premultiplied-sum ops, fallbacks)
keeps the Python path.  `NCCLBENCH_NATIVE=0` turns it off.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Protocol, cast

from ..core.config import BenchOptions
from ..core.errors import BenchError, ExitCode
from ..cuda.runtime import CudaRuntime
from ..nccl import native_loop as nl
from ..nccl.binding import NcclError, NcclLibrary
from ..nccl.communicator import NcclCommunicator
from .worker import TimedBatch


class NativeWorker(Protocol):
    """What of the NCCL worker (backends/nccl_gpu.py) the batch uses."""

    lib: NcclLibrary
    cuda: CudaRuntime
    slots: Any  # NcclSlot and ProcessSetup live in nccl_gpu.py, which imports this module
    opts: BenchOptions
    setup: Any
    @property
    def native_loop(self) -> nl.NativeLoop | None: ...

    @property
    def multi_device(self) -> bool: ...

    def abort(self) -> None: ...

    def _nccl(self, exc: NcclError, slot: Any = None) -> NcclError: ...

_LIBCUDA = "libcuda.so.1"


def open_native_loop(nccl_dll: Any) -> tuple[nl.NativeLoop | None, str]:
    """The C loop over the loaded libnccl and the driver, or None and why not."""
    module, why = nl.load_extension()
    if module is None:
        return None, why
    try:
        cuda = ctypes.CDLL(_LIBCUDA)
    except OSError as exc:
        return None, f"{_LIBCUDA} not loadable ({exc})"
    return nl.NativeLoop(module, nccl_dll, cuda), ""


class NativeBatch(TimedBatch):
    """Every timed op of one measurement, packed for the C loop."""

    def __init__(self, worker: NativeWorker, loop: nl.NativeLoop, ops: Sequence[Sequence[nl.Step]]):
        self.worker, self.loop = worker, loop
        self.steps = [s for op in ops for s in op]
        self.packed = nl.pack_steps(self.steps)
        self.first = nl.pack_steps(ops[0]) if ops else b""
        check = worker.lib.caps.async_error
        self.polls = nl.pack_polls([loop.poll(slot.stream, slot.handle, check) for slot in worker.slots])

    def issue_first(self) -> None:
        """Op 0 through the C loop, untimed (it warms the path the clock times)."""
        code, index = self.loop.issue(self.first)
        if code:
            raise self._failure(nl.CALL_FAILED, code, index)

    def run(self) -> tuple[float, float]:
        """(enqueue seconds, completion seconds) of the whole batch."""
        w = self.worker
        kind, code, index, t0, t1, t2 = self.loop.timed(self.packed, self.polls, float(w.opts.timeout), True)
        if kind != nl.OK:
            raise self._failure(kind, code, index)
        return t1 - t0, t2 - t0

    def _failure(self, kind: int, code: int, index: int) -> BaseException:
        w = self.worker
        if kind == nl.CALL_FAILED:
            step = self.steps[index]
            if step.name.startswith("nccl"):
                slot = next((s for s in w.slots if s.handle == step.comm), w.slots[0])
                return cast(NcclCommunicator, slot.comm)._failed(w.lib.error(step.name, code, step.comm))
            w.abort()
            return w.cuda.fail_driver(step.name, _cu_result(code))
        slot = w.slots[index]
        if kind == nl.ASYNC_ERROR:
            return w._nccl(w.lib.error("ncclCommGetAsyncError", code, slot.handle), slot)
        w.abort()
        if kind == nl.TIMEOUT:
            return BenchError(f"{w.setup.hostname}: Test timeout ({w.opts.timeout}s)", ExitCode.TIMEOUT)
        return w.cuda.fail_driver("cuStreamQuery", _cu_result(code))


def _cu_result(code: int) -> Any:
    try:
        from cuda.bindings import driver

        return driver.CUresult(code)
    except (ImportError, ValueError):
        return code


def build_native_batch(worker: NativeWorker, ops: Sequence[Sequence[tuple[Any, str, tuple[Any, ...]]]]) -> NativeBatch | None:
    """A NativeBatch for `ops`, or None when the Python loop must run them."""
    loop = worker.native_loop
    if loop is None or worker.multi_device:
        return None
    packed_ops: list[list[nl.Step]] = []
    for items in ops:
        steps: list[nl.Step] = []
        for comm, name, args in items:
            if name == "local_copy":
                dst, src, nbytes = args
                if nbytes > 0:
                    steps.append(loop.copy_step(dst, src, nbytes, comm.stream))
                continue
            raw = comm.raw_step(name, args)
            if raw is None:
                return None
            fname, cargs, handle = raw
            steps.append(loop.nccl_step(fname, cargs, handle))
        packed_ops.append(steps)
    return NativeBatch(worker, loop, packed_ops)
