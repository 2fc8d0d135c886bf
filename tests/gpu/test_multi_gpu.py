"""End-to-end runs on every visible GPU (or NCCLBENCH_TEST_NGPUS of them):
one process per GPU started by ncclbench itself, and one process driving all
GPUs (-g N).  Every collective, checking on, #wrong must be zero.  These are
the issue's "GPU count as a parameter" tests: run them on 2, 4 and 8 GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ncclbench.backends.select import gpu_count
from ncclbench.collectives import COLLECTIVES

pytestmark = pytest.mark.gpu


def ngpus() -> int:
    return int(os.environ.get("NCCLBENCH_TEST_NGPUS", gpu_count()))


def run(args, tmp_path, name, **extra_env):
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1", NCCLBENCH_NO_STORE="1", **extra_env)
    out = tmp_path / f"{name}.json"
    try:
        # Bounded well below a device call: a hang fails this test with its output
        # instead of stopping the whole suite (the repeats runs lost the suite's tail that way).
        p = subprocess.run([sys.executable, "-m", "ncclbench", *args, "-J", str(out)], capture_output=True,
                           text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired as exc:
        said = b"".join(x if isinstance(x, bytes) else x.encode() for x in (exc.stdout, exc.stderr) if x)
        pytest.fail(f"ncclbench {' '.join(args)} did not finish in {exc.timeout} s\n"
                    f"{said.decode(errors='replace')}")
    assert p.returncode == 0, p.stdout + p.stderr
    return p, json.loads(out.read_text())


def needs_several():
    if ngpus() < 2:
        pytest.skip("needs at least 2 GPUs")


@pytest.mark.parametrize("coll", list(COLLECTIVES))
def test_one_process_per_gpu(coll, tmp_path):
    needs_several()
    n = ngpus()
    p, doc = run([f"{coll}_perf", "-b", "8", "-e", "16M", "-f", "16", "-c", "2", "--nprocs", str(n)],
                 tmp_path, coll)
    assert p.stdout.count("#  Rank") == n
    assert doc["results"], p.stdout
    for r in doc["results"]:
        assert r["out_of_place"]["nwrong"] == 0
        assert r["in_place"]["nwrong"] in (0, None)


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "alltoall", "broadcast", "sendrecv"])
def test_one_process_drives_every_gpu(coll, tmp_path):
    needs_several()
    n = ngpus()
    p, doc = run([f"{coll}_perf", "-b", "8", "-e", "16M", "-f", "16", "-g", str(n)], tmp_path, f"g{coll}")
    assert p.stdout.count("#  Rank") == n and "nGpus %d" % n in p.stdout
    assert len(doc["config"]["devices"]) == 1  # one entry per process, as nccl-tests
    assert all(r["out_of_place"]["nwrong"] == 0 for r in doc["results"])


def test_threads_and_gpus_per_thread(tmp_path):
    n = ngpus()
    if n < 2 or n % 2:
        pytest.skip("needs an even number of GPUs")
    p, doc = run(["all_reduce_perf", "-b", "1K", "-e", "1M", "-f", "32", "-t", "2", "-g", str(n // 2)],
                 tmp_path, "tg")
    assert p.stdout.count("#  Rank") == n
    assert all(r["out_of_place"]["nwrong"] == 0 for r in doc["results"])


def all_right(doc) -> bool:
    return bool(doc["results"]) and all(r["out_of_place"]["nwrong"] == 0 and r["in_place"]["nwrong"] in (0, None)
                                        for r in doc["results"])


def test_split_into_groups(tmp_path):
    """NCCL_TESTS_SPLIT=MOD2: two communicators of n/2 ranks each, run side by side."""
    n = ngpus()
    if n < 4 or n % 2:
        pytest.skip("needs an even number of GPUs, at least 4")
    p, doc = run(["all_reduce_perf", "-b", "8", "-e", "4M", "-f", "8", "--nprocs", str(n)], tmp_path, "split",
                 NCCL_TESTS_SPLIT="MOD2")
    assert "Group  1" in p.stdout
    assert all_right(doc), p.stdout


@pytest.mark.parametrize("mode", ["1", "2"])
def test_buffer_registration_across_processes(mode, tmp_path):
    needs_several()
    p, doc = run(["all_reduce_perf", "-b", "8", "-e", "16M", "-f", "16", "-R", mode, "--nprocs", str(ngpus())],
                 tmp_path, f"reg{mode}")
    assert all_right(doc), p.stdout


@pytest.mark.parametrize("layout", ["procs", "gpus"])
def test_graphs_across_gpus(layout, tmp_path):
    """-G with a process per GPU, and with one process capturing every GPU's stream."""
    needs_several()
    n = str(ngpus())
    where = ["--nprocs", n] if layout == "procs" else ["-g", n]
    p, doc = run(["all_reduce_perf", "-b", "8", "-e", "1M", "-f", "32", "-G", "5", *where], tmp_path, f"G{layout}")
    assert all_right(doc), p.stdout


@pytest.mark.parametrize("graph", ["0", "5"])
@pytest.mark.parametrize("layout", ["procs", "threads", "gpus"])
def test_hypercube_local_copy_in_every_layout(layout, graph, tmp_path):
    """Hypercube's own block is copied inside the timed op: by the driver's
    pre-bound copy on a one-GPU worker (a process or a thread per GPU), by the
    runtime call when one thread drives every GPU; eager and captured (-G).
    Out-of-place checking fails if the copy is skipped or lands elsewhere."""
    needs_several()
    n = ngpus()
    if n & (n - 1):
        pytest.skip("hypercube needs a power-of-two rank count")
    where = {"procs": ["--nprocs", str(n)], "threads": ["-t", str(n)], "gpus": ["-g", str(n)]}[layout]
    p, doc = run(["hypercube_perf", "-b", "8", "-e", "2M", "-f", "8", "-G", graph, *where], tmp_path,
                 f"hc{layout}{graph}")
    assert p.stdout.count("#  Rank") == n
    assert all_right(doc), p.stdout
    assert max(int(r["size"]) for r in doc["results"]) == 2 << 20  # 8 B * 8**6
