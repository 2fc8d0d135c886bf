"""The timed loop's pre-bound NCCL calls make exactly the libnccl calls the
ordinary path makes, for every collective, placement, op and rank (the call
paths that carry them out are tested in test_nccl_callpath.py)."""

from __future__ import annotations

import pytest

from ncclbench.collectives import COLLECTIVES
from ncclbench.collectives.collective import CallArgs
from ncclbench.core.datatypes import DATATYPE_BY_NAME, NO_OP, REDOP_BY_NAME
from ncclbench.nccl.binding import Capabilities, NcclError, NcclLibrary
from ncclbench.nccl.communicator import NcclCommunicator
from ncclbench.run.recording import CallRecorder

RAW = {"_allreduce": "ncclAllReduce", "_bcast": "ncclBroadcast", "_reduce": "ncclReduce",
       "_allgather": "ncclAllGather", "_reducescatter": "ncclReduceScatter", "_gstart": "ncclGroupStart",
       "_gend": "ncclGroupEnd", "_send": "ncclSend", "_recv": "ncclRecv", "_alltoall": "ncclAlltoAll",
       "_gather": "ncclGather", "_scatter": "ncclScatter"}


def fake_library(log: list, native: bool, fail: str | None = None) -> NcclLibrary:
    """A real NcclLibrary object whose raw ctypes functions are recorders."""
    lib = object.__new__(NcclLibrary)
    for attr, name in RAW.items():
        def raw(*args, _name=name):
            log.append((_name, args))
            return 3 if _name == fail else 0
        setattr(lib, attr, raw)
    flags = {f: True for f in Capabilities.__dataclass_fields__}
    flags.update(alltoall=native, gather=native, scatter=native)
    lib.caps = Capabilities(**flags)
    lib.version_code = 22809
    lib.error = lambda function, result, comm=None: NcclError(function, result, "internal error", "", comm=comm)
    lib.call_path, lib.call_path_note = RecordingCallPath(lib, log, fail), ""
    return lib


class RecordingCallPath:
    """The compiled path's calls go through the library's call path: record them
    in the same (NCCL name, int args) form as the raw functions above."""

    def __init__(self, lib, log, fail, fail_comm=None):
        self.lib, self.log, self.fail, self.fail_comm = lib, log, fail, fail_comm
        self.builds = 0

    def build(self, calls, on_error):
        self.builds += 1

        def run():
            for name, args, comm in calls:
                self.log.append((name, args))
                if name == self.fail and self.fail_comm in (None, comm):
                    raise on_error(self.lib.error(name, 3, comm))
        return run


def both_paths(coll, n, rank, in_place, op, native):
    f32 = DATATYPE_BY_NAME["float"]
    counts = coll.counts(4096, n, 4)
    args = CallArgs(f32, op, 1 if coll.rooted else -1, rank, n, counts)
    send, recv = 1 << 20, 1 << 24
    if in_place:
        s_off, r_off = coll.in_place_offsets(counts, rank)
        send, recv = recv + 4 * s_off, recv + 4 * r_off
    direct, compiled = [], []
    coll.launch(NcclCommunicator(fake_library(direct, native), 77, rank, n, 99, 0,
                                 copy=lambda *a: direct.append(("cudaMemcpyAsync", a))),
                send, recv, args)
    comm = NcclCommunicator(fake_library(compiled, native), 77, rank, n, 99, 0,
                            copy=lambda *a: compiled.append(("cudaMemcpyAsync", a)))
    rec = CallRecorder(rank, n)
    coll.launch(rec, send, recv, args)
    fast = comm.compile(rec.calls)
    return direct, compiled, fast


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_compiled_calls_equal_the_method_path(name, native):
    coll = COLLECTIVES[name]
    ops = [REDOP_BY_NAME["sum"], REDOP_BY_NAME["max"]] if coll.reduces else [NO_OP]
    compiled_some = False
    for n in (1, 2, 4):
        for rank in range(n):
            for in_place in (False, True):
                for op in ops:
                    direct, compiled, fast = both_paths(coll, n, rank, in_place, op, native)
                    if fast is None:  # falls back to the methods: fine, nothing to compare
                        continue
                    compiled_some = True
                    fast()
                    assert compiled == direct, (name, n, rank, in_place)
                    assert direct or n == 1, name  # hypercube in place on one rank: nothing to do
    if native or name not in ("alltoall", "gather", "scatter"):
        assert compiled_some, name  # the fast path is really taken
    if name == "hypercube":  # its own block is copied locally, in order with the NCCL calls
        direct, compiled, fast = both_paths(coll, 4, 1, False, NO_OP, native)
        fast()
        assert direct[0][0] == "cudaMemcpyAsync" and compiled == direct


