"""health.outputs.scan_output and the command's baseline files: the verdict table, JSON, drain list, exit code."""

import json

import pytest
from health_helpers import FakeFabric

from ncclbench.core.errors import ArgumentError
from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.scan import ScanConfig, run_scan
from ncclbench.health.outputs.baseline_file import load_baseline as _load_baseline
from ncclbench.health.outputs.baseline_file import save_baseline as _save_baseline
from ncclbench.health.outputs.scan_output import FAULTS_FOUND, emit, exit_code, verdict_table


def report(**faults):  # the re-pairing (the default above 16 hosts): evidence from rounds 1-3
    return run_scan(Fleet.uniform(16, 8), ScanConfig(all_pairs=False), FakeFabric(**faults))


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
    assert set(saved) == {"name", "version", "hosts", "busbw", "lat_us", "measured", "samples"}
    assert "pairs:2x1" in saved["busbw"] and saved["hosts"] == [f"node{i:02d}" for i in range(16)]
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


def test_one_host_with_nothing_to_judge_against_is_not_judged_exit_9_unless_accepted(tmp_path):
    """Issue 22: one host, its intra group alone of its shape, no baseline, no ceiling: the summary
    counts it "not judged" (never healthy), the exit is 9, --accept-not-judged makes it 0, and the
    JSON, drain file and a report read back say the same."""
    from ncclbench.health.core.scan import report_from_json
    from ncclbench.health.outputs.scan_output import NOT_JUDGED, drain_text, outcome

    rep = run_scan(Fleet.uniform(1, 4), ScanConfig(), FakeFabric())
    assert rep.host_status == {"node0": "not judged"} and rep.unresolved == ["node0"]
    assert rep.count()["healthy"] == 0 and rep.count()["not judged"] == 1 and rep.count()["faulty"] == 0
    assert any("intra r1: node0" in why and "no reference" in why for why in rep.not_judged["node0"])
    assert exit_code(rep) == NOT_JUDGED == 9 and exit_code(rep, accept_not_judged=True) == 0
    assert outcome(rep) == "not judged"
    text = verdict_table(rep)
    assert "# hosts: 0 healthy, 0 faulty, 1 not judged" in text and "# healthy:" not in text
    assert "# not judged (no fault seen, nothing to judge against): 1 host(s): node0" in text
    assert "exit 9" in text and "every host judged healthy" not in text
    assert "(accepted: --accept-not-judged)" in verdict_table(rep, accept_not_judged=True)
    assert drain_text(rep) == "# not judged (not drained, not known healthy): node0\n"
    js = tmp_path / "r.json"
    with open(tmp_path / "out.txt", "w") as out:
        assert emit(rep, {"accept_not_judged": True}, str(js), None, out) == 0
    doc = json.loads(js.read_text())
    assert doc["outcome"] == "not judged" and doc["exit_code"] == 0 and doc["accept_not_judged"] is True
    assert doc["summary"]["not judged"] == 1 and doc["not_judged"]["node0"]
    back = report_from_json(doc)
    assert back.not_judged == rep.not_judged and exit_code(back) == 9


def test_a_fleet_judged_healthy_exits_0_and_counts_every_host_healthy():
    rep = report()
    assert rep.count()["healthy"] == 16 and not rep.unresolved and exit_code(rep) == 0
    assert "# hosts: 16 healthy, 0 faulty, 0 not judged" in verdict_table(rep)
    assert "# no fault confirmed: every host judged healthy (exit 0)" in verdict_table(rep)


