"""Metrics that do not churn: label values from small fixed sets, reasons in JSON/JUnit.

Why: Prometheus keeps one series per label set; a free-text `reason` with measured numbers,
a group `status` that changes from scan to scan or `run="latest"` make a new series each
scan or run (or one series for many runs), and alerting on them breaks.  Read back with
prometheus_client's parser, as a scraper would.
"""
from __future__ import annotations

import csv
import re
import subprocess
import sys

import pytest
from health_helpers import FakeFabric
from output_helpers import half, make_info, make_row

from ncclbench.core.config import BenchOptions
from ncclbench.core.results import RunSummary
from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.scan import HOST_STATUSES, ScanConfig, run_scan
from ncclbench.health.outputs.scan_output import scan_document
from ncclbench.output.metrics import CHECK_STATUSES, VERDICT_WHY, check_metrics, health_metrics, run_metrics

parser = pytest.importorskip("prometheus_client.parser", reason="the test extra installs prometheus-client")
MiB = 1 << 20


def sweep(sizes, busbw):
    return [make_row(size=s, count=s // 4, oop=half(time_us=10.0 + s / 1e4, algbw=b, busbw=b),
                     ip=half(time_us=11.0 + s / 1e4, algbw=b * 0.9, busbw=b * 0.9)) for s, b in zip(sizes, busbw)]
# labels whose values name a thing of the machine (a host, a GPU slot, a round): not free text
_NAMES = {"host", "peer", "hosts", "group", "gpu", "rail", "round", "shape", "detail", "library", "version",
          "nranks", "ngroups", "root", "against", "series"}
_FIXED = {"verdict": {"healthy", "faulty", "not judged", "as expected", "below expected", "above the line rate",
                      "ok", "regression", "unstable", "slow", "no answer", "wrong results",
                      "suspect (not confirmed)", "above the model"},
          "why": set(VERDICT_WHY), "status": set(HOST_STATUSES) | set(CHECK_STATUSES) | {"other"}}


def _labels(text: str) -> list[tuple[str, str, str]]:
    return [(fam.name, k, v) for fam in parser.text_string_to_metric_families(text)
            for s in fam.samples for k, v in s.labels.items()]


def _assert_fixed(text: str) -> None:
    for fam, key, value in _labels(text):
        assert key != "reason" and key != "run", (fam, key, value)
        if key in _FIXED:
            assert value in _FIXED[key], (fam, key, value)
        elif key not in _NAMES:
            assert len(value) <= 40 and not re.search(r"\d\.\d|\d+ ?(GB/s|%|us|s\b)", value), (fam, key, value)


@pytest.mark.parametrize("faults", [{}, {"gpu": {(3, 2): 0.5}}, {"nic": {(5, 1): 0.8}}])
def test_health_labels_come_from_fixed_sets(faults) -> None:
    doc = scan_document(run_scan(Fleet.uniform(8, 4), ScanConfig(), FakeFabric(**faults)), {"backend": "simulated"})
    _assert_fixed(health_metrics(doc))


def test_a_lone_host_not_judged_has_no_free_text_label() -> None:
    doc = scan_document(run_scan(Fleet.uniform(1, 2), ScanConfig(), FakeFabric()), {"backend": "simulated"})
    _assert_fixed(health_metrics(doc))


def test_health_exit_code_help_lists_the_documented_codes() -> None:
    doc = scan_document(run_scan(Fleet.uniform(2, 2), ScanConfig(), FakeFabric()), {"backend": "simulated"})
    fam = next(f for f in parser.text_string_to_metric_families(health_metrics(doc))
               if f.name == "ncclbench_health_exit_code")
    assert all(re.search(rf"\b{c}\b", fam.documentation) for c in (0, 8, 9)), fam.documentation


def test_run_verdict_has_no_reason_sentence() -> None:
    text = 'the ceiling is unknown: 0.43 GB/s over 32-64 MiB, "quoted"'
    j = {"ceiling": {"ceiling": None}, "plateau": {"busbw": 0.1}, "verdict": {"label": "unknown", "text": text}}
    for rows in (sweep([8, 1024], [0.1, 0.2]), sweep([64 * MiB, 128 * MiB], [0.4, 0.43])):
        for summary in (RunSummary(0, 0.1, None, None, explain={"judgement": j}), RunSummary(0, 0.1, None, None),
                        None):
            out = run_metrics(make_info(), BenchOptions(), rows, summary)
            _assert_fixed(out)
            assert "0.43 GB/s" not in out


def test_check_metrics_do_not_label_the_run() -> None:
    gate = {"status": "unstable candidate", "ok": False, "exit_code": 9,
            "judgements": [{"series": "float sum", "figure": "plateau busbw", "metric": "busbw",
                            "worse_pct": 12.5, "limit_pct": 5.0, "verdict": "unstable"}]}
    for run in ("latest", "17"):
        out = check_metrics(gate, run, "good", now=1.0)
        _assert_fixed(out)
    ids = [s.value for f in parser.text_string_to_metric_families(out) if f.name == "ncclbench_check_run_id"
           for s in f.samples]
    assert ids == [17.0]


def test_live_csv_rows_carry_their_timestamp(tmp_path) -> None:
    out = tmp_path / "t.csv"
    env_run = [sys.executable, "-m", "ncclbench", "all_reduce_perf", "--backend", "mpi", "-b", "8", "-e", "64",
               "-f", "2", "-n", "2", "-w", "1", "--csv", str(out), "--no-store"]
    p = subprocess.run(env_run, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        pytest.skip(f"the CPU backend does not run here: {p.stderr.strip()[-200:]}")
    rows = list(csv.DictReader(out.open()))
    assert rows and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", r["timestamp"]) for r in rows), rows
