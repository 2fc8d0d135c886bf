"""Shared helpers of the output tests: fixture files and small result-model builders."""

import json
from pathlib import Path

from ncclbench.core.config import BenchOptions
from ncclbench.core.results import DeviceInfo, HalfResult, PerIterStats, ResultRow, RunInfo, RunSummary

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nccl_tests_output"
TEXT_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.txt"))
# fixtures that were cut when they were saved: what the complete text adds
FIXTURE_CUTS = {"all_reduce_4proc_graph20.txt": "\n"}

DEFAULT_HEADER = [
    "#",
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ",
]


def read_fixture(name):
    return (FIXTURES / name).read_text()


def h200(rank, pid, process=0):
    return DeviceInfo(rank, 0, pid, "vm", rank, "0000:00:%02x" % (6 + rank), "NVIDIA H200", process)


def make_info(**kw):
    base = dict(
        program="all_reduce_perf",
        argv=["all_reduce_perf"],
        backend="nccl",
        version="0.1.0",
        nccl_version_code=22809,
        nccl_headers_code=22803,
        library="libnccl 2.28.9",
        devices=[h200(0, 1631)],
    )
    base.update(kw)
    return RunInfo(**base)


def half(time_us=18.55, algbw=0.0, busbw=0.0, wrong=0, per_iter=None, cpu=None):
    return HalfResult(time_us, time_us if cpu is None else cpu, algbw, busbw, wrong, per_iter)


def make_row(size=8, count=2, oop=None, ip=None, **kw):
    return ResultRow(size, count, "float", "sum", -1, oop or half(), ip or half(19.93), **kw)


def run_from_json_fixture():
    """RunInfo/options/rows/summary equivalent to all_reduce_4proc_per_iter.json."""
    doc = json.loads(read_fixture("all_reduce_4proc_per_iter.json"))
    cfg = doc["config"]
    devices = [
        DeviceInfo(d["rank"], d["group"], d["pid"], d["hostname"], d["device"], d["device_hex"], d["device_info"], i)
        for i, d in enumerate(cfg["devices"])
    ]
    info = make_info(devices=devices, argv=doc["args"], world_size=4, nranks=4, start_time=doc["start_time"])
    opts = BenchOptions(
        argv=doc["args"],
        ngpus=cfg["ngpus"],
        min_bytes=cfg["minimum_bytes"],
        max_bytes=cfg["maximum_bytes"],
        step_factor=cfg["step_factor"],
        iters=cfg["iterations"],
        per_iter_timing=True,
        output_file="all_reduce_4proc_per_iter.json",
    )

    def stats(p):
        return PerIterStats(
            p["skipped_iterations"], p["min_us"], p["max_us"], p["avg_us"], p["p50_us"], p["p95_us"],
            p["p99_us"], p["stdev_us"], p["cv_pct"], p["times_us"], p.get("per_process_max_times_us"),
        )

    def hres(h, p):
        return HalfResult(h["time"], h["time"], h["alg_bw"], h["bus_bw"], int(h["nwrong"]), stats(p))

    rows = [
        ResultRow(
            r["size"], r["count"], r["type"], r["redop"], int(r["root"]),
            hres(r["out_of_place"], r["out_of_place_per_iter"]),
            hres(r["in_place"], r["in_place_per_iter"]),
        )
        for r in doc["results"]
    ]
    summary = RunSummary(doc["out_of_bounds"]["count"], doc["average_bus_bandwidth"]["bandwidth"], None, None)
    return doc, info, opts, rows, summary
