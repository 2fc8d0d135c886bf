"""One group's measurement on GPUs: an NCCL communicator made for the group alone,
timed by the harness's own loop through an `NcclWorker` (the twin of `mpi_group`).

How the communicator is made decides what survives a member that died or
stopped, so it is made in the ways NCCL lets an application abandon:

* one communicator per group with `ncclCommInitRank`, never a split of a
  world communicator: a split is collective over its parent, so one stopped
  rank anywhere would hold up every group (the CPU runtime avoids
  MPI_Comm_split for the same reason).  The group's first member makes the
  unique id and the coordinator relays it to the others (`live_rounds`, TCP,
  `messages.Uid`).
* the init is non-blocking (config blocking=0, NCCL >= 2.14 with
  ncclCommSplit, >= 2.18): `ncclCommInitRankConfig` returns at once, the rank
  polls `ncclCommGetAsyncError` against the round's deadline and calls
  `ncclCommAbort` there ("no answer"), as NCCL's fault-tolerance section
  prescribes.  A missing member otherwise leaves NCCL's bootstrap waiting
  forever inside the call.
* the communicator that is timed is a blocking child of that one
  (`ncclCommSplit(parent, 0, rank, config blocking=1)`): on a non-blocking
  communicator every collective is its own asynchronous group job - NCCL
  v2.28.9-1 src/group.cc ncclGroupEndInternal starts a thread per call
  (groupLaunchNonBlocking) and returns ncclInProgress, and the next call is
  refused until ncclCommGetAsyncError says ncclSuccess
  (init.cc ncclCommEnsureReady) - which is neither nccl-tests' loop nor what
  applications time.  The split itself runs as the non-blocking parent's
  job (group.cc ncclAsyncLaunch takes the parent's mode), and aborting the
  parent aborts the child's init too (init.cc setCommAbortFlags sets
  childAbortFlag), so it can be abandoned at the deadline as well.  Once the
  child exists the parent is aborted (a local call): NCCL unlinks
  childAbortFlag when the child's init completes (ncclCommInitRankFunc), and
  the parent is made with splitShare=0 whatever NCCL_COMM_SPLIT_SHARE_RESOURCES
  says, so the child owns its resources and abort flag (read in v2.30.7-1).
* NCCL_RUNTIME_CONNECT=0 (unless the user set it): connections are made
  during that abandonable init, not lazily inside the first timed
  collective, where a stopped peer would hold the calling thread.
* after that, a hung member only shows as kernels that never finish: the
  worker's wait polls the stream and ncclCommGetAsyncError against the
  deadline and aborts the child - nccl-tests' -T path.

Older libraries (no ncclCommSplit, < 2.18): a blocking ncclCommInitRank after
the id exchange, which cannot be abandoned; the rank's watchdog then reports
it stuck, as the CPU runtime does for MPI_Comm_create_group.

Host-side collectives of the timed loop (barrier, the check's sum) run as
small NCCL all_reduces on the group's own communicator, polled against the
same deadline (`GroupNcclHost`): a group needs nothing but its GPUs and NCCL.
"""

from __future__ import annotations

import ctypes
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from ...backends.nccl_gpu import NcclSlot, NcclWorker, ProcessSetup, release_memory
from ...backends.threads import ThreadTeam
from ...core.config import Backend, BenchOptions
from ...core.datatypes import DATATYPE_BY_NAME, REDOP_BY_NAME
from ...core.errors import BenchError, ExitCode
from ...cuda.runtime import CudaError, DeviceProps
from ...launch.hostcomm import HostComm
from ...nccl import runmodel
from ...nccl.binding import NcclError
from ...nccl.communicator import NcclCommunicator
from .group_measure import GroupSpec, GroupTimeout, measure_sizes
from .messages import GroupJob, Setup, Uid

if TYPE_CHECKING:
    from .live_rounds import Inbox

