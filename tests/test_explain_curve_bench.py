"""bench/explain_curve_gpu.py's control flow on a CPU machine: the budget stops it cleanly with what
was not run recorded, nccl-tests logs are imported, judged and cut at each -e, and the counts say
which healthy judgements were below expected."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
CORPUS = Path(__file__).resolve().parent / "fixtures" / "log_corpus"


def _load():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("explain_curve_gpu", BENCH / "explain_curve_gpu.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["explain_curve_gpu"] = mod
    spec.loader.exec_module(mod)
    return mod


ecg = _load()


def _fake_nccl_tests(tmp: Path, logs: dict[str, str]) -> Path:
    """A directory of `<coll>_perf` scripts that print a recorded nccl-tests log."""
    d = tmp / "nt"
    d.mkdir()
    for coll, log in logs.items():
        exe = d / f"{coll}_perf"
        exe.write_text(f"#!/bin/sh\ncat '{CORPUS / log}'\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return d


def test_a_spent_budget_records_every_step_and_run_not_run(tmp_path):
    rc = ecg.main([str(tmp_path), "--cpu", "--budget-s", "1", "--steps", "healthy_128M,causes"])
    doc = json.loads((tmp_path / "explain_curve_gpu.json").read_text())
    names = [n["name"] for n in doc["not_run"]]
    assert "short128M-all_reduce" in names and "cause-p2p_off" in names
    assert all("budget" in n["why"] or "no GPU" in n["why"] for n in doc["not_run"])
    assert not doc.get("healthy") and rc == 0
    assert "Not run: short128M-all_reduce" in (tmp_path / "explain_curve_gpu.md").read_text()


def test_nccl_tests_logs_are_judged_and_cut_and_counted(tmp_path):
    nt = _fake_nccl_tests(tmp_path, {"all_gather": "h100-healthy-allgather-large.log",
                                     "all_reduce": "h100-nchannels2.log"})
    os.environ.pop("NCCLBENCH_DB", None)
    ecg.main([str(tmp_path / "out"), "--budget-s", "120", "--steps", "nccl_tests", "--nccl-tests", str(nt)])
    doc = json.loads((tmp_path / "out" / "explain_curve_gpu.json").read_text())
    ag = next(r for r in doc["nccl_tests"] if r["name"] == "nt-INFO-all_gather")
    assert ag["rc"] == 0 and ag["verdict"] not in (None, "error") and set(ag["cuts"]) == {"32M", "128M", "1G", "8G"}
    assert any(n["name"] == "nt-INFO-broadcast" and "missing" in n["why"] for n in doc["not_run"])
    causes = {r["name"]: r for r in doc["nccl_tests_causes"]}
    assert causes["nt-cause-p2p_off"]["caught"] is True  # the capped-channels log: below or trapped
    labels = doc["summary"]["healthy_labels"]
    assert sum(labels.values()) == 2 * 2 * 5  # 2 logs x (INFO, plain) x (run + 4 cuts)
