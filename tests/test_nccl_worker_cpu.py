"""NcclWorker logic that needs no GPU: completion polling, async errors, -T
timeout, unalign shifts, device lines and the -M report, over recording
doubles of the CUDA runtime and libnccl."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from ncclbench.backends.nccl_gpu import NcclSlot, NcclWorker, ProcessSetup
from ncclbench.backends.threads import ThreadTeam
from ncclbench.core.config import BenchOptions
from ncclbench.core.errors import BenchError, ExitCode
from ncclbench.cuda.runtime import DeviceProps
from ncclbench.launch.hostcomm import SingleHostComm
from ncclbench.nccl.binding import Capabilities, NcclError


class FakeCuda:
    def __init__(self, ready_after: int = 0, free: int = 10 << 30):
        self.ready_after, self.queries, self.free = ready_after, 0, free
        self.devices_set: list[int] = []

    def set_device(self, d):
        self.devices_set.append(d)

    def stream_query(self, stream):
        self.queries += 1
        return self.ready_after >= 0 and self.queries > self.ready_after

    def mem_get_info(self):
        return self.free, 80 << 30


class FakeLib:
    def __init__(self, async_error: int = 0):
        self.caps = Capabilities(*([True] * len(Capabilities.__dataclass_fields__)))
        self.async_error, self.aborted = async_error, []

    def comm_get_async_error(self, comm):
        return self.async_error

    def comm_abort(self, comm):
        self.aborted.append(comm)

    def error(self, function, result, comm=None):
        return NcclError(function, result, "remote process exited or there was a network error", "peer gone")


def make_worker(cuda, lib, opts=None, ngpus=2):
    opts = opts or BenchOptions(ngpus=ngpus)
    host = SingleHostComm()
    setup = ProcessSetup(opts=opts, host=host, lib=lib, cuda=cuda, team=ThreadTeam(1, host), world_rank=0,
                         world_size=1, hostname="node1", hosts=["node1"], local_rank=0, color=0, colors=[0],
                         group_proc=0, group_size=1, nranks=ngpus, base_device=0, max_bytes=1 << 20,
                         min_cuda_arch=900, register_mode=0, notes=[])
    props = DeviceProps(0, "NVIDIA H200", 140 << 30, 9, 0, 0, 0x19, 0)
    slots = [NcclSlot(rank=g, comm=None, send=0, recv=0, device=g, handle=100 + g, stream=200 + g,
                      send_base=4096 * (g + 1), recv_base=8192 * (g + 1), local_index=g,
                      props=replace(props, ordinal=g, pci_bus=0x19 + g)) for g in range(ngpus)]
    return NcclWorker(setup, 0, slots, init_mem=600 << 20, user_mem=4 << 20,
                      free_after_setup=[cuda.free + (1 << 20)] * ngpus)


def test_wait_polls_until_every_stream_is_done():
    cuda = FakeCuda(ready_after=5)
    worker = make_worker(cuda, FakeLib())
    worker.wait()
    assert cuda.queries >= 6
    assert not worker._aborted


def test_async_error_aborts_and_raises_nccl_error():
    lib = FakeLib(async_error=6)
    worker = make_worker(FakeCuda(ready_after=-1), lib)
    with pytest.raises(NcclError) as info:
        worker.wait()
    assert info.value.code == ExitCode.NCCL_ERROR
    assert info.value.message.endswith("(rank 0)")
    assert "ncclCommGetAsyncError" in info.value.message
    assert lib.aborted == [100, 101]


def test_in_progress_is_not_an_error():
    cuda = FakeCuda(ready_after=3)
    worker = make_worker(cuda, FakeLib(async_error=7))
    worker.wait()
    assert not worker._aborted


def test_timeout_aborts_communicators_and_exits_4():
    lib = FakeLib()
    worker = make_worker(FakeCuda(ready_after=-1), lib, BenchOptions(ngpus=2, timeout=1))
    t0 = time.monotonic()
    with pytest.raises(BenchError) as info:
        worker.wait()
    assert 1.0 <= time.monotonic() - t0 < 10
    assert info.value.code == ExitCode.TIMEOUT
    assert info.value.message == "node1: Test timeout (1s)"
    assert lib.aborted == [100, 101]
    worker.abort()  # idempotent
    assert lib.aborted == [100, 101]


def test_devices_lines_and_reporter():
    worker = make_worker(FakeCuda(), FakeLib())
    devs = worker.devices()
    assert [(d.rank, d.device, d.device_hex, d.hostname) for d in devs] == [
        (0, 0, "0000:19:00", "node1"), (1, 1, "0000:1a:00", "node1")]
    assert worker.is_reporter


def test_gather_devices_single_process():
    worker = make_worker(FakeCuda(), FakeLib())
    assert [d.rank for d in worker.gather_devices()] == [0, 1]


def test_memory_report_line():
    cuda = FakeCuda(free=10 << 30)
    worker = make_worker(cuda, FakeLib())
    assert worker.memory_figures() == (600 << 20, 4 << 20, 1 << 20)
    assert worker.memory_report() == ("# GPU memory usage     : Initialization 600 MB | "
                                      "User-Allocated 4.00 MB | Collective 1.00 MB | Total  605 MB")


def test_two_thread_workers_share_host_collectives():
    """-t 2 -g 1: two workers of one process meet in a ThreadTeam."""
    import threading

    cuda, lib = FakeCuda(ready_after=0), FakeLib()
    opts = BenchOptions(nthreads=2, ngpus=1)
    host = SingleHostComm()
    setup = ProcessSetup(opts=opts, host=host, lib=lib, cuda=cuda, team=ThreadTeam(2, host), world_rank=0,
                         world_size=1, hostname="node1", hosts=["node1"], local_rank=0, color=0, colors=[0],
                         group_proc=0, group_size=1, nranks=2, base_device=0, max_bytes=1 << 20,
                         min_cuda_arch=900, register_mode=0, notes=[])
    props = DeviceProps(0, "NVIDIA H200", 140 << 30, 9, 0, 0, 0x19, 0)
    workers = [NcclWorker(setup, t, [NcclSlot(rank=t, comm=None, send=0, recv=0, device=t, handle=100 + t,
                                              stream=200 + t, local_index=t, props=props)],
                          init_mem=t, user_mem=0, free_after_setup=[cuda.free]) for t in range(2)]
    out = {}

    def drive(w):
        w.barrier()
        out[w.thread] = (w.allreduce_host(1.5 + w.thread, "sum"), w.gather_devices(), w.is_reporter)

    threads = [threading.Thread(target=drive, args=(w,)) for w in workers]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=20)
    assert out[0][0] == out[1][0] == 4.0
    assert [d.rank for d in out[0][1]] == [0, 1] and [d.device for d in out[0][1]] == [0, 1]
    assert out[0][2] and not out[1][2]


class CaptureCuda(FakeCuda):
    """Records capture, instantiate and copy calls with the device current then."""

    def __init__(self, fail_end_on: int | None = None):
        super().__init__()
        self.log: list[tuple] = []
        self.current, self.capturing, self.fail_end_on = 0, set(), fail_end_on

    def set_device(self, d):
        super().set_device(d)
        self.current = d

    def begin_capture(self, stream, thread_local=True):
        self.capturing.add(stream)
        self.log.append(("begin", stream))

    def end_capture(self, stream):
        from ncclbench.cuda.runtime import CudaError

        if stream not in self.capturing or stream == self.fail_end_on:
            self.capturing.discard(stream)
            raise CudaError("not capturing")
        self.capturing.discard(stream)
        self.log.append(("end", stream))
        return 1000 + stream

    def graph_instantiate(self, graph):
        # CUDA refuses this while any of the thread's streams still captures.
        assert not self.capturing, "instantiated while a stream was capturing"
        self.log.append(("instantiate", graph))
        return 2000 + graph

    def graph_destroy(self, graph):
        self.log.append(("destroy", graph))

    def bound_dtod_copy(self, dst, src, nbytes, stream):
        return lambda: self.log.append(("copy", stream, self.current))


def test_graphs_of_several_gpus_are_instantiated_after_every_capture_ended():
    cuda = CaptureCuda()
    worker = make_worker(cuda, FakeLib(), ngpus=4)
    worker.begin_capture()
    graph = worker.end_capture()
    kinds = [k for k, _ in cuda.log]
    assert kinds == ["begin"] * 4 + ["end"] * 4 + ["instantiate"] * 4
    assert [p[3] for p in graph.parts] == [2000 + 1000 + 200 + g for g in range(4)]


def test_abandoned_capture_ends_every_stream_and_drops_the_graphs():
    cuda = CaptureCuda(fail_end_on=201)  # one stream's capture already invalidated
    worker = make_worker(cuda, FakeLib(), ngpus=3)
    worker.begin_capture()
    worker.abandon_capture()
    assert not cuda.capturing
    assert ("destroy", 1200) in cuda.log and ("destroy", 1202) in cuda.log
    assert cuda.current == 0  # the worker's first GPU is current again


def test_bound_copy_sets_the_ranks_device_when_a_thread_drives_several():
    cuda = CaptureCuda()
    worker = make_worker(cuda, FakeLib(), ngpus=2)
    copies = [worker.bind_copy(1, 2, 3, 200 + g, device=g) for g in (1, 0, 1)]
    for c in copies:
        c()
    assert [e for e in cuda.log if e[0] == "copy"] == [("copy", 201, 1), ("copy", 200, 0), ("copy", 201, 1)]
    single = make_worker(CaptureCuda(), FakeLib(), ngpus=1)
    assert single.bind_copy(1, 2, 3, 200, device=0).__name__ == "<lambda>"  # one GPU: the bare bound copy


class TeardownCuda(FakeCuda):
    """Records what close gives back, and on which device."""

    def __init__(self):
        super().__init__()
        self.log: list[tuple] = []

    def set_device(self, d):
        self.log.append(("device", d))

    def stream_synchronize(self, stream):
        pass

    def stream_destroy(self, stream):
        self.log.append(("destroy stream", stream))


def test_close_releases_each_slots_buffers_and_stream_on_its_device():
    cuda, lib = TeardownCuda(), FakeLib()
    destroyed: list[int] = []
    lib.comm_destroy = destroyed.append  # type: ignore[attr-defined]
    worker = make_worker(cuda, lib)
    cuda.free = lambda ptr: cuda.log.append(("free", ptr))  # FakeCuda.free was the free memory
    worker.close()
    assert destroyed == [100, 101]
    released = cuda.log[cuda.log.index(("device", 0), 2):]  # after the synchronize pass
    assert released == [("device", 0), ("free", 4096), ("free", 8192), ("destroy stream", 200),
                        ("device", 1), ("free", 8192), ("free", 16384), ("destroy stream", 201)]
    assert all((s.send_base, s.recv_base, s.handle) == (0, 0, 0) for s in worker.slots)
    worker.close()  # safe twice: nothing released again
    assert len(cuda.log) == 2 + len(released)  # the first pass set each device once