IN_PROGRESS = 7  # ncclInProgress
POLL_S = 0.001  # between ncclCommGetAsyncError polls of a forming communicator
SPLIT_SINCE = 21800  # ncclCommSplit, and ncclConfig_t with blocking (2.14) before it
_F64 = DATATYPE_BY_NAME["double"]
_OPS = {name: REDOP_BY_NAME[name].nccl_id for name in ("sum", "min", "max")}
_NO_OBJECTS = ("health: a GPU group's host channel carries numbers only (barrier, sum/min/max); "
               "its figures go to the coordinator over TCP")


def robust_init(lib: Any) -> bool:
    """True when this libnccl can form a group's communicator in an abandonable way."""
    return bool(lib.caps.config_init and lib.has("ncclCommSplit") and lib.version_code >= SPLIT_SINCE)


def _poll_ready(lib: Any, comm: int, deadline: float, what: str, sleep: Callable[[float], None]) -> None:
    """Poll a non-blocking communicator until its pending operation is done;
    GroupTimeout at the deadline, NcclError on an NCCL error (the caller aborts)."""
    while True:
        state = lib.comm_get_async_error(comm)
        if state == 0:
            return
        if state != IN_PROGRESS:
            raise lib.error(what, state, comm)
        if time.monotonic() > deadline:
            raise GroupTimeout(f"{what} did not complete before the round's deadline "
                               "(a member never joined or stopped during set-up)")
        sleep(POLL_S)


def _abort(lib: Any, *comms: int) -> None:
    for comm in comms:
        if comm:
            try:
                lib.comm_abort(comm)
            except NcclError:
                pass


def form_group_comm(lib: Any, nranks: int, uid: bytes, rank: int, deadline: float,
                    config_values: dict[str, int] | None = None, stage: list[str] | None = None,
                    sleep: Callable[[float], None] = time.sleep) -> int:
    """This rank's handle of a blocking communicator of `nranks` made from `uid`, formed
    so that it can be abandoned at `deadline` (module docstring); the current CUDA device
    must be this rank's.  Raises GroupTimeout at the deadline, NcclError on failure; either
    way nothing of it is left behind."""
    stage = stage if stage is not None else [""]
    values = dict(config_values or {})
    if not robust_init(lib):
        stage[0] = f"creating the group's communicator (blocking ncclCommInitRank: libnccl {lib.version} " \
                   "has no ncclCommSplit, so the init cannot be abandoned)"
        config = lib.make_config(**values) if lib.caps.config_init else None
        return int(lib.comm_init_rank(nranks, uid, rank, config))
    stage[0] = "forming the group's communicator (non-blocking ncclCommInitRankConfig)"
    parent = child = 0
    holder = None
    try:
        # splitShare=0 whatever NCCL_COMM_SPLIT_SHARE_RESOURCES says: the child must own its
        # resources and abort flag, since the parent is aborted once the child exists
        parent = lib.comm_init_rank_started(nranks, uid, rank, lib.make_config(**values, blocking=0, splitShare=0))
        _poll_ready(lib, parent, deadline, "ncclCommInitRankConfig", sleep)
        stage[0] = "making the group's blocking communicator (ncclCommSplit of a non-blocking parent)"
        holder = lib.comm_split_started(parent, 0, rank, lib.make_config(**values, blocking=1))
        _poll_ready(lib, parent, deadline, "ncclCommSplit", sleep)
        child = int(holder.value or 0)
        if not child:
            raise lib.error("ncclCommSplit", 3, parent)  # no child although the split said success
    except BaseException:
        # aborting the parent first also aborts a child still forming (its childAbortFlag)
        _abort(lib, parent, int(holder.value or 0) if holder is not None else 0)
        raise
    _abort(lib, parent)  # the parent's job is done; the child owns its own resources (splitShare 0)
    return child


