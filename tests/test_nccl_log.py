"""NCCL log reader (explain.nccl_log) on logs built from NCCL's own format strings.

The fixtures under tests/fixtures/nccl_logs/ are written by build_fixtures.py
from the C format strings at the NCCL tags it cites (2.18.6, 2.20.5, 2.23.4,
2.28.9); each fixture's values are kept there, so every test compares what
the reader found with what was written: parse(format(x)) == x.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from ncclbench.explain.nccl_log import (
    CallChoice,
    NcclLogFacts,
    choice_lines,
    merge_facts,
    parse_nccl_log,
    per_size_choices,
)
from ncclbench.output.nccl_log_line import NCCL_LINE_MAX, read_log_line

FIX = Path(__file__).parent / "fixtures" / "nccl_logs"
sys.path.insert(0, str(FIX))
import build_fixtures  # noqa: E402

BUILT = sorted(build_fixtures.BUILDERS)


def facts_of(name: str) -> NcclLogFacts:
    return parse_nccl_log((FIX / name).read_text())


@pytest.mark.parametrize("name", BUILT)
def test_committed_fixture_is_what_the_builder_writes(name):
    assert (FIX / name).read_text() == build_fixtures.render(name)


@pytest.mark.parametrize("name", BUILT)
def test_facts_equal_what_the_fixture_was_built_from(name):
    spec = build_fixtures.spec(name)
    f = facts_of(name)
    assert f.version == spec["version"]
    assert f.net_plugin == spec["net_plugin"]
    assert f.nchannels == spec["nchannels"] and f.nranks == spec["nranks"]
    if "nnodes" in spec:
        assert f.nnodes == spec["nnodes"]
    if "net_plugin_external" in spec:
        assert f.net_plugin_external == spec["net_plugin_external"]
    for key in ("p2p_disabled", "shm_disabled", "nvls_available", "gdr_in_rings"):
        if key in spec:
            assert getattr(f, key) == spec[key], key
    assert set(f.tuning_table) == set(spec["table"])
    for func, cells in spec["table"].items():
        assert set(f.tuning_table[func]) == set(cells)
        for key, (lat, bw) in cells.items():
            got = f.tuning_table[func][key]
            assert got == pytest.approx((lat, bw), abs=1e-9), (func, key)
    assert len(f.per_call) == len(spec["per_call"])
    for got, want in zip(f.per_call, spec["per_call"]):
        for k, v in want.items():
            assert getattr(got, k) == v, (k, got)
    devices = {(d.index, d.transport): d for d in f.net_devices}
    assert set(devices) == set(spec["devices"])
    for key, attrs in spec["devices"].items():
        for k, v in attrs.items():
            assert getattr(devices[key], k) == v, (key, k)
    kinds = {}
    for c in f.connections:
        kinds[c.kind] = kinds.get(c.kind, 0) + 1
    assert kinds == spec["conn_kinds"]
    for k, v in spec.get("env", {}).items():
        assert f.env[k] == v
    assert f.warnings == spec.get("warnings", [])
    assert f.unparsed == []


def test_per_call_byte_counts_say_what_they_count():
    """2.20-2.23 print max(send, recv) bytes, 2.24+ count x type size (one rank's share for AllGather)."""
    assert {c.bytes_kind for c in facts_of("nccl-2.20.5-rank0.log").per_call} == {"total"}
    assert {c.bytes_kind for c in facts_of("nccl-2.23.4-rank0.log").per_call} == {"total"}
    assert {c.bytes_kind for c in facts_of("nccl-2.28.9-rank0.log").per_call} == {"count"}
    assert all(c.func_inferred for c in facts_of("nccl-2.20.5-rank0.log").per_call)


def test_unknowns_name_the_missing_fact_and_the_reason():
    old = facts_of("nccl-2.18.6-rank0.log")
    assert any("2.18.6 release builds print no per-call choice" in u for u in old.unknown)
    fallback = facts_of("nccl-2.28.9-socket-fallback.log")
    assert any(u.startswith("model table:") for u in fallback.unknown)
    assert not any(u.startswith("network") for u in fallback.unknown)
    full = facts_of("nccl-2.28.9-rank0.log")
    assert full.unknown == []
    assert parse_nccl_log("").unknown == [
        "no NCCL log line found (NCCL_DEBUG was not INFO, or the log was not captured)"]


def test_socket_fallback_evidence_is_kept():
    f = facts_of("nccl-2.28.9-socket-fallback.log")
    assert f.net_plugin == "Socket" and f.net_plugin_external is None
    assert f.net_plugin_log[0] == "NET/Plugin: Could not find: libnccl-net.so"
    assert all(c.net == "Socket" and c.gdr is False for c in f.connections)


def test_nameless_2_20_lines_without_coll_lines_keep_func_unknown():
    text = "\n".join(ln for ln in (FIX / "nccl-2.20.5-rank0.log").read_text().splitlines()
                     if "opCount" not in ln)
    f = parse_nccl_log(text)
    assert [c.func for c in f.per_call] == [None] * 5
    assert any("name no collective" in u for u in f.unknown)
    assert per_size_choices(f, "AllReduce") == []
    assert per_size_choices(f, None)[0][:4] == (8, 1024, "Ring", "LL")


def test_real_prefix_variants_timestamps_crlf_and_glued_text():
    base = (FIX / "nccl-2.28.9-rank0.log").read_text().splitlines()
    stamped = ["[2026-11-21 07:48:1%d] %s" % (i % 10, ln) if "NCCL INFO" in ln else ln for i, ln in enumerate(base)]
    text = "\r\n".join(stamped) + "\r\n"
    f = parse_nccl_log(text)
    ref = facts_of("nccl-2.28.9-rank0.log")
    assert f.to_dict() == ref.to_dict()
    ln = read_log_line("     8388608       2097152     float     sum      -1node001:42:42 [3] NCCL INFO x y")
    # the row's last cell is glued to the host name: log_line cannot tell them apart, output.demux can
    assert (ln.msg, ln.dev, ln.host, ln.before.split()) == ("x y", 3, "-1node001", ["8388608", "2097152", "float", "sum"])


def test_log_line_levels():
    w = read_log_line("[2026-01-01 00:00:00] h1:7:8 [2] misc/socket.cc:55 (socketProgress) NCCL WARN bad thing")
    assert (w.level, w.msg, w.dev, w.before) == ("WARN", "bad thing", 2, "[2026-01-01 00:00:00] ")
    t = read_log_line("h1:7:8 [0] 12.345678 enqueue.cc:100 NCCL TRACE something")
    assert (t.level, t.msg) == ("TRACE", "something")
    c = read_log_line("h1:7:8 NCCL CALL ncclCommInitRank(0x1, 2)")
    assert (c.level, c.dev) == ("CALL", None)
    v = read_log_line("NCCL version 2.28.9+cuda12.9")
    assert (v.level, v.msg) == ("VERSION", "NCCL version 2.28.9+cuda12.9")
    assert read_log_line("#  Rank  0 Group  0 Pid   1631 on vm device  0 [0000:00:06] NVIDIA H200") is None
    assert parse_nccl_log("NCCL version 2.26.6+cuda12.8\n").version == "2.26.6"


def test_truncated_device_list_keeps_the_devices_before_the_cut():
    devs = "".join(" [%d]mlx5_%d:1/IB" % (i, i) for i in range(100))
    line = build_fixtures.info("NET/IB : Using" + devs + " [RO]; OOB ib0:10.1.0.1<0>")[:NCCL_LINE_MAX]
    f = parse_nccl_log(line)
    assert read_log_line(line).truncated
    assert 50 < len(f.net_devices) < 100 and f.net_devices[0].name == "mlx5_0"
    assert any("cut short" in u for u in f.unparsed)


def test_unknown_formats_give_unknowns_never_facts():
    text = "\n".join(build_fixtures.info(m) for m in [
        "NCCL version 2.35.1+cuda13.2",
        "AllReduce: 1024 Bytes -> Algorithm Ring/LL channels 4",
        "Channel 00/1 : 0[0] -> 1[1] via TELEPORT/quantum",
        "  Algorithm   |         Tree        |        Hyperloop       |",
        "AllReduce: 2048 Bytes -> Algo WARP proto SIMPLE channel{Lo..Hi}={0..3}",
    ])
    f = parse_nccl_log(text)
    assert f.version == "2.35.1"
    assert f.per_call[0].algo is None  # the name is not one NCCL defines: not turned into a fact
    assert per_size_choices(f, "AllReduce") == []
    assert f.connections == [] and f.tuning_table == {}
    assert any("newer than the formats read" in u for u in f.unknown)
    assert any("per-call line in an unknown format" in u for u in f.unparsed)
    assert any("connection line in an unknown format" in u for u in f.unparsed)
    assert any("unknown algorithm name 'WARP'" in u for u in f.unparsed)


def test_damaged_logs_never_raise():
    rnd = random.Random(3)
    data = "".join((FIX / n).read_text() for n in BUILT)
    junk = ["|", "/", "->", "[", "]", "Bytes", "NCCL INFO ", "\n", ":", "-1", "9" * 30, "nan", "{", "}"]
    for _ in range(200):
        chars = list(data)
        for _ in range(rnd.randint(1, 40)):
            k = rnd.randrange(len(chars))
            if rnd.random() < 0.5:
                del chars[k:k + rnd.randint(1, 30)]
            else:
                chars.insert(k, rnd.choice(junk))
        f = parse_nccl_log("".join(chars))
        json.dumps(f.to_dict())


def test_merge_keeps_rank0_table_and_says_disagreements():
    r0, r1 = facts_of("nccl-2.28.9-rank0.log"), facts_of("nccl-2.28.9-rank1.log")
    assert r1.tuning_table == {} and any(u.startswith("model table:") for u in r1.unknown)
    m = merge_facts([r1, r0])
    assert m.tuning_table == r0.tuning_table and m.per_call == r0.per_call
    assert m.sources == ["node001:4243", "node001:4242"] and sorted(m.ranks) == [0, 1]
    assert m.warnings == r0.warnings  # the same WARN on both ranks, once
    assert m.unknown == []
    mixed = merge_facts([r0, facts_of("nccl-2.23.4-rank0.log")])
    assert mixed.version is None and mixed.net_plugin is None
    assert any("ranks disagree on version: 2.28.9, 2.23.4" in u for u in mixed.unparsed)
    assert any(u.startswith("NCCL version:") for u in mixed.unknown)


@pytest.mark.parametrize("name", BUILT)
def test_dict_round_trip_through_json(name):
    f = facts_of(name)
    back = NcclLogFacts.from_dict(json.loads(json.dumps(f.to_dict())))
    assert back == f


def test_per_size_choices_collapse_only_runs_of_one_choice():
    def call(n, algo, proto="Simple", nch=2):
        return CallChoice(func="AllReduce", nbytes=n, algo=algo, proto=proto, nchannels=nch, fmt="2.24")
    f = NcclLogFacts(per_call=[call(8, "Ring", "LL"), call(16, "Ring", "LL"), call(16, "Ring", "LL"),
                               call(32, "Ring", "LL"), call(64, "Tree", "LL"), call(64, "Ring", "LL"),
                               call(128, "Ring", "LL"), call(1024, "Ring", nch=4), call(512, "Ring", "LL")])
    assert per_size_choices(f, "AllReduce") == [
        (8, 32, "Ring", "LL", 2), (64, 64, "Tree", "LL", 2), (64, 64, "Ring", "LL", 2),
        (128, 512, "Ring", "LL", 2), (1024, 1024, "Ring", "Simple", 4)]
    assert choice_lines("all_reduce", per_size_choices(f, "AllReduce"))[::4] == [
        "# all_reduce 8 B - 32 B: Ring/LL, 2 channels", "# all_reduce 1 KiB: Ring/Simple, 4 channels"]


def test_fixture_per_size_view_of_2_28():
    f = facts_of("nccl-2.28.9-rank0.log")
    assert per_size_choices(f, "AllGather") == [(1048576, 1048576, "PAT", "Simple", 8)]
    ar = per_size_choices(f, "AllReduce")
    assert ar[0] == (8, 8, "Ring", "LL", 2) and ar[1] == (1024, 1024, "Symmetric", None, 4)
    assert ar[-1] == (4194304, 134217728, "Ring", "Simple", 16)


REAL = FIX / "h100-1rank-2.28.9"  # real NCCL 2.28.9 logs from the 1-GPU machine (see its README)


@pytest.mark.parametrize("name", ["ncclbench-all-subsys.log", "nccl-tests-interleaved-init-tuning-coll.txt",
                                  "nccl-tests-forced-ring-simple-p2pdisable.txt", "nccl-tests-info-reduce-scatter.txt"])
def test_real_one_rank_logs(name):
    """One rank on a VM without IB: Socket fallback, 64 channels, and no model table or per-call line (none
    exists at one rank -- said so, not left as a generic gap)."""
    f = parse_nccl_log((REAL / name).read_text())
    assert (f.version, f.net_plugin, f.nranks, f.nnodes, f.nchannels) == ("2.28.9", "Socket", 1, 1, 64)
    assert [(d.index, d.transport, d.name, d.address) for d in f.net_devices] == [(0, "Socket", "eth0", "192.0.2.2<0>")]
    assert "Failed to initialize NET plugin IB" in f.net_plugin_log
    assert f.tuning_table == {} and f.per_call == [] and f.unparsed == [] and f.warnings == []
    assert any(u.startswith("model table: none with one rank") for u in f.unknown)
    assert any(u.startswith("per-call algorithm: none with one rank") for u in f.unknown)
    if "p2pdisable" in name:
        assert f.p2p_disabled and f.p2p_disabled_reason == "NCCL_P2P_DISABLE=1"
