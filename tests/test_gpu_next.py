"""bench/gpu_next.sh's control flow on a CPU machine (GPU_NEXT_DRY=1: each step echoes its
command and sleeps): the order, the budgets handed to each step, the skip lines, a cut at a
step's budget, and the summary file the operator reads after the one device call."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_next.sh"

pytestmark = pytest.mark.skipif(shutil.which("timeout") is None or shutil.which("bash") is None,
                                reason="needs bash and coreutils' timeout")


def _run(tmp: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHON": sys.executable, "GPU_NEXT_DRY": "1",
            "NCCLBENCH_COMMIT": "feedbee", "GPU_NEXT_IPR": str(tmp / "no-ipr"), **env}
    p = subprocess.run(["bash", str(SCRIPT), str(tmp / "out"), *args], cwd=ROOT, env=full, capture_output=True,
                       text=True, timeout=60)
    return p, (tmp / "out" / "summary.txt").read_text().splitlines()


def _steps(lines: list[str]) -> dict[str, list[str]]:
    return {ln.split()[0]: ln.split()[1:] for ln in lines if not ln.startswith("#")}


def _log(tmp: Path, step: str) -> str:
    return (tmp / "out" / step / "log.txt").read_text()


def test_every_step_runs_in_order_with_its_budget(tmp_path):
    (tmp_path / "ipr").mkdir()
    nt = tmp_path / "nt"
    nt.mkdir()
    (nt / "all_reduce_perf").write_text("#!/bin/sh\n")
    (nt / "all_reduce_perf").chmod(0o755)
    p, lines = _run(tmp_path, str(nt), GPU_NEXT_IPR=str(tmp_path / "ipr"), GPU_NEXT_KEEP="1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines[0].startswith("# gpu_next at commit feedbee") and "budget 560 s (dry run)" in lines[0]
    steps = _steps(lines)
    assert list(steps) == ["gate", "health", "parity", "live_causes", "gpu_tests"]
    assert all(v[0] == "0" for v in steps.values())
    out = tmp_path / "out"
    assert _log(tmp_path, "gate").split() == [
        sys.executable, "bench/gate_trials.py", "gpu", "--out", f"{out}/gate", "--trials", "20", "--ngpus", "4",
        "--hog-device", "1", "--results", f"{out}/gate/gate-trials-gpu-h100x4.md"]
    # health: its 320 s less the 20 s margin (parity's 60 s kept back does not bind with 560 s)
    assert _log(tmp_path, "health").split()[1:] == [
        "bench/multihost_gpu.py", f"{out}/health/mh", "--iproute2", str(tmp_path / "ipr"), "--steps", "health",
        "--budget-s", "300"]
    assert _log(tmp_path, "parity").split()[1:] == [
        "bench/multihost_gpu.py", f"{out}/parity/mh", "--steps", "mpirun", "--nccl-tests", str(nt), "--budget-s", "50"]
    assert _log(tmp_path, "live_causes").split()[1:] == ["bench/live_causes_gpu.py", "--nprocs", "4", "--out",
                                                         f"{out}/live_causes"]
    assert "-m pytest tests/gpu" in _log(tmp_path, "gpu_tests")
    assert re.search(r"== gpu_tests: up to 5[56]\d s", p.stdout)  # everything left goes to the tests
    assert lines[-1].startswith("# total ")
    assert (out / "machine.txt").read_text().startswith("commit feedbee\n")


def test_missing_inputs_and_time_give_skip_lines(tmp_path):
    # no .ipr, no nccl-tests, 150 s in all: gate (needs 200) and both issue-25 steps are skipped, each saying why
    p, lines = _run(tmp_path, GPU_NEXT_TOTAL_S="150", GATE_TRIALS="7")
    steps = _steps(lines)
    assert p.returncode == 0, p.stdout + p.stderr
    assert steps["gate"][:2] == ["skip", "0"] and "the step needs 200" in " ".join(steps["gate"])
    assert steps["health"][:2] == ["skip", "0"] and "no-ipr" in " ".join(steps["health"])
    assert " ".join(steps["parity"]) == "skip 0 (no NCCL_TESTS_BIN_DIR given)"
    assert steps["live_causes"][0] == "0" and steps["gpu_tests"][0] == "0"
    # without GPU_NEXT_KEEP the step folders end in one archive, the reports beside the summary
    out = tmp_path / "out"
    assert sorted(x.name for x in out.iterdir()) == ["gpu_next-raw.tar.xz", "machine.txt", "reports", "summary.txt"]
    assert sorted(x.name for x in (out / "reports").iterdir()) == ["gpu_tests-log.txt"]
    with tarfile.open(out / "gpu_next-raw.tar.xz") as t:
        assert sorted(t.getnames()) == ["gpu_tests", "gpu_tests/log.txt", "live_causes", "live_causes/log.txt"]


def test_a_step_past_its_budget_is_cut_and_later_steps_see_the_time_spent(tmp_path):
    # every dry step sleeps 3 s; gate gets 2 s (SIGINT at 1 s, KILL 1 s later): cut, rc 124; the 4 s total
    # then leaves at most 3 s, fewer than live_causes' minimum (4 here)
    p, lines = _run(tmp_path, GPU_NEXT_TOTAL_S="4", GPU_NEXT_DRY_SLEEP="3", GATE_S="2", GATE_MIN_S="1",
                    KILL_GRACE_S="1", LIVE_MIN_S="4", TESTS_MIN_S="1", GPU_NEXT_KEEP="1")
    steps = _steps(lines)
    assert p.returncode == 1, p.stdout + p.stderr  # a step failed (here: cut)
    assert steps["gate"][0] == "124" and "(cut at its budget, 2 s)" in " ".join(steps["gate"])
    assert int(steps["gate"][1]) <= 2
    assert steps["live_causes"][0] == "skip" and "the step needs 4" in " ".join(steps["live_causes"])
    # gpu_tests takes what is left (>= 1 s), and is cut there too
    assert steps["gpu_tests"][0] in ("124", "skip")
