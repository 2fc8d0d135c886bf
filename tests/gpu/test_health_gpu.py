"""`ncclbench health` on GPUs (the NCCL runtime, health/runtime/nccl_group.py) and the slow-GPU hog.

    PYTHONPATH=src NCCL_NVLS_ENABLE=0 python -m pytest tests/gpu/test_health_gpu.py -v

On one GPU only the single-GPU path runs: the local phase's figure, reported and
said to have nothing to compare with (exit 0).  What no CPU test can show is
checked here on the real library: a group's communicator formed the
abandonable way (non-blocking ncclCommInitRankConfig, then a blocking
ncclCommSplit child) times the GPU with the bit-exact check, and a member that
never joins is given up on at the deadline (ncclCommAbort of the half-made
communicator returns; nothing hangs).  With two or more GPUs, every GPU and the
host's all-GPU group are measured.  The hog (bench/gpu_hog.py) runs for a
bounded time and moves memory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ncclbench.backends.select import gpu_count

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, NCCLBENCH_NO_STORE="1", NCCL_NVLS_ENABLE="0", **extra)
    env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def health(args: list[str], tmp_path: Path, timeout: float = 120, **extra: str):
    """One scan; (completed process, its JSON document, seconds)."""
    js = tmp_path / "h.json"
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "ncclbench", "health", "--backend", "nccl", "--json", str(js),
                            "--no-store", *args], capture_output=True, text=True, env=_env(**extra), timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"health {' '.join(args)} did not finish in {exc.timeout} s")
    assert js.exists(), p.stdout + p.stderr
    return p, json.loads(js.read_text()), time.monotonic() - t0


def test_one_gpu_is_judged_against_its_memory_or_says_there_is_nothing_to_compare(tmp_path):
    """A lone GPU: against half of its memory bandwidth (NVML's bus width x clock) where NVML gives it -
    a healthy GPU is then judged healthy, exit 0 -, else reported and not judged, exit 9 (issue 22)."""
    p, doc, took = health(["--nprocs", "1"], tmp_path, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES",
                                                                                             "0"))
    out = p.stdout
    assert out.startswith("# ncclbench health: 1 host(s), 1 rank(s), NCCL (GPU)"), out
    local = doc["expected"]["local:1x1"]
    if local.get("ceiling") is not None:
        assert local["bound"] == "memory" and local["physics"]["threshold"], local
        assert p.returncode == 0 and doc["outcome"] == "healthy", p.stdout + p.stderr
        assert "# one GPU: no fleet to compare with: judged against its memory's ceiling" in out
    else:
        assert p.returncode == 9 and "# one GPU: nothing to compare its figure with" in out, p.stdout + p.stderr
    [rec] = [r for r in doc["measurements"] if r["round"] == "local r1"]
    [g] = rec["groups"]
    assert g["wrong"] == 0 and g["busbw"] > 10.0 and g["lat_us"] > 0, g  # a device copy: tens of GB/s at least
    assert doc["nccl"].startswith("2.") and re.search(r" [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2} ", doc["gpus"]["0"]), \
        doc.get("gpus")
    assert local.get("ceiling") or local.get("text"), local  # a ceiling, or why it is unknown
    assert took < 90, took


def test_a_member_that_never_joins_is_given_up_on_with_the_real_library(tmp_path):
    """A 2-rank communicator whose second rank never comes: the non-blocking init is polled
    until the deadline, then aborted; the call returns in bounded time (child process, so a
    hang cannot take the test run with it)."""
    code = textwrap.dedent("""
        import time
        from ncclbench.health.runtime.group_measure import GroupTimeout
        from ncclbench.health.runtime.nccl_group import form_group_comm, open_gpu_rank
        gpu = open_gpu_rank(0, "here")
        gpu.choose_device(0)
        uid = gpu.lib.get_unique_id()
        t0 = time.monotonic()
        try:
            form_group_comm(gpu.lib, 2, uid, 0, time.monotonic() + 3.0, gpu.config_values())
        except GroupTimeout as exc:
            print(f"gave up after {time.monotonic() - t0:.2f} s: {exc}")
        else:
            print("formed?!")
    """)
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a group with a missing member hung past 60 s (the abort did not return)")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("gave up after "), p.stdout + p.stderr
    assert "ncclCommInitRankConfig did not complete before the round's deadline" in p.stdout
    took = float(p.stdout.split()[3])  # "gave up after 3.01 s: ..."
    assert 2.9 < took < 8.0, took


def test_every_gpu_of_the_host_and_the_host_group_are_measured(tmp_path):
    n = gpu_count()
    if n < 2:
        pytest.skip("one GPU: the intra-node phase needs two")
    p, doc, _ = health(["--nprocs", str(n), "--phases", "local,intra"], tmp_path, timeout=240)
    assert p.returncode in (0, 8, 9), p.stdout + p.stderr
    groups = [g for r in doc["measurements"] for g in r["groups"]]
    assert groups and all(g["status"] != "no answer" and g["wrong"] == 0 and g["busbw"] for g in groups), groups
    assert {int(g["gpus"][0]) for g in groups if g["shape"] == "local:1x1"} == set(range(n))
    intra = doc["expected"].get(f"intra:1x{n}", {})
    assert intra.get("ceiling") or intra.get("text"), doc["expected"]  # a ceiling, or why it is unknown


def test_gpu_hog_moves_memory_and_ends_by_itself():
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_hog.py"), "--device", "0", "--seconds", "3",
                        "--mib", "256"], capture_output=True, text=True, env=_env(), timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "gpu_hog: running on device 0" in p.stderr
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["device"] == 0 and 2.9 < summary["seconds"] < 10 and summary["gbps"] > 100, summary
    assert time.monotonic() - t0 < 60
