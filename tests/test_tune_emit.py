"""Tune's outputs: env lines, JSON, and the tuner config read by NCCL's own example
plugin, compiled from NVIDIA/nccl's `plugins/tuner/example` (v2.30.3 or later: older
copies index the cost table differently, docs/tuning.md) and called the way NCCL's
core calls it.  NCCL's code is not kept in this repository: point
NCCL_TUNER_EXAMPLE_DIR at that directory of an NVIDIA/nccl checkout to run those
tests (skipped otherwise)."""

import ctypes
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ncclbench.tune.candidates import nccl_candidates
from ncclbench.tune.emit import env_file, report_lines, result_json, tuner_config
from ncclbench.tune.result import TuneResult

PLUGIN_ENV = "NCCL_TUNER_EXAMPLE_DIR"
NUM_ALGO, NUM_PROTO = 7, 3
ALGO_INDEX = {"tree": 0, "ring": 1, "collnet_direct": 2, "collnet_chain": 3, "nvls": 4, "nvls_tree": 5, "pat": 6}
PROTO_INDEX = {"ll": 0, "ll128": 1, "simple": 2}
FUNC_ALLREDUCE = 4


def synthetic_result(times: dict[int, dict[str, list[float]]], cands=None, **kw) -> TuneResult:
    cs = cands or nccl_candidates("all_reduce", 22809, algos=["ring", "tree", "auto"], protos=["LL", "Simple"],
                                  nnodes=1)
    base = dict(collective="all_reduce", backend="nccl", library="NCCL 2.28.9", version_code=22809, nranks=8,
                nnodes=1, datatype="float", op="sum", rounds=5, iters_per_round=4, candidates=cs.candidates,
                skipped=cs.skipped, times_us=times, algbw_bytes={s: float(s) for s in times}, bus_factor=1.75)
    base.update(kw)
    return TuneResult(**base)


def three_band_result() -> TuneResult:
    # 1 KiB, 2 KiB: Tree/LL clearly faster; 4 KiB: nothing beyond noise; 8 KiB: Ring/Simple with 2 CTAs... no CTAs
    # here, 8 KiB: auto/LL (protocol only) faster.
    slow = [10.0, 10.1, 9.9, 10.0, 10.05]
    t = {}
    for size, fast in ((1024, "Tree/LL"), (2048, "Tree/LL"), (4096, None), (8192, "auto/LL")):
        row = {label: list(slow) for label in ("default", "Ring/LL", "Ring/Simple", "Tree/LL", "Tree/Simple",
                                                "auto/LL", "auto/Simple")}
        if fast:
            row[fast] = [5.0, 5.1, 4.9, 5.0, 5.05]
        t[size] = row
    return synthetic_result(t)


def test_bands_env_and_report():
    r = three_band_result()
    assert [(b.winner, b.sizes) for b in r.bands()] == [("Tree/LL", [1024, 2048]), ("default", [4096]),
                                                         ("auto/LL", [8192])]
    env = env_file(r)
    assert "export NCCL_ALGO=allreduce:Tree" in env and "export NCCL_PROTO=allreduce:LL" in env
    lines = "\n".join(report_lines(r))
    assert "keep the default" in lines and "Tree/LL: median gain" in lines


def test_json_round_trip_keeps_the_judgement():
    r = three_band_result()
    doc = json.loads(json.dumps(result_json(r)))
    back = TuneResult.from_json(doc)
    assert [v.winner for v in back.verdicts()] == [v.winner for v in r.verdicts()]
    assert doc["bands"][0]["range"] == [1024, 4095]
    with pytest.raises(ValueError):
        TuneResult.from_json({"format": "something else"})


def test_tuner_config_lines():
    text, notes = tuner_config(three_band_result())
    body = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert body == ["allreduce,1024,4095,tree,ll,0,1,8"]
    assert all(len(ln) < 256 for ln in text.splitlines())  # the plugin reads 256-byte lines
    assert len(notes) == 1 and "leaves the algorithm to NCCL" in notes[0]


def test_no_tuner_config_for_mpi_or_p2p():
    r = synthetic_result({8: {"default": [1.0] * 5}}, backend="mpi")
    text, notes = tuner_config(r)
    assert text == "" and "NCCL's" in notes[0]


