"""A simulated libnccl + CUDA runtime for the GPU health runtime's CPU tests (not a test module).

Ranks are threads of this process; "device memory" is host memory; a
communicator is a set of handles formed from one unique id (or split from a
parent), with NCCL's non-blocking semantics as the runtime relies on them
(NCCL v2.28.9-1, init.cc / group.cc): a non-blocking init or split returns at
once and `comm_get_async_error` says ncclInProgress (7) until every member
has called it, the split's child appears in the holder when it completes,
`comm_abort` ends a handle.  A collective is posted to its stream and
completes when every member has posted it; the reduction is then computed
for real (numpy over the members' send buffers), so the harness's bit-exact
check checks real data.  Each completed op also takes `bytes / rate` seconds
of "device time" on the slowest member's GPU (`rates`), so a slow GPU shows
in the host clock as it would.

GPUs are told apart by (host name, device): `rates` slows one down,
`stop_after` makes one stop (its thread blocks in the collective after its
N-th, as a stopped process would) so its peers wait for it.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ncclbench.core import verifiable
from ncclbench.core.datatypes import DATATYPES
from ncclbench.cuda.runtime import DeviceProps
from ncclbench.nccl import config_struct
from ncclbench.nccl.binding import Capabilities, NcclError

NP = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
      "uint64": np.uint64, "half": np.float16, "float": np.float32, "double": np.float64}
DTYPE_BY_ID = {d.nccl_id: d for d in DATATYPES}


def view(ptr: int, nbytes: int) -> np.ndarray:
    if nbytes <= 0:
        return np.zeros(0, dtype=np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))


@dataclass
class Op:
    send: int
    recv: int
    count: int
    dtype: int
    op: int
    stream: int
    done_at: float | None = None
    posted_at: float = field(default_factory=time.monotonic)  # when its rank enqueued it


@dataclass
class Group:
    n: int
    handles: dict[int, int] = field(default_factory=dict)  # rank -> handle
    ops: dict[int, list[Op]] = field(default_factory=dict)  # rank -> posted ops
    done: int = 0  # ops completed (the same index on every rank)
    splits: dict[int, dict] = field(default_factory=dict)  # split number -> {rank: (holder, color, key, cfg)}


@dataclass
class Comm:
    handle: int
    group: Group
    rank: int
    blocking: bool
    device: tuple[str, int]
    aborted: bool = False
    pending: str = ""  # "init" / "split": what ncclInProgress waits for
    splits: int = 0
    posted: int = 0


class FakeCuda:
    def __init__(self, fabric: FakeNccl, ngpus: int = 8):
        self.fabric = fabric
        self.device_count = ngpus
        self._mem: dict[int, np.ndarray] = {}
        self._streams = itertools.count(1000)
        self._tls = threading.local()

    # devices
    def set_device(self, d: int) -> None:
        self._tls.device = d

    def properties(self, d: int) -> DeviceProps:
        return DeviceProps(d, "Fake H100", 80 << 30, 9, 0, 0, 0x18 + d, 0)

    def mem_get_info(self) -> tuple[int, int]:
        return 70 << 30, 80 << 30

    # memory
    def malloc(self, nbytes: int) -> int:
        arr = np.zeros(max(1, nbytes) + 64, dtype=np.uint8)
        ptr = arr.ctypes.data
        self._mem[ptr] = arr
        return ptr

    def free(self, ptr: int) -> None:
        self._mem.pop(ptr, None)

    def memset_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        ctypes.memset(ptr, value, nbytes)

    def memcpy_htod(self, dst: int, data) -> None:
        b = bytes(data)
        ctypes.memmove(dst, b, len(b))

    def memcpy_dtoh(self, src: int, nbytes: int) -> bytes:
        return ctypes.string_at(src, nbytes)

    # streams
    def stream_create(self, nonblocking: bool = True) -> int:
        return next(self._streams)

    def stream_destroy(self, stream: int) -> None:
        pass

    def stream_query(self, stream: int) -> bool:
        """Whether the stream's work is done.  Not done: the calling thread naps until the work's
        completion time (at most 0.5 ms) before it answers, as a thread polling a real GPU leaves the
        host's CPUs to others; eight ranks' threads spinning on the GIL here had made the fake GPUs'
        figures scatter with -4 % tails (CI, 2026-11-26), which no GPU's own timing has."""
        if self.fabric.stream_done(stream):
            return True
        ready = self.fabric.stream_ready_at(stream)
        time.sleep(0.0005 if ready is None else min(0.0005, max(0.0, ready - time.monotonic())))
        return False

    def stream_synchronize(self, stream: int) -> None:
        """Returns when the stream's work is done: sleeps until its ops' completion time once every
        member has posted them (a GPU's stream finishes on the device's clock, not a poll's)."""
        deadline = time.monotonic() + 5
        while not self.fabric.stream_done(stream) and time.monotonic() < deadline:
            ready = self.fabric.stream_ready_at(stream)
            time.sleep(0.0005 if ready is None else min(0.0005, max(0.0, ready - time.monotonic())))


