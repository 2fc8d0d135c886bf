"""A lone GPU's ceiling: its memory bandwidth from NVML (bus width x max memory clock x 2 / 8), read
through the real NVML reader against a fake NVML, and unknown (with NVML's reason) where NVML cannot say."""

import dataclasses

import pytest
from explain_helpers import H100, H200, facts

from ncclbench.explain.ceiling import memory_bandwidth_bound
from ncclbench.explain.topology import HostTopology, format_topology_report, memory_bandwidth_gbps
from ncclbench.simulation import hosts as S

H100_MEMORY = (5120, 2619)  # nvidia-smi -q on an H100 SXM: 5120-bit bus, max memory clock 2619 MHz
H200_MEMORY = (6144, 3201)


def _with_memory(spec, memory):
    spec.gpus = [dataclasses.replace(g, memory=memory) for g in spec.gpus]
    return spec


def test_formula_matches_nvidias_published_peaks():
    assert memory_bandwidth_gbps(*H100_MEMORY) == pytest.approx(3352.32)  # NVIDIA: 3.35 TB/s (H100 SXM)
    assert memory_bandwidth_gbps(*H200_MEMORY) == pytest.approx(4916.7, abs=0.1)  # NVIDIA: 4.8 TB/s (H200)
    assert memory_bandwidth_gbps(384, 10501) == pytest.approx(1008.1, abs=0.1)  # GDDR6X RTX 4090: 1008 GB/s
    assert memory_bandwidth_gbps(None, 2619) is None and memory_bandwidth_gbps(5120, 0) is None


def test_reader_reads_bus_width_and_memory_clock(tmp_path):
    t = facts(_with_memory(S.hgx_host("m1", *H100, ngpus=2), H100_MEMORY))
    g = t.gpus[0]
    assert (g.memory_bus_width, g.memory_clock_max_mhz) == H100_MEMORY
    assert g.memory_bandwidth == pytest.approx(3352.32)
    assert "memory_bus_width" not in g.unknown and "memory_clock_max_mhz" not in g.unknown
    back = HostTopology.from_dict(t.to_dict()).gpus[0]  # travels between ranks and into the store
    assert back.memory_bandwidth == g.memory_bandwidth
    assert any("memory 3352 GB/s (5120-bit x 2619 MHz x 2)" in line for line in format_topology_report(t))


def test_bound_says_its_source():
    g = facts(_with_memory(S.hgx_host("m2", *H200, ngpus=1), H200_MEMORY)).gpus[0]
    b, why = memory_bandwidth_bound(g)
    assert b is not None and why == ""
    assert b.kind == "memory" and b.line_rate == b.model == pytest.approx(4916.7, abs=0.1)
    assert "6144-bit bus x 3201 MHz" in b.text and "nvmlDeviceGetMemoryBusWidth" in b.text
    assert "NVML_CLOCK_MEM" in b.text


def test_unknown_when_nvml_does_not_answer():
    g = facts(S.hgx_host("m3", *H100, ngpus=1)).gpus[0]  # the fake answers NOT_SUPPORTED
    assert g.memory_bandwidth is None
    assert "Not Supported" in g.unknown["memory_bus_width"]
    b, why = memory_bandwidth_bound(g)
    assert b is None and "memory bandwidth unknown" in why and "Not Supported" in why
    assert not any("memory " in line and "GB/s" in line for line in format_topology_report(
        HostTopology(host="x", gpus=[g])) if line.startswith("GPU"))