@pytest.fixture(scope="module")
def example_plugin(tmp_path_factory):
    src = Path(os.environ.get(PLUGIN_ENV, "/nonexistent"))
    if not (src / "plugin.c").is_file():
        pytest.skip(f"{PLUGIN_ENV} does not name NVIDIA/nccl's plugins/tuner/example (v2.30.3+)")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build NCCL's example tuner plugin")
    out = tmp_path_factory.mktemp("plugin") / "libnccl-tuner-example.so"
    subprocess.run([cc, "-I", str(src / "nccl"), "-fPIC", "-shared", "-o", str(out),
                    str(src / "plugin.c")], check=True, capture_output=True)
    lib = ctypes.CDLL(str(out))

    class TunerV5(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p),
                    ("init", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                                              ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                                              ctypes.c_void_p)),
                    ("getCollInfo", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                                                     ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                                     ctypes.c_int, ctypes.POINTER(ctypes.c_int))),
                    ("finalize", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p))]

    return TunerV5.in_dll(lib, "ncclTunerPlugin_v5")


def plugin_choice(plugin, conf: Path, monkeypatch, nbytes: int, nranks: int = 8, nnodes: int = 1):
    """(algorithm, protocol, nChannels) the plugin picks for an allreduce of nbytes, or None."""
    monkeypatch.setenv("NCCL_TUNER_CONFIG_FILE", str(conf))
    ctx = ctypes.c_void_p()
    assert plugin.init(ctypes.byref(ctx), 1, nranks, nnodes, None, None, None) == 0
    try:
        table = (ctypes.c_float * (NUM_ALGO * NUM_PROTO))(*([1.0] * (NUM_ALGO * NUM_PROTO)))  # flat, as NCCL passes it
        nch = ctypes.c_int(-7)
        assert plugin.getCollInfo(ctx, FUNC_ALLREDUCE, nbytes, 1, ctypes.cast(table, ctypes.c_void_p), NUM_ALGO,
                                  NUM_PROTO, 0, ctypes.byref(nch)) == 0
        zero = [i for i, v in enumerate(table) if v == 0.0]
        if not zero:
            return None
        a, p = divmod(zero[0], NUM_PROTO)
        algo = next(k for k, v in ALGO_INDEX.items() if v == a)
        proto = next(k for k, v in PROTO_INDEX.items() if v == p)
        return algo, proto, nch.value
    finally:
        plugin.finalize(ctx)


def test_nccl_example_plugin_reads_our_config(example_plugin, tmp_path, monkeypatch):
    text, _ = tuner_config(three_band_result())
    conf = tmp_path / "tuner.conf"
    conf.write_text(text)
    # inside the Tree/LL band, its last byte, and channels 0 = NCCL keeps its own count
    assert plugin_choice(example_plugin, conf, monkeypatch, 1024) == ("tree", "ll", 0)
    assert plugin_choice(example_plugin, conf, monkeypatch, 4095) == ("tree", "ll", 0)
    # beyond the band, and for another rank count: nothing chosen, NCCL decides
    assert plugin_choice(example_plugin, conf, monkeypatch, 4096) is None
    assert plugin_choice(example_plugin, conf, monkeypatch, 1024, nranks=16) is None


def test_plugin_minus_one_channels_means_one_channel(example_plugin, tmp_path, monkeypatch):
    """Why we write 0 and not the documented -1: the plugin sets *nChannels = 1 first."""
    conf = tmp_path / "tuner.conf"
    conf.write_text("allreduce,0,100,ring,simple,-1,-1,-1\n")
    assert plugin_choice(example_plugin, conf, monkeypatch, 64) == ("ring", "simple", 1)


def test_ctas_candidate_writes_its_channel_count(example_plugin, tmp_path, monkeypatch):
    cs = nccl_candidates("all_reduce", 22809, algos=["ring"], protos=["LL128"], ctas=[4])
    r = synthetic_result({65536: {"default": [10.0] * 5, "Ring/LL128/ctas=4": [4.0] * 5}},
                         cands=cs)
    text, _ = tuner_config(r)
    conf = tmp_path / "tuner.conf"
    conf.write_text(text)
    assert plugin_choice(example_plugin, conf, monkeypatch, 65536) == ("ring", "ll128", 4)
