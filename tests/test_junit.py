"""--junit for `check` and `health`: every file is read back with junitparser (a JUnit
reader CI tools build on) and checked case by case: a regression or a confirmed fault
is a failure, what could not be judged is skipped (never a pass), the rest pass."""

from __future__ import annotations

import copy
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gate_helpers import one_run_limit_pct, slow_down
from health_helpers import FakeFabric

from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.scan import ScanConfig, run_scan
from ncclbench.health.outputs.scan_output import scan_document
from ncclbench.output.junit import check_junit, health_junit
from ncclbench.store.gate import gate
from ncclbench.store.gate_format import gate_to_dict
from ncclbench.store.importers import load_file

junitparser = pytest.importorskip("junitparser", reason="the test extra installs junitparser")

FIX = Path(__file__).parent / "fixtures" / "nccl_tests_output"
AR = FIX / "all_reduce_1proc_4gpu.txt"


def cases(xml_text: str) -> dict[tuple[str, str], object]:
    """(classname, name) -> junitparser TestCase, checking the suite's counts on the way."""
    xml = junitparser.JUnitXml.fromstring(xml_text)
    suites = list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml]
    out = {}
    for suite in suites:
        found = list(suite)
        assert suite.tests == len(found)
        assert suite.failures == sum(any(isinstance(r, junitparser.Failure) for r in c.result) for c in found)
        assert suite.skipped == sum(any(isinstance(r, junitparser.Skipped) for r in c.result) for c in found)
        for c in found:
            out[(c.classname, c.name)] = c
    return out


def outcome(case) -> str:
    kinds = {type(r) for r in case.result}
    if junitparser.Failure in kinds:
        return "failure"
    if junitparser.Skipped in kinds:
        return "skipped"
    assert case.is_passed
    return "passed"


def slowed(run, factor):
    new = copy.deepcopy(run)
    for r in new.rows:
        slow_down(r, 1 / factor)
    new.content_hash += f"-x{factor}"
    return new


def test_check_regression_is_a_failure_and_a_pass_passes():
    base = load_file(str(AR))[0]
    bad = gate_to_dict(gate(slowed(base, 0.5), base, 5.0, 5.0))
    assert not bad["ok"]
    got = cases(check_junit(bad, "latest"))
    plateau = [c for (cls, name), c in got.items() if name == "plateau busbw"]
    assert plateau and all(outcome(c) == "failure" for c in plateau)
    assert "REGRESSION" in plateau[0].result[0].message
    same = gate_to_dict(gate(base, base, 20.0, 60.0))  # limits a one-run GPU baseline's prior can see
    assert same["ok"] and {outcome(c) for c in cases(check_junit(same)).values()} == {"passed"}
    assert len(cases(check_junit(same))) == len(same["judgements"])


def test_check_cannot_confirm_is_skipped_not_passed():
    """Asked for less than a one-run GPU baseline can see (half its busbw limit, a 5 % rise of
    small-message time): every figure is not judged (exit 9)."""
    base = load_file(str(AR))[0]
    doc = gate_to_dict(gate(base, base, one_run_limit_pct() / 2, 5.0))
    assert doc["exit_code"] == 9 and doc["status"] == "cannot confirm"
    got = list(cases(check_junit(doc)).values())
    assert {outcome(c) for c in got} == {"skipped"}
    assert all("not judged: cannot confirm: this baseline can only see" in c.result[0].message for c in got)


def test_check_unstable_figure_is_skipped_not_passed():
    base = load_file(str(AR))[0]
    doc = gate_to_dict(gate(base, base, 5.0, 5.0))
    doc["judgements"][0]["unstable"] = "unstable candidate: cannot confirm; re-run"
    got = list(cases(check_junit(doc)).values())
    assert outcome(got[0]) == "skipped" and "not judged: unstable candidate" in got[0].result[0].message


def test_health_faulty_host_fails_with_evidence_others_pass():
    doc = scan_document(run_scan(Fleet.uniform(8, 4), ScanConfig(), FakeFabric(gpu={(3, 2): 0.5},
                                                                                link={frozenset({0, 1}): 0.7})), {})
    got = cases(health_junit(doc))
    hosts = {name: c for (cls, name), c in got.items() if cls == "ncclbench.health.host"}
    assert set(hosts) == {f"node{i}" for i in range(8)}
    assert outcome(hosts["node3"]) == "failure"
    failure = hosts["node3"].result[0]
    assert "gpu 2 slow" in failure.message and "busbw" in failure.text  # the evidence travels with it
    assert {outcome(hosts[f"node{i}"]) for i in (1, 2, 4, 5, 6, 7)} == {"passed"}
    link = [c for (cls, name), c in got.items() if cls == "ncclbench.health.link"]
    assert len(link) == 1 and outcome(link[0]) == "failure" and link[0].name == "node0 <-> node1"


def test_health_not_judged_is_skipped_never_passed():
    doc = scan_document(run_scan(Fleet.uniform(1, 2), ScanConfig(), FakeFabric()), {})
    got = cases(health_junit(doc))
    phases = [c for (cls, name), c in got.items() if cls == "ncclbench.health.fleet"]
    assert phases and {outcome(c) for c in phases} == {"skipped"}
    assert all("not judged" in c.result[0].message for c in phases)
    host = got[("ncclbench.health.host", "node0")]
    assert outcome(host) == "skipped"  # one host, nothing to compare it with: never "healthy"


