"""CPU backend: real MPI collectives (mpi4py) on host memory.

It runs the same harness, checking and output as the GPU backend, so the
whole pipeline can be exercised, and compared, on machines without GPUs.
Buffers are plain numpy byte arrays addressed by raw pointers, like device
buffers.  MPI calls are blocking, so "enqueue" is execution and `wait()` is
a no-op; the timing is the host wall clock around the calls, as always.

What MPI cannot do exactly is refused up front: avg and premultiplied-sum
reductions (MPI has neither) and reductions of half, bfloat16 and fp8
(no standard MPI type).  Non-reducing collectives move any datatype as bytes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from ..collectives.collective import Collective
from ..core.config import BenchOptions
from ..core.datatypes import DataType, RedOp
from ..core.errors import BenchError, ExitCode, UnsupportedError
from ..core.fills import Fill
from ..core.results import DeviceInfo
from ..launch.hostcomm import HostComm, MpiHostComm
from ..launch.shutdown import note_for_launcher, run_last_words
from .worker import IterationTimer, RankSlot, Worker

if TYPE_CHECKING:  # the generator (and its cache) is imported when a run first fills
    from mpi4py import MPI

    from ..core.verifiable import FillCache

_REDUCE_TYPES = {
    "int8": "INT8_T", "uint8": "UINT8_T", "int32": "INT32_T", "uint32": "UINT32_T",
    "int64": "INT64_T", "uint64": "UINT64_T", "float": "FLOAT", "double": "DOUBLE",
}
_REDUCE_OPS = {"sum": "SUM", "prod": "PROD", "max": "MAX", "min": "MIN"}
ALIGN = 4096  # buffers start page-aligned, as cudaMalloc's do


def unsupported_options(opts: BenchOptions) -> list[str]:
    """GPU-only options this backend cannot honour, as user-facing phrases."""
    bad = []
    if opts.nthreads != 1:
        bad.append(f"-t {opts.nthreads} (threads per process; start more MPI processes instead)")
    if opts.ngpus != 1:
        bad.append(f"-g {opts.ngpus} (GPUs per thread)")
    if opts.cudagraph:
        bad.append("-G (CUDA graphs)")
    if opts.local_register:
        bad.append("-R (NCCL buffer registration)")
    if opts.device_implementation:
        bad.append("-D (device-API kernels)")
    if opts.cta_policy is not None:
        bad.append("-x (NCCL CTA policy)")
    if opts.stream_null:
        bad.append("-y (CUDA null stream)")
    if opts.memory_report:
        bad.append("-M (GPU memory report)")
    if opts.parallel_init:
        bad.append("-p (parallel NCCL init)")
    return bad


class MpiCommunicator:
    """The `Communicator` primitives over mpi4py on raw host addresses."""

    def __init__(self, comm: Any, scratch: np.ndarray):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm
        self.rank = comm.Get_rank()
        self.nranks = comm.Get_size()
        self._scratch = scratch
        self._group_depth = 0
        self._pending: list[tuple[str, int, int, DataType, int]] = []
        # Buffer specs are cached: the timed loop reuses a handful of
        # (pointer, count) pairs, and building them costs more than the call
        # overhead we try to keep out of small-message times.
        self._specs: dict[tuple[int, int, int, bool, int], list[object]] = {}  # (ptr, count, type, reducing, blocks)
        self._ops: dict[str, MPI.Op] = {name: getattr(MPI, mpi) for name, mpi in _REDUCE_OPS.items()}

    # -- helpers ------------------------------------------------------------------------
    def _buf(self, ptr: int, count: int, dtype: DataType, reducing: bool, nblocks: int = 1) -> list[object]:
        """mpi4py message spec for `nblocks` blocks of `count` elements at `ptr`.
        The count in the spec is per block: mpi4py (like MPI) reads the counts
        of Allgather/Alltoall/Gather/Scatter buffers per process."""
        key = (ptr, count, dtype.nccl_id, reducing, nblocks)
        spec = self._specs.get(key)
        if spec is not None:
            return spec
        MPI = self.MPI
        buf = MPI.buffer.fromaddress(ptr, count * nblocks * dtype.itemsize)
        if reducing:
            spec = [buf, count, getattr(MPI, _REDUCE_TYPES[dtype.name])]
        else:
            spec = [buf, count * dtype.itemsize, MPI.BYTE]
        if len(self._specs) > 4096:
            self._specs.clear()
        self._specs[key] = spec
        return spec

    def _op(self, op: RedOp) -> MPI.Op:
        return self._ops[op.name]

    # -- collectives ----------------------------------------------------------------------
    def all_reduce(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp) -> None:
        src = self.MPI.IN_PLACE if send == recv else self._buf(send, count, dtype, True)
        self.comm.Allreduce(src, self._buf(recv, count, dtype, True), self._op(op))

    def broadcast(self, send: int, recv: int, count: int, dtype: DataType, root: int) -> None:
        if self.rank == root and send != recv:
            ctypes.memmove(recv, send, count * dtype.itemsize)
        self.comm.Bcast(self._buf(recv, count, dtype, False), root)

    def reduce(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp, root: int) -> None:
        if self.rank == root:
            src = self.MPI.IN_PLACE if send == recv else self._buf(send, count, dtype, True)
            self.comm.Reduce(src, self._buf(recv, count, dtype, True), self._op(op), root)
        else:
            self.comm.Reduce(self._buf(send, count, dtype, True), None, self._op(op), root)

    def all_gather(self, send: int, recv: int, count: int, dtype: DataType) -> None:
        n = self.nranks
        in_place = send == recv + self.rank * count * dtype.itemsize
        src = self.MPI.IN_PLACE if in_place else self._buf(send, count, dtype, False)
        self.comm.Allgather(src, self._buf(recv, count, dtype, False, n))

    def reduce_scatter(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp) -> None:
        n, nbytes = self.nranks, count * dtype.itemsize
        if recv == send + self.rank * nbytes:
            # NCCL's in-place layout keeps the result at this rank's block; MPI's
            # IN_PLACE would put it at the start, so go through scratch memory.
            tmp = self._scratch.ctypes.data
            self.comm.Reduce_scatter_block(self._buf(send, count, dtype, True, n),
                                           self._buf(tmp, count, dtype, True), self._op(op))
            ctypes.memmove(recv, tmp, nbytes)
        else:
            self.comm.Reduce_scatter_block(self._buf(send, count, dtype, True, n),
                                           self._buf(recv, count, dtype, True), self._op(op))

    def alltoall(self, send: int, recv: int, count: int, dtype: DataType) -> None:
        n = self.nranks
        src = self.MPI.IN_PLACE if send == recv else self._buf(send, count, dtype, False, n)
        self.comm.Alltoall(src, self._buf(recv, count, dtype, False, n))

    def gather(self, send: int, recv: int, count: int, dtype: DataType, root: int) -> None:
        n = self.nranks
        if self.rank == root:
            in_place = send == recv + root * count * dtype.itemsize
            src = self.MPI.IN_PLACE if in_place else self._buf(send, count, dtype, False)
            self.comm.Gather(src, self._buf(recv, count, dtype, False, n), root)
        else:
            self.comm.Gather(self._buf(send, count, dtype, False), None, root)

    def scatter(self, send: int, recv: int, count: int, dtype: DataType, root: int) -> None:
        n = self.nranks
        if self.rank == root:
            in_place = recv == send + root * count * dtype.itemsize
            dst = self.MPI.IN_PLACE if in_place else self._buf(recv, count, dtype, False)
            self.comm.Scatter(self._buf(send, count, dtype, False, n), dst, root)
        else:
            self.comm.Scatter(None, self._buf(recv, count, dtype, False), root)

    # -- point to point, grouped like NCCL -----------------------------------------------------
    def send(self, buf: int, count: int, dtype: DataType, peer: int) -> None:
        self._pending.append(("send", buf, count, dtype, peer))
        if self._group_depth == 0:
            self._flush()

    def recv(self, buf: int, count: int, dtype: DataType, peer: int) -> None:
        self._pending.append(("recv", buf, count, dtype, peer))
        if self._group_depth == 0:
            self._flush()

    def group_start(self) -> None:
        self._group_depth += 1

    def group_end(self) -> None:
        self._group_depth -= 1
        if self._group_depth == 0:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        reqs = []
        for kind, buf, count, dtype, peer in self._pending:
            b = self._buf(buf, count, dtype, False)
            reqs.append(self.comm.Isend(b, peer, 7) if kind == "send" else self.comm.Irecv(b, peer, 7))
        self._pending.clear()
        self.MPI.Request.Waitall(reqs)

    def local_copy(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def compile_group(self, items: list[tuple[Any, str, tuple[Any, ...]]]) -> None:
        """An MPI worker drives one rank: there is never a group of local ranks to compile."""
        return None

    def compile(self, calls: list[tuple[str, tuple[Any, ...]]]) -> Callable[[], None]:
        """Pre-bind recorded primitive calls (see run.timing.CallRecorder):
        a lone out-of-place or in-place all_reduce becomes a closure over the
        ready mpi4py arguments; anything else is replayed through the methods
        (still skipping the collective and placement layers)."""
        if len(calls) == 1 and calls[0][0] == "all_reduce":
            send, recv, count, dtype, op = calls[0][1]
            src = self.MPI.IN_PLACE if send == recv else self._buf(send, count, dtype, True)
            dst, mop, allreduce = self._buf(recv, count, dtype, True), self._op(op), self.comm.Allreduce
            return lambda: allreduce(src, dst, mop)
        bound = [(getattr(self, name), args) for name, args in calls]
        if len(bound) == 1:
            return partial(bound[0][0], *bound[0][1])

        def replay() -> None:
            for fn, args in bound:
                fn(*args)

        return replay


class HostIterationTimer(IterationTimer):
    """-I on the CPU backend: host timestamps (calls are synchronous)."""

    def __init__(self, nevents: int):
        self.stamps = [0.0] * nevents

    def record(self, j: int) -> None:
        self.stamps[j] = time.perf_counter()

    def samples_us(self) -> list[float]:
        s = self.stamps
        return [(s[j + 1] - s[j]) * 1e6 for j in range(len(s) - 1)]


class HostMemoryWorker(Worker):
    """A Worker whose buffers are host memory (aligned numpy arrays, used by address):
    zeroing, the verifiable fill and the bit-exact check on the CPU.  The CPU backend's
    MpiWorker and health's per-group worker share it."""

    # Bytes of generated fill/check data kept between calls (core.verifiable.FillCache): the
    # MPI worker sizes it from the host's memory room; elsewhere (health's groups) it is
    # what one check needs, its inputs and its expected result at the largest size.
    fill_cache_budget: int | None = None
    # The timed loop runs on the first check's inputs (seed 1), not on a stream of their
    # own (nccl-tests' seed 99): on a GPU that stream costs a kernel launch, here the numpy
    # generator's time for every element of the largest size, a third of what checking
    # costs.  The timed loop's data is never compared, every value is a normal number of
    # the same generator (timing cannot tell), and the check still zeroes the receive
    # buffer and writes its inputs again before its op (docs/behaviour.md §4.1).
    timed_data_seed = 1
    _fill_cache: FillCache | None = None

    def _cache(self) -> FillCache:
        if self._fill_cache is None:
            from ..core.verifiable import FillCache

            budget = self.fill_cache_budget
            self._fill_cache = FillCache(2 * (self.max_bytes + ALIGN) if budget is None else budget)
        return self._fill_cache

    def zero(self, slot: RankSlot, ptr: int, nbytes: int) -> None:
        if nbytes:
            ctypes.memset(ptr, 0, nbytes)

    def fill(self, slot: RankSlot, ptr: int, fills: Sequence[Fill], dtype: DataType, op: RedOp) -> None:
        from ..core import verifiable

        span = max((f.offset + f.count for f in fills), default=0) * dtype.itemsize
        verifiable.host_fill(host_view(ptr, span), fills, dtype, op, self.nranks, self._cache())

    def count_wrong(self, slot: RankSlot, ptr: int, count: int, fills: Sequence[Fill],
                    dtype: DataType, op: RedOp) -> int:
        from ..core import verifiable

        return verifiable.host_count_wrong(host_view(ptr, count * dtype.itemsize), count, fills,
                                           dtype, op, self.nranks, self._cache())