class GroupNcclHost(HostComm):
    """barrier / allreduce of the timed loop, as 1-element NCCL all_reduces on the group's
    communicator, polled against the round's deadline (no MPI, no extra channel)."""

    def __init__(self, lib: Any, cuda: Any, rank: int, size: int, deadline: float):
        self.lib, self.cuda, self.rank, self.size, self.deadline = lib, cuda, rank, size, deadline
        self.comm = 0  # set once the communicator exists
        self.stream = 0
        self.scratch = 0  # 8 bytes of device memory
        self.abort_comm: Callable[[], None] = lambda: None

    def _run(self, data: bytes | None, dtype: int, op: int) -> bytes | None:
        cuda, lib = self.cuda, self.lib
        if data is not None:
            cuda.memcpy_htod(self.scratch, data)
        try:
            lib.all_reduce(self.scratch, self.scratch, 1, dtype, op, self.comm, self.stream)
        except NcclError:
            self.abort_comm()
            raise
        while not cuda.stream_query(self.stream):
            err = lib.comm_get_async_error(self.comm)
            if err and err != IN_PROGRESS:
                self.abort_comm()
                raise lib.error("ncclCommGetAsyncError", err, self.comm)
            if time.monotonic() > self.deadline:
                self.abort_comm()
                raise GroupTimeout("a member did not reach the group's barrier before the deadline")
            os.sched_yield()
        return None if data is None else cuda.memcpy_dtoh(self.scratch, 8)

    def barrier(self) -> None:
        if self.size > 1:
            self._run(None, _F64.nccl_id, _OPS["sum"])

    def allreduce(self, value: float, op: str) -> float:
        if self.size == 1:
            return value
        out = self._run(bytes(ctypes.c_double(float(value))), _F64.nccl_id, _OPS[op])
        assert out is not None
        return ctypes.c_double.from_buffer_copy(out).value

    # Objects are not part of a group's measurement (run.timing uses barrier and the
    # check's sum): a group's figures reach the coordinator over TCP.  A call is a bug.
    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        raise BenchError(_NO_OBJECTS, ExitCode.INTERNAL)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        raise BenchError(_NO_OBJECTS, ExitCode.INTERNAL)


class GroupNcclWorker(NcclWorker):
    """NcclWorker whose waits end at the round's deadline (absolute), not after -T per wait."""

    def __init__(self, setup: ProcessSetup, slots: list[NcclSlot], deadline: float,
                 kernels: dict[int, Any] | None = None):
        super().__init__(setup, 0, slots, 0, 0, [0] * len(slots))
        self.deadline = deadline
        if kernels is not None:  # the rank's loaded fill/check kernels, shared by its groups
            self._kernels = kernels

    def options(self, spec: GroupSpec) -> BenchOptions:
        """One cycle's options, -T = the seconds left to the deadline (the C loop's bound)."""
        left = max(1, math.ceil(self.deadline - time.monotonic()))
        self.opts = replace(spec.options(), timeout=left)
        return self.opts

    def wait(self) -> None:
        self._bind()
        cuda, lib = self.cuda, self.lib
        for slot in self.slots:
            while not cuda.stream_query(slot.stream):
                if lib.caps.async_error:
                    err = lib.comm_get_async_error(slot.handle)
                    if err and err != IN_PROGRESS:
                        raise self._nccl(lib.error("ncclCommGetAsyncError", err, slot.handle), slot)
                if time.monotonic() > self.deadline:
                    self.abort()
                    raise GroupTimeout("the group's collective did not finish before the round's deadline "
                                       "(a member stopped or a link hangs)")
                os.sched_yield()