class FakeKernels:
    """The fill/check kernels, on host memory (the numpy reference of core/verifiable.py)."""

    def fill(self, ptr, fills, dtype, op, nranks, stream) -> None:
        span = max((f.offset + f.count for f in fills), default=0) * dtype.itemsize
        verifiable.host_fill(view(ptr, span), fills, dtype, op, nranks)

    def count_wrong(self, ptr, count, fills, dtype, op, nranks, stream) -> int:
        return verifiable.host_count_wrong(view(ptr, count * dtype.itemsize), count, fills, dtype, op, nranks)


class FakeCallPath:
    """The timed loop's call path: prepared NCCL calls, through the fake library."""

    def __init__(self, lib: FakeNccl):
        self.lib = lib

    def build(self, calls, on_error):
        lib = self.lib

        def run():
            for name, args, _comm in calls:
                if name == "ncclAllReduce":
                    lib.all_reduce(*args)
                elif name in ("ncclGroupStart", "ncclGroupEnd"):
                    pass
                else:
                    raise AssertionError(f"the fake NCCL does not do {name}")
        return run

    def describe(self) -> str:
        return "fake"


class FakeNccl:
    """The library: every rank thread shares one (one fabric)."""

    IN_PROGRESS = 7

    def __init__(self, version_code: int = 22809, split: bool = True, rates: dict | None = None,
                 base_rate: float = 0.05):
        self.version_code = version_code
        self.version = config_struct.version_text(version_code)
        self.caps = Capabilities(**{f: True for f in Capabilities.__dataclass_fields__})
        self._split = split
        self.call_path, self.call_path_note = FakeCallPath(self), ""
        self.handle = None  # no C loop
        self.lock = threading.RLock()
        self.groups: dict[bytes, Group] = {}
        self.comms: dict[int, Comm] = {}
        self._ids = itertools.count(1)
        # (host, device) -> GB/s of its "device time"; the default is low so that device time,
        # not the threads' Python, sets the pace (a 256 KiB op takes ~5 ms)
        self.rates = dict(rates or {})
        self.base_rate = base_rate
        self.stop_after: dict[tuple[str, int], tuple[int, float]] = {}  # (host, device) -> (collectives, stop s)
        self.aborted: list[int] = []
        self.destroyed: list[int] = []
        self.streams: dict[int, list[tuple[Group, int, int]]] = {}  # stream -> (group, rank, op index)
        self.inits: list[tuple[int, bool]] = []  # (nranks, blocking) per init call
        self.split_share: list[int] = []  # the config's splitShare per init call
        self.cuda = FakeCuda(self)

    # -- library identity ----------------------------------------------------------------
    def has(self, name: str) -> bool:
        return name != "ncclCommSplit" or self._split

    def make_config(self, **values):
        return config_struct.make_config(self.version_code, **values)

    def error(self, function, result, comm=None):
        return NcclError(function, result, {3: "internal error", 6: "remote process exited"}.get(result, "error"),
                         "fake", comm=comm)

    def get_unique_id(self) -> bytes:
        return os.urandom(128)

    # -- communicators ---------------------------------------------------------------------
    def where(self) -> tuple[str, int]:
        """(host, device) of the calling rank thread."""
        return getattr(self.cuda._tls, "host", "?"), getattr(self.cuda._tls, "device", 0)

    def _new_comm(self, group: Group, rank: int, blocking: bool, device: tuple[str, int]) -> Comm:
        c = Comm(next(self._ids), group, rank, blocking, device)
        self.comms[c.handle] = c
        group.handles[rank] = c.handle
        group.ops.setdefault(rank, [])
        return c

    def comm_init_rank_started(self, nranks, uid, rank, config) -> int:
        with self.lock:
            self.inits.append((nranks, bool(config.blocking)))
            self.split_share.append(int(getattr(config, "splitShare", -1)))
            g = self.groups.setdefault(bytes(uid), Group(nranks))
            c = self._new_comm(g, rank, bool(config.blocking), self.where())
            c.pending = "init"
            return c.handle

    def comm_init_rank(self, nranks, uid, rank, config=None) -> int:
        """Blocking: returns when every member has called it (NCCL's bootstrap)."""
        h = self.comm_init_rank_started(nranks, uid, rank, config or self.make_config(blocking=1))
        while self.comm_get_async_error(h) == self.IN_PROGRESS:
            time.sleep(0.001)
        return h

    def comm_split_started(self, parent, color, key, config=None):
        with self.lock:
            p = self.comms[parent]
            p.splits += 1
            entry = p.group.splits.setdefault(p.splits, {})
            holder = ctypes.c_void_p()
            entry[p.rank] = (holder, color, key, bool(config.blocking) if config is not None else p.blocking)
            p.pending = f"split {p.splits}"
            self._try_split(p.group, p.splits)
            return holder

    def _try_split(self, g: Group, number: int) -> None:
        entry = g.splits[number]
        if len(entry) < g.n or any(self.comms[h].aborted for h in g.handles.values()):
            return
        child = Group(g.n)
        for rank, (holder, _color, _key, blocking) in sorted(entry.items(), key=lambda kv: kv[1][2]):
            c = self._new_comm(child, rank, blocking, self.comms[g.handles[rank]].device)
            holder.value = c.handle
        for h in g.handles.values():
            self.comms[h].pending = ""

    def comm_get_async_error(self, handle) -> int:
        with self.lock:
            c = self.comms[handle]
            if c.aborted:
                return 6
            if c.pending == "init":
                if len(c.group.handles) < c.group.n:
                    return self.IN_PROGRESS
                for h in c.group.handles.values():
                    if self.comms[h].pending == "init":
                        self.comms[h].pending = ""
                return 0
            return self.IN_PROGRESS if c.pending else 0

    def comm_abort(self, handle) -> None:
        with self.lock:
            self.comms[handle].aborted = True
            self.aborted.append(handle)

    def comm_destroy(self, handle) -> None:
        with self.lock:
            self.destroyed.append(handle)

    # -- memory ---------------------------------------------------------------------------------
    def mem_alloc(self, nbytes):
        return self.cuda.malloc(nbytes)

    def mem_free(self, ptr):
        self.cuda.free(ptr)

    # -- collectives ------------------------------------------------------------------------------
    def all_reduce(self, send, recv, count, dtype, op, comm, stream) -> None:
        with self.lock:
            c = self.comms[comm]
            if c.aborted:
                raise self.error("ncclAllReduce", 5, comm)
            c.posted += 1
            stop = self.stop_after.get(c.device) if c.blocking else None
            ops = c.group.ops[c.rank]
            if stop is None or c.posted <= stop[0]:
                ops.append(Op(send, recv, count, dtype, op, stream))
                self.streams.setdefault(stream, []).append((c.group, c.rank, len(ops) - 1))
                return
        time.sleep(stop[1])  # stopped: this thread does nothing more for a while, its peers wait
        raise self.error("ncclAllReduce", 6, comm)

    def _complete(self, g: Group) -> None:
        while all(len(g.ops.get(r, [])) > g.done for r in range(g.n)):
            k = g.done
            ops = [g.ops[r][k] for r in range(g.n)]
            dt = DTYPE_BY_ID[ops[0].dtype]
            nbytes = ops[0].count * dt.itemsize
            arrays = [view(o.send, nbytes).view(NP[dt.name]).copy() for o in ops]
            fn = {0: np.add, 1: np.multiply, 2: np.maximum, 3: np.minimum}[ops[0].op]
            out = arrays[0]
            for a in arrays[1:]:
                out = fn(out, a)
            raw = out.astype(NP[dt.name]).tobytes()
            # the op starts on the "device" when its last member enqueued it (not when a host
            # thread next polled: that made the figures the GIL's and the polling's, with 1 % tails
            # of -6 % that a GPU's own timing does not have)
            start = max(o.posted_at for o in ops)
            rate = min(self.rates.get(self.comms[g.handles[r]].device, self.base_rate) for r in range(g.n))
            for r, o in enumerate(ops):
                ctypes.memmove(o.recv, raw, nbytes)
                prev = g.ops[r][k - 1].done_at if k else None
                o.done_at = max(start, prev or start) + nbytes / (rate * 1e9) + 2e-5
            g.done += 1

    def stream_ready_at(self, stream: int) -> float | None:
        """When the stream's last op completes, once all its ops have every member's post (else None)."""
        with self.lock:
            entries = self.streams.get(stream, [])
            times = [g.ops[rank][k].done_at for g, rank, k in entries]
            return None if not times or any(t is None for t in times) else max(t for t in times if t is not None)

    def stream_done(self, stream: int) -> bool:
        with self.lock:
            entries = self.streams.get(stream, [])
            for g in {id(g): g for g, _, _ in entries}.values():
                self._complete(g)
            now = time.monotonic()
            for g, rank, k in entries:
                o = g.ops[rank][k]
                if o.done_at is None or o.done_at > now:
                    return False
            self.streams[stream] = []
            return True


def gpu_rank_opener(lib: FakeNccl):
    """GpuRankService's opener: a GpuRank on the fake library, runtime and kernels."""
    from ncclbench.health.runtime.nccl_group import GpuRank

    def open_rank(world_rank: int, hostname: str) -> GpuRank:
        lib.cuda._tls.host = hostname
        gpu = GpuRank(lib, lib.cuda, world_rank, hostname)
        gpu.kernels = _KernelsFor()
        return gpu

    return open_rank


class _KernelsFor(dict):
    """GpuRank.kernels: fake kernels for whichever device asks."""

    def get(self, device, default=None):
        return super().get(device) or self.setdefault(device, FakeKernels())
