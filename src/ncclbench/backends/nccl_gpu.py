"""The GPU backend: NCCL communicators on CUDA devices, nccl-tests' run model.

`create_nccl_workers` does what nccl-tests' `run()` does before the first
test: find processes on the same host (local rank), split the world into
groups (NCCL_TESTS_SPLIT*), pick devices, share one unique id per group
through the HostComm, create the T·G communicators of the process (one
ncclGroupStart/End, or one per thread with -p), allocate send and receive
buffers (ncclMemAlloc when available) and register them (-R).  It returns
one `NcclWorker` per -t thread; the harness drives each from its own thread.

Differences from nccl-tests, on purpose: no "expected" buffer (the GPU check
kernel computes expected values on the fly), and sizes that cannot fit in
the GPUs' free memory are refused with one clear line before allocating.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..config import BenchOptions
from ..cuda.runtime import NULL_STREAM, CudaError, CudaRuntime, DeviceProps, get_runtime
from ..datatypes import DataType, RedOp
from ..errors import BenchError, ExitCode, UnsupportedError
from ..fills import Fill
from ..launch.hostcomm import HostComm
from ..nccl import runmodel
from ..nccl.binding import NCCL_WIN_COLL_SYMMETRIC, NcclError, NcclLibrary, get_library, short_hostname
from ..nccl.communicator import NcclCommunicator
from ..results import DeviceInfo
from .base import IterationTimer, RankSlot, Worker
from .threads import ThreadTeam, elementwise_max


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
    max_bytes: int
    reduced_max_bytes: int | None
    min_cuda_arch: int
    register_mode: int
    notes: list[str]


class CudaEventTimer(IterationTimer):
    """Per-iteration CUDA-event timing (-I) on every local stream.

    Consecutive mode: `nevents` = iters + 1 boundaries, sample j spans events
    j..j+1.  Paired mode (-z 3): events 2j and 2j+1 bracket iteration j.
    Samples are raw event spans in µs (not divided by -m), max over GPUs.
    Reading the samples releases the events."""

    def __init__(self, worker: "NcclWorker", nevents: int, paired: bool = False):
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
        self.reduced_max_bytes = setup.reduced_max_bytes
        self.notes = setup.notes
        self.library = setup.lib
        self._init_mem, self._user_mem = init_mem, user_mem
        self._free_after_setup = free_after_setup
        self._multi_device = len({s.device for s in slots}) > 1 or (
            len(slots) > 1 and any(s.stream == NULL_STREAM for s in slots))
        self._tls = threading.local()
        self._kernels: dict[int, Any] = {}
        self._timers: list[CudaEventTimer] = []
        self._aborted = False
        self._closed = False
        self._itemsize = 0

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

    # -- per-datatype preparation ------------------------------------------------------
    def prepare(self, dtype: DataType) -> None:
        """Apply the -u shift for `dtype` (k·itemsize bytes) to every slot's
        send/recv pointers; call at the start of each (type, op, root) test."""
        self._itemsize = dtype.itemsize
        shift = self.opts.unalign * dtype.itemsize
        for slot in self.slots:
            slot.send = slot.send_base + shift
            slot.recv = slot.recv_base + shift

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
                time.sleep(0)  # let NCCL's proxy threads and other -t threads run
        if multi:
            cuda.set_device(self.slots[0].device)

    def copy_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """cudaMemcpyAsync device to device (a communicator's local_copy)."""
        self._bind()
        self.cuda.memcpy_dtod_async(dst, src, nbytes, stream)

    # -- host collectives --------------------------------------------------------------
    def barrier(self) -> None:
        self._bind()
        self.team.barrier(self.thread)

    def allreduce_host(self, value: float, op: str) -> float:
        self._bind()
        return self.team.allreduce(value, op, self.thread)

    def gather_host(self, obj: Any, combine=elementwise_max) -> list[Any] | None:
        """One object per world process at world rank 0; with -t > 1 the
        threads' objects are merged first by `combine` (default: element-wise
        max of number lists, else thread 0's object)."""
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
            self.cuda.memset_async(ptr, 0, nbytes, slot.stream)

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
        self._bind()
        if self._multi_device:
            self.cuda.set_device(slot.device)
        self._kernels_for(slot).fill(ptr, fills, dtype, op, self.nranks, slot.stream)

    def count_wrong(self, slot: RankSlot, ptr: int, count: int, fills: Sequence[Fill],
                    dtype: DataType, op: RedOp) -> int:
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
        """End capture on every local stream and instantiate the graphs."""
        graph = NcclGraph()
        for slot in self.slots:
            if self._multi_device:
                self.cuda.set_device(slot.device)
            g = self.cuda.end_capture(slot.stream)
            graph.parts.append((slot.device, slot.stream, g, self.cuda.graph_instantiate(g)))
        self._bind(force=True)
        return graph

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
        of cudaMemGetInfo free memory, max over its GPUs (spec §7.4)."""
        coll = None
        for slot, before in zip(self.slots, self._free_after_setup):
            self.cuda.set_device(slot.device)
            free, _ = self.cuda.mem_get_info()
            coll = before - free if coll is None else max(coll, before - free)
        self._bind(force=True)
        return self._init_mem, self._user_mem, coll or 0

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
            if slot.handle:
                try:
                    if self._aborted:
                        pass  # ncclCommAbort already freed it
                    else:
                        lib.comm_destroy(slot.handle)
                except NcclError as exc:
                    errors.append(exc.at_rank(slot.rank))
                slot.handle = 0
        for slot in self.slots:
            try:
                cuda.set_device(slot.device)
                _free_buffers(lib, cuda, slot)
                cuda.stream_destroy(slot.stream)
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


def _free_buffers(lib: NcclLibrary, cuda: CudaRuntime, slot: NcclSlot) -> None:
    for attr in ("send_base", "recv_base"):
        ptr = getattr(slot, attr)
        if ptr:
            if slot.allocated_by_nccl:
                lib.mem_free(ptr)
            else:
                cuda.free(ptr)
            setattr(slot, attr, 0)


def _agree(host: HostComm, error: BaseException | None) -> None:
    """World-wide agreement on a setup step: every process learns whether any
    failed, so all stop together instead of some waiting forever."""
    msg = None
    if error is not None:
        code = error.code if isinstance(error, BenchError) else ExitCode.INTERNAL
        msg = (str(error), int(code))
    results = host.allgather(msg)
    if error is not None:
        raise error
    for proc, r in enumerate(results):
        if r is not None:
            text, code = r
            raise BenchError(f"process {proc}: {text}", ExitCode(code))


def _collective_name(collective: Any) -> str:
    return collective if isinstance(collective, str) else getattr(collective, "name", "")


def create_nccl_workers(opts: BenchOptions, host: HostComm, collective: Any) -> list[NcclWorker]:
    """Set up this process's part of the run (see module docstring) and return
    one NcclWorker per -t thread, in thread order.  Collective over `host`:
    every world process must call it.  Failures raise BenchError in every
    process (exit 2 CUDA, 3 NCCL, 5 too few GPUs / unsupported option)."""
    if opts.device_implementation > 0:
        raise UnsupportedError("device-API kernels (-D) are not supported by ncclbench yet")
    T, G = opts.nthreads, opts.ngpus
    env = os.environ

    # Step 1: library, runtime, host layout -- agreed on world-wide.
    lib = cuda = None
    err: BaseException | None = None
    try:
        lib = get_library(opts.nccl_lib)
        cuda = get_runtime()
        color = runmodel.split_color(host.rank, env)
    except BenchError as exc:
        err, color = exc, 0
    hostname = short_hostname()
    info = host.allgather((runmodel.host_identity(), hostname, color,
                           None if err is None else (str(err), int(err.code))))
    if err is not None:
        raise err
    for proc, (_, _, _, e) in enumerate(info):
        if e is not None:
            raise BenchError(f"process {proc}: {e[0]}", ExitCode(e[1]))
    ids, hosts, colors = [i[0] for i in info], [i[1] for i in info], [i[2] for i in info]
    assert lib is not None and cuda is not None
    local = runmodel.local_rank(ids, host.rank)
    group_proc, group_size, leader = runmodel.group_layout(colors, host.rank)
    nranks = group_size * T * G

    # Step 2: devices and memory budget.
    props: list[DeviceProps] = []
    err = None
    base = 0
    try:
        base = runmodel.base_device(local, T, G, env)
        runmodel.check_device_count(base, T, G, cuda.device_count)
        props = [cuda.properties(base + i) for i in range(T * G)]
    except BenchError as exc:
        err = exc
    _agree(host, err)
    max_mem = int(host.allreduce(min(p.total_mem for p in props), "min"))
    min_arch = int(host.allreduce(min(p.cuda_arch for p in props), "min"))
    max_bytes, reduced = opts.max_bytes, None
    limit = runmodel.nccl_tests_max_bytes(max_mem, opts.check != 0)
    if max_bytes > limit:
        max_bytes = reduced = limit

    notes: list[str] = []
    reg_mode, note = runmodel.registration_mode(opts.local_register, lib.version_code,
                                                lib.caps.comm_register, lib.caps.window_register)
    if note:
        notes.append(note)
    cta, note = runmodel.cta_policy_setting(opts.cta_policy, lib.version_code)
    if note:
        notes.append(note)
    config_values = runmodel.comm_config_values(lib.version_code, cta, _collective_name(collective))

    # Step 3: one unique id per group, from its first process.
    err, uid = None, None
    try:
        uid = lib.get_unique_id() if host.rank == leader else None
    except BenchError as exc:
        err = exc
    _agree(host, err)
    uids = host.allgather(uid)
    uid = uids[leader]
    host.barrier()

    setup = ProcessSetup(opts=opts, host=host, lib=lib, cuda=cuda, team=ThreadTeam(T, host),
                         world_rank=host.rank, world_size=host.size, hostname=hostname, hosts=hosts,
                         local_rank=local, color=colors[host.rank], colors=colors,
                         group_proc=group_proc, group_size=group_size, nranks=nranks,
                         base_device=base, max_bytes=max_bytes, reduced_max_bytes=reduced,
                         min_cuda_arch=min_arch, register_mode=reg_mode, notes=notes)
    slots = [NcclSlot(rank=runmodel.global_rank(group_proc, i // G, i % G, T, G), comm=None,  # type: ignore[arg-type]
                      send=0, recv=0, device=base + i, local_index=i, props=props[i])
             for i in range(T * G)]
    try:
        return _build(setup, slots, uid, config_values)
    except BaseException:
        for slot in slots:
            if slot.handle:
                try:
                    lib.comm_abort(slot.handle)
                except NcclError:
                    pass
                slot.handle = 0
            try:
                cuda.set_device(slot.device)
                _free_buffers(lib, cuda, slot)
                cuda.stream_destroy(slot.stream)
                slot.stream = NULL_STREAM
            except (CudaError, NcclError):
                pass
        raise


def _init_comms(setup: ProcessSetup, slots: Sequence[NcclSlot], uid: bytes, config_values: dict) -> None:
    """ncclCommInitRankConfig for `slots`, inside one ncclGroupStart/End."""
    lib, cuda = setup.lib, setup.cuda
    config = lib.make_config(**config_values) if lib.caps.config_init else None
    lib.group_start()
    try:
        for slot in slots:
            cuda.set_device(slot.device)
            slot.handle = lib.comm_init_rank(setup.nranks, uid, slot.rank, config)
    finally:
        lib.group_end()


def _register(setup: ProcessSetup, slots: Sequence[NcclSlot]) -> None:
    """-R 1: ncclCommRegister; -R 2: ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC);
    both over maxBytes of each buffer from its unshifted start, in one group."""
    lib, cuda, n = setup.lib, setup.cuda, setup.max_bytes
    windows = []  # ncclCommWindowRegister fills these at group end
    lib.group_start()
    try:
        for slot in slots:
            cuda.set_device(slot.device)
            if setup.register_mode == 2:
                windows.append((slot, lib.window_register(slot.handle, slot.send_base, n, NCCL_WIN_COLL_SYMMETRIC),
                                lib.window_register(slot.handle, slot.recv_base, n, NCCL_WIN_COLL_SYMMETRIC)))
            else:
                slot.send_reg = lib.comm_register(slot.handle, slot.send_base, n)
                slot.recv_reg = lib.comm_register(slot.handle, slot.recv_base, n)
    finally:
        lib.group_end()
    for slot, send_win, recv_win in windows:
        slot.send_reg, slot.recv_reg = send_win.value or 0, recv_win.value or 0


def _free_per_slot(cuda: CudaRuntime, slots: Sequence[NcclSlot]) -> list[int]:
    out = []
    for slot in slots:
        cuda.set_device(slot.device)
        out.append(cuda.mem_get_info()[0])
    return out


def _build(setup: ProcessSetup, slots: list[NcclSlot], uid: bytes, config_values: dict) -> list[NcclWorker]:
    opts, lib, cuda, host = setup.opts, setup.lib, setup.cuda, setup.host
    T, G = opts.nthreads, opts.ngpus
    for slot in slots:
        cuda.set_device(slot.device)
        slot.stream = NULL_STREAM if opts.stream_null else cuda.stream_create(nonblocking=True)
    free0 = _free_per_slot(cuda, slots)

    # Communicators: all T*G in one group, or each thread its own G (-p).
    # A failure here is raised at once, without a world-wide agreement: the
    # other processes may be blocked inside NCCL's bootstrap, and only the
    # launcher's abort (HostComm.abort) can release them.
    if opts.parallel_init and T > 1:
        failures: list[BaseException] = []

        def init_thread(t: int) -> None:
            try:
                _init_comms(setup, slots[t * G:(t + 1) * G], uid, config_values)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=init_thread, args=(t,), name=f"ncclbench-init-{t}")
                   for t in range(T - 1, -1, -1)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if failures:
            raise failures[0]
    else:
        _init_comms(setup, slots, uid, config_values)
    free1 = _free_per_slot(cuda, slots)

    # Refuse sizes that cannot fit, before allocating anything.
    err = None
    for slot, free in zip(slots, free1):
        msg = runmodel.fit_error(setup.max_bytes, opts.unalign, free, slot.device)
        if msg:
            err = BenchError(msg, ExitCode.CUDA_ERROR)
            break
    _agree(host, err)

    # Buffers (agreed on: nothing collective happens during allocation), then
    # registration (window registration is collective: failures raise at once).
    nbytes = runmodel.buffer_bytes(setup.max_bytes, opts.unalign)
    use_nccl_alloc = lib.caps.mem_alloc
    err = None
    try:
        for slot in slots:
            cuda.set_device(slot.device)
            slot.alloc_bytes = nbytes
            slot.allocated_by_nccl = use_nccl_alloc
            alloc = lib.mem_alloc if use_nccl_alloc else cuda.malloc
            slot.send_base = alloc(max(nbytes, 1))
            slot.recv_base = alloc(max(nbytes, 1))
            slot.send, slot.recv = slot.send_base, slot.recv_base
    except (NcclError, CudaError) as exc:
        err = exc
    _agree(host, err)
    if setup.register_mode and setup.max_bytes > 0:
        _register(setup, slots)
    free2 = _free_per_slot(cuda, slots)

    workers: list[NcclWorker] = []
    for t in range(T):
        mine = slots[t * G:(t + 1) * G]
        idx = range(t * G, (t + 1) * G)
        init_mem = max(free0[i] - free1[i] for i in idx)
        user_mem = max(free1[i] - free2[i] for i in idx)
        worker = NcclWorker(setup, t, mine, init_mem, user_mem, [free2[i] for i in idx])
        for slot in mine:
            slot.comm = NcclCommunicator(lib, slot.handle, slot.rank, setup.nranks, slot.stream,
                                         slot.device, copy=worker.copy_async, on_error=worker.abort)
        workers.append(worker)
    if opts.datatypes:
        from ..datatypes import DATATYPE_BY_NAME

        first = DATATYPE_BY_NAME.get(opts.datatypes[0])
        if first is not None:
            for w in workers:
                w.prepare(first)
    cuda.set_device(slots[0].device)
    return workers
