"""The NVML reader's memory-bandwidth and NVLink-fabric facts on a real GPU, against nvidia-smi.

nvidia-smi is the independent witness: its `clocks.max.memory` must be the clock the reader used for a
lone GPU's ceiling, and the ceiling must sit near NVIDIA's published peak for the parts we know; its
`-q` Fabric State must agree with the reader's fabric facts (an H100 box: N/A or Completed with a zero
cluster UUID - never a multi-node NVLink domain)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ncclbench.backends.select import gpu_count

pytestmark = pytest.mark.gpu

# NVIDIA's datasheet peaks (GB/s): H100 SXM5 80GB 3.35 TB/s, H200 4.8 TB/s
PUBLISHED_MEMORY_BW = {"H100 80GB HBM3": 3350.0, "H200": 4800.0}


def smi(*args: str) -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        pytest.skip("no nvidia-smi to compare with")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=True).stdout


@pytest.fixture(scope="module")
def facts():
    if gpu_count() < 1:
        pytest.skip("needs a GPU")
    from ncclbench.explain.gather_topology import gather_host_topology

    t = gather_host_topology()
    if t.unknown.get("nvml"):
        pytest.skip(f"NVML not readable: {t.unknown['nvml']}")
    return t


def test_memory_bandwidth_uses_nvidia_smis_max_memory_clock(facts):
    from ncclbench.explain.ceiling import memory_bandwidth_bound

    clocks = [int(x) for x in smi("--query-gpu=clocks.max.memory", "--format=csv,noheader,nounits").split()]
    assert len(clocks) == len(facts.gpus)
    for g, clk in zip(facts.gpus, clocks):
        assert g.memory_clock_max_mhz == clk, (g.index, g.unknown)
        b, why = memory_bandwidth_bound(g)
        assert b is not None, why
        assert b.line_rate == pytest.approx(g.memory_bus_width * clk * 2 / 8 / 1000)
        for part, peak in PUBLISHED_MEMORY_BW.items():
            if part in (g.name or ""):
                assert b.line_rate == pytest.approx(peak, rel=0.05), (g.name, b.text)


def _smi_fabric_states() -> list[str]:
    """Per GPU, the State line of nvidia-smi -q's Fabric section ('N/A', 'Completed', ...)."""
    states: list[str] = []
    in_fabric = False
    for line in smi("-q").splitlines():
        if re.match(r"^GPU [0-9A-Fa-f:.]+$", line.strip()):
            in_fabric = False
        if re.match(r"^\s{4}Fabric\s*$", line):
            in_fabric = True
            continue
        m = re.match(r"^\s{8}State\s*:\s*(.+?)\s*$", line)
        if in_fabric and m:
            states.append(m.group(1))
            in_fabric = False
    return states


def test_fabric_state_agrees_with_nvidia_smi(facts):
    states = _smi_fabric_states()
    if not states:
        pytest.skip("this nvidia-smi prints no Fabric section")
    assert len(states) == len(facts.gpus)
    for g, state in zip(facts.gpus, states):
        if state == "N/A":
            assert g.fabric_state in (None, "not supported"), (g.index, g.fabric_state, g.unknown)
        elif g.nvlink_remote == "switch":
            assert g.fabric_state == state.lower(), (g.index, g.fabric_state, state)
        assert g.fabric_domain is None or "GB" in (g.name or ""), g  # no multi-node domain on an HGX box
