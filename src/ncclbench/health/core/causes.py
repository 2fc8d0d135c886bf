"""Why a slow group is slow: explain's trap checks, run inside the scan.

Before the scan each host's facts (explain.gather_topology, restricted to the GPUs the scan
uses) and the NCCL settings its ranks run with go through `explain.traps.find_traps`,
the same checks a benchmark run gets.  A trap is attached to the confirmed or suspect
findings of that host whose component it can explain (P2P off, SHM off, capped
channels or a forced algorithm explain a slow intra-node group; sockets, GDR off or a
NIC list a slow NIC or link), so the verdict names the cause with its evidence and fix.

A trap that the same facts raise only with the ranks' settings (not without them) is a
*setting* of this job, not a fault of the node: the finding says so, and a host whose
confirmed faults are all explained by settings is not drained - fix the setting and
scan again.  A finding no trap explains says that too (a lone GPU slower than its
memory allows is another process's work, clocks or heat: nothing a trap can see).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ...explain.topology import HostTopology
from ...explain.traps import Trap, find_traps
from .findings import GPU, LINK, NODE_INTRA, NODE_NIC, RAIL, Finding
from .fleet import Fleet

# the variables health sets itself for its own communicators (not the user's)
OWN_SETTINGS = ("NCCL_RUNTIME_CONNECT",)

# which traps can explain a slow group of which component
_INTRA = ("p2p-disabled", "p2p-shm-disabled", "nvlink-down", "pcie-downtrained", "channels-capped", "algo-forced",
          "proto-forced")
_NET = ("net-socket-fallback", "gdr-off", "nic-env-mismatch", "pcie-downtrained", "channels-capped", "algo-forced",
        "proto-forced")
EXPLAINS: dict[str, tuple[str, ...]] = {NODE_INTRA: _INTRA, NODE_NIC: _NET, LINK: _NET, RAIL: _NET, GPU: ()}


def nccl_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The NCCL_* settings a rank runs with (what its set-up answer carries)."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k.startswith("NCCL_") and k not in OWN_SETTINGS}


@dataclass(frozen=True)
class HostCauses:
    """The traps raised on one host, which of them its settings alone raise, what was not checked."""

    host: str
    traps: tuple[Trap, ...]
    settings: frozenset[str]  # names of the traps that only the ranks' NCCL settings raise
    unchecked: tuple[str, ...] = ()

    def for_component(self, component: str) -> list[Trap]:
        names = EXPLAINS.get(component, _INTRA + _NET)
        return [t for t in self.traps if t.name in names]

    def to_json(self) -> dict:
        return {"traps": [{"name": t.name, "severity": t.severity, "evidence": t.evidence, "fix": t.fix,
                           "setting": t.name in self.settings} for t in self.traps],
                "unchecked": list(self.unchecked)}


def host_causes(fleet: Fleet, topologies: Mapping[str, HostTopology], gpu_pci: Mapping[int, str],
                envs: Mapping[str, Mapping[str, str]]) -> dict[str, HostCauses]:
    """host -> its traps, over the GPUs of the scan on that host and its ranks' settings."""
    out: dict[str, HostCauses] = {}
    for h, name in enumerate(fleet.hosts):
        topo = topologies.get(name)
        env = dict(envs.get(name) or {})
        if topo is None:
            continue
        pcis = [gpu_pci[r] for r in fleet.ranks[h] if r in gpu_pci]
        facts = [topo.only(pcis) if pcis else topo]
        nnodes = fleet.nhosts
        with_env = find_traps(facts, None, env, nnodes=nnodes)
        bare = {(t.name, t.evidence) for t in find_traps(facts, None, {}, nnodes=nnodes).raised}
        settings = frozenset(t.name for t in with_env.raised if (t.name, t.evidence) not in bare)
        out[name] = HostCauses(name, tuple(with_env.raised), settings,
                               tuple(f"{u.name} ({u.reason})" for u in with_env.unchecked))
    return out


def attach_causes(findings: Iterable[Finding], causes: Mapping[str, HostCauses]) -> None:
    """Name the cause of each confirmed or suspect finding of a host: the traps that can explain
    its component (evidence and fix), or that none does.  A finding all of whose causes are the
    ranks' own settings is marked `setting` (not drained)."""
    for f in findings:
        if not f.hosts or not (f.confirmed or f.verdict.startswith("suspect")) or f.component not in EXPLAINS:
            continue
        traps: list[tuple[str, Trap]] = []
        for host in f.hosts:
            hc = causes.get(host)
            if hc is not None:
                traps += [(host, t) for t in hc.for_component(f.component) if (host, t) not in traps]
        if not traps:
            checked = [h for h in f.hosts if h in causes]
            f.evidence.append("cause: no trap explains it (explain's checks over "
                              + (", ".join(checked) if checked else "no host: no topology facts") + ")"
                              + (" - a GPU slower than its memory allows: another process's work, clocks or "
                                 "temperature" if f.component == GPU else ""))
            continue
        f.cause = [t.name for _, t in traps]
        f.setting = all(t.name in causes[h].settings for h, t in traps)
        for host, t in traps:
            kind = "setting of this job" if t.name in causes[host].settings else "trap"
            f.evidence.insert(0, f"cause ({kind} {t.name}, {host}): {t.evidence}. Fix: {t.fix}")
        if f.setting:
            f.evidence.append("explained by the ranks' NCCL settings alone: not drained; fix the setting and "
                              "scan again")