class MpiWorker(HostMemoryWorker):
    backend_name = "mpi"

    def __init__(self, opts: BenchOptions, host: HostComm | None = None, comm: Any = None):
        bad = unsupported_options(opts)
        if bad:
            err = UnsupportedError("the CPU (MPI) backend cannot honour " + ", ".join(bad)
                                   + "; use --backend nccl on a GPU machine")
            err.all_ranks = True  # decided from the options alone, the same on every rank
            raise err
        from mpi4py import MPI

        self.MPI = MPI
        self.world = comm if comm is not None else MPI.COMM_WORLD
        self.host = host or MpiHostComm(self.world)
        color = split_color_from_env(self.world.Get_rank())
        self.group = self.world.Split(color, self.world.Get_rank()) if color is not None else self.world
        self.color = color or 0
        self.nranks = self.group.Get_size()
        self.timeout = opts.timeout
        pad = 8 * opts.unalign
        # Like nccl-tests on a GPU: lower -e to what fits (every rank computes the
        # same limit from the same gathered facts); the run plan's sweep follows.
        self.max_bytes, note, self.fill_cache_budget = host_memory_limit(self.host, opts.max_bytes, self.nranks,
                                                                         opts.unalign)
        self.notes = [note] if note else []
        nbytes = self.max_bytes + pad + ALIGN
        try:
            self._send = np.zeros(nbytes, dtype=np.uint8)
            self._recv = np.zeros(nbytes, dtype=np.uint8)
            scratch = np.zeros(self.max_bytes // max(1, self.nranks) + 64, dtype=np.uint8)
        except MemoryError:
            raise BenchError(f"rank {self.world.Get_rank()}: cannot allocate 2 buffers of {nbytes} bytes of host "
                             f"memory (-e {self.max_bytes}); lower -e", ExitCode.INTERNAL) from None
        send = aligned_address(self._send)
        recv = aligned_address(self._recv)
        self._scratch = scratch
        self.comm = MpiCommunicator(self.group, scratch)
        self.slots = [RankSlot(self.comm.rank, self.comm, send, recv, -1)]
        self._watchdog = _Watchdog(self.timeout, self.world) if self.timeout > 0 else None

    # -- Worker interface ---------------------------------------------------------------------
    @property
    def is_reporter(self) -> bool:
        return self.world.Get_rank() == 0

    def wait(self) -> None:
        if self._watchdog is not None:
            self._watchdog.tick()

    def barrier(self) -> None:
        self.world.Barrier()

    def allreduce_host(self, value: float, op: str) -> float:
        return self.host.allreduce(value, op)

    def gather_host(self, obj: Any) -> list[Any] | None:
        return self.host.gather(obj, 0)


    def iteration_timer(self, nevents: int) -> IterationTimer:
        return HostIterationTimer(nevents)

    @contextlib.contextmanager
    def fresh_communicators(self) -> Iterator[str]:
        """A duplicate of the rank's communicator (MPI_Comm_dup: a new context, the same processes
        and connections) for the body of the `with`, freed after it."""
        dup = self.group.Dup()
        saved = self.slots[0].comm
        self.slots[0].comm = MpiCommunicator(dup, self._scratch)
        try:
            yield "in a duplicated MPI communicator"
        finally:
            self.slots[0].comm = saved
            dup.Free()

    def library_description(self) -> str:
        """The MPI library's own first version line ("MPICH Version: 4.2.0")."""
        return self.MPI.Get_library_version().splitlines()[0].strip() or "MPI"

    def unsupported_reason(self, coll: Collective, dtype: DataType, op: RedOp) -> str | None:
        if not coll.reduces or coll.name == "sendrecv":
            return None
        if op.name not in _REDUCE_OPS:
            return f"MPI has no '{op.name}' reduction (use --backend nccl)"
        if dtype.name not in _REDUCE_TYPES:
            return f"MPI cannot reduce datatype '{dtype.name}' (use --backend nccl)"
        return None

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(rank=self.world.Get_rank(), group=self.color, pid=os.getpid(),
                           hostname=socket.gethostname().split(".")[0], device=-1, device_hex="cpu",
                           device_info=f"CPU {platform.machine()} (MPI host memory)",
                           process=self.world.Get_rank())]

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.stop()
        if self.group is not self.world:
            self.group.Free()


