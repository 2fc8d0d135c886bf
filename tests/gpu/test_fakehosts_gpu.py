"""Fake hosts on one GPU machine (bench/fakehosts.py): 2 fake hosts x 1 GPU, each in its own
network and UTS namespace, started through ncclbench's own rendezvous (RANK/WORLD_SIZE/
MASTER_ADDR).  NCCL must go over its socket transport between them, and ncclbench must see two
hosts everywhere: the banner's topology (each with its veth as a virtual NIC), explain's path
line, and health (whose coordinator on rank 0 the other host reaches over the veths).

Needs >= 2 GPUs, root, and ip/tc (on PATH or NCCLBENCH_IPROUTE2=<bench/fetch_iproute2.sh folder>);
skips cleanly otherwise."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from ncclbench.backends.select import gpu_count

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fakehosts():
    if gpu_count() < 2:
        pytest.skip("fake hosts need >= 2 GPUs")
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    spec = importlib.util.spec_from_file_location("fakehosts", ROOT / "bench" / "fakehosts.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fakehosts"] = mod
    spec.loader.exec_module(mod)
    try:
        mod.tools = mod.find_tools()
    except mod.SetupError as exc:
        pytest.skip(str(exc))
    return mod


def _env():
    return {"PYTHONPATH": str(ROOT / "src"), "NCCLBENCH_NO_STORE": "1", "PYTHONUNBUFFERED": "1"}


def test_all_reduce_across_two_fake_hosts_goes_over_sockets_and_is_judged_per_host(fakehosts, tmp_path):
    with fakehosts.FakeHosts(2, 1, fakehosts.tools, ngpus=gpu_count()) as fh:
        assert len(fh.hosts) == 2
        job = fh.start([sys.executable, "-m", "ncclbench", "all_reduce", "-b", "1M", "-e", "16M", "-f", "4",
                        "-n", "5", "-w", "2", "-J", str(tmp_path / "run.json")], tmp_path, "ar", extra_env=_env())
        codes = job.wait(120)
        out = job.stdout(0)
    assert codes == [0, 0], (out, job.stderr(0), job.stderr(1))
    assert "# Topology node0:" in out and "# Topology node1:" in out, out
    assert "virtual fhv0" in out and "virtual fhv1" in out and "no NIC found" not in out, out
    assert "sockets over" in out, out  # NCCL's path line: its socket transport between the fake hosts
    assert "ceiling unknown (node0: facts for" not in out, out  # the per-host facts cover the GPUs in use
    assert json.loads((tmp_path / "run.json").read_text())  # the -J file written


def test_health_across_two_fake_hosts_reaches_rank0s_coordinator(fakehosts, tmp_path):
    with fakehosts.FakeHosts(2, 1, fakehosts.tools, ngpus=gpu_count()) as fh:
        js = tmp_path / "health.json"
        job = fh.start([sys.executable, "-m", "ncclbench", "health", "--backend", "nccl", "--phases", "local,pairs",
                        "--bw-size", "8M", "-n", "5", "-w", "1", "--cycles", "2", "--round-timeout", "30",
                        "--no-store", "--json", str(js)], tmp_path, "health", extra_env=_env())
        codes = job.wait(150)
    assert "cannot reach the coordinator" not in job.stderr(1), job.stderr(1)
    # docs/health.md: with fewer than 3 host pairs, no stored baseline (--no-store) and no line rate
    # (a veth's speed is unknown), the one pair cannot be judged: exit 9, "not judged", never healthy
    assert codes[0] == 9, (job.stdout(0), job.stderr(0))
    doc = json.loads(js.read_text())
    assert sorted(doc["host_status"]) == ["node0", "node1"], doc["host_status"]
    assert doc["outcome"] == "not judged" and doc["not_judged"], (doc["outcome"], doc["not_judged"])
    assert not doc["faults_found"], doc["findings"]
    two = [n for n in doc["notes"] if n.startswith("pairs: 2 hosts, one pair")]
    assert two and "not judged" in two[0], doc["notes"]  # the report says which reference applied: none
