"""`--backend`: one typed notion (core.config.Backend), resolved in one place
(backends.select), read by every command: the benchmark's options, preflight,
and health, including `health --serve`, whose coordinator runs no collective
and so learns the ranks' backend from the ranks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import pytest

from ncclbench.backends.select import BACKEND_ENV, choose_backend, requested_backend
from ncclbench.core.config import BACKEND_CHOICES, Backend
from ncclbench.core.errors import ArgumentError
from ncclbench.health.runtime.control_channel import RankInfo, RankLink
from ncclbench.health.runtime.group_measure import BW_SIZE, default_bw_bytes
from ncclbench.health.runtime.live_rounds import serve_rank
from ncclbench.run.bench_args import parse_size


def test_requested_backend_is_typed_and_auto_is_none():
    assert BACKEND_CHOICES == ("auto", "nccl", "mpi")
    assert requested_backend("auto") is None
    assert requested_backend("nccl") is Backend.NCCL and requested_backend("mpi") is Backend.MPI
    with pytest.raises(ArgumentError, match="invalid backend 'gpu'"):
        requested_backend("gpu")


def test_choose_backend_reads_the_parents_choice(monkeypatch):
    monkeypatch.setenv(BACKEND_ENV, "mpi")
    assert choose_backend("auto") == (Backend.MPI, None)
    assert choose_backend("nccl") == (Backend.NCCL, None)  # what the command line says wins


def test_default_bandwidth_size_per_backend():
    assert default_bw_bytes(Backend.NCCL) == parse_size(BW_SIZE[Backend.NCCL], "x") == 256 << 20
    assert default_bw_bytes(Backend.MPI) == 4 << 20


def _serve_one_rank(args: list[str], said: str, env: dict) -> tuple[list, str, str]:
    """`health --serve` in a subprocess and one rank here that says it runs `said`: (the
    specs its groups were sent, the coordinator's stdout, its stderr)."""
    token = "t0k3n"
    env = {**env, "NCCLBENCH_HEALTH_TOKEN": token, "NCCLBENCH_NO_STORE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ncclbench", "health", "--serve", "127.0.0.1:0", "--ranks", "1",
                             "--phases", "local", "--round-timeout", "5", "--join-timeout", "20", *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert m, line
        specs: list = []

        def measure(job, deadline, stage, inbox):
            specs.append(job.spec)
            return {"error": "not measured in this test"}

        def rank() -> None:
            link = RankLink("127.0.0.1", int(m.group(1)), token, RankInfo(0, "h0", os.getpid()), timeout_s=20)
            serve_rank(link, measure, silence_s=30, setup=lambda request: {"backend": said})
            link.close()

        t = threading.Thread(target=rank, daemon=True)
        t.start()
        out, err = proc.communicate(timeout=60)
        t.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return specs, out, line + err


@pytest.mark.parametrize("said, bw_bytes", [("nccl", 256 << 20), ("mpi", 4 << 20)])
def test_serve_with_backend_auto_takes_the_ranks_backend(said, bw_bytes, ncclbench_env):
    """The coordinator on a login node (no GPU) must not take its own host's backend for the
    ranks': with `--backend auto` the bandwidth size and the run's label follow what the ranks
    say at set-up (before: 4 MiB and "CPU backend (MPI)" whatever the ranks ran)."""
    specs, out, err = _serve_one_rank([], said, ncclbench_env)
    assert specs and all(s.bw_bytes == bw_bytes for s in specs), (specs, err)
    assert f"{Backend(said).label}, external coordinator" in out.splitlines()[0], out


def test_serve_keeps_a_given_bandwidth_size(ncclbench_env):
    specs, out, err = _serve_one_rank(["--bw-size", "64K"], "nccl", ncclbench_env)
    assert specs and all(s.bw_bytes == 64 << 10 for s in specs), (specs, err)


def test_preflight_takes_the_typed_backend(capsys):
    """preflight's checks read the same Backend: NCCL requires a GPU on every rank, auto
    (None) only where some rank has one."""
    from ncclbench.backends.select import gpu_count
    from ncclbench.launch.detect import detect_launch
    from ncclbench.launch.preflight_checks import run_checks

    if gpu_count() > 0:
        pytest.skip("a GPU is visible here: the NCCL backend's requirement is met")
    single = detect_launch({})
    assert run_checks(single, backend=None) == 0
    assert run_checks(single, backend=Backend.NCCL) == 6
    assert "sees no GPU" in capsys.readouterr().out
