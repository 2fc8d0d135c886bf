"""`ncclbench explain` scored on the log corpus (tests/fixtures/log_corpus): the share of logs with the
right verdict, causes and words must stay at or above the target (bench/log_corpus_eval.py, issue 26)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("log_corpus_eval", ROOT / "bench" / "log_corpus_eval.py")
assert _spec is not None and _spec.loader is not None
evaluation = importlib.util.module_from_spec(_spec)
sys.modules["log_corpus_eval"] = evaluation  # its dataclasses look their module up while being made
_spec.loader.exec_module(evaluation)


@pytest.fixture(scope="module")
def results():
    return evaluation.evaluate()


def test_the_corpus_is_judged_right_at_the_target_share(results):
    s = evaluation.summary(results)
    misses = "\n".join(f"{r.file}: {r.why()}" for r in results if not r.ok)
    assert s["entries"] >= 25
    assert s["share"] >= evaluation.TARGET, f"{s['right']} of {s['entries']} right; misses:\n{misses}"
    assert s["errors"] == 0, misses  # every log of the corpus imports


def test_no_healthy_log_gets_an_error_trap(results):
    """A judge must not cry wolf: logs confirmed normal raise no ERROR-severity cause."""
    healthy = [r for r in results if r.expected_verdict == "as_expected" and not r.expected_causes]
    assert len(healthy) >= 5
    assert [r.file for r in healthy if r.wolf] == []


def test_scoring_catches_a_wrong_verdict_and_a_missing_cause(tmp_path):
    """The score can fail: an entry with a wrong expectation is a miss, with what differed."""
    src = ROOT / "tests" / "fixtures" / "log_corpus" / "h100-nchannels2.log"
    (tmp_path / src.name).write_bytes(src.read_bytes())
    entry = {"file": src.name, "expected_verdict": "as_expected", "expected_causes": ["gdr_off"],
             "cause_words": ["nosuchword"]}
    r = evaluation.score_entry(entry, tmp_path)
    assert not r.ok and r.verdict == "below" and r.missing_causes == ["gdr_off"]
    assert r.missing_words == ["nosuchword"] and "channels_capped" in r.causes
    assert "verdict below, expected as_expected" in r.why()
