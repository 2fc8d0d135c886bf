"""The C timed loop (ncclbench.nccl._timedloop via nccl/native_loop.py), without a GPU.

Calls go to ctypes callbacks standing in for libnccl/libcuda functions (each
records the arguments it received, as the C loop passed them), and to the
real libnccl from the wheel, which validates arguments without a GPU."""

from __future__ import annotations

import ctypes
import time

import pytest

from ncclbench.nccl import native_loop as nl

ext, why = nl.load_extension()
pytestmark = pytest.mark.skipif(ext is None, reason=f"native loop not built: {why}")

C = ctypes
SIGS = {
    nl.SHAPE_VOID: C.CFUNCTYPE(C.c_int),
    nl.SHAPE_COLL7: C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_size_t, C.c_int, C.c_int, C.c_void_p,
                                C.c_void_p),
    nl.SHAPE_REDUCE8: C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_size_t, C.c_int, C.c_int, C.c_int,
                                  C.c_void_p, C.c_void_p),
    nl.SHAPE_COLL6: C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_size_t, C.c_int, C.c_void_p, C.c_void_p),
    nl.SHAPE_P2P6: C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_size_t, C.c_int, C.c_int, C.c_void_p, C.c_void_p),
    nl.SHAPE_COPY4: C.CFUNCTYPE(C.c_int, C.c_uint64, C.c_uint64, C.c_size_t, C.c_void_p),
}


class Recorder:
    """One fake function per shape; every call appends (shape, args)."""

    def __init__(self, fail_at: int | None = None, code: int = 3):
        self.calls: list[tuple[int, tuple]] = []
        self.fail_at, self.code = fail_at, code
        self.keep = {}
        for shape, sig in SIGS.items():
            def fn(*args, _shape=shape):
                self.calls.append((_shape, tuple(0 if a is None else a for a in args)))
                return self.code if len(self.calls) - 1 == self.fail_at else 0
            self.keep[shape] = sig(fn)

    def step(self, shape: int, *args: int) -> nl.Step:
        addr = C.cast(self.keep[shape], C.c_void_p).value
        return nl.Step(f"fake{shape}", shape, addr, tuple(args), None)


BIG = (1 << 40) + 0x1230


def mixed_steps(rec: Recorder) -> list[nl.Step]:
    return [rec.step(nl.SHAPE_VOID),
            rec.step(nl.SHAPE_COLL7, BIG, BIG + 64, (1 << 33) + 5, 7, 2, BIG + 128, BIG + 256),
            rec.step(nl.SHAPE_REDUCE8, BIG, BIG + 8, 3, 9, 4, 3, BIG + 128, BIG + 256),
            rec.step(nl.SHAPE_COLL6, BIG, BIG + 8, 17, 1, BIG + 128, BIG + 256),
            rec.step(nl.SHAPE_P2P6, BIG, 99, 7, 1, BIG + 128, BIG + 256),
            rec.step(nl.SHAPE_COPY4, BIG, BIG + 4096, 4096, BIG + 256),
            rec.step(nl.SHAPE_VOID)]


def test_every_shape_passes_its_arguments_in_order():
    rec = Recorder()
    steps = mixed_steps(rec)
    assert ext.issue(nl.pack_steps(steps)) == (0, -1)
    assert rec.calls == [(s.shape, s.args) for s in steps]


def test_the_loop_stops_at_the_first_failing_call_and_names_it():
    rec = Recorder(fail_at=3, code=5)
    code, index = ext.issue(nl.pack_steps(mixed_steps(rec)))
    assert (code, index) == (5, 3)
    assert len(rec.calls) == 4  # nothing after the failing call ran


def test_arity_is_checked_when_packing():
    rec = Recorder()
    with pytest.raises(ValueError):
        nl.pack_steps([rec.step(nl.SHAPE_COLL7, 1, 2, 3)])


