"""Shared by the explain tests: a described host's facts, read through the real readers."""

import tempfile
from pathlib import Path

from ncclbench.explain.gather_topology import gather_host_topology
from ncclbench.explain.nccl_log import parse_nccl_log
from ncclbench.simulation import hosts as S

H100 = ("NVIDIA H100 80GB HBM3", (9, 0))
H200 = ("NVIDIA H200", (9, 0))
B200 = ("NVIDIA B200", (10, 0))
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0))
LOGS = Path(__file__).parent / "fixtures" / "nccl_logs"


def facts(spec, nvml=None):
    """Gather `spec`'s facts with the real NVML and sysfs readers (fake NVML, sysfs tree in a temp dir)."""
    with tempfile.TemporaryDirectory() as d:
        fake, root = S.materialise(spec, d)
        return gather_host_topology(nvml if nvml is not None else fake, root, spec.host)


def log(name):
    return parse_nccl_log((LOGS / name).read_text())
