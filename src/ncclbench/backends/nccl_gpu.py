"""The GPU backend: NCCL communicators on CUDA devices, nccl-tests' run model.

`nccl_setup.create_nccl_workers(opts, host, collective)` returns one
`NcclWorker` per -t thread; the harness drives each from its own
thread.  A worker owns G ranks (one per GPU), their streams and buffers, and
implements the `Worker` contract: completion polling with async-error and -T
checks, host collectives through a `ThreadTeam`, fill/check through the GPU
kernels, CUDA-event iteration timers, graph capture and the -M report.

Differences from nccl-tests, on purpose: no "expected" buffer (the GPU check
kernel computes expected values on the fly), and sizes that cannot fit in
the GPUs' free memory are refused with one clear line before allocating.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from ..collectives.collective import Collective
from ..core.config import BenchOptions
from ..core.datatypes import DataType, RedOp
from ..core.errors import BenchError, ExitCode
from ..core.fills import Fill
from ..core.results import DeviceInfo
from ..cuda.runtime import NULL_STREAM, CudaError, CudaRuntime, DeviceProps
from ..launch.hostcomm import HostComm
from ..nccl import runmodel
from ..nccl.binding import NcclError, NcclLibrary
from ..nccl.communicator import NcclCommunicator
from ..nccl.native_loop import NativeLoop
from ..nccl.version_text import version_text
from .nccl_native import build_native_batch
from .threads import ThreadTeam, merge_threads
from .worker import IterationTimer, RankSlot, TimedBatch, Worker


@dataclass
class NcclSlot(RankSlot):
    """A RankSlot plus what the NCCL backend keeps per GPU."""

    handle: int = 0  # ncclComm_t
    stream: int = NULL_STREAM
    send_base: int = 0  # allocation start (no unalign shift)
    recv_base: int = 0
    alloc_bytes: int = 0  # bytes allocated per buffer (maxBytes + 8*unalign)
    local_index: int = 0  # t*G + g
    props: DeviceProps | None = None
    send_reg: int = 0  # registration handle / window (0 = none)
    recv_reg: int = 0
    allocated_by_nccl: bool = False


@dataclass
class NcclGraph:
    """One captured and instantiated CUDA graph per local GPU."""

    parts: list[tuple[int, int, int, int]] = field(default_factory=list)  # (device, stream, graph, exec)


@dataclass
class ProcessSetup:
    """What the workers of one process share."""

    opts: BenchOptions
    host: HostComm
    lib: NcclLibrary
    cuda: CudaRuntime
    team: ThreadTeam
    world_rank: int
    world_size: int
    hostname: str
    hosts: list[str]  # short hostname per world process
    local_rank: int
    color: int
    colors: list[int]
    group_proc: int
    group_size: int
    nranks: int
    base_device: int
    max_bytes: int  # per buffer, after nccl-tests' memory clamp
    min_cuda_arch: int
    register_mode: int
    notes: list[str]
    native_loop: NativeLoop | None = None  # the C timed loop (backends/nccl_native.py)
    config_values: dict[str, int] | None = None  # the ncclConfig_t fields the run's communicators were made with


class CudaEventTimer(IterationTimer):
    """Per-iteration CUDA-event timing (-I) on every local stream.

    Consecutive mode: `nevents` = iters + 1 boundaries, sample j spans events
    j..j+1.  Paired mode (-z 3): events 2j and 2j+1 bracket iteration j.
    Samples are raw event spans in µs (not divided by -m), max over GPUs.
    Reading the samples releases the events."""

    def __init__(self, worker: NcclWorker, nevents: int, paired: bool = False):
        self.worker, self.nevents, self.paired = worker, nevents, paired
        cuda = worker.cuda
        self.events: list[list[int]] = []
        for slot in worker.slots:
            cuda.set_device(slot.device)
            self.events.append([cuda.event_create() for _ in range(nevents)])
        worker._bind(force=True)
        self._samples: list[float] | None = None
        worker._timers.append(self)

    def record(self, j: int) -> None:
        cuda, multi = self.worker.cuda, self.worker._multi_device
        for slot, evs in zip(self.worker.slots, self.events):
            if multi:
                cuda.set_device(slot.device)
            cuda.event_record(evs[j], slot.stream)

    def samples_us(self) -> list[float]:
        if self._samples is not None:
            return self._samples
        cuda = self.worker.cuda
        pairs = ([(2 * j, 2 * j + 1) for j in range(self.nevents // 2)] if self.paired
                 else [(j, j + 1) for j in range(self.nevents - 1)])
        out = [0.0] * len(pairs)
        for evs in self.events:
            cuda.event_synchronize(evs[-1])
            for k, (a, b) in enumerate(pairs):
                out[k] = max(out[k], cuda.event_elapsed_ms(evs[a], evs[b]) * 1000.0)
        self._samples = out
        self.close()
        return out

    def close(self) -> None:
        for evs in self.events:
            for ev in evs:
                try:
                    self.worker.cuda.event_destroy(ev)
                except CudaError:
                    pass
        self.events = []
        if self in self.worker._timers:
            self.worker._timers.remove(self)


class NcclWorker(Worker):
    """One -t thread's GPUs: G ranks, their streams and buffers."""

    backend_name = "nccl"
    supports_graphs = True

    def __init__(self, setup: ProcessSetup, thread: int, slots: list[NcclSlot],
                 init_mem: int, user_mem: int, free_after_setup: list[int]):
        self.setup = setup
        self.lib, self.cuda, self.team = setup.lib, setup.cuda, setup.team
        self.opts = setup.opts
        self.thread = thread
        self.slots: list[NcclSlot] = slots
        self.nranks = setup.nranks
        self.max_bytes = setup.max_bytes
        self.notes = setup.notes
        self._init_mem, self._user_mem = init_mem, user_mem
        self._free_after_setup = free_after_setup
        self._multi_device = len({s.device for s in slots}) > 1 or (
            len(slots) > 1 and any(s.stream == NULL_STREAM for s in slots))
        self._tls = threading.local()
        self._kernels: dict[int, Any] = {}
        self._timers: list[CudaEventTimer] = []
        self._aborted = False
        self._closed = False

    @property
    def native_loop(self) -> NativeLoop | None:
        return self.setup.native_loop

    @property
    def multi_device(self) -> bool:
        """True when this worker's ranks are on several GPUs (each call sets its device)."""
        return self._multi_device

    def native_batch(self, ops: Sequence[Sequence[tuple[Any, str, tuple[Any, ...]]]]) -> TimedBatch | None:
        return build_native_batch(self, ops)

    # -- thread binding --------------------------------------------------------------------
    def _bind(self, force: bool = False) -> None:
        """Make this worker's first GPU current in the calling thread (once per
        thread), so no CUDA call ever creates a context on GPU 0 by accident."""
        if force or not getattr(self._tls, "bound", False):
            self.cuda.set_device(self.slots[0].device)
            self._tls.bound = True

    def bind_thread(self) -> None:
        """Call first in the thread that will drive this worker (optional: every
        entry point binds lazily)."""
        self._bind(force=True)

    # -- identity ----------------------------------------------------------------------
    @property
    def is_reporter(self) -> bool:
        return self.setup.world_rank == 0 and self.thread == 0

    @property
    def world_rank(self) -> int:
        return self.setup.world_rank

    @property
    def world_size(self) -> int:
        return self.setup.world_size

    @property
    def hosts(self) -> list[str]:
        """Short hostname of every world process."""
        return self.setup.hosts

    @property
    def color(self) -> int:
        """This process's NCCL_TESTS_SPLIT group (printed as `Group`)."""
        return self.setup.color

    @property
    def ngroups(self) -> int:
        return len(set(self.setup.colors))

    @property
    def min_cuda_arch(self) -> int:
        """Smallest 100*major+10*minor over the world's GPUs (fp8 needs 900)."""
        return self.setup.min_cuda_arch

    @property
    def nccl_version_code(self) -> int:
        return self.lib.version_code

    def library_description(self) -> str:
        return self.lib.describe()

    def devices(self) -> list[DeviceInfo]:
        """`# Using devices` lines for this worker's GPUs (rank = worldRank·T·G + i)."""
        s, T, G = self.setup, self.opts.nthreads, self.opts.ngpus
        out = []
        for slot in self.slots:
            p = slot.props
            out.append(DeviceInfo(rank=s.world_rank * T * G + slot.local_index, group=s.color,
                                  pid=os.getpid(), hostname=s.hostname, device=slot.device,
                                  device_hex=p.pci_hex if p else "", device_info=p.name if p else "",
                                  process=s.world_rank))
        return out

    # -- failure handling --------------------------------------------------------------
    def abort(self) -> None:
        """Abort this worker's communicators (after an error or a timeout) so
        that no rank stays blocked in NCCL; threads waiting in the team are released."""
        if self._aborted:
            return
        self._aborted = True
        for slot in self.slots:
            if slot.handle:
                try:
                    self.lib.comm_abort(slot.handle)
                except NcclError:
                    pass
        self.team.abort()

    def _nccl(self, exc: NcclError, slot: NcclSlot | None = None) -> NcclError:
        self.abort()
        return exc.at_rank(slot.rank) if slot is not None else exc

    # -- the gate's rounds ------------------------------------------------------------------
    @contextlib.contextmanager
    def fresh_communicators(self) -> Iterator[str]:
        """New NCCL communicators of the same ranks for the body of the `with` (fresh_handles:
        new channels, buffers and connections), destroyed after it; the run's own are untouched.  Where a
        fresh one cannot stand in (-t > 1: several threads would have to make theirs together; -R: the
        buffers are registered with the run's), the run's own is used and the line says so."""
        why = ("-t > 1" if self.opts.nthreads != 1 else "-R registers the buffers with the run's"
               if self.setup.register_mode else "")
        if why:
            yield f"on the run's communicator ({why})"
            return
        self._bind()
        saved = [(slot.handle, slot.comm) for slot in self.slots]
        handles = fresh_handles(self.setup, self.slots)
        try:
            for slot, h in zip(self.slots, handles):
                slot.handle = h
                slot.comm = communicator_for(self, slot)
            yield "in a fresh NCCL communicator"
        finally:
            for slot, (h, comm) in zip(self.slots, saved):
                fresh, slot.handle, slot.comm = slot.handle, h, comm
                if fresh and not self._aborted:
                    self.cuda.set_device(slot.device)
                    self.lib.comm_destroy(fresh)
            self._bind(force=True)

    # -- completion --------------------------------------------------------------------
    def wait(self) -> None:
        """Poll every local stream until done, checking ncclCommGetAsyncError and -T,
        like nccl-tests' testStreamSynchronize."""
        self._bind()
        cuda, lib = self.cuda, self.lib
        timeout = self.opts.timeout
        check_async = lib.caps.async_error
        multi = self._multi_device
        pending = list(self.slots)
        start = time.monotonic()
        while pending:
            idle = True
            still = []
            for slot in pending:
                try:
                    if multi:
                        cuda.set_device(slot.device)
                    if cuda.stream_query(slot.stream):
                        idle = False
                        continue
                    if check_async:
                        err = lib.comm_get_async_error(slot.handle)
                        if err and err != 7:  # 7 = ncclInProgress
                            raise lib.error("ncclCommGetAsyncError", err, slot.handle)
                except NcclError as exc:
                    raise self._nccl(exc, slot) from None
                except CudaError:
                    self.abort()
                    raise
                still.append(slot)
                if timeout > 0 and time.monotonic() - start > timeout:
                    self.abort()
                    raise BenchError(f"{self.setup.hostname}: Test timeout ({timeout}s)", ExitCode.TIMEOUT)
            pending = still
            if idle and pending:
                # Yield like nccl-tests' sched_yield().  Not time.sleep(0): that is a
                # 0-length nanosleep, which Linux rounds up by the timer slack
                # (~50 us) and which showed up as +4 us per op on 20-op timings.
                os.sched_yield()
        if multi:
            cuda.set_device(self.slots[0].device)

    def copy_async(self, dst: int, src: int, nbytes: int, stream: int, device: int | None = None) -> None:
        """cudaMemcpyAsync device to device (a communicator's local_copy).  With
        several GPUs in this thread, `device` (the rank's GPU) is made current
        first, as nccl-tests sets each GPU before its rank's calls."""
        self._bind()
        if self._multi_device and device is not None:
            self.cuda.set_device(device)
        self.cuda.memcpy_dtod_async(dst, src, nbytes, stream)

    def bind_copy(self, dst: int, src: int, nbytes: int, stream: int,
                  device: int | None = None) -> Callable[[], None]:
        """`copy_async` with its arguments bound, for a compiled timed op: the
        driver's pre-bound copy (cuMemcpyDtoDAsync acts in the current context,
        so with several GPUs in this thread the rank's device is set first)."""
        copy = self.cuda.bound_dtod_copy(dst, src, nbytes, stream)
        if not self._multi_device or device is None:
            return copy
        set_device = self.cuda.set_device

        def copy_on_device() -> None:
            set_device(device)
            copy()

        return copy_on_device

    # -- host collectives --------------------------------------------------------------
    def barrier(self) -> None:
        self._bind()
        self.team.barrier(self.thread)

    def allreduce_host(self, value: float, op: str) -> float:
        self._bind()
        return self.team.allreduce(value, op, self.thread)

    def gather_host(self, obj: Any, combine: Callable[[Sequence[Any]], Any] = merge_threads) -> list[Any] | None:
        """One object per world process at world rank 0; with -t > 1 the
        threads' objects are merged first by `combine` (default
        `threads.merge_threads`: element-wise max of number lists,
        concatenation of other lists, else thread 0's object)."""
        self._bind()
        return self.team.gather(obj, self.thread, 0, combine)

    # -- grouping ----------------------------------------------------------------------
    def group_start(self) -> None:
        self._bind()
        try:
            self.lib.group_start()
        except NcclError as exc:
            raise self._nccl(exc) from None

    def group_end(self) -> None:
        try:
            self.lib.group_end()
        except NcclError as exc:
            raise self._nccl(exc) from None

    # -- data --------------------------------------------------------------------------
    def zero(self, slot: RankSlot, ptr: int, nbytes: int) -> None:
        if nbytes > 0:
            self._bind()
            self.cuda.memset_async(ptr, 0, nbytes, cast(NcclSlot, slot).stream)

    def load_kernels(self) -> None:
        """Compile/load the fill and check kernels now, at set-up, so that
        the first measured size does not pay for loading a module."""
        for slot in self.slots:
            self.cuda.set_device(slot.device)
            self._kernels_for(slot)

    def _kernels_for(self, slot: NcclSlot) -> Any:
        k = self._kernels.get(slot.device)
        if k is None:
            try:
                from ..cuda.kernels import DeviceKernels
            except ImportError as exc:
                raise BenchError(f"GPU fill/check kernels are not available ({exc})", ExitCode.INTERNAL) from None
            k = self._kernels[slot.device] = DeviceKernels(slot.device)
        return k

    def fill(self, slot: RankSlot, ptr: int, fills: Sequence[Fill], dtype: DataType, op: RedOp) -> None:
        slot = cast(NcclSlot, slot)  # the slots this worker handed out
        self._bind()
        if self._multi_device:
            self.cuda.set_device(slot.device)
        self._kernels_for(slot).fill(ptr, fills, dtype, op, self.nranks, slot.stream)

    def count_wrong(self, slot: RankSlot, ptr: int, count: int, fills: Sequence[Fill],
                    dtype: DataType, op: RedOp) -> int:
        slot = cast(NcclSlot, slot)
        self._bind()
        if self._multi_device:
            self.cuda.set_device(slot.device)
        return int(self._kernels_for(slot).count_wrong(ptr, count, fills, dtype, op, self.nranks, slot.stream))

    # -- timers and graphs -------------------------------------------------------------
    def iteration_timer(self, nevents: int, paired: bool = False) -> IterationTimer:
        return CudaEventTimer(self, nevents, paired)

    def begin_capture(self, thread_local: bool = True) -> None:
        """Start stream capture on every local stream.  nccl-tests captures the
        timed loop thread-locally and the check run globally when -t is 1."""
        self._bind()
        for slot in self.slots:
            if self._multi_device:
                self.cuda.set_device(slot.device)
            self.cuda.begin_capture(slot.stream, thread_local)

    def end_capture(self) -> NcclGraph:
        """End capture on every local stream, then instantiate the graphs.  All
        captures end first, as in nccl-tests: instantiating while another of
        this thread's streams still captures is refused ('operation not
        permitted when stream is capturing', seen with -G and -g 4)."""
        graph = NcclGraph()
        ended = []
        for slot in self.slots:
            if self._multi_device:
                self.cuda.set_device(slot.device)
            ended.append((slot, self.cuda.end_capture(slot.stream)))
        for slot, g in ended:
            if self._multi_device:
                self.cuda.set_device(slot.device)
            graph.parts.append((slot.device, slot.stream, g, self.cuda.graph_instantiate(g)))
        self._bind(force=True)
        return graph

    def abandon_capture(self) -> None:
        for slot in self.slots:
            try:
                if self._multi_device:
                    self.cuda.set_device(slot.device)
                g = self.cuda.end_capture(slot.stream)
                if g:
                    self.cuda.graph_destroy(g)
            except CudaError:  # not capturing, or invalidated: nothing to keep
                pass
        self._bind(force=True)

    def launch_graph(self, graph: NcclGraph, times: int) -> None:
        cuda, multi = self.cuda, self._multi_device
        for _ in range(times):
            for device, stream, _g, gexec in graph.parts:
                if multi:
                    cuda.set_device(device)
                cuda.graph_launch(gexec, stream)

    def destroy_graph(self, graph: NcclGraph) -> None:
        for _d, _s, g, gexec in graph.parts:
            if gexec:
                self.cuda.graph_exec_destroy(gexec)
            self.cuda.graph_destroy(g)
        graph.parts = []

    # -- memory report (-M) ------------------------------------------------------------
    def memory_figures(self) -> tuple[int, int, int]:
        """This worker's (initialization, user-allocated, collective) bytes: drops
        of cudaMemGetInfo free memory, max over its GPUs (docs/behaviour.md §7.4)."""
        coll = None
        for slot, before in zip(self.slots, self._free_after_setup):
            self.cuda.set_device(slot.device)
            free, _ = self.cuda.mem_get_info()
            coll = before - free if coll is None else max(coll, before - free)
        self._bind(force=True)
        return self._init_mem, self._user_mem, coll or 0

    def unsupported_reason(self, coll: Collective, dtype: DataType, op: RedOp) -> str | None:
        """Why this library/GPU set cannot run (dtype, op), or None.  Used by the
        harness to refuse an explicit choice and to trim `-d all` / `-o all`."""
        v = self.lib.version_code
        if dtype.min_nccl_version > v:
            return f"datatype {dtype.name} needs NCCL >= {version_text(dtype.min_nccl_version)} (loaded {version_text(v)})"
        if dtype.min_compute_capability != (0, 0) and self.opts.datatype_arg == "all":
            need = 100 * dtype.min_compute_capability[0] + 10 * dtype.min_compute_capability[1]
            if self.min_cuda_arch < need:
                return f"datatype {dtype.name} needs compute capability {need // 100}.{need % 100 // 10}+"
        if not coll.reduces or coll.name == "sendrecv":
            return None
        if op.min_nccl_version > v:
            return f"op {op.name} needs NCCL >= {version_text(op.min_nccl_version)} (loaded {version_text(v)})"
        if dtype.name.startswith("f8") and op.name in ("avg", "mulsum"):
            # Observed with NCCL 2.28.9: ncclInvalidArgument for fp8 avg / premulsum
            # (nccl-tests' `-d all -o all` aborts there); skip instead of aborting.
            return f"NCCL {version_text(v)} rejects op {op.name} on {dtype.name} (invalid argument)"
        return None

    def memory_report(self) -> str | None:
        """The -M footer line with figures maxed over the world.  Collective:
        every worker of every process must call it (the reporter prints it)."""
        init, user, coll = self.memory_figures()
        init = int(self.allreduce_host(init, "max"))
        user = int(self.allreduce_host(user, "max"))
        coll = int(self.allreduce_host(coll, "max"))
        return runmodel.memory_line(init, user, coll)

    # -- teardown ----------------------------------------------------------------------
    def close(self) -> None:
        """Deregister and free buffers, destroy the communicators (abort them if
        an error happened) and the streams.  Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for timer in list(self._timers):
            timer.close()
        errors: list[BenchError] = []
        lib, cuda = self.lib, self.cuda
        for slot in self.slots:
            try:
                cuda.set_device(slot.device)
                if not self._aborted:
                    cuda.stream_synchronize(slot.stream)
            except CudaError as exc:
                errors.append(exc)
            if not self._aborted and slot.handle:
                try:
                    _deregister(lib, slot, self.setup.register_mode)
                except NcclError as exc:
                    errors.append(exc.at_rank(slot.rank))
        for slot in self.slots:
            if slot.handle and not self._aborted:  # ncclCommAbort already freed aborted ones
                try:
                    lib.comm_destroy(slot.handle)
                except NcclError as exc:
                    errors.append(exc.at_rank(slot.rank))
            slot.handle = 0
        for slot in self.slots:
            try:
                release_memory(lib, cuda, slot)
            except (CudaError, NcclError) as exc:
                errors.append(exc)
        if errors and not self._aborted:
            raise errors[0]


# -- setup helpers -------------------------------------------------------------------------

def _deregister(lib: NcclLibrary, slot: NcclSlot, mode: int) -> None:
    for attr in ("send_reg", "recv_reg"):
        handle = getattr(slot, attr)
        if handle:
            if mode == 2:
                lib.window_deregister(slot.handle, handle)
            else:
                lib.comm_deregister(slot.handle, handle)
            setattr(slot, attr, 0)


def release_memory(lib: NcclLibrary, cuda: CudaRuntime, slot: NcclSlot) -> None:
    """Give back the slot's buffers and its stream, on its device: what `close` and a
    failed set-up (nccl_setup) release after the communicator is gone."""
    cuda.set_device(slot.device)
    _free_buffers(lib, cuda, slot)
    cuda.stream_destroy(slot.stream)
    slot.stream = NULL_STREAM


def _free_buffers(lib: NcclLibrary, cuda: CudaRuntime, slot: NcclSlot) -> None:
    for attr in ("send_base", "recv_base"):
        ptr = getattr(slot, attr)
        if ptr:
            if slot.allocated_by_nccl:
                lib.mem_free(ptr)
            else:
                cuda.free(ptr)
            setattr(slot, attr, 0)


def communicator_for(worker: NcclWorker, slot: NcclSlot) -> NcclCommunicator:
    """The `Communicator` the harness calls for `slot` (its handle, stream and device)."""
    return NcclCommunicator(worker.lib, slot.handle, slot.rank, worker.setup.nranks, slot.stream, slot.device,
                            copy=partial(worker.copy_async, device=slot.device), on_error=worker.abort,
                            bind_copy=partial(worker.bind_copy, device=slot.device))


def fresh_handles(setup: ProcessSetup, slots: Sequence[NcclSlot]) -> list[int]:
    """New communicators of the same ranks as `slots` (the gate's rounds, NcclWorker.fresh_communicators):
    a unique id from the group's first process over the host channel, then ncclCommInitRankConfig with
    the run's own config for every slot in one group, as the set-up made the run's.  Collective over
    the world; one thread per process (the caller checks)."""
    lib, cuda = setup.lib, setup.cuda
    leader = runmodel.group_layout(setup.colors, setup.world_rank)[2]
    uid = lib.get_unique_id() if setup.world_rank == leader else None
    uid = setup.host.allgather(uid)[leader]
    config = lib.make_config(**(setup.config_values or {})) if lib.caps.config_init else None
    handles: list[int] = []
    lib.group_start()
    try:
        for slot in slots:
            cuda.set_device(slot.device)
            handles.append(lib.comm_init_rank(setup.nranks, uid, slot.rank, config))
    finally:
        lib.group_end()
    return handles