class FakeStreams:
    """cuStreamQuery / ncclCommGetAsyncError stand-ins: stream k is done after
    `pending[k]` queries; the async error of comm c is `errors[c]`."""

    def __init__(self, pending: dict[int, int], errors: dict[int, int] | None = None, query_error: int = 0):
        self.pending, self.errors, self.query_error = dict(pending), errors or {}, query_error
        self.queries = 0
        self.async_calls = 0
        self.query = C.CFUNCTYPE(C.c_int, C.c_void_p)(self._query)
        self.async_error = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.c_int))(self._async)

    def _query(self, stream):
        self.queries += 1
        if self.query_error:
            return self.query_error
        left = self.pending.get(stream, 0)
        if left <= 0:
            return 0
        self.pending[stream] = left - 1
        return 600  # CUDA_ERROR_NOT_READY

    def _async(self, comm, out):
        self.async_calls += 1
        out[0] = self.errors.get(comm, 0)
        return 0

    def polls(self, *streams: int) -> bytes:
        q = C.cast(self.query, C.c_void_p).value
        a = C.cast(self.async_error, C.c_void_p).value
        return nl.pack_polls([(q, s, a, s + 1000) for s in streams])


def test_timed_waits_for_every_stream_on_the_perf_counter_clock():
    rec = Recorder()
    fake = FakeStreams({11: 3, 12: 5}, errors={1011: 7})  # 7 = ncclInProgress: not an error
    before = time.perf_counter()
    kind, code, index, t0, t1, t2 = ext.timed(nl.pack_steps(mixed_steps(rec)), fake.polls(11, 12), 0.0, True)
    after = time.perf_counter()
    assert (kind, code, index) == (nl.OK, 0, -1)
    assert before <= t0 <= t1 <= t2 <= after
    assert fake.queries == 4 + 6  # each stream until it reports done
    assert fake.async_calls == 3 + 5  # checked on every not-ready answer
    assert len(rec.calls) == 7


def test_timed_without_wait_returns_after_enqueueing():
    fake = FakeStreams({11: 100})
    kind, _, _, t0, t1, t2 = ext.timed(nl.pack_steps([]), fake.polls(11), 0.0, False)
    assert kind == nl.OK and t1 == t2 and fake.queries == 0


def test_async_error_query_error_and_timeout_are_reported():
    fake = FakeStreams({11: 2, 12: 50}, errors={1012: 3})
    kind, code, index, *_ = ext.timed(b"", fake.polls(11, 12), 0.0, True)
    assert (kind, code, index) == (nl.ASYNC_ERROR, 3, 1)
    fake = FakeStreams({11: 2}, query_error=700)
    assert ext.timed(b"", fake.polls(11), 0.0, True)[:3] == (nl.QUERY_FAILED, 700, 0)
    fake = FakeStreams({11: 10**12})
    kind, code, index, t0, t1, t2 = ext.timed(b"", fake.polls(11), 0.05, True)
    assert (kind, index) == (nl.TIMEOUT, 0) and t2 - t1 >= 0.05


def test_a_failing_call_skips_the_wait():
    rec = Recorder(fail_at=1, code=4)
    fake = FakeStreams({11: 100})
    kind, code, index, *_ = ext.timed(nl.pack_steps(mixed_steps(rec)), fake.polls(11), 0.0, True)
    assert (kind, code, index) == (nl.CALL_FAILED, 4, 1) and fake.queries == 0


def test_real_libnccl_rejects_a_null_communicator_through_the_c_loop():
    from ncclbench.nccl.loader import wheel_library_path

    path = wheel_library_path()
    if path is None:
        pytest.skip("nvidia-nccl wheel not installed")
    loop = nl.NativeLoop(ext, C.CDLL(path, mode=C.RTLD_GLOBAL), None)
    steps = [loop.nccl_step("ncclGroupStart", (), None),
             loop.nccl_step("ncclAllReduce", (0x1000, 0x2000, 8, 7, 0, 0, 0), 0),
             loop.nccl_step("ncclGroupEnd", (), None)]
    code, index = loop.issue(nl.pack_steps(steps))
    assert (code, index) == (4, 1)  # ncclInvalidArgument, at the all-reduce
    C.CDLL(path).ncclGroupEnd()  # close the group the failed call left open


def test_the_environment_switch_turns_the_extension_off(monkeypatch):
    monkeypatch.setenv(nl.NATIVE_ENV, "0")
    module, reason = nl.load_extension()
    assert module is None and nl.NATIVE_ENV in reason
