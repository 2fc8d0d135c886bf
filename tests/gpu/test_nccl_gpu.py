"""The NCCL backend on a real GPU: 1-rank communicators, every collective with
real data movement, graphs, events, registration, null stream, error paths.

Runs only where a GPU and libnccl are present (skipped cleanly elsewhere).
Export NCCL_NVLS_ENABLE=0 on shared machines."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from ncclbench.backends.select import gpu_count  # noqa: E402


def _gpu_present() -> bool:
    return gpu_count() > 0


if not _gpu_present():
    pytest.skip("needs an NVIDIA GPU with a driver", allow_module_level=True)

# Never NVLink SHARP on shared machines. Set only where the module runs: at collection on a machine
# without a GPU it leaked into the whole session's environment and into every later test's children.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

from ncclbench.backends.nccl_setup import create_nccl_workers  # noqa: E402
from ncclbench.collectives import COLLECTIVES  # noqa: E402
from ncclbench.collectives.collective import CallArgs  # noqa: E402
from ncclbench.core.config import Backend, BenchOptions  # noqa: E402
from ncclbench.core.datatypes import DATATYPE_BY_NAME, NO_OP, REDOP_BY_NAME  # noqa: E402
from ncclbench.core.errors import BenchError, ExitCode  # noqa: E402
from ncclbench.launch.hostcomm import SingleHostComm  # noqa: E402
from ncclbench.nccl import runmodel  # noqa: E402
from ncclbench.nccl.binding import NcclError, scalar_bytes  # noqa: E402
from ncclbench.nccl.communicator import NcclCommunicator  # noqa: E402
from ncclbench.run.plan import make_plan  # noqa: E402

MAX_BYTES = 4 << 20
F32 = DATATYPE_BY_NAME["float"]


def make(collective: str = "all_reduce", **kw):
    opts = BenchOptions(collective=collective, program=f"{collective}_perf", max_bytes=kw.pop("max_bytes", MAX_BYTES),
                        min_bytes=8, **kw)
    workers = create_nccl_workers(opts, SingleHostComm(), collective)
    assert len(workers) == opts.nthreads
    return workers[0]


@pytest.fixture(scope="module")
def worker():
    w = make()
    yield w
    w.close()


def put(worker, ptr: int, data: bytes) -> None:
    worker.cuda.memcpy_htod(ptr, data)


def get(worker, ptr: int, nbytes: int) -> bytes:
    return worker.cuda.memcpy_dtoh(ptr, nbytes)


def run_one(worker, name: str, count: int, dtype=F32, op=None, root=0, in_place=False):
    """Launch one call of collective `name` for `count` requested elements; return
    (send bytes written, recv bytes read back, counts)."""
    coll = COLLECTIVES[name]
    slot = worker.slots[0]
    counts = coll.counts(count, worker.nranks, dtype.itemsize)
    args = CallArgs(dtype=dtype, op=op or (REDOP_BY_NAME["sum"] if coll.reduces else NO_OP), root=root,
                    rank=slot.rank, nranks=worker.nranks, counts=counts)
    rng = np.random.default_rng(len(name) * 1000 + count)
    send_bytes = counts.send_count * dtype.itemsize
    recv_bytes = counts.recv_count * dtype.itemsize
    data = rng.integers(1, 100, counts.send_count).astype(np.float32).tobytes() if dtype is F32 else \
        rng.integers(0, 256, send_bytes, dtype=np.uint8).tobytes()
    worker.zero(slot, slot.recv, max(recv_bytes, send_bytes))
    worker.wait()
    if in_place:
        soff, roff = coll.in_place_offsets(counts, slot.rank)
        send = slot.recv + soff * dtype.itemsize
        recv = slot.recv + roff * dtype.itemsize
    else:
        send, recv = slot.send, slot.recv
    put(worker, send, data)
    worker.group_start()
    coll.launch(slot.comm, send, recv, args)
    worker.group_end()
    worker.wait()
    return data, get(worker, slot.recv, recv_bytes), counts


def test_setup_facts(worker):
    slot = worker.slots[0]
    (dev,) = worker.devices()
    assert dev.device == slot.device == 0 and dev.rank == 0 and dev.group == 0
    assert len(dev.device_hex) == 10 and dev.device_hex[4] == ":"
    assert "NVIDIA" in dev.device_info
    assert worker.nranks == 1 and worker.max_bytes == MAX_BYTES
    assert worker.lib.caps.mem_alloc and slot.allocated_by_nccl
    assert worker.slots[0].comm.rank == 0
    assert worker.lib.comm_count(slot.handle) == 1
    assert worker.lib.comm_cu_device(slot.handle) == slot.device
    init, user, _ = worker.memory_figures()
    assert init > 0
    assert user >= 2 * MAX_BYTES
    print(f"\n[facts] {worker.lib.describe()} device {dev.device} [{dev.device_hex}] {dev.device_info} "
          f"init={init} user={user}")


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
def test_every_collective_moves_data(worker, name):
    for count in (1024, 1000, 262144):
        data, out, counts = run_one(worker, name, count)
        assert counts.recv_count > 0
        if name == "alltoallv":
            n = len(out)
            assert out == data[:n]
        else:
            assert out == data[:len(out)], f"{name} count {count}"


@pytest.mark.parametrize("name", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                                  "gather", "scatter", "hypercube"])
def test_in_place(worker, name):
    data, out, counts = run_one(worker, name, 4096, in_place=True)
    assert out[:len(data)] == data[:len(out)]


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "avg", "mulsum"])
def test_reduction_ops_on_one_rank_are_identity(worker, op):
    data, out, _ = run_one(worker, "all_reduce", 65536, op=REDOP_BY_NAME[op])
    assert out == data


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float",
                                   "double", "bfloat16"])
def test_premulsum_scalar_two_doubles_values(worker, dtype):
    """An odd rank's mulsum multiplies by 2: a communicator that believes it is
    rank 1 (on the real 1-rank comm) checks the scalar encoding of every type.
    (fp8 is left out: NCCL 2.28.9 answers premulsum on fp8 with "invalid argument".)"""
    dt = DATATYPE_BY_NAME[dtype]
    slot = worker.slots[0]
    odd = NcclCommunicator(worker.lib, slot.handle, 1, 1, slot.stream, slot.device)
    n = 4096
    put(worker, slot.send, scalar_bytes(dt, 1) * n)
    worker.zero(slot, slot.recv, n * dt.itemsize)
    odd.all_reduce(slot.send, slot.recv, n, dt, REDOP_BY_NAME["mulsum"])
    worker.wait()
    assert get(worker, slot.recv, n * dt.itemsize) == scalar_bytes(dt, 2) * n


def test_send_recv_fallbacks_without_native_calls(worker):
    lib = worker.lib
    saved = lib.caps
    lib.caps = replace(saved, alltoall=False, gather=False, scatter=False)
    try:
        for name in ("alltoall", "gather", "scatter"):
            data, out, _ = run_one(worker, name, 8192)
            assert out == data[:len(out)]
    finally:
        lib.caps = saved


def test_graph_capture_and_replay(worker):
    slot = worker.slots[0]
    n = 1 << 18
    data = np.arange(n, dtype=np.float32).tobytes()
    put(worker, slot.send, data)
    worker.zero(slot, slot.recv, n * 4)
    worker.wait()
    worker.begin_capture()
    for _ in range(10):
        slot.comm.all_reduce(slot.send, slot.recv, n, F32, REDOP_BY_NAME["sum"])
    graph = worker.end_capture()
    assert get(worker, slot.recv, 16) == bytes(16)  # captured, not run
    t0 = time.perf_counter()
    worker.launch_graph(graph, 5)
    worker.wait()
    dt = time.perf_counter() - t0
    assert get(worker, slot.recv, n * 4) == data
    worker.destroy_graph(graph)
    print(f"\n[graph] 50 all_reduce of 1 MiB replayed in {dt * 1e6:.1f} us ({dt * 1e6 / 50:.2f} us/op)")
    # Global capture mode (nccl-tests' check run with -t 1) works too.
    worker.begin_capture(thread_local=False)
    slot.comm.all_reduce(slot.send, slot.recv, 16, F32, REDOP_BY_NAME["sum"])
    g2 = worker.end_capture()
    worker.launch_graph(g2, 1)
    worker.wait()
    worker.destroy_graph(g2)


def test_event_timer(worker):
    slot = worker.slots[0]
    n = 1 << 20
    iters = 8
    timer = worker.iteration_timer(iters + 1)
    for j in range(iters):
        timer.record(j)
        slot.comm.all_reduce(slot.send, slot.recv, n, F32, REDOP_BY_NAME["sum"])
    timer.record(iters)
    worker.wait()
    samples = timer.samples_us()
    assert len(samples) == iters and all(s > 0 for s in samples)
    assert timer.samples_us() is samples
    paired = worker.iteration_timer(2 * 3, paired=True)
    for j in range(3):
        paired.record(2 * j)
        slot.comm.all_reduce(slot.send, slot.recv, n, F32, REDOP_BY_NAME["sum"])
        paired.record(2 * j + 1)
    worker.wait()
    assert len(paired.samples_us()) == 3
    print(f"\n[events] all_reduce 4 MiB per-iteration us: {[round(s, 2) for s in samples]}")


def test_latency_small_messages(worker):
    slot = worker.slots[0]
    comm, op = slot.comm, REDOP_BY_NAME["sum"]
    results = {}
    for nbytes in (8, 1 << 20, 4 << 20):
        count = nbytes // 4
        for _ in range(5):
            comm.all_reduce(slot.send, slot.recv, count, F32, op)
        worker.wait()
        iters = 200
        t0 = time.perf_counter()
        for _ in range(iters):
            comm.all_reduce(slot.send, slot.recv, count, F32, op)
        t_enq = time.perf_counter() - t0
        worker.wait()
        t = time.perf_counter() - t0
        results[nbytes] = (t / iters * 1e6, t_enq / iters * 1e6)
    t0 = time.perf_counter()
    for _ in range(1000):
        worker.wait()
    idle_wait = (time.perf_counter() - t0) / 1000 * 1e6
    print(f"\n[latency] all_reduce 1 rank, per op (total us, enqueue us): "
          f"{ {k: (round(a, 2), round(b, 2)) for k, (a, b) in results.items()} }; idle wait() {idle_wait:.2f} us")
    assert results[8][0] < 1000


def test_memory_report_line(worker):
    line = worker.memory_report()
    assert line.startswith("# GPU memory usage     : Initialization ")
    assert " | User-Allocated " in line and " | Collective " in line and " | Total  " in line
    print(f"\n[memory] {line}")


@pytest.mark.parametrize("mode", [1, 2])
def test_registration(mode):
    w = make(local_register=mode)
    try:
        slot = w.slots[0]
        assert w.setup.register_mode == mode and [n for n in w.notes if not n.startswith('NCCL calls')] == []
        if mode == 1:
            assert slot.send_reg and slot.recv_reg
        # -R 2: NCCL leaves the window NULL when the communicator has no
        # symmetric-memory support (a 1-rank communicator has none).
        print(f"\n[register -R {mode}] handles {slot.send_reg:#x} {slot.recv_reg:#x}")
        data, out, _ = run_one(w, "all_reduce", 65536)
        assert out == data
    finally:
        w.close()
    assert slot.send_reg == 0 and slot.send_base == 0


def test_null_stream_and_unalign():
    w = make(stream_null=True, unalign=3, cta_policy=1, datatypes=["double"])
    try:
        slot = w.slots[0]
        assert slot.stream == 0
        assert slot.send == slot.send_base  # -u skew is applied by the harness per datatype
        assert slot.alloc_bytes == MAX_BYTES + 24
        data, out, _ = run_one(w, "all_reduce", 4096)
        assert out == data
    finally:
        w.close()


def test_parallel_init_and_sendrecv_config():
    w = make("sendrecv", parallel_init=True)
    try:
        data, out, _ = run_one(w, "sendrecv", 4096)
        assert out == data
    finally:
        w.close()


def test_nccl_error_aborts_and_is_reported():
    w = make()
    slot = w.slots[0]
    with pytest.raises(NcclError) as info:
        slot.comm.broadcast(slot.send, slot.recv, 16, F32, root=3)  # no rank 3
    assert info.value.code == ExitCode.NCCL_ERROR
    assert "ncclBroadcast" in info.value.message and info.value.message.endswith("(rank 0)")
    assert w._aborted
    w.close()  # no second failure after an abort


def test_sizes_that_cannot_fit_are_refused(worker):
    cuda = worker.cuda
    cuda.set_device(0)
    free, total = cuda.mem_get_info()
    blocker = cuda.malloc(free - (6 << 30))
    try:
        with pytest.raises(BenchError) as info:
            make(max_bytes=8 << 30)
        assert info.value.code == ExitCode.CUDA_ERROR
        assert info.value.message.startswith(f"maxBytes {8 << 30} does not fit on GPU 0")
        print(f"\n[fit] {info.value.message}")
    finally:
        cuda.free(blocker)


def test_nccl_tests_clamp_is_reported():
    w = make(max_bytes=1 << 40, check=1)
    try:
        total = w.slots[0].props.total_mem
        assert w.max_bytes == runmodel.nccl_tests_max_bytes(total, True)
        plan = make_plan(w.opts, COLLECTIVES["all_reduce"], Backend.NCCL, w)
        assert plan.sizes.reduced_max_bytes == w.max_bytes and max(plan.sizes.sweep()) <= w.max_bytes
        print(f"\n[clamp] total {total} -> maxBytes {w.max_bytes}")
    finally:
        w.close()


def test_fill_and_check_kernels_when_available(worker):
    kernels = pytest.importorskip("ncclbench.cuda.kernels")
    assert kernels.DeviceKernels
    from ncclbench.core.fills import plain

    slot = worker.slots[0]
    fills = [plain(0, 1000, seed=3)]
    worker.fill(slot, slot.recv, fills, F32, NO_OP)
    assert worker.count_wrong(slot, slot.recv, 1000, fills, F32, NO_OP) == 0
    worker.zero(slot, slot.recv, 40)
    assert worker.count_wrong(slot, slot.recv, 1000, fills, F32, NO_OP) > 0


