"""The gate's latency rounds as jobs of their own (run/gate_processes.py): which runs can start them,
what a round job measures, how their rounds become one record, and what a failed round job leaves."""

from __future__ import annotations

import os
import sys

import pytest

from ncclbench.core.config import BenchOptions
from ncclbench.launch.shutdown import LAUNCHER_PID_ENV
from ncclbench.run import gate_processes as gp


def _record(oop, sizes=(8, 32)):
    return {"rounds": 1, "fresh": gp.FRESH_PROCESS, "renews": "process", "loop_us": 2000.0, "seconds": 0.1,
            "iterations": [100 + len(oop)],
            "series": [{"type": "float", "redop": "sum", "root": -1, "sizes": list(sizes), "out_of_place": [oop],
                        "in_place": [[x / 2 for x in oop]]}]}


def test_round_jobs_merge_into_one_record_in_order_and_a_round_of_other_sizes_is_left_out():
    merged = gp.merge_rounds([_record([1.0, 2.0]), _record([1.5, 2.5]), _record([9.0], sizes=(8,)),
                              _record([1.2, 2.2])], 3.25)
    assert merged is not None
    s = merged["series"][0]
    assert s["out_of_place"] == [[1.0, 2.0], [1.5, 2.5], [1.2, 2.2]] and len(s["in_place"]) == 3
    assert merged["rounds"] == 3 and merged["renews"] == "process" and merged["seconds"] == 3.25
    assert merged["iterations"] == [101, 102]
    assert gp.merge_rounds([], 0.0) is None


def test_a_round_job_measures_the_small_sizes_once_and_writes_nothing_else():
    opts = BenchOptions(min_bytes=8, max_bytes=8 << 30, check=1, run_cycles=5, store=True, baseline="nightly",
                        output_file="x.json", csv_file="x.csv", metrics_file="x.prom", gate_rounds=10,
                        fail_on_trap="warn")
    r = gp.round_job_options(opts)
    assert (r.min_bytes, r.max_bytes, r.check, r.run_cycles, r.gate_rounds) == (8, 64 << 10, 0, 1, 1)
    assert not r.store and not r.explain and r.baseline is None and r.fail_on_trap is None
    assert r.output_file is None and r.csv_file is None and r.metrics_file is None
    assert gp.has_gate_sizes(opts) and not gp.has_gate_sizes(BenchOptions(min_bytes=1 << 20, max_bytes=1 << 30))


def test_only_a_command_that_started_every_process_starts_round_jobs_and_only_when_asked(monkeypatch):
    monkeypatch.delenv(LAUNCHER_PID_ENV, raising=False)
    monkeypatch.delenv(gp.ROUND_OUT_ENV, raising=False)
    monkeypatch.delenv(gp.ROUND_JOBS_ENV, raising=False)
    assert not gp.starts_its_processes("single")  # off by default (the module says why)
    monkeypatch.setenv(gp.ROUND_JOBS_ENV, "1")
    assert gp.starts_its_processes("single")
    for kind in ("ompi", "slurm", "torchrun", "ncclbench-spawn", "mpich-hydra"):
        assert not gp.starts_its_processes(kind)
    monkeypatch.setenv(LAUNCHER_PID_ENV, "1")  # a rank ncclbench started
    assert not gp.starts_its_processes("single")
    monkeypatch.delenv(LAUNCHER_PID_ENV)
    monkeypatch.setenv(gp.ROUND_OUT_ENV, "/tmp/x")  # a round job never starts round jobs of its own
    assert not gp.starts_its_processes("single")
    monkeypatch.delenv(gp.ROUND_OUT_ENV)
    monkeypatch.setenv(gp.ROUND_JOBS_ENV, "0")
    assert not gp.starts_its_processes("single")


@pytest.mark.skipif(sys.platform != "linux", reason="starts processes")
def test_a_round_job_that_fails_says_why_and_measures_nothing(tmp_path):
    record, why = gp.measure_in_round_jobs("all_reduce_perf", ["-b", "8", "-e", "8", "--backend", "nosuch"], 3)
    assert record is None and "a round job ended with exit" in why and "nosuch" in why


def test_the_checked_run_reads_the_rounds_measured_before_it_and_the_file_goes_after():
    rec = _record([1.0, 2.0])
    assert gp.read_rounds() is None
    with gp.rounds_for_checked_run(rec):
        path = os.environ[gp.ROUNDS_FILE_ENV]
        assert gp.read_rounds() == rec
    assert gp.ROUNDS_FILE_ENV not in os.environ and not os.path.exists(path)
    with gp.rounds_for_checked_run(None):
        assert gp.ROUNDS_FILE_ENV not in os.environ
