"""The expected busbw ceiling of each group shape of a scan, from `explain`'s model.

The GPU runtime's ranks send their GPU's PCI address and (one rank per host)
the host's topology facts before the scan; this turns them into
`ScanConfig.expected` ({group shape: GB/s}), so a verdict can also say "% of
the expected ceiling".  It is the model's *large-message* ceiling for an
all_reduce over the GPUs of one group of that shape (the first such group:
fleets are expected to be uniform, and the fleet statistics, not this figure,
decide what is slow).  At the scan's bandwidth size (256 MiB by default on
GPUs) a healthy group sits near or somewhat below it; the report says so.

A lone GPU (`local`: a 1-rank all_reduce is a device copy, each byte read and
written once) is bounded by its memory: half of NVML's bus width x max memory
clock x 2 / 8 (explain.ceiling.memory_bandwidth_bound), as algbw.  A shape whose
ceiling cannot be given is listed with the reason (unknown, never guessed):
missing facts, an NVML that does not report the memory, sockets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...explain.ceiling import expected_ceiling, memory_bandwidth_bound
from ...explain.nccl_env import PLATFORM_SETTINGS
from ...explain.topology import HostTopology
from .fleet import Fleet
from .scan_schedule import Group, intra_groups, local_groups, pair_groups, rail_groups

LOCAL_UNKNOWN = ("one GPU alone: its figure is the algbw of a 1-rank all_reduce (a device-to-device copy), "
                 "bounded by its memory bandwidth, which NVML did not give")


@dataclass(frozen=True)
class ShapeCeiling:
    shape: str
    ceiling: float | None  # GB/s busbw (algbw for a lone GPU), large messages
    text: str  # the model's reasoning, or why it is unknown
    group: str  # the group it was computed for
    bound: str = ""  # 'NVLink', 'PCIe', 'NIC', 'memory'
    ngpus: int = 1  # ranks in the group
    nnodes: int = 1
    algorithm: str | None = None
    algorithm_source: str = ""

    def to_json(self) -> dict:
        return {"ceiling": self.ceiling, "text": self.text, "group": self.group, "bound": self.bound or None}


def representative_groups(fleet: Fleet, phases: Sequence[str], pair_shape: str) -> list[Group]:
    """The first group of every shape the scan's phases will run."""
    out: dict[str, Group] = {}
    candidates: list[Group] = []
    if "local" in phases:
        candidates += local_groups(fleet)[:1]
    if "intra" in phases:
        candidates += intra_groups(fleet)
    if "rail" in phases:
        candidates += rail_groups(fleet)[:1]
    if "pairs" in phases and fleet.nhosts >= 2:
        candidates += pair_groups(fleet, [(0, 1)], pair_shape)[:1]
    for g in candidates:
        out.setdefault(g.shape, g)
    return list(out.values())


def shape_ceilings(fleet: Fleet, groups: Sequence[Group], topologies: Mapping[str, HostTopology],
                   gpu_pci: Mapping[int, str], nccl_version: str | None,
                   env: Mapping[str, str] | None = None) -> list[ShapeCeiling]:
    """The ceiling of each group's shape.  `topologies`: host name -> its facts;
    `gpu_pci`: world rank -> its GPU's PCI address (as `HostTopology.only` takes it)."""
    out = []
    env = {k: v for k, v in (env or {}).items() if k in PLATFORM_SETTINGS}
    for g in groups:
        label = g.label(fleet)
        if g.phase == "local":
            out.append(_lone_gpu(fleet, g, label, topologies, gpu_pci))
            continue
        hosts: list[HostTopology] = []
        missing = []
        for h in g.hosts:
            name = fleet.hosts[h]
            topo = topologies.get(name)
            pcis = [gpu_pci.get(fleet.rank_of(hh, s)) for hh, s in g.members if hh == h]
            if topo is None or any(p is None for p in pcis):
                missing.append(name)
                continue
            hosts.append(topo.only([p for p in pcis if p]))
        if missing:
            out.append(ShapeCeiling(g.shape, None, f"no topology facts from {', '.join(missing)}", label))
            continue
        c = expected_ceiling(hosts, "all_reduce", len(g.members), nccl_version=nccl_version, env=env)
        if c.ceiling is None:
            out.append(ShapeCeiling(g.shape, None, c.unknown or "the model gave no ceiling", label))
        else:
            out.append(ShapeCeiling(g.shape, float(c.ceiling),
                                    f"{c.ceiling:.1f} GB/s ({c.bound}, {c.algorithm} {c.algorithm_source}): "
                                    f"{c.reasoning}", label, c.bound or "", len(g.members), c.nnodes,
                                    c.algorithm, c.algorithm_source))
    return out


def _lone_gpu(fleet: Fleet, g: Group, label: str, topologies: Mapping[str, HostTopology],
              gpu_pci: Mapping[int, str]) -> ShapeCeiling:
    """A lone GPU's ceiling: a device copy reads and writes each byte once, so its algbw is
    at most half of the memory bandwidth (NVML)."""
    (h, slot), = g.members
    name = fleet.hosts[h]
    topo, pci = topologies.get(name), gpu_pci.get(fleet.rank_of(h, slot))
    if topo is None or pci is None:
        return ShapeCeiling(g.shape, None, f"{LOCAL_UNKNOWN} (no topology facts from {name})", label)
    gpus = topo.only([pci]).gpus
    if not gpus:
        return ShapeCeiling(g.shape, None, f"{LOCAL_UNKNOWN} (GPU {pci} not in {name}'s facts)", label)
    bound, why = memory_bandwidth_bound(gpus[0])
    if bound is None:
        return ShapeCeiling(g.shape, None, f"{LOCAL_UNKNOWN}: {why}", label)
    half = bound.model / 2
    return ShapeCeiling(g.shape, half, f"{half:.1f} GB/s algbw (memory, a device copy reads and writes each byte: "
                        f"half of {bound.text})", label, "memory", 1, 1, None, "")


def expected_map(ceilings: Sequence[ShapeCeiling]) -> dict[str, float]:
    """`ScanConfig.expected`: the shapes whose ceiling is known."""
    return {c.shape: c.ceiling for c in ceilings if c.ceiling is not None}