def test_mulsum_and_copy_without_runtime_fall_back_to_methods():
    coll = COLLECTIVES["all_reduce"]
    rec = CallRecorder(1, 2)
    coll.launch(rec, 1 << 20, 1 << 21, CallArgs(DATATYPE_BY_NAME["float"], REDOP_BY_NAME["mulsum"], -1, 1, 2,
                                                coll.counts(8, 2, 4)))
    assert NcclCommunicator(fake_library([], True), 77, 1, 2, 99, 0).compile(rec.calls) is None
    rec = CallRecorder(0, 2)
    rec.local_copy(1, 2, 3)
    comm = NcclCommunicator(fake_library([], True), 77, 0, 2, 99, 0)  # no CUDA runtime to copy with
    assert comm.compile(rec.calls) is None


def test_compiled_call_reports_nccl_errors_with_rank_and_aborts():
    aborted = []
    log: list = []
    comm = NcclCommunicator(fake_library(log, True, fail="ncclAllReduce"), 77, 3, 4, 99, 0,
                            on_error=lambda: aborted.append(True))
    rec = CallRecorder(3, 4)
    COLLECTIVES["all_reduce"].launch(rec, 1 << 20, 1 << 21, CallArgs(
        DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"], -1, 3, 4, COLLECTIVES["all_reduce"].counts(8, 4, 4)))
    fast = comm.compile(rec.calls)
    with pytest.raises(NcclError) as info:
        fast()
    assert aborted == [True]
    assert "rank 3" in str(info.value)


class GroupWorker:
    """The part of a Worker that Placement uses, with `len(comms)` local ranks
    (one process driving several GPUs: -g/-t)."""

    def __init__(self, comms, log):
        from types import SimpleNamespace

        self.slots = [SimpleNamespace(rank=c.rank, comm=c, send=(1 << 30) * (i + 1), recv=(1 << 30) * (i + 1) + (1 << 28))
                      for i, c in enumerate(comms)]
        self.nranks, self.max_bytes, self.log = comms[0].nranks, 1 << 20, log

        self.brackets = 0  # group calls made through the worker, not the compiled op

    def group_start(self):
        self.brackets += 1
        self.log.append(("ncclGroupStart", ()))

    def group_end(self):
        self.brackets += 1
        self.log.append(("ncclGroupEnd", ()))


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_several_ranks_per_worker_compile_into_one_group(name):
    """-g 4 (4 local ranks of an 8-rank job): the prepared op makes the calls of
    Placement.issue, in the same order, through the compiled path."""
    from ncclbench.run.timing import Placement

    coll = COLLECTIVES[name]
    f32 = DATATYPE_BY_NAME["float"]
    op = REDOP_BY_NAME["sum"] if coll.reduces else NO_OP
    counts = coll.counts(4096, 8, 4)
    logs = []
    for _ in range(2):
        log: list = []
        lib = fake_library(log, True)
        comms = [NcclCommunicator(lib, 100 + r, r, 8, 200 + r, r, copy=lambda *a, _l=log: _l.append(("cudaMemcpyAsync", a)))
                 for r in (4, 5, 6, 7)]
        pl = Placement(GroupWorker(comms, log), coll, f32, op, 1 if coll.rooted else -1, counts, False)
        logs.append((pl, log))
    (direct_pl, direct), (fast_pl, compiled) = logs
    direct_pl.issue(direct_pl.calls(3))
    fast = fast_pl.prepared(3)
    assert not hasattr(fast, "func"), name  # compiled, not the issue() fallback
    fast()
    assert compiled == direct and direct[-1] == ("ncclGroupEnd", ())
    if name == "hypercube":  # every rank's copy first, then one enclosing group per round
        assert [e[0] for e in direct[:5]] == ["cudaMemcpyAsync"] * 4 + ["ncclGroupStart"]
        assert _outer_groups(direct[4:]) == 3  # log2(8) rounds
    else:  # one enclosing group around every rank's calls, as nccl-tests issues them
        assert direct[0] == ("ncclGroupStart", ()) and _outer_groups(direct) == 1
    handles = {args[-2] for n, args in compiled if n not in ("ncclGroupStart", "ncclGroupEnd", "cudaMemcpyAsync")}
    assert handles == {104, 105, 106, 107}, name  # every local rank's communicator took part
    # The group brackets came from the compiled op itself, in one run of the
    # call path (hypercube's local copies split it into runs), not from the worker.
    assert fast_pl.worker.brackets == 0
    assert fast_pl.worker.slots[0].comm.lib.call_path.builds == 1, name  # the copies all come first


def _outer_groups(log) -> int:
    """How many depth-0 NCCL groups a call log opens (nested ones do not count)."""
    depth = groups = 0
    for name, _ in log:
        if name == "ncclGroupStart":
            groups += depth == 0
            depth += 1
        elif name == "ncclGroupEnd":
            depth -= 1
    assert depth == 0
    return groups


def test_compiled_group_reports_the_failing_rank():
    """An NCCL failure inside a compiled -g group names the rank whose call failed
    and aborts (the worker aborts all its communicators)."""
    from ncclbench.run.timing import Placement

    log: list = []
    aborted: list = []
    lib = fake_library(log, True)
    lib.call_path = RecordingCallPath(lib, log, "ncclAllReduce", fail_comm=106)
    comms = [NcclCommunicator(lib, 100 + r, r, 8, 200 + r, r, on_error=lambda: aborted.append(True))
             for r in (4, 5, 6, 7)]
    coll = COLLECTIVES["all_reduce"]
    pl = Placement(GroupWorker(comms, log), coll, DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"], -1,
                   coll.counts(4096, 8, 4), False)
    fast = pl.prepared(0)
    with pytest.raises(NcclError) as info:
        fast()
    assert "(rank 6)" in str(info.value) and aborted == [True]


def test_compiled_local_copy_uses_the_bound_copy_in_order():
    """A worker that can pre-bind its copy (the driver call on a one-GPU worker)
    gets it into the compiled op, between the NCCL runs, with the rank's stream."""
    coll = COLLECTIVES["hypercube"]
    log, bound = [], []

    def bind_copy(dst, src, nbytes, stream):
        bound.append((dst, src, nbytes, stream))
        return lambda: log.append(("copy", dst, src, nbytes, stream))

    n, rank = 4, 1
    args = CallArgs(DATATYPE_BY_NAME["float"], NO_OP, -1, rank, n, coll.counts(4096, n, 4))
    rec = CallRecorder(rank, n)
    coll.launch(rec, 1 << 20, 1 << 24, args)
    comm = NcclCommunicator(fake_library(log, True), 77, rank, n, 99, 0,
                            copy=lambda *a: pytest.fail("the unbound copy must not be called"),
                            bind_copy=bind_copy)
    fast = comm.compile(rec.calls)
    assert fast is not None and len(bound) == 1 and not log  # bound once, at compile time
    fast()
    fast()
    nbytes = args.counts.param_count * 4
    copy = ("copy", (1 << 24) + rank * nbytes, 1 << 20, nbytes, 99)
    assert log[0] == copy and log.count(copy) == 2
    assert [e[0] for e in log[1:log.index(copy, 1)]] == ["ncclGroupStart", "ncclSend", "ncclRecv", "ncclGroupEnd"] * 2