def test_a_baseline_of_other_hosts_is_refused_in_one_line(tmp_path):
    """Issue 22's bad input: a health baseline saved on other hosts is not this fleet's reference -
    one clear line (exit 255), nothing judged against it; a subset of its hosts, or an older file
    that names no hosts, is used."""
    from ncclbench.health.core.round_judge import Baseline
    from ncclbench.health.outputs.baseline_file import check_baseline_hosts

    js, base = tmp_path / "r.json", tmp_path / "base.json"
    with open(tmp_path / "o", "w") as out:
        emit(report(), {}, str(js), None, out)
    _save_baseline(str(base), str(js))
    loaded = _load_baseline(str(base))
    check_baseline_hosts(loaded, Fleet(("node00", "node03"), ((0, 1), (2, 3))))  # part of the saved fleet
    with pytest.raises(ArgumentError, match=r"baseline base\.json was saved on other hosts \(node00, .*none of "
                                            r"them in this scan \(gpu0, gpu1\): not judged against it") as info:
        check_baseline_hosts(loaded, Fleet.uniform(2, 8, prefix="gpu"))
    assert int(info.value.code) == 255
    check_baseline_hosts(Baseline({"local:1x1": (1.0, 0.1)}), Fleet.uniform(2, 8, prefix="gpu"))  # older file


def test_a_baseline_from_another_version_is_refused_in_one_line(tmp_path):
    """Issue 29's bad input: a baseline saved by another ncclbench version is refused in one line
    (exit 255), nothing judged against it; one saved by this version, or a file that records no
    version (an older one), is used."""
    import ncclbench
    from ncclbench.health.core.round_judge import Baseline
    from ncclbench.health.outputs.baseline_file import check_baseline_version

    js, base = tmp_path / "r.json", tmp_path / "base.json"
    with open(tmp_path / "o", "w") as out:
        emit(report(), {}, str(js), None, out)
    _save_baseline(str(base), str(js))
    saved = json.loads(base.read_text())
    assert saved["version"] == ncclbench.__version__
    check_baseline_version(_load_baseline(str(base)))  # this version's own file
    base.write_text(json.dumps({**saved, "version": "0.0.1"}))
    with pytest.raises(ArgumentError, match=r"^health: baseline base\.json was saved by ncclbench 0\.0\.1, this is "
                                            + ncclbench.__version__.replace(".", r"\.") + r": .*not judged against it"
                                            r" \(save a new one with --save-baseline\)$") as info:
        check_baseline_version(_load_baseline(str(base)))
    assert int(info.value.code) == 255
    check_baseline_version(Baseline({"pairs:2x8": (1.0, 0.1)}))  # no version recorded


def test_two_hosts_are_judged_against_a_saved_healthy_scan_of_themselves(tmp_path):
    """Issue 29, 2 hosts: --save-baseline on healthy scans of the two hosts, then --baseline: a
    healthy scan is judged healthy (exit 0), a NIC at half or at 90 % is not (never healthy)."""
    js, base = tmp_path / "r.json", tmp_path / "base.json"
    healthy = run_scan(Fleet.uniform(2, 8), ScanConfig(), FakeFabric())
    assert exit_code(healthy) == 9  # alone: not judged
    with open(tmp_path / "o", "w") as out:
        emit(healthy, {}, str(js), None, out)
    for _ in range(3):
        _save_baseline(str(base), str(js))
    cfg = ScanConfig(baseline=_load_baseline(str(base)))
    again = run_scan(Fleet.uniform(2, 8), cfg, FakeFabric())
    assert exit_code(again) == 0 and set(again.host_status.values()) == {"healthy"}
    for rate in (0.5, 0.9):
        slow = run_scan(Fleet.uniform(2, 8), cfg, FakeFabric(nic={(1, None): rate}))
        assert exit_code(slow) in (FAULTS_FOUND, 9) and "healthy" not in slow.host_status.values(), rate
        assert "judged against baseline base.json" in verdict_table(slow)


def test_a_pairs_slow_rails_judged_by_the_line_rate_alone_show_the_ceiling_not_nan():
    """Two hosts with only the line rate to judge them (no fleet, no baseline: z is undefined):
    the evidence of their slow rails says the ceiling they fell under, never 'z +nan..+nan'."""
    from ncclbench.health.core.physics import physics_reference

    cfg = ScanConfig(physics={"pairs:2x1": physics_reference("pairs:2x1", 50.0, "NIC", 2, 256 << 20)})
    rep = run_scan(Fleet.uniform(2, 8), cfg, FakeFabric(nic={(1, None): 0.5}))
    text = verdict_table(rep)
    assert "healthy" not in rep.host_status.values()
    assert "8 of 8 rails slow" in text and "of the 50 GB/s NIC ceiling" in text and "nan" not in text
