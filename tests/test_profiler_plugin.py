"""The profiler plugin (explain/csrc/ncclbench_profiler.c) driven on the CPU exactly as NCCL drives it.

The test compiles the C file, loads it, and calls the function tables NCCL
looks up (ncclProfiler_v4 / _v5 / _v6) with event descriptors laid out as
NCCL's published headers lay them out (declared here independently with
ctypes, from ext-profiler/example/nccl/profiler_v4.h and profiler_v5.h at
v2.28.9-1, plugins/profiler/example/nccl/profiler_v6.h at v2.30.7-1): a
record only comes out right if the plugin reads the same offsets.
On the GPU the operator runs it under NCCL (see docs/explain.md).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import threading

import pytest

from ncclbench.explain import profiler as P

SRC = P._HERE + "/csrc/ncclbench_profiler.c"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("plugin") / "libprof.so"
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden", "-o", str(out), SRC,
                    "-lpthread"], check=True, capture_output=True)
    return out


@pytest.fixture
def plugin(built, tmp_path):
    """A private copy: its own globals (dlopen shares one object per file)."""
    path = tmp_path / "libnccl-profiler-ncclbench.so"
    shutil.copy(built, path)
    return str(path)


# ---- NCCL's side, from the published headers (only what these tests send)

class CollDescr(ctypes.Structure):
    _fields_ = [("seqNumber", ctypes.c_uint64), ("func", ctypes.c_char_p), ("sendBuff", ctypes.c_void_p),
                ("recvBuff", ctypes.c_void_p), ("count", ctypes.c_size_t), ("root", ctypes.c_int),
                ("datatype", ctypes.c_char_p), ("nChannels", ctypes.c_uint8), ("nWarps", ctypes.c_uint8),
                ("algo", ctypes.c_char_p), ("proto", ctypes.c_char_p), ("parentGroup", ctypes.c_void_p)]


class ProxyOpDescr(ctypes.Structure):  # another union member, so the union is as wide as NCCL's
    _fields_ = [("pid", ctypes.c_int), ("channelId", ctypes.c_uint8), ("peer", ctypes.c_int),
                ("nSteps", ctypes.c_int), ("chunkSize", ctypes.c_int), ("isSend", ctypes.c_int)]


class DescrUnion(ctypes.Union):
    _fields_ = [("coll", CollDescr), ("proxyOp", ProxyOpDescr)]


class DescrV4(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint8), ("parentObj", ctypes.c_void_p), ("rank", ctypes.c_int), ("u", DescrUnion)]


class DescrV5(ctypes.Structure):  # v6 has the same prefix and coll member
    _fields_ = [("type", ctypes.c_uint64), ("parentObj", ctypes.c_void_p), ("rank", ctypes.c_int), ("u", DescrUnion)]


LOGFN = ctypes.c_void_p
INIT_V4 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int),
                           ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_int, ctypes.c_int, LOGFN)
INIT_V5 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                           ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                           LOGFN)
STOP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
STATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)


def table(init_type, descr_type):
    start = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.POINTER(descr_type))

    class Table(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("init", init_type), ("startEvent", start), ("stopEvent", STOP),
                    ("recordEventState", STATE), ("finalize", STOP)]
    return Table


TABLES = {4: (table(INIT_V4, DescrV4), DescrV4), 5: (table(INIT_V5, DescrV5), DescrV5),
          6: (table(INIT_V5, DescrV5), DescrV5)}
KEEP = []  # keep ctypes strings alive while the plugin holds pointers to them


def nccl_view(path, api):
    lib = ctypes.CDLL(path)
    cls, descr = TABLES[api]
    return cls.in_dll(lib, f"ncclProfiler_v{api}"), descr


def init(tab, api, mask, comm_id=0xC0FFEE, nranks=16, rank=3):
    ctx = ctypes.c_void_p()
    if api == 4:
        rc = tab.init(ctypes.byref(ctx), ctypes.byref(mask), b"comm", comm_id, 2, nranks, rank, None)
    else:
        rc = tab.init(ctypes.byref(ctx), comm_id, ctypes.byref(mask), b"comm", 2, nranks, rank, None)
    assert rc == 0
    return ctx


def coll(descr_type, seq=7, func=b"AllReduce", count=1 << 20, algo=b"RING", proto=b"SIMPLE", nch=24, rank=3,
         dtype=b"ncclFloat32", etype=P.PROFILE_COLL):
    d = descr_type()
    d.type, d.rank = etype, rank
    c = d.u.coll
    c.seqNumber, c.func, c.count, c.root, c.datatype = seq, func, count, 0, dtype
    c.nChannels, c.nWarps, c.algo, c.proto = nch, 16, algo, proto
    KEEP.append(d)
    return d


def start(tab, ctx, d):
    handle = ctypes.c_void_p(12345)
    assert tab.startEvent(ctx, ctypes.byref(handle), ctypes.byref(d)) == 0
    return handle.value


@pytest.mark.parametrize("api", [4, 5, 6])
def test_nccl_lifecycle_records_only_while_ncclbench_lets_it(plugin, api):
    tab, descr = nccl_view(plugin, api)
    assert tab.name == b"ncclbench"
    control = P.ProfilerControl(plugin)
    mask = ctypes.c_int(0x7FFF)  # NCCL's process-wide ncclProfilerEventMask
    ctx = init(tab, api, mask)
    assert mask.value == 0 and control.api_version == api and control.live_comms == 1  # off from the start
    with control.collecting():
        assert mask.value == P.PROFILE_COLL  # written through the pointer NCCL gave init()
        assert start(tab, ctx, coll(descr, etype=1 << 8)) is None  # a group-API event: no record
        assert start(tab, ctx, coll(descr)) is None  # NULL handle: NCCL asks for no stop and no children
        assert start(tab, ctx, coll(descr, seq=8, func=b"AllGather", count=4096, algo=b"PAT", proto=b"LL",
                                    nch=1, dtype=b"ncclBfloat16")) is None
    assert mask.value == 0
    events = control.drain()
    assert [(e.func, e.seq_number, e.count, e.algo, e.proto, e.nchannels, e.datatype, e.rank, e.nranks, e.comm_id,
             e.api_version) for e in events] == [
        ("AllReduce", 7, 1 << 20, "RING", "SIMPLE", 24, "ncclFloat32", 3, 16, 0xC0FFEE, api),
        ("AllGather", 8, 4096, "PAT", "LL", 1, "ncclBfloat16", 3, 16, 0xC0FFEE, api)]
    assert control.drain() == []
    choices, unknown = P.events_to_choices(events)
    assert [(c.func, c.nbytes, c.algo, c.proto, c.nchannels) for c in choices] == [
        ("AllReduce", 4 << 20, "Ring", "Simple", 24), ("AllGather", 8192, "PAT", "LL", 1)] and unknown == []
    assert tab.finalize(ctx) == 0 and control.live_comms == 0


def test_a_communicator_made_while_recording_is_recorded_and_every_mask_follows(plugin):
    tab, descr = nccl_view(plugin, 5)
    control = P.ProfilerControl(plugin)
    m1, m2 = ctypes.c_int(0), ctypes.c_int(0)
    init(tab, 5, m1)
    control.set_mask(P.PROFILE_COLL)
    init(tab, 5, m2, comm_id=2)
    assert m2.value == P.PROFILE_COLL
    control.set_mask(0)
    assert (m1.value, m2.value) == (0, 0)


def test_a_full_ring_drops_and_counts(plugin):
    tab, descr = nccl_view(plugin, 5)
    control = P.ProfilerControl(plugin)
    ctx = init(tab, 5, ctypes.c_int(0))
    d = coll(descr)
    for _ in range(5000):
        start(tab, ctx, d)
    assert len(control.drain()) == 4096 and control.dropped == 5000 - 4096


def test_events_from_several_threads_all_arrive(plugin):
    """NCCL starts coll events on the calling thread or a CUDA host-callback thread."""
    tab, descr = nccl_view(plugin, 5)
    control = P.ProfilerControl(plugin)
    ctx = init(tab, 5, ctypes.c_int(0))

    def worker(rank):
        for seq in range(250):
            start(tab, ctx, coll(descr, seq=seq, rank=rank))
    threads = [threading.Thread(target=worker, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = control.drain()
    assert sorted((e.rank, e.seq_number) for e in events) == [(r, s) for r in range(4) for s in range(250)]


def test_unknown_names_are_not_turned_into_choices():
    e = P.CollEvent(1, 1, 0, 2, "AllReduce", 10, "ncclFloat99", 0, "RING", "LL", 2, 8, 5)
    choices, unknown = P.events_to_choices([e, P.CollEvent(1, 2, 0, 2, "AllReduce", 10, "ncclInt8", 0, "WARP",
                                                          "LL", 2, 8, 5)])
    assert choices == [] and len(unknown) == 2


def test_plan_never_replaces_the_users_plugin(plugin):
    mine = P.plan_profiler({"NCCL_PROFILER_PLUGIN": "/opt/inspector.so"}, (2, 28), path=plugin)
    assert not mine.use and "does not replace your profiler plugin" in mine.reason and mine.env == {}
    assert not P.plan_profiler({}, (2, 26), path=plugin).use
    ok = P.plan_profiler({}, (2, 28), path=plugin)
    assert ok.use and ok.env == {"NCCL_PROFILER_PLUGIN": plugin}
    if P.built_plugin() is None:
        assert "not built" in P.plan_profiler({}, (2, 28)).reason
