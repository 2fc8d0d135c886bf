"""bench/compare_nccl_tests.py end to end on the CPU: a stand-in "nccl-tests build"
whose binaries run ncclbench's CPU backend, under the MPICH mpiexec, 2 ranks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.mpi
def test_compare_script_runs_both_tools_and_writes_ratios(tmp_path, mpiexec, ncclbench_env):
    build = tmp_path / "build"
    build.mkdir()
    for coll in ("all_reduce", "alltoall"):
        exe = build / f"{coll}_perf"
        exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ncclbench {coll}_perf --backend mpi "$@"\n')
        exe.chmod(0o755)
    out = tmp_path / "out"
    env = dict(ncclbench_env, NCCLBENCH_BACKEND="mpi")
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "compare_nccl_tests.py"), "--nccl-tests-build",
                        str(build), "--ngpus", "2", "--collectives", "all_reduce,alltoall", "--min", "16K",
                        "--max", "64M", "--extra", "-c 0 -n 3", "--graph", "0", "--repeats", "2", "--mpirun", mpiexec, "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert doc["repeats"] == 2 and set(doc["runs"]) == {"all_reduce", "alltoall"}
    for coll, e in doc["runs"].items():
        assert e["rc"] == {"ncclbench": 0, "nccl_tests": 0}, coll
        sizes = {x["size"] for x in e["busbw_large"]}
        assert sizes == {64 << 20}, coll  # the sizes >= 64 MiB
        assert all(0.3 < x["ratio"] < 3 for x in e["busbw_large"])  # same engine on both sides
        assert e["small_time_delta_median_us"] is not None
        assert e["ncclbench_wrong"] == []  # -c 0: every cell is N/A, none counted as wrong
    assert "| all_reduce |" in (out / "summary.md").read_text()
    assert len(list(out.glob("all_reduce.ncclbench.*.txt"))) == 2
    # Agreement columns: each tool against itself, and ours against theirs.
    for coll, e in doc["runs"].items():
        a = e["busbw_agreement"]
        assert a["points"] == 2 and (a["within"] == 2) == (a["max_dev"] <= 0.01), (coll, a)
        for name in ("nccl_tests", "ncclbench"):  # first run against the second, from the logs themselves
            devs = self_deviations(out, coll, name)
            a = e[f"{name}_self_agreement"]
            assert a["points"] == len(devs) == 2, (coll, name)
            assert a["within"] == sum(abs(d) <= 0.01 for d in devs), (coll, name, devs)
            assert a["max_dev"] == pytest.approx(max(abs(d) for d in devs), rel=1e-6, abs=1e-12), (coll, name)
    # --reanalyse rebuilds the same figures from the logs alone.
    (out / "summary.json").unlink()
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "compare_nccl_tests.py"), "--reanalyse",
                        "--ngpus", "2", "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    again = json.loads((out / "summary.json").read_text())
    for coll, e in doc["runs"].items():
        r = again["runs"][coll]
        for key in ("busbw_large", "small_time_delta_median_us", "busbw_agreement", "peak_mib", "rc"):
            assert r[key] == e[key], (coll, key)
        assert abs(r["wall_s"]["ncclbench"] - e["wall_s"]["ncclbench"]) < 0.01


def self_deviations(out: Path, coll: str, name: str) -> list[float]:
    """busbw of run 0 relative to run 1 at 64 MiB, out-of-place and in-place
    (what the script's self-agreement compares), read from the two logs with
    ncclbench's own parser."""
    from ncclbench.output.parse import parse_text

    runs = []
    for i in (0, 1):
        text = (out / f"{coll}.{name}.{i}.txt").read_text().split("\n--- stderr ---\n")[0]
        (row,) = [r for r in parse_text(text)[1] if r.size == 64 << 20]
        runs.append((row.out_of_place.busbw, row.in_place.busbw))
    return [first / second - 1 for first, second in zip(runs[0], runs[1]) if second > 0]


def test_busbw_agreement_counts_points_within_the_tolerance():
    import importlib.util

    spec = importlib.util.spec_from_file_location("compare_nccl_tests", ROOT / "bench" / "compare_nccl_tests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    big = 64 << 20
    ours = {"rows": {big: {"oop_busbw": 100.5, "ip_busbw": 105.0}, 1024: {"oop_busbw": 9.0, "ip_busbw": 9.0}}}
    ref = {"rows": {big: {"oop_busbw": 100.0, "ip_busbw": 100.0}, 1024: {"oop_busbw": 1.0, "ip_busbw": 1.0}}}
    a = module.busbw_agreement(ours, ref, big)
    assert (a["points"], a["within"]) == (2, 1) and a["max_dev"] == pytest.approx(0.05)
    assert module.busbw_agreement(ref, ref, big) == {"points": 2, "within": 2, "max_dev": 0.0}


def test_reanalyse_refuses_a_directory_without_logs(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "compare_nccl_tests.py"), "--reanalyse",
                        "--ngpus", "2", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "no logs" in p.stderr


def test_busbw_spread_is_the_widest_range_over_runs_at_large_sizes():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import compare_nccl_tests as cmp
    finally:
        sys.path.remove(str(ROOT / "bench"))

    def run(small, oop, ip):
        return {"rows": {1024: {"oop_busbw": small, "ip_busbw": small},
                         64 << 20: {"oop_busbw": oop, "ip_busbw": ip}}}

    runs = [run(1, 100, 200), run(50, 104, 202), run(9, 98, 201)]
    # oop: (104 - 98) / 100 = 6 %; ip: 1 %; the small size is not counted.
    assert cmp.busbw_spread(runs, 64 << 20) == pytest.approx(0.06)
    assert cmp.busbw_spread(runs, 1 << 40) is None


def _load_compare_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("compare_nccl_tests", ROOT / "bench" / "compare_nccl_tests.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rows_repeated_by_cycles_take_the_median_and_keep_a_wrong_count():
    mod = _load_compare_module()
    line = "{:>12} {:>13} {:>9} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7}"
    rows = [line.format(64, 16, "float", "sum", -1, t, 0.0, 0.0, w, t + 1, 0.0, 0.0, 0)
            for t, w in ((10.0, 0), (30.0, 3), (12.0, 0))]
    text = "\n".join(["# header", *rows, line.format(128, 32, "float", "sum", -1, 5.0, 0.1, 0.2, 0, 6.0, 0.1, 0.2, 0)])
    got = mod.parse_rows(text)
    assert got[64]["oop_time"] == 12.0 and got[64]["ip_time"] == 13.0  # medians of 3 cycles
    assert got[64]["oop_wrong"] == "3" and got[64]["ip_wrong"] == "0"
    assert got[128] == {"oop_time": 5.0, "oop_busbw": 0.2, "oop_wrong": "0",
                        "ip_time": 6.0, "ip_busbw": 0.2, "ip_wrong": "0"}
