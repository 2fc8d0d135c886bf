"""bench/health_sim_model.py in its small CPU mode: the table, its provenance, and a budget that
runs out recorded as what was not run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("health_sim_model", BENCH / "health_sim_model.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_small_run_writes_the_table_with_provenance(tmp_path):
    mod = _load()
    assert mod.main([str(tmp_path), "--sizes", "3", "--trials", "2", "--kinds", "healthy", "nic"]) == 0
    doc = json.loads((tmp_path / "health-sim-model-after.json").read_text())
    rows = {(r["kind"], r["slowdown"]): r for r in doc["rows"]}
    assert set(rows) == {("healthy", 0.0)} | {("nic", s) for s in mod.SLOWDOWNS}
    assert rows[("nic", 0.5)]["found_pct"] == 100.0 and rows[("healthy", 0.0)]["false_alarms"] == 0
    assert {"machine", "gpus", "nccl", "commit", "command", "date"} <= set(doc["meta"])
    md = (tmp_path / "health-sim-model-after.md").read_text()
    assert "| nic | 50% | 100 (0/2)" in md, md


def test_a_spent_budget_records_what_was_not_run(tmp_path):
    mod = _load()
    assert mod.main([str(tmp_path), "--sizes", "3", "4", "--trials", "1", "--kinds", "healthy",
                     "--budget-s", "0"]) == 0
    doc = json.loads((tmp_path / "health-sim-model-after.json").read_text())
    assert doc["meta"]["not_run"] and len(doc["rows"]) + len(doc["meta"]["not_run"]) == 2
    assert "Not run (budget 0.0 s spent)" in (tmp_path / "health-sim-model-after.md").read_text()


def test_a_noisier_fleet_is_said_in_the_table(tmp_path):
    mod = _load()
    assert mod.main([str(tmp_path), "--sizes", "3", "--trials", "1", "--kinds", "healthy", "--sigma-run", "0.02"]) == 0
    doc = json.loads((tmp_path / "health-sim-model-after.json").read_text())
    assert doc["meta"]["sigma_run"] == 0.02
    assert "Run-to-run noise of a group 2.0 % (--sigma-run" in (tmp_path / "health-sim-model-after.md").read_text()


def test_a_topology_adds_the_path_kind_and_names_the_path(tmp_path):
    """--hosts-per-leaf: the scan is given leaves, the path between two of them is slowed, and found means
    the scan named that path; a fleet of one leaf has no path (recorded as not run)."""
    mod = _load()
    assert mod.main([str(tmp_path), "--sizes", "4", "8", "--trials", "2", "--kinds", "healthy", "path",
                     "--hosts-per-leaf", "4", "--label", "topo"]) == 0
    doc = json.loads((tmp_path / "health-sim-model-topo.json").read_text())
    rows = {(r["nhosts"], r["kind"], r["slowdown"]): r for r in doc["rows"]}
    assert rows[(8, "path", 0.5)]["found_pct"] == 100.0 and rows[(8, "path", 0.5)]["false_alarms"] == 0
    assert rows[(8, "healthy", 0.0)]["false_alarms"] == 0 and (4, "path", 0.5) not in rows
    assert doc["meta"]["hosts_per_leaf"] == 4 and "path 50% at 4" in doc["meta"]["one_leaf"]
    assert "No path between leaves (one leaf): path 10% at 4" in (tmp_path / "health-sim-model-topo.md").read_text()


def test_a_path_scanned_without_its_topology_is_not_named(tmp_path):
    """--scan-without-topology: the same slow path, the scan not told the leaves: no path named."""
    mod = _load()
    assert mod.main([str(tmp_path), "--sizes", "8", "--trials", "2", "--kinds", "path", "--hosts-per-leaf", "4",
                     "--scan-without-topology", "--label", "blind"]) == 0
    doc = json.loads((tmp_path / "health-sim-model-blind.json").read_text())
    assert {r["found_pct"] for r in doc["rows"]} == {0.0} and doc["meta"]["scan_without_topology"]