def host_memory_limit(host: HostComm, max_bytes: int, nranks: int, unalign: int) -> tuple[int, str | None, int]:
    """(-e to use, banner note or None, bytes of check data to keep): `max_bytes`
    lowered to what every host's memory holds with all of its ranks, and what is
    left of the room for the fill cache (backends/host_memory.py).  Collective."""
    from .host_memory import clamp_note, fill_cache_budget, largest_fitting, this_process_room

    rooms = host.allgather(this_process_room(socket.gethostname().split(".")[0]))
    fit = largest_fitting(rooms, nranks, unalign)
    if fit is None or fit[0] >= max_bytes:
        return max_bytes, None, fill_cache_budget(rooms, max_bytes, nranks, unalign)
    limit, why = fit
    return limit, clamp_note(max_bytes, limit, why), fill_cache_budget(rooms, limit, nranks, unalign)


def aligned_address(arr: np.ndarray) -> int:
    """The first ALIGN-aligned address inside `arr` (allocate ALIGN bytes more than needed)."""
    addr = arr.ctypes.data
    return addr + (-addr) % ALIGN


def host_view(ptr: int, nbytes: int) -> np.ndarray:
    """A uint8 numpy view of `nbytes` of host memory at address `ptr` (no copy)."""
    if nbytes <= 0:
        return np.zeros(0, dtype=np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))


