"""The timed loop runs with Python's garbage collector off (a collection inside
the clock would add its pause to one op) and leaves it as it found it."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest

from ncclbench.collectives import COLLECTIVES
from ncclbench.core.config import BenchOptions
from ncclbench.core.datatypes import DATATYPE_BY_NAME, REDOP_BY_NAME
from ncclbench.run.timing import Placement, measure


class ProbeComm:
    """One rank whose compiled op records whether the GC was on."""

    rank, nranks = 0, 1

    def __init__(self):
        self.gc_during_timed_ops: list[bool] = []

    def compile(self, calls):
        return lambda: self.gc_during_timed_ops.append(gc.isenabled())

    def compile_group(self, items):
        return None

    def all_reduce(self, *args):  # the untimed warm-up op goes through the method
        pass


class ProbeWorker:
    nranks, max_bytes = 1, 1 << 20

    def __init__(self, comm):
        self.slots = [SimpleNamespace(rank=0, comm=comm, send=1 << 20, recv=1 << 22)]

    def wait(self):
        pass

    def barrier(self):
        pass

    def group_start(self):
        pass

    def group_end(self):
        pass

    def allreduce_host(self, value, op):
        return value

    def native_batch(self, ops):  # Worker's default: the prepared callables run the loop
        return None


@pytest.mark.parametrize("was_enabled", [True, False])
def test_gc_is_off_inside_the_clock_and_restored(was_enabled):
    comm = ProbeComm()
    worker = ProbeWorker(comm)
    coll = COLLECTIVES["all_reduce"]
    pl = Placement(worker, coll, DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"], -1,
                   coll.counts(256, 1, 4), False)
    (gc.enable if was_enabled else gc.disable)()
    try:
        m, wrong = measure(worker, pl, BenchOptions(iters=7, check=0))
        assert gc.isenabled() == was_enabled
    finally:
        gc.enable()
    # The untimed op 0 runs through the compiled op too (GC as found), then 7 timed.
    assert comm.gc_during_timed_ops == [was_enabled] + [False] * 7 and wrong == 0 and m.time_us >= 0


class CapturingWorker(ProbeWorker):
    """Records the capture calls; its compiled op fails on the 3rd call."""

    def __init__(self, comm):
        super().__init__(comm)
        self.log: list[str] = []

    def begin_capture(self):
        self.log.append("begin")

    def end_capture(self):
        self.log.append("end")
        return "graph"

    def abandon_capture(self):
        self.log.append("abandon")

    def launch_graph(self, graph, times):
        self.log.append(f"launch x{times}")

    def destroy_graph(self, graph):
        self.log.append("destroy")


class FailingComm(ProbeComm):
    def compile(self, calls):
        def op():
            self.gc_during_timed_ops.append(gc.isenabled())
            if len(self.gc_during_timed_ops) == 4:  # the untimed op, then the 3rd timed one
                raise RuntimeError("NCCL failure inside the capture")
        return op


@pytest.mark.parametrize("fails", [False, True])
def test_a_failure_inside_a_capture_ends_the_capture_before_cleanup(fails):
    comm = FailingComm() if fails else ProbeComm()
    worker = CapturingWorker(comm)
    coll = COLLECTIVES["all_reduce"]
    pl = Placement(worker, coll, DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"], -1,
                   coll.counts(256, 1, 4), False)
    opts = BenchOptions(iters=5, check=0, cudagraph=4)
    if fails:
        with pytest.raises(RuntimeError, match="inside the capture"):
            measure(worker, pl, opts)
        assert worker.log == ["begin", "abandon"]
    else:
        measure(worker, pl, opts)
        assert worker.log == ["begin", "end", "launch x4", "destroy"]
