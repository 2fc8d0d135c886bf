"""A run explained (explain/run_explain.py, nccl_capture.py, live.py) without a GPU.

The assembly is fed the facts a live run collects: rows, NCCL's per-call
lines from its log (the fixtures built from NCCL's format strings, and a fake
libnccl that writes its debug files the way ncclDebugInit does), the probe's
per-test choices, topology facts from the simulated hosts.  What it prints
and stores must follow from those facts alone.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from types import SimpleNamespace

from explain_helpers import H200, LOGS, facts, log
from output_helpers import half

from ncclbench.core.config import Backend, BenchOptions
from ncclbench.core.datatypes import DATATYPE_BY_NAME, REDOP_BY_NAME
from ncclbench.core.results import ResultRow, RunInfo, RunSummary
from ncclbench.explain.live import ENV_SWITCH, LiveExplain, TopologyReader, wanted
from ncclbench.explain.nccl_capture import NcclRunCapture, RankCapture, choices_from, version_pair
from ncclbench.explain.nccl_log import CallChoice, NcclLogFacts, parse_nccl_log
from ncclbench.explain.run_explain import RunFacts, explain_run, nccl_path_line
from ncclbench.explain.run_explain import tests_of as distinct_tests
from ncclbench.simulation import hosts as S

MiB, GiB = 2**20, 2**30


def row(size, busbw=100.0, type_="float", redop="sum", root=-1, count=None, itemsize=4):
    return ResultRow(size, size // itemsize if count is None else count, type_, redop, root,
                     half(time_us=10.0, algbw=busbw, busbw=busbw), half(time_us=10.0, algbw=busbw, busbw=busbw))


def choice(nbytes, algo, proto, nch, func="AllReduce", kind="count"):
    return CallChoice(func=func, nbytes=nbytes, algo=algo, proto=proto, nchannels=nch, fmt="2.24", bytes_kind=kind)


# -- per size and per row ----------------------------------------------------------------------

def all_reduce_plan(nranks: int) -> SimpleNamespace:
    """Stands in for the RunPlan that LiveExplain reads: all_reduce of float sums over `nranks` ranks."""
    return SimpleNamespace(collective=SimpleNamespace(name="all_reduce"), nranks=nranks,
                           tests=lambda: iter([(DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"], -1)]))


def test_probe_choices_become_size_ranges_and_row_fields():
    rows = [row(s) for s in (8, 1024, 64 * 1024, 1 * MiB, 256 * MiB)]
    probe = [[choice(8, "Ring", "LL", 2), choice(1024, "Ring", "LL", 2), choice(65536, "Ring", "LL", 2),
              choice(MiB, "Ring", "Simple", 16), choice(256 * MiB, "Ring", "Simple", 16)]]
    f = RunFacts("all_reduce", 2, rows, tests=[("float", "sum", -1)], probe=probe)
    ex = explain_run(f)
    assert "# all_reduce 8 B - 64 KiB: Ring/LL, 2 channels" in ex.lines
    assert "# all_reduce 1 MiB - 256 MiB: Ring/Simple, 16 channels" in ex.lines
    assert [(r["size"], r["algo"], r["proto"], r["nchannels"]) for r in ex.data["rows"]] == [
        (8, "Ring", "LL", 2), (1024, "Ring", "LL", 2), (65536, "Ring", "LL", 2), (MiB, "Ring", "Simple", 16),
        (256 * MiB, "Ring", "Simple", 16)]
    assert ex.data["per_size"][1] == {"type": "float", "redop": "sum", "root": -1, "lo": MiB, "hi": 256 * MiB,
                                      "choices": [{"algo": "Ring", "proto": "Simple", "nchannels": 16}]}


def test_rows_match_nccls_byte_count_not_the_size_column():
    """all_gather: the size column is all ranks' data; NCCL 2.24+ logs one rank's share (count x type size),
    2.20-2.23 log the larger buffer.  Each row must find its own line."""
    nranks = 4
    rows = [row(4 * MiB, type_="float", redop="none", count=MiB // 4)]  # 1 MiB per rank
    for kind, nbytes in (("count", MiB), ("total", 4 * MiB)):
        f = RunFacts("all_gather", nranks, rows, tests=[("float", "none", -1)],
                     probe=[[choice(nbytes, "Ring", "Simple", 8, func="AllGather", kind=kind)]])
        assert explain_run(f).data["rows"][0]["algo"] == "Ring", kind
    wrong = RunFacts("all_gather", nranks, rows, tests=[("float", "none", -1)],
                     probe=[[choice(4 * MiB, "Ring", "Simple", 8, func="AllGather", kind="count")]])
    assert explain_run(wrong).data["rows"][0]["algo"] is None  # 4 MiB per rank is another call


def test_two_choices_for_one_size_are_both_said_and_tests_are_kept_apart():
    rows = [row(MiB, type_="float"), row(MiB, type_="half", itemsize=2)]
    probe = [[choice(MiB, "Ring", "Simple", 16), choice(MiB, "Tree", "Simple", 16)],  # float: NCCL chose twice
             [choice(MiB, "NVLS", "Simple", 16)]]  # half
    f = RunFacts("all_reduce", 8, rows, tests=[("float", "sum", -1), ("half", "sum", -1)], probe=probe)
    ex = explain_run(f)
    assert "# all_reduce float sum 1 MiB: Ring/Simple, 16 channels or Tree/Simple, 16 channels (NCCL chose " \
           "differently for the same size)" in ex.lines
    assert "# all_reduce half sum 1 MiB: NVLS/Simple, 16 channels" in ex.lines
    first, second = ex.data["rows"]
    assert first["algo"] is None and [c["algo"] for c in first["choices"]] == ["Ring", "Tree"]
    assert second["algo"] == "NVLS"


def test_without_a_probe_the_whole_log_is_matched_by_bytes():
    lg = log("nccl-2.28.9-rank0.log")
    rows = [row(s) for s in (8, 65536, 262144, 4194304)]
    ex = explain_run(RunFacts("all_reduce", 16, rows, log=lg))
    assert ex.lines[1:4] == ["# all_reduce 8 B - 64 KiB: Ring/LL, 2 channels",
                             "# all_reduce 256 KiB: Tree/LL128, 4 channels",
                             "# all_reduce 4 MiB: Ring/Simple, 16 channels"]


def test_unknown_per_size_choice_says_why():
    rows = [row(8), row(MiB)]
    one = explain_run(RunFacts("all_reduce", 1, rows, log=parse_nccl_log("")))
    assert "# all_reduce per size: NCCL's choice unknown (none with one rank (NCCL copies locally, no algorithm " \
           "is chosen))" in one.lines
    p2p = explain_run(RunFacts("alltoall", 4, rows, log=parse_nccl_log("")))
    assert any("NCCL logs no algorithm for alltoall" in x for x in p2p.lines)
    notes = ["NCCL_DEBUG=INFO set by you without NCCL_DEBUG_FILE: NCCL's log goes to your terminal, which "
             "ncclbench does not read (set NCCL_DEBUG_FILE to let it)"]
    term = explain_run(RunFacts("all_reduce", 4, rows, log=None, log_unknown="not captured", notes=notes))
    assert term.lines[0] == "# NCCL path unknown: not captured"
    assert f"# all_reduce per size: NCCL's choice unknown ({notes[0]})" in term.lines


def test_cpu_backend_says_what_does_not_apply():
    ex = explain_run(RunFacts("all_reduce", 4, [row(64 * MiB, 2.0), row(128 * MiB, 2.2)], backend="mpi"))
    assert ex.lines[0] == "# NCCL path: none (the CPU backend runs MPI collectives on host memory)"
    assert ex.lines[1].startswith("# Plateau bus bandwidth: 2.1 GB/s at 64 MiB-128 MiB; ceiling unknown (the CPU "
                                  "backend (MPI on host memory) has no bandwidth model")
    assert ex.lines[-1] == "# Not checked: NCCL traps (the CPU backend uses no NCCL)"
    assert ex.judgement.verdict.label == "unknown" and ex.data["rows"][0]["algo"] is None


def test_topology_and_log_judged_together():
    t = facts(S.hgx_host("n1", *H200, ngpus=8))
    rows = [row(s, 360.0) for s in (256 * MiB, 512 * MiB, GiB)]
    probe = [[choice(s, "Ring", "Simple", 16) for s in (256 * MiB, 512 * MiB, GiB)]]
    lg = log("nccl-2.28.9-rank0.log")
    f = RunFacts("all_reduce", 8, rows, hosts=[t], log=lg, tests=[("float", "sum", -1)], probe=probe,
                 env={"NCCL_NVLS_ENABLE": "0"})
    ex = explain_run(f)
    assert ex.lines[0].startswith("# NCCL 2.28.9 path: network AWS Libfabric (external plugin)")
    assert "# all_reduce 256 MiB - 1 GiB: Ring/Simple, 16 channels" in ex.lines
    summary = next(x for x in ex.lines if x.startswith("# Plateau"))
    assert "ceiling 370.8 GB/s (NVLink, Ring from NCCL log)" in summary and summary.endswith(
        "as expected (97% of the 370.8 GB/s ceiling)")
    assert not any(x.startswith("# Topology unknown") for x in ex.lines)


def test_tests_of_rows_in_first_seen_order():
    rows = [row(8, type_="half"), row(8, type_="float"), row(16, type_="half")]
    assert distinct_tests(rows) == [("half", "sum", -1), ("float", "sum", -1)]


def test_path_line_counts_connections_and_gdr():
    line = nccl_path_line(log("nccl-2.28.9-rank0.log"))
    assert line.startswith("# NCCL 2.28.9 path: network AWS Libfabric (external plugin)")
    assert "coll channel(s)" in line and "connections:" in line
    assert nccl_path_line(None, "the CPU") == "# NCCL path unknown: the CPU"


# -- the capture in phases, against a libnccl that logs as ncclDebugInit does --------------------

class FakeNccl:
    """Logs like NCCL: settings read at the first line after a reset, the file opened with "w",
    a line written only when its subsystem is in the mask."""

    def __init__(self, environ):
        self.environ, self.file, self.mask, self.level = environ, None, set(), -2
        self.resets = 0

    def ncclResetDebugInit(self):
        self.resets += 1
        self.level = -2

    def _init(self):
        if self.file is not None:
            self.file.close()
            self.file = None
        self.level = 1 if self.environ.get("NCCL_DEBUG") == "INFO" else 0
        self.mask = set(self.environ.get("NCCL_DEBUG_SUBSYS", "INIT,ENV").split(","))
        name = self.environ.get("NCCL_DEBUG_FILE")
        if name:
            host = socket.gethostname().split(".")[0]
            self.file = open(name.replace("%h", host).replace("%p", str(os.getpid())), "w")  # noqa: SIM115

    def info(self, subsys, msg):
        if self.level < 0:
            self._init()
        if self.level >= 1 and subsys in self.mask and self.file is not None:
            self.file.write(f"{socket.gethostname().split('.')[0]}:{os.getpid()}:1 [0] NCCL INFO {msg}\n")
            self.file.flush()

    def call(self, nbytes, algo="RING", proto="LL", hi=1):
        self.info("TUNING", f"AllReduce: {nbytes} Bytes -> Algo {algo} proto {proto} channel{{Lo..Hi}}={{0..{hi}}}")


def test_capture_phases_give_each_probed_test_its_own_file():
    env: dict[str, str] = {}
    nccl = FakeNccl(env)
    cap = NcclRunCapture(nccl, 22809, environ=env)
    try:
        assert cap.route == "log" and cap.wants_probe and cap.plan.ours
        cap.begin()
        nccl.info("INIT", "NCCL version 2.28.9+cuda12.9")
        nccl.info("INIT", "comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 6000 commId 0x2 - Init COMPLETE")
        nccl.info("TUNING", "   Algorithm   |    Tree    |    Ring")  # init: the model table is logged
        cap.after_init()
        nccl.call(8)  # warm-up and timed loop: TUNING is off
        nccl.call(1024)
        for test, sizes in ((0, (8, 1024)), (1, (16,))):
            cap.switch(test)
            for s in sizes:
                nccl.call(s, hi=3 if test else 1)
        cap.switch(-1)
        nccl.call(8)  # after the probe: off again
        got = cap.collect(2)
        names = os.listdir(cap.log_dir)
    finally:
        cap.close()
    assert not os.path.exists(cap.log_dir)
    assert got.route == "log" and len(got.probe) == 2
    assert [(c["nbytes"], c["nchannels"]) for c in got.probe[0]] == [(8, 2), (1024, 2)]
    assert [(c["nbytes"], c["nchannels"]) for c in got.probe[1]] == [(16, 4)]
    merged = NcclLogFacts.from_dict(got.facts)
    assert merged.version == "2.28.9" and len(merged.per_call) == 3  # the timed calls left no line
    phases = sorted(re.sub(r"^nccl\..*\.(\d\d-\w+)\.log$", r"\1", n) for n in names)
    assert phases == ["00-init", "01-timed", "02-probe", "03-probe", "04-timed"]


def test_user_nccl_debug_is_left_alone(monkeypatch):
    monkeypatch.setattr("ncclbench.explain.profiler.built_plugin", lambda: None)  # an install without a compiler
    env = {"NCCL_DEBUG": "INFO"}
    cap = NcclRunCapture(FakeNccl(env), 22809, environ=env)
    try:
        cap.begin()
        assert env == {"NCCL_DEBUG": "INFO"}  # nothing set, nothing reset
        assert cap.route == "none" and not cap.wants_probe  # the terminal cannot be read, and no plugin
        got = cap.collect(0)
    finally:
        cap.close()
    assert got.probe is None and any("goes to your terminal" in n for n in got.notes)
    old = NcclRunCapture(object(), 22005, environ={})  # no ncclResetDebugInit: NCCL 2.20
    old.close()
    assert old.route == "none" and any("NCCL < 2.24" in n for n in old.notes)
    assert version_pair(22809) == (2, 28) and version_pair(2708) == (2, 7)


# -- the live glue: what the reporting rank builds from every rank's capture ---------------------

class OneProcessHost:
    rank, size = 0, 1

    def gather(self, obj, root=0):
        return [obj]


def test_live_explain_assembles_ranks_captures_into_the_summary(monkeypatch):
    monkeypatch.delenv(ENV_SWITCH, raising=False)
    opts = BenchOptions(program="all_reduce_perf", collective="all_reduce")
    live = LiveExplain(opts, Backend.NCCL, local_rank=1, environ={"NCCL_IB_HCA": "mlx5"})
    assert live.reader is None  # only a host's first local rank reads its topology
    rank0 = parse_nccl_log((LOGS / "nccl-2.28.9-rank0.log").read_text())
    rank1 = parse_nccl_log((LOGS / "nccl-2.28.9-rank1.log").read_text())
    probe0 = [[dataclasses.asdict(choice(s, "Ring", "LL", 2)) for s in (8, 65536)]]
    parts = [RankCapture(rank0.to_dict(), probe0, "log", ["a note"]), RankCapture(rank1.to_dict(), [[]], "log")]
    for r in (8, 65536):
        live.rows.row(row(r))

    plan = all_reduce_plan(16)
    f = live._run_facts(plan, parts)
    assert f.env == {"NCCL_IB_HCA": "mlx5"} and f.notes == ["a note"] and f.nccl_version == "2.28.9"
    assert len(f.log.sources) == 2 and f.probe is not None and len(f.probe[0]) == 2
    assert f.topology_unknown == "" and f.hosts == []
    summary = RunSummary(0, 1.0, None, None)
    live.capture = None
    live.finish(plan, [], OneProcessHost(), summary)  # no capture in this run: said so, not guessed
    assert summary.explain_lines[0] == "# NCCL path unknown: NCCL's log was not captured (no capture in this run)"
    assert summary.explain["rows"][0]["algo"] is None


def test_topology_reader_and_the_banner_lines(monkeypatch):
    t = facts(S.hgx_host("n1", *H200, ngpus=2, nic_kind="ib", nics=2))
    reader = TopologyReader(read=lambda: (t.to_dict(), ""))
    assert reader.result()[0]["host"] == "n1"
    broken = TopologyReader(read=lambda: (None, "reading the topology failed: OSError: boom"))
    opts = BenchOptions(program="all_reduce_perf", collective="all_reduce", backend="mpi")
    live = LiveExplain(opts, Backend.MPI, local_rank=1, environ={})
    info = RunInfo("all_reduce_perf", [], "mpi", "0", None, None, "MPICH")
    live._start_facts([reader.result(), broken.result(), None], None, info)
    assert info.notes[0].startswith("# Topology n1: 2x NVIDIA H200 (sm 9.0), NVSwitch")
    assert info.notes[-1] == "#   topology of some hosts unknown: reading the topology failed: OSError: boom"
    assert info.extra["ncclbench_explain"]["topology"][0]["host"] == "n1"
    none = LiveExplain(opts, Backend.MPI, local_rank=1, environ={})
    info2 = RunInfo("all_reduce_perf", [], "mpi", "0", None, None, "MPICH")
    none._start_facts([broken.result()], None, info2)
    assert info2.notes == ["# Topology unknown: reading the topology failed: OSError: boom"]


def test_explain_switches():
    opts = BenchOptions()
    assert wanted(opts, {}) and wanted(opts, {ENV_SWITCH: "1"})
    assert not wanted(opts, {ENV_SWITCH: "0"}) and not wanted(opts, {ENV_SWITCH: "off"})
    assert not wanted(dataclasses.replace(opts, explain=False), {})


def test_close_gives_the_users_settings_back():
    env = {"NCCL_DEBUG_SUBSYS": "COLL"}
    live = LiveExplain(BenchOptions(), Backend.NCCL, local_rank=1, environ=env)
    env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT", "NCCL_DEBUG_FILE": "/x"})
    live.close()
    assert env == {"NCCL_DEBUG_SUBSYS": "COLL"}


def test_choices_round_trip_through_plain_data():
    c = choice(8, "Ring", "LL", 2)
    assert choices_from([dataclasses.asdict(c)]) == [c]


def test_nameless_220_lines_are_not_matched_to_a_collective():
    c = CallChoice(func=None, nbytes=8, algo="Ring", proto="LL", nchannels=None, fmt="2.20", bytes_kind="total")
    ex = explain_run(RunFacts("all_reduce", 2, [row(8)], log=NcclLogFacts(per_call=[c], version="2.20.5",
                                                                              sources=["h:1"])))
    assert ex.data["rows"][0]["algo"] is None


def test_profiler_route_where_the_log_cannot_give_the_choice(tmp_path):
    env = {"NCCL_DEBUG": "WARN"}
    plugin = str(tmp_path / "libnccl-profiler-ncclbench.so")  # not loadable: after_init says so
    cap = NcclRunCapture(FakeNccl(env), 22809, environ=env, plugin=plugin)
    try:
        assert cap.route == "profiler" and cap.wants_probe
        cap.begin()
        assert env == {"NCCL_DEBUG": "WARN", "NCCL_PROFILER_PLUGIN": plugin}  # the user's NCCL_DEBUG stays
        cap.after_init()
        assert cap.control is None and any(n.startswith("profiler plugin not usable") for n in cap.notes)
    finally:
        cap.close()
    theirs = {"NCCL_DEBUG": "WARN", "NCCL_PROFILER_PLUGIN": "/opt/theirs.so"}
    cap = NcclRunCapture(FakeNccl(theirs), 22809, environ=theirs, plugin=plugin)
    cap.begin()
    cap.close()
    assert theirs["NCCL_PROFILER_PLUGIN"] == "/opt/theirs.so" and cap.route == "none"
    assert any("does not replace your profiler plugin" in n for n in cap.notes)
    old = NcclRunCapture(FakeNccl({}), 22607, environ={"NCCL_DEBUG": "INFO"}, plugin=plugin)
    old.close()
    assert old.route == "none" and any("predates profiler API v4" in n for n in old.notes)  # NCCL 2.26


def test_ranks_gpus_matched_to_the_hosts_facts_or_the_whole_host_said():
    from ncclbench.launch.facts import GpuFact, RankFacts

    t = facts(S.hgx_host("n1", *H200, ngpus=4, nic_kind=None))
    opts = BenchOptions(program="all_reduce_perf", collective="all_reduce")

    def ranks(pcis):
        return [RankFacts(rank=i, size=len(pcis), host="n1", boot_id="b", pid=10 + i, local_rank=i,
                          gpus=[GpuFact(j, f"GPU-{j}", p, "NVIDIA H200", 1) for j, p in enumerate(pcis)])
                for i in range(len(pcis))]

    matched = LiveExplain(opts, Backend.NCCL, local_rank=1, environ={})
    info = RunInfo("all_reduce_perf", [], "nccl", "0", 22809, 22809, "libnccl")
    matched._start_facts([(t.to_dict(), "")], ranks([g.pci_bus_id[:-2] for g in t.gpus[:2]]), info)
    assert [g.index for g in matched.hosts[0].gpus] == [0, 1] and info.notes[0].startswith("# Topology n1: 2x")
    other = LiveExplain(opts, Backend.NCCL, local_rank=1, environ={})
    info = RunInfo("all_reduce_perf", [], "nccl", "0", 22809, 22809, "libnccl")
    other._start_facts([(t.to_dict(), "")], ranks(["0000:ee:00", "0000:ef:00"]), info)
    assert len(other.hosts[0].gpus) == 4 and info.notes[0].startswith("# Topology n1: 4x")
    assert info.notes[-1] == ("#   topology of some hosts unknown: the ranks' GPUs were not found among NVML's by "
                              "PCI address: every GPU of the host is shown")


def test_a_judged_run_round_trips_through_the_store(tmp_path):
    """What a live GPU run stores (topology at start, NCCL's facts and the probe at the end) judges the
    same when read back: `ncclbench explain RUN` on it prints what the run printed."""
    from ncclbench.core.results import EXPLAIN_KEY
    from ncclbench.explain.stored import run_facts
    from ncclbench.store.db import ResultStore

    t = facts(S.hgx_host("n1", *H200, ngpus=8))
    rows = [row(s, 360.0) for s in (8, 256 * MiB, 512 * MiB, GiB)]
    probe = [[choice(8, "Ring", "LL", 16)] + [choice(s, "Ring", "Simple", 16) for s in (256 * MiB, 512 * MiB, GiB)]]
    live = RunFacts("all_reduce", 8, rows, hosts=[t], log=log("nccl-2.28.9-rank0.log"),
                    tests=[("float", "sum", -1)], probe=probe, env={"NCCL_NVLS_ENABLE": "0"}, nccl_version="2.28.9",
                    notes=["a capture note"])
    ex = explain_run(live)
    info = RunInfo("all_reduce_perf", ["all_reduce_perf"], "nccl", "0.1.0", 22809, 22809, "libnccl 2.28.9",
                   nranks=8, extra={EXPLAIN_KEY: {"topology": [t.to_dict()], "topology_unknown": ""}})
    summary = RunSummary(0, 300.0, None, None, explain_lines=ex.lines, explain=ex.data)
    opts = BenchOptions(program="all_reduce_perf", collective="all_reduce")
    with ResultStore(tmp_path / "r.sqlite") as store:
        rid = store.begin_run(info, opts, env={"NCCL_NVLS_ENABLE": "0"})
        for i, r in enumerate(rows):
            store.add_row(rid, i, r)
        store.finish_run(rid, summary)
        back = store.get_run(rid)
    assert back.summary.explain_lines == ex.lines
    again = explain_run(run_facts(back))
    assert again.lines == ex.lines and again.data["rows"] == ex.data["rows"]
    assert again.judgement == ex.judgement


def test_topology_read_starts_at_the_communicators_init_on_nccl_and_at_once_on_cpu(monkeypatch):
    """On NCCL's backend the read waits for the set-up's on_comm_init (NCCL's init hides it);
    on the CPU backend it starts in before_workers; after_workers starts it if nothing did."""
    started = []
    monkeypatch.setattr("ncclbench.explain.live.TopologyReader",
                        lambda gpus: started.append(gpus) or TopologyReader(read=lambda: (None, "test")))
    monkeypatch.setattr(LiveExplain, "_begin_capture", lambda self, lib: None)
    nccl = LiveExplain(BenchOptions(), Backend.NCCL, local_rank=0, environ={})
    nccl.before_workers()
    assert started == [] and nccl.reader is None
    nccl.start_topology()
    nccl.start_topology()  # once
    assert started == [True]
    cpu = LiveExplain(BenchOptions(), Backend.MPI, local_rank=0, environ={})
    cpu.before_workers()
    assert started == [True, False]
    late = LiveExplain(BenchOptions(), Backend.NCCL, local_rank=0, environ={})
    late.before_workers()
    late.after_workers(_OneRank(), None, RunInfo("all_reduce_perf", [], "", "", None, None, ""))
    assert started == [True, False, True] and late.reader is not None
    other_rank = LiveExplain(BenchOptions(), Backend.NCCL, local_rank=1, environ={})
    other_rank.start_topology()
    assert started == [True, False, True] and other_rank.reader is None  # each host's first local rank reads


class _OneRank:
    rank, size = 0, 1

    def gather(self, value, root):
        return [value]


def _fake_host_pair_run(node1_ifname, tmp_path):
    """Issue 25's fake hosts: node0 and node1 (2 GPUs each), each in its own network namespace with its own
    veth (fhv0, fhv1) and its ranks' own NCCL_SOCKET_IFNAME; rank 0 (node0) ran with =fhv0.  Returns the
    live judgement and the one `ncclbench explain RUN` makes of the stored run."""
    from ncclbench.explain.stored import run_facts
    from ncclbench.launch.facts import GpuFact, RankFacts
    from ncclbench.store.db import ResultStore

    tops = []
    for i in (0, 1):
        t = facts(S.hgx_host(f"node{i}", *H200, ngpus=2, nic_kind=None))
        t.interfaces = {f"fhv{i}": "up", "lo": "unknown"}
        tops.append(t)
    ifnames = ["=fhv0", node1_ifname]
    ranks = [RankFacts(rank=r, size=4, host=f"node{r // 2}", boot_id="b", pid=100 + r, local_rank=r % 2,
                       nccl_host=f"node{r // 2}",
                       env={"NCCL_SOCKET_IFNAME": ifnames[r // 2], "NCCL_HOSTID": f"node{r // 2}",
                            "CUDA_VISIBLE_DEVICES": str(r)},
                       gpus=[GpuFact(0, f"GPU-{r}", tops[r // 2].gpus[r % 2].pci_bus_id[:-2], H200[0], 1)])
             for r in range(4)]
    opts = BenchOptions(program="all_reduce_perf", collective="all_reduce")
    live = LiveExplain(opts, Backend.NCCL, local_rank=0,
                       environ={"NCCL_SOCKET_IFNAME": "=fhv0", "NCCL_HOSTID": "node0"})
    info = RunInfo("all_reduce_perf", ["all_reduce_perf"], "nccl", "0.1.0", 22809, 22809, "libnccl 2.28.9",
                   nranks=4)
    live._start_facts([(t.to_dict(), "") for t in tops] + [None, None], ranks, info)
    assert [h.host for h in live.hosts] == ["node0", "node1"]
    for r in (8, 256 * MiB):
        live.rows.row(row(r, 3.8))

    plan = all_reduce_plan(4)
    ex = explain_run(live._run_facts(plan, []))
    with ResultStore(tmp_path / "r.sqlite") as store:
        rid = store.begin_run(info, opts, env=live.user_env)
        for i, r in enumerate(live.rows.rows):
            store.add_row(rid, i, r)
        store.finish_run(rid, RunSummary(0, 3.8, None, None, explain_lines=ex.lines, explain=ex.data))
        again = explain_run(run_facts(store.get_run(rid)))
    return ex, again


def test_each_fake_host_is_judged_with_its_own_ranks_nccl_settings(tmp_path):
    """Issue 25, GPU visit at 3681118: 'NCCL_SOCKET_IFNAME==fhv0 matches no interface that is up on node1'
    although node1's ranks ran with =fhv1: every host was judged with rank 0's settings.  Now each host is
    judged with its own ranks' settings, live and from the store; a host whose own setting names nothing
    there is still caught, and named alone."""
    ex, again = _fake_host_pair_run("=fhv1", tmp_path)
    for j in (ex.judgement, again.judgement):
        assert "nic-env-mismatch" not in j.traps.names() and "nic-env-mismatch" in j.traps.passed, j.traps
    assert again.lines == ex.lines
    wrong, wrong_again = _fake_host_pair_run("=fhv0", tmp_path / "b")  # node1's ranks name node0's veth
    for j in (wrong.judgement, wrong_again.judgement):
        t = [t for t in j.traps.raised if t.name == "nic-env-mismatch"]
        assert len(t) == 1 and "on node1" in t[0].evidence and "node0" not in t[0].evidence, t


def test_an_imported_log_whose_hosts_set_their_own_socket_ifname_raises_no_trap_for_it():
    """The imported route (issue 25's check): a log from 2 fake hosts whose ranks each name their own veth
    (node0 =fhv0, node1 =fhv1; NCCL's ENV lines, from the operator's GPU visit at 3681118, trimmed) has no
    interface facts, so nic-env-mismatch is not checked there -- never raised from one host's value --
    and the settings line says the value differs per rank rather than giving node0's as the job's."""
    from pathlib import Path

    from ncclbench.explain.stored import run_facts
    from ncclbench.store.importers import load_file

    path = Path(__file__).parent / "fixtures" / "log_inputs" / "fakehosts_2x2_own_socket_ifname.log"
    run, = load_file(path, None)
    ex = explain_run(run_facts(run))
    traps = ex.judgement.traps
    assert "nic-env-mismatch" not in traps.names()
    assert any(u.name == "nic-env-mismatch" and "no link facts" in u.reason for u in traps.unchecked)
    settings = [ln for ln in ex.lines if "NCCL settings" in ln]
    assert settings and "NCCL_SOCKET_IFNAME==fhv0,..." in settings[0] and "different per rank" in settings[0]
    assert "sockets over fhv0, fhv1" in "\n".join(ex.lines)
