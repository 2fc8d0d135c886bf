"""The log corpus (tests/fixtures/log_corpus) is well formed: every log listed, every entry judgeable.

The corpus is what `ncclbench explain` is scored against (bench/log_corpus_eval.py);
a manifest entry that names a missing file, an unknown cause id or a verdict
outside the bands would silently drop out of that score, so it is caught here.
What the entries must contain is described in tests/fixtures/log_corpus/README.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "fixtures" / "log_corpus"
MANIFEST = CORPUS / "manifest.json"

VERDICTS = {"as_expected", "below", "above", "failed", "not_judged"}
# The cause ids agreed for the corpus (README.md, "Cause ids"); extend both together.
CAUSE_IDS = {
    "sockets_between_hosts", "gdr_off", "p2p_disabled", "p2p_shm_disabled", "channels_capped",
    "algo_forced", "proto_forced", "iface_list_empty", "hca_list_empty", "acs_iommu",
    "network_error_remote_exit", "ib_completion_error", "bootstrap_no_interface",
    "plugin_missing", "pcie_downtrained", "nvlink_down", "hang_no_table",
    "oom_or_alloc_failure", "version_mismatch", "wrong_results", "cuda_error", "healthy",
}
REQUIRED = {"file", "source", "diagnosis", "expected_verdict", "expected_causes", "cause_words"}
# A cut the corpus made: N is the count of lines left out, "?" where the source did not show them.
CUT = re.compile(r"^\[\.\.\. (\d+|\?) lines cut by ncclbench corpus \.\.\.\]$")
MAX_BYTES = 200 * 1024

ENTRIES = json.loads(MANIFEST.read_text(encoding="utf-8"))


def _id(entry: dict) -> str:
    return str(entry.get("file", "?"))


def test_manifest_is_a_list_with_one_entry_per_file():
    assert isinstance(ENTRIES, list) and ENTRIES
    files = [e.get("file") for e in ENTRIES]
    assert len(files) == len(set(files)), "a file is listed twice"


def test_every_log_in_the_folder_is_in_the_manifest():
    listed = {e["file"] for e in ENTRIES}
    on_disk = {p.name for p in CORPUS.glob("*.log")}
    assert on_disk - listed == set(), "logs nobody judges"
    assert listed - on_disk == set(), "entries without their log"


@pytest.mark.parametrize("entry", ENTRIES, ids=_id)
def test_entry_is_complete_and_uses_known_ids(entry):
    assert REQUIRED <= set(entry), f"missing {REQUIRED - set(entry)}"
    assert re.fullmatch(r"(gh|h100)-[a-z0-9][a-z0-9.-]*\.log", entry["file"]), "name is <source>-<short-name>.log"
    assert entry["expected_verdict"] in VERDICTS
    assert set(entry["expected_causes"]) <= CAUSE_IDS, set(entry["expected_causes"]) - CAUSE_IDS
    assert entry["diagnosis"].strip()
    assert all(isinstance(w, str) and w and w == w.lower() for w in entry["cause_words"])
    src = entry["source"]
    if entry["file"].startswith("gh-"):
        assert src.startswith("https://github.com/"), "a public log cites its thread or file"
    else:
        assert src.startswith("captured:"), "a captured log says how it was captured"


@pytest.mark.parametrize("entry", ENTRIES, ids=_id)
def test_log_is_small_text_and_cuts_are_marked(entry):
    raw = (CORPUS / entry["file"]).read_bytes()
    assert 0 < len(raw) < MAX_BYTES
    text = raw.decode("utf-8")
    marked = [line for line in text.splitlines() if "lines cut by ncclbench corpus" in line]
    assert all(CUT.match(line) for line in marked), marked


def test_corpus_holds_healthy_failed_and_unjudgeable_logs():
    """A judge must not cry wolf (healthy logs), must read failures, and must say when it cannot judge."""
    verdicts = {e["expected_verdict"] for e in ENTRIES}
    assert {"as_expected", "failed", "not_judged"} <= verdicts
