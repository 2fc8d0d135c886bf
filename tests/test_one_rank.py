"""Issue 22 item 5: runs that move no data are said plainly.  Without a GPU and
without a launcher the CPU backend starts enough ranks to move data (and says how
many and why); a run of one rank says "one rank moves no data" in the banner and
in explain, and compare/check/baseline refuse to judge it (one line, exit 255)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from launch_helpers import PY, child_env

from ncclbench.backends.select import CPU_RANKS_MAX, default_cpu_ranks, default_cpu_ranks_note
from ncclbench.core.results import ONE_RANK_NOTE
from ncclbench.launch.spawn import find_mpiexec

needs_mpiexec = pytest.mark.skipif(find_mpiexec() is None, reason="needs mpiexec (mpich wheel)")


def test_default_cpu_ranks():
    assert [default_cpu_ranks(c) for c in (None, 1, 2, 3, 4, 64)] == [2, 2, 2, 3, 4, CPU_RANKS_MAX]
    note = default_cpu_ranks_note(2, 2)
    assert "started 2 CPU ranks" in note and ONE_RANK_NOTE in note and "--nprocs N" in note


def _ncclbench(*args: str, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "ncclbench", *args], env=child_env(NCCLBENCH_DB=str(db)),
                          capture_output=True, text=True, timeout=120)


@needs_mpiexec
def test_auto_backend_without_gpu_starts_ranks_that_move_data(tmp_path):
    p = _ncclbench("all_reduce", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "-w", "1", db=tmp_path / "r.sqlite")
    assert p.returncode == 0, p.stderr
    n = default_cpu_ranks(os.cpu_count())
    assert f"started {n} CPU ranks on this host, since one rank moves no data" in p.stdout
    assert p.stdout.count("#  Rank ") == n and ONE_RANK_NOTE not in p.stdout.replace("since one rank", "")


@needs_mpiexec
def test_one_rank_run_is_said_and_refused(tmp_path):
    db = tmp_path / "r.sqlite"
    p = _ncclbench("all_reduce", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "-w", "1", "--backend", "mpi", db=db)
    assert p.returncode == 0, p.stderr
    banner, _, footer = p.stdout.partition("# Avg bus bandwidth")
    assert "# one rank moves no data: busbw is 0" in banner
    shown = _ncclbench("show", "latest", db=db)  # a banner note: kept with the run
    assert "# one rank moves no data: busbw is 0" in shown.stdout
    assert "# One rank moves no data" in footer  # explain's lines
    e = _ncclbench("explain", "latest", db=db)
    assert e.returncode == 0 and "One rank moves no data" in e.stdout
    for argv in (["check", "latest", "--against", "latest"], ["compare", "latest", "latest"],
                 ["baseline", "set", "solo", "latest"]):
        r = _ncclbench(*argv, db=db)
        assert r.returncode == 255, (argv, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and "it ran one rank, and one rank moves no data" in r.stderr
