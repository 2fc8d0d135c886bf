"""bench/health_fleet_gpu.py (issue 29's fake-host figures): the order the budget cuts, the
judging of a scan against the case, and the dry run on network-namespace hosts."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from netns_hosts import skip_or_fail, unavailable_reason

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
spec = importlib.util.spec_from_file_location("health_fleet_gpu", ROOT / "bench" / "health_fleet_gpu.py")
hf = importlib.util.module_from_spec(spec)
sys.modules["health_fleet_gpu"] = hf  # its dataclasses look their module up
spec.loader.exec_module(hf)


def test_the_most_important_cases_come_first_and_every_case_once():
    names = [c.name for c in hf.plan()]
    assert names[:5] == ["4h-nic50-1", "4h-nic25-1", "3h-nic50-1", "8h-nic25-1", "4h-link50-1"]
    assert names[5:9] == ["3h-healthy-1", "4h-healthy-1", "5h-healthy-1", "8h-healthy-1"]
    assert len(names) == len(set(names))
    for n in (3, 4, 5, 8):
        assert sum(c.hosts == n and c.kind == "healthy" for c in hf.plan()) == 5
        for p in (75, 50, 25):
            assert f"{n}h-nic{p}-1" in names


def _f(comp, hosts):
    return {"component": comp, "hosts": hosts, "confirmed": True, "detail": "x"}


def test_a_fault_is_as_expected_only_when_exactly_that_is_named_and_drained():
    nic = hf.Case(4, "nic", 25)
    assert hf.judge_case(nic, 8, {"findings": [_f("node nic", ["node2"])]}, ["node2"])["as expected"]
    other = hf.judge_case(nic, 8, {"findings": [_f("node nic", ["node2"]), _f("node nic", ["node1"])]},
                          ["node1", "node2"])
    assert not other["as expected"] and other["other hosts drained"] == ["node1"]
    assert not hf.judge_case(nic, 9, {"findings": []}, [])["as expected"]  # the stuck case's old answer
    link = hf.Case(4, "link", 50)
    assert hf.judge_case(link, 8, {"findings": [_f("link", ["node1", "node3"])]}, [])["as expected"]
    rec = {"round": "pairs r2", "groups": [{"group": "node1+node2 rail 0", "upper_bound": "node1+node2: under 0.1 GB/s",
                                            "status": "slow"},
                                           {"group": "node0+node3 rail 0", "status": "no answer", "why": "died"}]}
    res = hf.judge_case(nic, 8, {"findings": [_f("node nic", ["node2"])], "measurements": [rec]}, ["node2"])
    assert res["bounded groups"] == ["node1+node2: under 0.1 GB/s"]
    assert res["no answer groups"] == ["pairs r2: node0+node3 rail 0: died"]
    assert not hf.judge_case(link, 8, {"findings": [_f("link", ["node1", "node3"])]}, ["node1"])["as expected"]


def test_a_healthy_scan_is_as_expected_only_at_exit_0_with_nothing_named():
    ok = hf.Case(3, "healthy")
    assert hf.judge_case(ok, 0, {"findings": []}, [])["as expected"]
    assert not hf.judge_case(ok, 9, {"findings": []}, [])["as expected"]
    assert not hf.judge_case(ok, 8, {"findings": [_f("node nic", ["node0"])]}, ["node0"])["as expected"]
    tally = hf.tally({"3h-healthy-1": hf.judge_case(ok, 8, {"findings": [_f("node nic", ["node0"])]}, ["node0"]),
                      "4h-healthy-1": {"status": "not run"}})
    assert tally["healthy scans with an alarm (exit 8 or a confirmed finding)"] == "1 of 1 run"
    assert tally["not run"] == ["4h-healthy-1"]


@pytest.mark.netns
def test_the_dry_run_makes_and_shapes_each_fleet_and_records_what_the_budget_left_out(tmp_path):
    reason = unavailable_reason()
    if reason:
        skip_or_fail(reason)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "health_fleet_gpu.py"), str(out), "--cpu",
                           "--budget-s", "8", "--cases", "4h-nic25-1,3h-healthy-1,8h-healthy-5"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["commit"] and doc["date"] and doc["machine"] and "command" in doc
    first = doc["cases"]["4h-nic25-1"]
    assert first["status"] == "dry" and first["exit codes"] == [0, 0, 0, 0], first
    assert "node2's veth at 25mbit" in first["links"]
    assert "4 host(s)" in first["preflight"][0]
    ran = [n for n, r in doc["cases"].items() if r["status"] == "dry"]
    assert doc["tally"]["not run"] == [n for n in doc["cases"] if n not in ran]
    assert "| 4h-nic25-1 |" in (out / "summary.md").read_text()


def test_odd_fleets_share_one_gpu_so_every_round_runs_as_many_ranks_on_it():
    assert [hf.gpus_for(n, 2) for n in (3, 4, 5, 8)] == [1, 2, 1, 2]
    assert hf.gpus_for(5, None) is None  # the CPU dry run: no GPUs to share


def _scan(pairs):
    """A scan's measurements: one round of 2-host groups, (hosts, busbw GB/s) each."""
    return {"measurements": [{"round": "pairs r1", "groups": [{"hosts": list(h), "busbw": b} for h, b in pairs]}]}


def test_an_injection_lands_only_where_its_rate_is_under_what_the_other_pairs_reach():
    """8 contexts time-sliced on one GPU (2026-11-28, 1x H200): pairs at 0.24-0.30 GB/s = 1.9-2.4 Gbit/s on
    the wire, under a 75 % NIC's 3 Gbit/s: not landed; on 2 GPUs the pairs are faster and it lands."""
    nic75 = hf.Case(8, "nic", 75)
    capped = _scan([(("node0", "node7"), 0.25), (("node1", "node6"), 0.26), (("node2", "node5"), 0.24),
                    (("node3", "node4"), 0.28)])
    landed, why = hf.injection_landed(nic75, capped, 4000)
    assert landed == "did not land" and "shaped 3.00 Gbit/s" in why and "2.08 Gbit/s" in why  # node2's pair out
    fast = _scan([(("node0", "node7"), 0.48), (("node1", "node6"), 0.47), (("node2", "node5"), 0.30),
                  (("node3", "node4"), 0.49)])
    assert hf.injection_landed(nic75, fast, 4000)[0] == "landed"
    link = hf.Case(8, "link", 50)  # node1-node3 at 2 Gbit/s: the pair itself is left out, its hosts' other pairs not
    near = _scan([(("node1", "node3"), 0.18), (("node1", "node6"), 0.26), (("node3", "node4"), 0.27),
                  (("node0", "node7"), 0.26)])
    assert hf.injection_landed(link, near, 4000)[0] == "at the cap"  # 2.0 within 10 % of 2.08
    assert hf.injection_landed(hf.Case(4, "healthy"), near, 4000) == (None, "no injection")


def test_a_case_that_did_not_land_is_counted_apart():
    res = {"8h-nic75-1": {"status": "ok", "as expected": False, "landed": "did not land", "landed why": "w",
                          "exit": 0, "confirmed": []},
           "8h-link50-1": {"status": "ok", "as expected": False, "landed": "at the cap", "landed why": "c",
                           "exit": 0, "confirmed": []},
           "8h-nic50-1": {"status": "ok", "as expected": True, "landed": "landed", "exit": 8, "confirmed": ["x"]}}
    t = hf.tally(res)
    assert t["faults named as expected"] == "1 of 2 run"
    assert t["faults whose injection did not land (not counted above)"] == ["8h-nic75-1: w"]
    assert t["faults at the cap the other pairs met (counted above)"] == ["8h-link50-1: c"]
