"""health.output and the command's baseline files: the verdict table, JSON, drain list, exit code."""

import json

import pytest
from health_helpers import FakeFabric

from ncclbench.errors import ArgumentError
from ncclbench.health.baseline import load_baseline as _load_baseline
from ncclbench.health.baseline import save_baseline as _save_baseline
from ncclbench.health.fleet import Fleet
from ncclbench.health.output import FAULTS_FOUND, emit, exit_code, verdict_table
from ncclbench.health.scan import ScanConfig, run_scan


def report(**faults):
    return run_scan(Fleet.uniform(16, 8), ScanConfig(), FakeFabric(**faults))


def test_table_rows_evidence_and_summary_lines():
    rep = report(nic={(5, None): 0.9}, link={frozenset({2, 3}): 0.9})
    text = verdict_table(rep, {"backend": "simulated"})
    lines = text.splitlines()
    assert lines[0].startswith("# ncclbench health: 16 host(s), 128 rank(s), simulated;")
    header = [line for line in lines if line.startswith("# host")][0]
    assert header.split() == ["#", "host", "component", "detail", "measured", "expected", "z", "verdict"]
    row = [line for line in lines if line.startswith("  node05 ")][0]
    assert "node nic" in row and "all rails" in row and "GB/s" in row and row.rstrip().endswith("slow")
    assert any(line.startswith("  node02 <-> node03  link") for line in lines)
    assert any(line.startswith("      pairs r1: node04+node05") for line in lines)  # evidence under its row
    assert "# healthy: 15 host(s)" in text and "# faults found: 2 (exit 8); drain: node05" in text


def test_healthy_report_exit_zero_and_empty_drain(tmp_path):
    rep = report()
    js, drain = tmp_path / "r.json", tmp_path / "drain"
    with open(tmp_path / "out.txt", "w") as out:
        code = emit(rep, {"backend": "x"}, str(js), str(drain), out)
    assert code == 0 == exit_code(rep) and drain.read_text() == ""
    doc = json.loads(js.read_text())
    assert doc["ncclbench_health"] == 1 and doc["faults_found"] is False and doc["findings"] == []
    assert len(doc["hosts"]) == 16 and doc["measurements"][0]["round"] == "local r1"
    assert "# no fault confirmed" in (tmp_path / "out.txt").read_text()


def test_faults_exit_code_is_outside_nccl_tests_codes(tmp_path):
    rep = report(gpu={(3, 1): 0.7})
    assert exit_code(rep) == FAULTS_FOUND == 8
    emit(rep, {}, None, str(tmp_path / "d"), open(tmp_path / "o", "w"))
    assert (tmp_path / "d").read_text() == "node03\n"


def test_baseline_written_from_a_report_judges_the_next_run(tmp_path):
    js, base = tmp_path / "r.json", tmp_path / "base.json"
    with open(tmp_path / "o", "w") as out:
        emit(report(), {}, str(js), None, out)
    _save_baseline(str(base), str(js))
    saved = json.loads(base.read_text())
    assert set(saved) == {"name", "busbw", "lat_us", "measured", "samples"} and "pairs:2x1" in saved["busbw"]
    assert saved["measured"] == {} and saved["samples"] == {"busbw": {}, "lat_us": {}}  # all had fleet statistics
    loaded = _load_baseline(str(base))
    # a fleet that is 20 % slower everywhere: invisible to fleet statistics, seen against the baseline
    slow = run_scan(Fleet.uniform(16, 8), ScanConfig(baseline=loaded),
                    FakeFabric(nic={(h, None): 0.8 for h in range(16)}))
    fleet = [f for f in slow.findings if f.component == "fleet" and f.detail == "pairs:2x1"]
    assert fleet and "below baseline base.json" in fleet[0].evidence[0]
    assert slow.drain == []  # a fleet-wide change drains nobody


def test_unreadable_baseline_is_one_clear_error(tmp_path):
    bad = tmp_path / "b.json"
    bad.write_text("{not json")
    with pytest.raises(ArgumentError, match=r"health: cannot read baseline .*b\.json"):
        _load_baseline(str(bad))