def split_color_from_env(world_rank: int) -> int | None:
    """NCCL_TESTS_SPLIT_MASK / NCCL_TESTS_SPLIT color of this process (docs/behaviour.md §2.3), or None."""
    mask = os.environ.get("NCCL_TESTS_SPLIT_MASK")
    if mask is not None:
        try:
            return world_rank & int(mask, 16)
        except ValueError:
            return 0
    spec = os.environ.get("NCCL_TESTS_SPLIT")
    if spec is None:
        return None
    return split_color(spec, world_rank)


def split_color(spec: str, rank: int) -> int:
    """Evaluate an NCCL_TESTS_SPLIT expression such as 'MOD 8', '&0x3', 'div2'."""
    s = spec.strip()
    table = (("AND", "&"), ("OR", "|"), ("MOD", "%"), ("DIV", "/"))
    for word, sym in table:
        if s.upper().startswith(word):
            op, rest = sym, s[len(word):]
            break
        if s.startswith(sym):
            op, rest = sym, s[1:]
            break
    else:
        return 0
    rest = rest.strip()
    try:
        if rest[:2].lower() == "0b":
            v = int(rest[2:], 2)
        elif rest[:2].lower() == "0x":
            v = int(rest[2:], 16)
        elif len(rest) > 1 and rest.startswith("0"):
            v = int(rest, 8)
        else:
            v = int(rest)
    except ValueError:
        return 0
    if op == "&":
        return rank & v
    if op == "|":
        return rank | v
    if v == 0:
        raise BenchError(f"NCCL_TESTS_SPLIT={spec!r} divides by zero", ExitCode.ARGUMENT)
    return rank % v if op == "%" else rank // v


class _Watchdog:
    """-T for blocking MPI calls: if no wait() happens for `timeout` seconds,
    report and abort the whole MPI job (exit 4) instead of hanging."""

    def __init__(self, timeout: int, world: Any):
        self.timeout, self.world = timeout, world
        self.last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="ncclbench-watchdog")
        self._thread.start()

    def tick(self) -> None:
        self.last = time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            if time.monotonic() - self.last > self.timeout:
                host = socket.gethostname().split(".")[0]
                message = (f"{host}: Test timeout ({self.timeout}s): rank {self.world.Get_rank()} waited "
                           f"longer than -T {self.timeout} s for an MPI call; aborting the job")
                print(message, flush=True)
                # before MPI_Abort ends every process: rank 0 stores its run as a timeout,
                # and ncclbench's launcher (if it started us) learns why the job ended
                run_last_words("timeout", message)
                note_for_launcher(ending=f"ended the job (MPI_Abort {int(ExitCode.TIMEOUT)}): {message}")
                self.world.Abort(int(ExitCode.TIMEOUT))
