"""bench/health_faults.py's judgement of a scan (the GPU fault catalog's checks), on made-up scan
documents: a fault counts only when convicted with its cause named, a healthy scan only when exit 0
with no finding and every host judged healthy."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("health_faults", BENCH / "health_faults.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["health_faults"] = mod
    spec.loader.exec_module(mod)
    return mod


hf = _load()
P2P = next(f for f in hf.CATALOG if f.name == "p2p_off")
HOG = next(f for f in hf.CATALOG if f.name == "gpu_busy")


def finding(component, detail, cause=(), evidence=(), hosts=("vm",)):
    return {"component": component, "detail": detail, "confirmed": True, "verdict": "slow", "hosts": list(hosts),
            "measured": 25.6, "expected": None, "cause": list(cause), "evidence": list(evidence)}


def scan(code, *findings, outcome="faults found", drain=()):
    return {"exit_code": code, "doc": {"findings": list(findings), "outcome": outcome, "drain": list(drain)}}


def test_a_fault_counts_only_when_convicted_with_its_cause():
    ok, detail = hf.check_fault(P2P, scan(8, finding("node intra", "4 GPUs", ["p2p-disabled"])))
    assert ok and "cause p2p-disabled" in detail and "drained: False" in detail
    assert not hf.check_fault(P2P, scan(8, finding("node intra", "4 GPUs")))[0]  # no cause named
    assert not hf.check_fault(P2P, scan(9, outcome="not judged"))[0]  # not judged is no conviction
    assert not hf.check_fault(P2P, scan(8, finding("gpu", "gpu 1", ["p2p-disabled"])))[0]  # wrong component


def test_the_hog_counts_when_exactly_its_gpu_is_named_and_no_trap_claimed():
    said = ["cause: no trap explains it (explain's checks over vm) - a GPU slower than its memory allows"]
    assert hf.check_fault(HOG, scan(8, finding("gpu", "gpu 3", evidence=said)), hog_device=3)[0]
    assert not hf.check_fault(HOG, scan(8, finding("gpu", "gpu 2", evidence=said)), hog_device=3)[0]
    two = scan(8, finding("gpu", "gpu 3", evidence=said), finding("gpu", "gpu 1", evidence=said))
    assert not hf.check_fault(HOG, two, hog_device=3)[0]


def test_a_healthy_scan_is_no_alarm_only_when_judged_healthy():
    assert hf.check_healthy(scan(0, outcome="healthy"))[0]
    assert not hf.check_healthy(scan(9, outcome="not judged"))[0]  # an unknown is no pass
    suspect = {**finding("gpu", "gpu 0"), "confirmed": False, "verdict": "suspect (not confirmed)"}
    assert not hf.check_healthy(scan(0, suspect, outcome="healthy"))[0]


def test_the_hog_is_found_by_its_slot_not_its_label():
    said = ["cause: no trap explains it (explain's checks over vm) - a GPU slower than its memory allows"]
    labelled_rank = {**finding("gpu", "rank 3", evidence=said), "slot": 3}  # the label is words; the slot is 3
    assert hf.check_fault(HOG, scan(8, labelled_rank), hog_device=3)[0]
    assert not hf.check_fault(HOG, scan(8, {**labelled_rank, "slot": 2}), hog_device=3)[0]
