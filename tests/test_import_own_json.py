"""Importing the -J file of a run already stored live neither stores it again nor makes it `latest`.

Why: a live run is stored row by row with no content hash, so `ncclbench import run.json` of its
own -J file used to add a second copy with the newest id, and `latest` (and history, and a
baseline's --runs) then pointed at the older record of the same run.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import child_env


def _ncclbench(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ncclbench", *args], env=env, capture_output=True, text=True,
                          timeout=180)


def test_own_json_is_recognised_as_the_stored_run(tmp_path: Path) -> None:
    db, js = tmp_path / "r.sqlite", tmp_path / "run.json"
    env = child_env(NCCLBENCH_DB=str(db))
    live = _ncclbench(["all_reduce_perf", "--backend", "mpi", "-b", "8", "-e", "64", "-f", "2", "-n", "2",
                       "-J", str(js)], env)
    if live.returncode != 0:
        pytest.skip(f"the CPU backend does not run here: {live.stderr.strip()[-300:]}")
    imp = _ncclbench(["import", str(js)], env)
    assert imp.returncode == 0, imp.stderr
    assert "already stored as run 1" in imp.stdout, imp.stdout
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    # the same file with another start time records another run: still imported
    doc = json.loads(js.read_text())
    doc["start_time"] = "2001-01-01 00:00:00"
    (tmp_path / "other.json").write_text(json.dumps(doc))
    imp2 = _ncclbench(["import", str(tmp_path / "other.json")], env)
    assert imp2.returncode == 0 and "run 2 (" in imp2.stdout, imp2.stdout + imp2.stderr


def test_explain_of_a_cpu_json_says_cpu_backend(tmp_path: Path) -> None:
    """The same run's text log said "CPU backend"; its -J file said "NCCL path unknown"."""
    db, js = tmp_path / "r.sqlite", tmp_path / "run.json"
    env = child_env(NCCLBENCH_DB=str(db), NCCLBENCH_NO_STORE="1")
    live = _ncclbench(["all_reduce_perf", "--backend", "mpi", "-b", "8", "-e", "64", "-f", "2", "-n", "2",
                       "-J", str(js)], env)
    if live.returncode != 0:
        pytest.skip(f"the CPU backend does not run here: {live.stderr.strip()[-300:]}")
    out = _ncclbench(["explain", str(js)], env)
    assert out.returncode == 0, out.stderr
    assert "# NCCL path: none (the CPU backend" in out.stdout and "NCCL path unknown" not in out.stdout, out.stdout
