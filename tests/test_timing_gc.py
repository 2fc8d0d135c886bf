"""The timed loop runs with Python's garbage collector off (a collection inside
the clock would add its pause to one op) and leaves it as it found it."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest

from ncclbench.collectives import COLLECTIVES
from ncclbench.config import BenchOptions
from ncclbench.datatypes import DATATYPE_BY_NAME, REDOP_BY_NAME
from ncclbench.harness.timing import Placement, measure


class ProbeComm:
    """One rank whose compiled op records whether the GC was on."""

    rank, nranks = 0, 1

    def __init__(self):
        self.gc_during_timed_ops: list[bool] = []

    def compile(self, calls):
        return lambda: self.gc_during_timed_ops.append(gc.isenabled())

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
    assert comm.gc_during_timed_ops == [False] * 7 and wrong == 0 and m.time_us >= 0
