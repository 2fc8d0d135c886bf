"""tune forms its job as a benchmark does (`run.rank_job`): Ctrl-C ends it with the launcher's
one line, as it ends a benchmark; the launch checks run at its start (a trap stops it with exit 6
and what to fix, a warning goes into its notes); a peer's death aborts every candidate's
communicators.

Why: tune repeated the benchmark's set-up and drifted: no rank signal handling (Ctrl-C on
`tune --nprocs 2` printed "ncclbench: interrupted" once per rank under the launcher's line),
no preflight (`tune --backend nccl` on a host without a GPU said "one rank has no algorithm
choice" and exited 0), no abort of the communicators when a peer died.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from launch_helpers import PY, SRC, TESTS, child_env

from ncclbench.backends.select import gpu_count
from ncclbench.launch.spawn import find_mpiexec

needs_mpi = pytest.mark.skipif(find_mpiexec() is None or importlib.util.find_spec("mpi4py") is None,
                               reason="the [mpi] extra (mpiexec, mpi4py) is not installed")

# Every process of the job leaves a file when its schedule starts (the timed loops): then the
# signal reaches ranks that are measuring, not ranks still starting.
MARK = """import os, pathlib
if os.environ.get("TUNE_MARK_DIR"):
    from ncclbench.tune import candidate_runner

    real = candidate_runner.run_schedule

    def marked(*args, **kwargs):
        pathlib.Path(os.environ["TUNE_MARK_DIR"], f"measuring-{os.getpid()}").touch()
        return real(*args, **kwargs)

    candidate_runner.run_schedule = marked
"""


@needs_mpi
def test_ctrl_c_ends_tune_with_the_launchers_line_alone(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(MARK)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = child_env(NCCLBENCH_NO_STORE="1", TUNE_MARK_DIR=str(marks),
                    PYTHONPATH=os.pathsep.join([str(SRC), str(TESTS), str(hook)]))
    p = subprocess.Popen([PY, "-m", "ncclbench", "tune", "all_reduce", "-b", "8", "-e", "1M", "-f", "2", "-n", "500",
                          "--rounds", "100", "--backend", "mpi", "--nprocs", "2", "--out", str(tmp_path / "t")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        assert len(list(marks.iterdir())) == 2, "the ranks never reached their schedule"
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does to the foreground group
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == 130, err
    assert len(lines) == 1 and lines[0].startswith("ncclbench: SIGINT received: ended all 2 ranks"), err
    assert out == "" and not (tmp_path / "t.json").exists()


@pytest.mark.skipif(gpu_count() > 0, reason="a GPU is visible here: the GPU backend's requirement is met")
def test_tune_on_the_gpu_backend_without_a_gpu_is_stopped_by_the_launch_checks(tmp_path: Path) -> None:
    p = subprocess.run([PY, "-m", "ncclbench", "tune", "all_reduce", "--backend", "nccl", "-b", "8", "-e", "64",
                        "--out", str(tmp_path / "t")], env=child_env(NCCLBENCH_NO_STORE="1"), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 6, (p.stdout, p.stderr)
    assert p.stderr.startswith("ncclbench: rank 0 on ") and "sees no GPU" in p.stderr, p.stderr
    assert p.stdout == ""  # not "one rank has no algorithm choice": the missing GPU is the problem


@needs_mpi
def test_launch_check_warnings_go_into_tunes_notes(tmp_path: Path) -> None:
    """Under the user's own mpiexec, one rank started with NCCL_DEBUG set and the other
    without: the result says so, as a benchmark's banner does."""
    mpiexec = find_mpiexec()
    assert mpiexec is not None
    tune = [PY, "-m", "ncclbench", "tune", "all_reduce", "-b", "8", "-e", "8", "-n", "2", "-w", "0", "--rounds", "1",
            "--backend", "mpi", "--algos", "ring", "--out", str(tmp_path / "t")]
    p = subprocess.run([mpiexec, "-n", "1", "-env", "NCCL_DEBUG", "WARN", *tune, ":", "-n", "1", *tune],
                       env=child_env(NCCLBENCH_NO_STORE="1"), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    notes = json.loads((tmp_path / "t.json").read_text())["notes"]
    warned = [n for n in notes if n.startswith("WARN: NCCL_DEBUG differs between ranks")]
    assert warned and "'WARN' on ranks 0" in warned[0] and "unset on ranks 1" in warned[0], notes
    assert f"# {warned[0]}" in p.stdout


def test_a_dead_peer_aborts_every_candidates_communicators() -> None:
    from ncclbench.tune.nccl_job import NcclSwitcher

    aborted: list[str] = []

    class Worker:
        def __init__(self, name: str):
            self.name = name

        def abort(self) -> None:
            aborted.append(self.name)

    switcher = NcclSwitcher.__new__(NcclSwitcher)  # its communicators, without making them
    switcher.workers = {"default": [Worker("default")], "Ring/LL": [Worker("Ring/LL 0"), Worker("Ring/LL 1")]}
    switcher.abort()
    assert aborted == ["default", "Ring/LL 0", "Ring/LL 1"]
    assert list(switcher.workers) == ["default", "Ring/LL"]  # still there for close()