@dataclass
class GpuRank:
    """What one rank keeps between groups: its library, runtime and GPU."""

    lib: Any
    cuda: Any
    world_rank: int
    hostname: str
    device: int = -1
    props: DeviceProps | None = None
    native: Any = None  # the C timed loop, when built
    notes: list[str] = field(default_factory=list)
    kernels: dict[int, Any] = field(default_factory=dict)  # device -> fill/check kernels, loaded once

    def choose_device(self, slot: int, environ: dict[str, str] | None = None) -> int:
        """The GPU of this rank: nccl-tests' rule (NCCL_TESTS_DEVICE, else its slot among
        the ranks of its host), checked against the GPUs this process sees."""
        if self.device < 0:
            device = runmodel.base_device(slot, 1, 1, os.environ if environ is None else environ)
            runmodel.check_device_count(device, 1, 1, self.cuda.device_count)
            self.device = device
            self.cuda.set_device(device)
            self.props = self.cuda.properties(device)
        return self.device

    def config_values(self) -> dict[str, int]:
        return runmodel.comm_config_values(self.lib.version_code, None, "all_reduce")

    def build_worker(self, handle: int, nranks: int, rank: int, spec: GroupSpec, deadline: float,
                     host: GroupNcclHost) -> GroupNcclWorker:
        """An NcclWorker of one slot on `handle`: its stream, buffers and host collectives."""
        lib, cuda = self.lib, self.cuda
        opts = spec.options()
        setup = ProcessSetup(opts=opts, host=host, lib=lib, cuda=cuda, team=ThreadTeam(1, host),
                             world_rank=self.world_rank, world_size=nranks, hostname=self.hostname,
                             hosts=[self.hostname], local_rank=0, color=0, colors=[0], group_proc=rank,
                             group_size=nranks, nranks=nranks, base_device=self.device,
                             max_bytes=spec.max_bytes, min_cuda_arch=self.props.cuda_arch if self.props else 0,
                             register_mode=0, notes=self.notes, native_loop=self.native)
        slot = NcclSlot(rank=rank, comm=None, send=0, recv=0, device=self.device,  # type: ignore[arg-type]
                        handle=handle, props=self.props)
        try:
            cuda.set_device(self.device)
            slot.stream = cuda.stream_create(nonblocking=True)
            alloc = lib.mem_alloc if lib.caps.mem_alloc else cuda.malloc
            slot.allocated_by_nccl = bool(lib.caps.mem_alloc)
            nbytes = runmodel.buffer_bytes(spec.max_bytes, 0)
            slot.alloc_bytes = nbytes
            slot.send_base = slot.send = alloc(max(nbytes, 1))
            slot.recv_base = slot.recv = alloc(max(nbytes, 1))
            host.scratch = cuda.malloc(8)
        except (CudaError, NcclError):
            release_memory(lib, cuda, slot)  # what was made: the buffers and the stream
            raise
        worker = GroupNcclWorker(setup, [slot], deadline, self.kernels)
        slot.comm = NcclCommunicator(lib, handle, rank, nranks, slot.stream, self.device,
                                     copy=partial(worker.copy_async, device=self.device), on_error=worker.abort,
                                     bind_copy=partial(worker.bind_copy, device=self.device))
        host.comm, host.stream, host.abort_comm = handle, slot.stream, worker.abort
        return worker


def measure_nccl_group(gpu: GpuRank, members: Sequence[int], slot: int, spec: GroupSpec, deadline: float,
                       get_uid: Callable[[], bytes], stage: list[str] | None = None) -> dict:
    """This rank's part of one group on its GPU (see module docstring): the figures of
    `group_measure.measure_sizes`.  `get_uid()` gives the group's unique id (made here by the
    first member and sent to the others by the caller, or received: it may raise
    GroupTimeout).  Raises GroupTimeout at the deadline, BenchError on failures; the
    communicator, buffers and stream are gone either way."""
    stage = stage if stage is not None else [""]
    me = members.index(gpu.world_rank)
    gpu.choose_device(slot)
    stage[0] = "waiting for the group's unique id"
    uid = get_uid()
    handle = form_group_comm(gpu.lib, len(members), uid, me, deadline, gpu.config_values(), stage)
    stage[0] = "measuring"
    host = GroupNcclHost(gpu.lib, gpu.cuda, me, len(members), deadline)
    try:
        worker = gpu.build_worker(handle, len(members), me, spec, deadline, host)
    except BaseException:
        _abort(gpu.lib, handle)
        raise
    try:
        if spec.check:
            worker.load_kernels()
        return measure_sizes(worker, spec, partial(worker.options, spec))
    except BenchError as exc:
        if exc.code == ExitCode.TIMEOUT:  # the C loop's -T, set to the deadline
            raise GroupTimeout(f"the group's timed loop did not finish before the round's deadline ({exc.message})") \
                from None
        raise
    finally:
        _close(worker, host)