def test_junit_shape_matches_the_common_schema():
    """The attributes Jenkins' junit-10.xsd requires, on the element tree itself."""
    doc = scan_document(run_scan(Fleet.uniform(4, 2), ScanConfig(), FakeFabric()), {})
    root = ET.fromstring(health_junit(doc))
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite is not None
    for attr in ("name", "tests", "failures", "errors", "skipped", "time", "timestamp", "hostname"):
        assert suite.get(attr) is not None, attr
    for tc in suite.findall("testcase"):
        assert tc.get("classname") and tc.get("name") and float(tc.get("time")) >= 0


@pytest.mark.mpi
def test_health_command_writes_junit_and_metrics(tmp_path, ncclbench_env):
    """A real CPU scan (2 ranks) judged against an impossible baseline: the host fails."""
    base = tmp_path / "base.json"
    base.write_text('{"name": "impossible", "busbw": {"local:1x1": [1000, 10]}, "lat_us": {}}')
    xml, prom = tmp_path / "h.xml", tmp_path / "h.prom"
    cmd = [sys.executable, "-m", "ncclbench", "health", "--nprocs", "2", "--backend", "mpi", "--phases", "local",
           "--bw-size", "64K", "-n", "5", "--cycles", "1", "--baseline", str(base), "--no-store",
           "--junit", str(xml), "--metrics", str(prom)]
    p = subprocess.run(cmd, env=ncclbench_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 8, p.stdout + p.stderr
    got = cases(xml.read_text())
    hosts = [c for (cls, _), c in got.items() if cls == "ncclbench.health.host"]
    assert len(hosts) == 1 and outcome(hosts[0]) == "failure"
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert fams["ncclbench_health_exit_code"].samples[0].value == 8
    assert {s.labels["verdict"] for s in fams["ncclbench_health_gpu_verdict"].samples} == {"faulty"}


def test_check_command_writes_junit(tmp_path, ncclbench_env):
    env = dict(ncclbench_env, NCCLBENCH_DB=str(tmp_path / "r.sqlite"))
    env.pop("NCCLBENCH_NO_STORE", None)
    ncb = [sys.executable, "-m", "ncclbench"]
    assert subprocess.run(ncb + ["import", str(AR)], env=env, capture_output=True, timeout=60).returncode == 0
    xml, prom = tmp_path / "check.xml", tmp_path / "check.prom"
    p = subprocess.run(ncb + ["check", "latest", "--against", "latest", "--max-drop", "20", "--junit", str(xml),
                            "--metrics", str(prom)],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = cases(xml.read_text())
    assert got and {outcome(c) for c in got.values()} == {"passed"}
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert fams["ncclbench_check_status"].samples[0].labels["status"] == "ok"
    assert fams["ncclbench_check_exit_code"].samples[0].value == 0
    assert len(fams["ncclbench_check_verdict"].samples) == len(got)
    assert {s.labels["verdict"] for s in fams["ncclbench_check_verdict"].samples} == {"ok"}
    p = subprocess.run(ncb + ["check", "latest", "--against", "latest", "--junit", str(tmp_path / "no" / "x.xml")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 255 and "cannot write in" in p.stderr


def test_a_host_not_judged_is_skipped_with_the_scans_reason():
    """Two GPUs per host: two rail groups, too few for fleet statistics, no baseline, no ceiling:
    the scan leaves every host not judged (exit 9) and says why; each is a skipped case with
    that reason and a `not judged` verdict in the metrics, never a pass."""
    from prometheus_client.parser import text_string_to_metric_families

    from ncclbench.output.metrics import health_metrics

    doc = scan_document(run_scan(Fleet.uniform(8, 2), ScanConfig(), FakeFabric()), {})
    assert set(doc["host_status"].values()) == {"not judged"} and doc["exit_code"] == 9
    got = {name: c for (cls, name), c in cases(health_junit(doc)).items() if cls == "ncclbench.health.host"}
    assert len(got) == 8 and {outcome(c) for c in got.values()} == {"skipped"}
    why = doc["not_judged"]["node0"][0]
    assert "no reference" in why and why in got["node0"].result[0].message
    fams = {f.name: f for f in text_string_to_metric_families(health_metrics(doc))}
    host = {s.labels["host"]: s.labels for s in fams["ncclbench_health_host_verdict"].samples}
    assert host["node0"]["verdict"] == "not judged" and "reason" not in host["node0"]  # the words: JUnit, JSON
    counts = {s.labels["verdict"]: s.value for s in fams["ncclbench_health_hosts"].samples}
    assert counts == {"healthy": 0, "faulty": 0, "not judged": 8}
    assert fams["ncclbench_health_exit_code"].samples[0].value == 9


def test_suspect_and_untested_hosts_are_not_judged_either():
    doc = scan_document(run_scan(Fleet.uniform(8, 4), ScanConfig(), FakeFabric()), {})
    assert set(doc["host_status"].values()) == {"healthy"}
    doc["host_status"].update({"node1": "suspect", "node2": "not tested", "node3": "partly tested"})
    got = {name: c for (cls, name), c in cases(health_junit(doc)).items() if cls == "ncclbench.health.host"}
    assert [outcome(got[f"node{i}"]) for i in range(5)] == ["passed", "skipped", "skipped", "skipped", "passed"]
    assert got["node1"].result[0].message.startswith("not judged (suspect")
