"""The NCCL worker's C timed loop (backends/nccl_native.py) without a GPU: a
real NcclWorker and NcclCommunicator over recording doubles, whose libnccl and
driver functions are ctypes callbacks the C loop calls.  Checks that recorded
ops reach the C loop as the right NCCL calls with their arguments, that the
stream wait runs, and that failures become the Python path's errors."""

from __future__ import annotations

import ctypes as C

import pytest
from test_nccl_worker_cpu import FakeCuda, FakeLib, make_worker

from ncclbench.backends.nccl_native import build_native_batch
from ncclbench.core.config import BenchOptions
from ncclbench.core.datatypes import DATATYPE_BY_NAME, REDOP_BY_NAME
from ncclbench.core.errors import BenchError, ExitCode
from ncclbench.cuda.runtime import CudaError
from ncclbench.nccl import native_loop as nl
from ncclbench.nccl.binding import NcclError
from ncclbench.nccl.communicator import NcclCommunicator

ext, why = nl.load_extension()
pytestmark = pytest.mark.skipif(ext is None, reason=f"native loop not built: {why}")

COLL7 = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_size_t, C.c_int, C.c_int, C.c_void_p, C.c_void_p)
VOID = C.CFUNCTYPE(C.c_int)
COPY = C.CFUNCTYPE(C.c_int, C.c_uint64, C.c_uint64, C.c_size_t, C.c_void_p)
QUERY = C.CFUNCTYPE(C.c_int, C.c_void_p)
ASYNC = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.c_int))


class FakeDriver:
    """libnccl/libcuda entry points as callbacks, with what they were called with."""

    def __init__(self, allreduce_rc=0, busy_polls=2, query_rc=0, async_code=0):
        self.log: list[tuple] = []
        self.busy = busy_polls

        def allreduce(*a):
            self.log.append(("ncclAllReduce", tuple(0 if x is None else x for x in a)))
            return allreduce_rc

        def group(name):
            def fn():
                self.log.append((name, ()))
                return 0
            return fn

        def copy(*a):
            self.log.append(("copy", tuple(0 if x is None else x for x in a)))
            return 0

        def query(stream):
            if query_rc:
                return query_rc
            if self.busy > 0:
                self.busy -= 1
                return 600
            return 0

        def async_error(comm, out):
            out[0] = async_code
            return 0

        self.cbs = {"ncclAllReduce": COLL7(allreduce), "ncclGroupStart": VOID(group("start")),
                    "ncclGroupEnd": VOID(group("end")), "cuMemcpyDtoDAsync_v2": COPY(copy),
                    "cuStreamQuery": QUERY(query), "ncclCommGetAsyncError": ASYNC(async_error)}

    def loop(self) -> nl.NativeLoop:
        loop = nl.NativeLoop(ext, None, None)  # type: ignore[arg-type]
        loop._addr.update({k: C.cast(v, C.c_void_p).value for k, v in self.cbs.items()})
        loop.keep_alive = self  # type: ignore[attr-defined]  # the callbacks must outlive the loop
        return loop


class DriverCuda(FakeCuda):
    def fail_driver(self, call, err):
        return CudaError(f"node1: Test CUDA failure {call} '{err}'")


def worker_with(driver: FakeDriver, lib=None, opts=None):
    lib = lib or FakeLib()
    worker = make_worker(DriverCuda(), lib, opts=opts or BenchOptions(), ngpus=1)
    worker.setup.native_loop = driver.loop()
    slot = worker.slots[0]
    slot.comm = NcclCommunicator(lib, slot.handle, 0, 1, slot.stream, 0)
    return worker, slot.comm, lib


def allreduce_op(comm, k):
    f32, total = DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"]
    return [(comm, "all_reduce", (0x10000 + 8 * k, 0x20000 + 8 * k, 2, f32, total))]


def test_recorded_ops_run_as_nccl_calls_and_the_streams_are_waited_for():
    drv = FakeDriver(busy_polls=3)
    worker, comm, _ = worker_with(drv)
    ops = [allreduce_op(comm, k) for k in range(3)]
    ops[1] = [(comm, "group_start", ()), *ops[1], (comm, "local_copy", (0x30000, 0x40000, 64)),
              (comm, "local_copy", (0x50000, 0x60000, 0)), (comm, "group_end", ())]
    batch = build_native_batch(worker, ops)
    assert batch is not None
    enqueued, elapsed = batch.run()
    assert 0 <= enqueued <= elapsed
    f32 = DATATYPE_BY_NAME["float"].nccl_id
    ar = [(0x10000 + 8 * k, 0x20000 + 8 * k, 2, f32, 0, 100, 200) for k in range(3)]
    assert drv.log == [("ncclAllReduce", ar[0]), ("start", ()), ("ncclAllReduce", ar[1]),
                       ("copy", (0x30000, 0x40000, 64, 200)), ("end", ()), ("ncclAllReduce", ar[2])]
    assert drv.busy == 0  # polled until the stream reported done


def test_a_failing_call_is_the_nccl_error_of_that_rank():
    drv = FakeDriver(allreduce_rc=4)
    worker, comm, lib = worker_with(drv)
    batch = build_native_batch(worker, [allreduce_op(comm, 0)])
    with pytest.raises(NcclError) as info:
        batch.run()
    assert info.value.function == "ncclAllReduce" and info.value.code == ExitCode.NCCL_ERROR


def test_async_error_timeout_and_query_failure():
    worker, comm, lib = worker_with(FakeDriver(busy_polls=10**9, async_code=6))
    with pytest.raises(NcclError) as info:
        build_native_batch(worker, [allreduce_op(comm, 0)]).run()
    assert "ncclCommGetAsyncError" in info.value.message and lib.aborted == [100]

    worker, comm, lib = worker_with(FakeDriver(busy_polls=10**9), opts=BenchOptions(timeout=1))
    with pytest.raises(BenchError) as timeout:
        build_native_batch(worker, [allreduce_op(comm, 0)]).run()
    assert timeout.value.code == ExitCode.TIMEOUT and "Test timeout (1s)" in timeout.value.message
    assert lib.aborted == [100]

    worker, comm, _ = worker_with(FakeDriver(query_rc=700))
    with pytest.raises(CudaError, match="cuStreamQuery"):
        build_native_batch(worker, [allreduce_op(comm, 0)]).run()


def test_ops_the_communicator_cannot_prebind_keep_the_python_path():
    worker, comm, _ = worker_with(FakeDriver())
    mulsum = [(comm, "all_reduce", (0x1000, 0x2000, 2, DATATYPE_BY_NAME["float"], REDOP_BY_NAME["mulsum"]))]
    assert build_native_batch(worker, [mulsum]) is None
    worker.setup.native_loop = None
    assert build_native_batch(worker, [allreduce_op(comm, 0)]) is None


def test_the_untimed_first_op_runs_alone_through_the_c_loop():
    drv = FakeDriver()
    worker, comm, _ = worker_with(drv)
    batch = build_native_batch(worker, [allreduce_op(comm, k) for k in range(4)])
    batch.issue_first()
    assert [name for name, _ in drv.log] == ["ncclAllReduce"] and drv.log[0][1][0] == 0x10000
    failing = FakeDriver(allreduce_rc=5)
    worker, comm, _ = worker_with(failing)
    with pytest.raises(NcclError):
        build_native_batch(worker, [allreduce_op(comm, 0)]).issue_first()