def _close(worker: GroupNcclWorker, host: GroupNcclHost) -> None:
    try:
        worker.close()
    except BenchError:
        worker.abort()  # a communicator that cannot be destroyed cleanly is aborted
    finally:
        try:
            if host.scratch:
                worker.cuda.free(host.scratch)
        except CudaError:
            pass
        host.scratch = 0


def open_gpu_rank(world_rank: int, hostname: str) -> GpuRank:
    """This rank's libnccl, CUDA runtime and the C timed loop (BenchError when missing)."""
    from ...backends.nccl_native import open_native_loop
    from ...cuda.runtime import get_runtime
    from ...nccl.binding import get_library

    lib = get_library()
    native, _ = open_native_loop(lib.handle)
    return GpuRank(lib, get_runtime(), world_rank, hostname, native=native)


class GpuRankService:
    """The GPU rank's answers to the coordinator: its set-up facts and its groups."""

    def __init__(self, world_rank: int, hostname: str,
                 opener: Callable[[int, str], GpuRank] = open_gpu_rank,
                 read_topology: Callable[[], tuple[dict | None, str]] | None = None):
        self.world_rank, self.hostname, self.opener = world_rank, hostname, opener
        self.read_topology = read_topology
        self.gpu: GpuRank | None = None

    def _gpu(self) -> GpuRank:
        if self.gpu is None:
            self.gpu = self.opener(self.world_rank, self.hostname)
        return self.gpu

    def setup(self, request: Setup) -> dict[str, Any]:
        """The coordinator's Setup -> this rank's GPU, its PCI address, the NCCL version, its
        NCCL_* settings and, when asked, the host's topology facts (explain.gather_topology)."""
        from ..core.causes import nccl_settings
        from ..core.crowding import machine_facts

        gpu = self._gpu()
        device = gpu.choose_device(request.slot)
        props = gpu.props
        answer: dict[str, Any] = {"backend": Backend.NCCL.value, "device": device, "nccl": gpu.lib.version,
                                  "pci": props.pci_hex if props else None, "gpu": props.name if props else None,
                                  "env": nccl_settings(), **machine_facts()}  # machine: GPUs shared (health/core/sharing.py)
        if request.topology:
            if self.read_topology is None:
                from ...explain.gather_topology import read_topology

                facts, why = read_topology()
            else:
                facts, why = self.read_topology()
            answer["topology"] = facts
            if facts is None:
                answer["topology_unread"] = f"{self.hostname}: {why}"
        return answer

    def measure(self, job: GroupJob, deadline: float, stage: list[str], inbox: Inbox) -> dict[str, Any]:
        """One group (live_rounds.MeasureGroup): the first member makes the NCCL unique id and
        sends it to the coordinator, which relays it to the others."""
        gpu = self._gpu()
        members = list(job.members)
        me = members.index(gpu.world_rank)

        def get_uid() -> bytes:
            if me == 0:
                uid = gpu.lib.get_unique_id()
                if len(members) > 1:
                    inbox.send(Uid(job.round_no, job.group, uid))
                return uid
            return inbox.wait_uid(job.round_no, job.group, deadline)

        return measure_nccl_group(gpu, members, int(job.slots[me]), job.spec, deadline, get_uid, stage)
