"""`ncclbench tune` on GPUs.

On one GPU (the operator's 1-GPU machine: run with CUDA_VISIBLE_DEVICES=0 on a
bigger one) the command runs and says that one rank has no algorithm choice.
With two or more GPUs: each candidate on its own communicators in one job,
a candidate NCCL refuses (NVLS with NVLS switched off) dropped with NCCL's
own reason while the others are still measured and reported.

    .venv/bin/python -m pytest tests/gpu/test_tune_gpu.py -v
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ncclbench.backends.select import gpu_count

pytestmark = pytest.mark.gpu


def tune(args, tmp_path, timeout=300, **extra_env):
    env = dict(os.environ, NCCLBENCH_NO_STORE="1", **extra_env)
    try:
        return subprocess.run([sys.executable, "-m", "ncclbench", "tune", *args, "--out", str(tmp_path / "t")],
                              capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"tune {' '.join(args)} did not finish in {exc.timeout} s")


def test_one_gpu_has_no_algorithm_choice(tmp_path):
    p = tune(["all_reduce", "-b", "8", "-e", "1M", "-f", "4"], tmp_path, CUDA_VISIBLE_DEVICES="0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "one rank has no algorithm choice" in p.stdout
    assert "NCCL 2." in p.stdout
    assert not (tmp_path / "t.json").exists()


def needs_two():
    if gpu_count() < 2:
        pytest.skip("needs at least 2 GPUs")


def test_two_gpus_ring_tree_protocols_ctas(tmp_path):
    needs_two()
    p = tune(["all_reduce", "-b", "8", "-e", "64M", "-f", "16", "-n", "20", "--nprocs", "2", "--algos", "ring,tree",
              "--protos", "LL,Simple", "--ctas", "2", "--rounds", "2"], tmp_path, NCCL_NVLS_ENABLE="0")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "t.json").read_text())
    labels = [c["label"] for c in doc["candidates"]]
    assert labels == ["default", "Ring/LL/ctas=2", "Ring/Simple/ctas=2", "Tree/LL/ctas=2", "Tree/Simple/ctas=2"]
    assert doc["nranks"] == 2 and doc["backend"] == "nccl"
    dropped = {d["label"] for d in doc["dropped"]}
    for size, row in doc["times_us"].items():
        for label in labels:
            if label in dropped:
                continue
            assert len(row[label]) == 2 and all(t > 0 for t in row[label]), (size, label)
    assert doc["tuner_config"] is None or doc["tuner_config"].startswith("# ncclbench tune all_reduce")


def test_refused_candidate_is_dropped_with_nccls_reason(tmp_path):
    needs_two()
    p = tune(["all_reduce", "-b", "1M", "-e", "4M", "-f", "4", "--nprocs", "2", "--algos", "nvls,ring",
              "--protos", "Simple", "--rounds", "2"], tmp_path, NCCL_NVLS_ENABLE="0")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "t.json").read_text())
    reasons = {d["label"]: d["reason"] for d in doc["dropped"]}
    assert "NVLS/Simple" in reasons, p.stdout
    assert "dropped NVLS/Simple" in p.stdout
    assert all("Ring/Simple" in row and "default" in row for row in doc["times_us"].values())
