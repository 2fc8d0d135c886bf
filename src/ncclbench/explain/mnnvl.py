"""Multi-node NVLink (GB200/GB300 NVL racks): is the job's NVLink domain wider than one host?

In an NVL72 rack each compute tray is a host of 4 GPUs, and all 72 GPUs hang off one NVLink
switch fabric.  NCCL treats the GPUs of one fabric clique as one node (src/mnnvl.cc
ncclMnnvlCheck and src/graph/topo.cc, v2.28.9-1: the clique's topologies are fused, so
`nNodes` counts NVLink domains, not hosts), which changes the ceiling completely: the bound
is each GPU's NVLink, not the trays' NICs.  Three witnesses, best first:

1. **NCCL's own log** - what NCCL did.  `comm ... nNodes %d localRanks %d localRank %d MNNVL %d`
   (init.cc, v2.20.3-1 .. v2.30.7-1), `MNNVL %d cliqueId %x cliqueSize %d cliqueRank %d`
   (init.cc v2.21.5-1 .. v2.23.4-1, src/mnnvl.cc from v2.24.3-1), and per GPU
   `MNNVL busId 0x%lx fabric UUID %lx.%lx cliqueId 0x%x state %d healthMask 0x%x`
   (init.cc, v2.20.3-1 ..).  NCCL's WARN "MNNVL (cliqueSize %d) is available but not working
   on this system" names an IMEX problem.
2. **NVML's fabric info** per GPU (`nvmlDeviceGetGpuFabricInfoV`: cluster UUID, clique id,
   state): what the hardware offers.  NCCL requires state COMPLETED on every rank and a
   non-zero UUID; GPUs sharing UUID and clique are one domain.
3. **The GPU model** (GB200, GB300): only a hint that the question matters - never taken
   as the answer.

`read_line`/`merge` are the log side (the NCCL log reader calls them; the facts stay a plain
dict so they travel in JSON), `find_domain` weighs the witnesses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .topology import HostTopology

MNNVL_PARTS = ("GB200", "GB300")  # GPUs sold in multi-node NVLink racks

# init.cc "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d" (v2.20.3-1 ..)
COMM_MNNVL = re.compile(r"^comm \S+ rank \d+ nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
                        r"localRanks (?P<local>\d+) localRank \d+ MNNVL (?P<flag>\d+)")
# "MNNVL %d cliqueId %x cliqueSize %d cliqueRank %d" (v2.21.5-1 .. v2.30.7-1; a trailing space before 2.24)
CLIQUE = re.compile(r"^MNNVL (?P<flag>\d+) cliqueId (?P<clique>[0-9a-fA-F]+) cliqueSize (?P<size>\d+) "
                    r"cliqueRank \d+")
# "MNNVL busId 0x%lx fabric UUID %lx.%lx cliqueId 0x%x state %d healthMask 0x%x" (v2.20.3-1 ..)
FABRIC = re.compile(r"^MNNVL busId 0x(?P<bus>[0-9a-fA-F]+) fabric UUID (?P<u0>[0-9a-fA-F]+)\.(?P<u1>[0-9a-fA-F]+) "
                    r"cliqueId 0x(?P<clique>[0-9a-fA-F]+) state (?P<state>\d+)")
# WARN in src/mnnvl.cc (v2.24.3-1 ..): FABRIC handles or IMEX not working
IMEX_BROKEN = re.compile(r"MNNVL \(cliqueSize (?P<size>\d+)\) is available but not working")
FABRIC_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED


def read_line(msg: str, acc: dict[str, Any]) -> bool:
    """Note what one NCCL INFO message says about MNNVL into `acc` (a JSON-ready dict kept with the log's
    facts).  True when the line was an MNNVL line; the comm line is also read elsewhere, so callers go on."""
    if m := COMM_MNNVL.match(msg):
        flags = acc.setdefault("flags", [])
        flag = int(m.group("flag"))
        if flag not in flags:
            flags.append(flag)
        acc["nnodes"] = max(acc.get("nnodes", 0), int(m.group("nnodes")))
        acc["local_ranks"] = max(acc.get("local_ranks", 0), int(m.group("local")))
        acc["nranks"] = int(m.group("nranks"))
        return True
    if m := CLIQUE.match(msg):
        acc["clique_id"] = int(m.group("clique"), 16)
        acc["clique_size"] = max(acc.get("clique_size", 0), int(m.group("size")))
        return True
    if m := FABRIC.match(msg):
        fab = acc.setdefault("fabric", {})
        if len(fab) < 512:
            uuid = f"{int(m.group('u0'), 16):016x}{int(m.group('u1'), 16):016x}"
            fab[m.group("bus").lower()] = [uuid, int(m.group("clique"), 16), int(m.group("state"))]
        return True
    return False


def read_warning(msg: str, acc: dict[str, Any]) -> None:
    if m := IMEX_BROKEN.search(msg):
        acc["imex_broken"] = msg[:300]
        acc["clique_size"] = max(acc.get("clique_size", 0), int(m.group("size")))


def merge(into: dict[str, Any], part: Mapping[str, Any]) -> None:
    """Fold one process's MNNVL notes into another's (several ranks' logs of one run)."""
    for f in part.get("flags", []):
        if f not in into.setdefault("flags", []):
            into["flags"].append(f)
    for key in ("nnodes", "local_ranks", "clique_size"):
        if key in part:
            into[key] = max(into.get(key, 0), part[key])
    for key in ("nranks", "clique_id", "imex_broken"):
        if key in part:
            into.setdefault(key, part[key])
    if part.get("fabric"):
        into.setdefault("fabric", {}).update(part["fabric"])


# -- weighing the witnesses --------------------------------------------------------------------

@dataclass
class NvlDomain:
    """What is known about the job's NVLink domain(s) across hosts.

    kind: 'one' (every rank in one NVLink domain that spans hosts: model it as one NVSwitch node),
    'none' (NCCL's nodes are the hosts: the usual multi-node model), 'several' (several domains
    joined by NICs: each domain one NCCL node, `ceiling.domains_joined`), 'unknown' (GB200/GB300 across
    hosts but no witness)."""

    kind: str
    evidence: list[str] = field(default_factory=list)
    gpus: int = 0  # GPUs in the job's domain ('one')
    fabric_unused: bool = False  # NVML shows one fabric over the hosts, but NCCL does not (or will not) use it

    @property
    def text(self) -> str:
        return "; ".join(self.evidence)


def _env_off(env: Mapping[str, str]) -> str:
    if env.get("NCCL_MNNVL_ENABLE", "").strip() == "0":
        return "NCCL_MNNVL_ENABLE=0"
    if env.get("NCCL_P2P_DISABLE", "0").strip() not in ("", "0"):
        return "NCCL_P2P_DISABLE set (NCCL checks MNNVL only with P2P on)"
    if env.get("NCCL_P2P_LEVEL", "").strip().upper() in ("LOC", "0"):
        return f"NCCL_P2P_LEVEL={env['NCCL_P2P_LEVEL']} (NCCL checks MNNVL only with P2P on)"
    return ""


def _nvml_domains(hosts: Sequence[HostTopology]) -> tuple[dict[tuple[str, int], set[str]], list[str], list[str]]:
    """(fabric domain -> hosts in it, GPUs NVML places outside any domain, GPUs whose fabric is unknown),
    the last two as 'host GPUi: why'.  NCCL uses MNNVL only when every rank's fabric state is COMPLETED
    with a non-zero cluster UUID (src/mnnvl.cc ncclMnnvlCheck), so one GPU outside is enough to rule it out."""
    domains: dict[tuple[str, int], set[str]] = {}
    outside: list[str] = []
    unknown: list[str] = []
    for h in hosts:
        for g in h.gpus:
            d = g.fabric_domain
            if d is not None:
                domains.setdefault(d, set()).add(h.host)
            elif g.nvlink_remote is not None and g.nvlink_remote != "switch":
                outside.append(f"{h.host} GPU{g.index}: not on an NVLink switch")
            elif g.fabric_state is None:
                unknown.append(f"{h.host} GPU{g.index}: " + g.unknown.get("fabric_state", "fabric not read"))
            elif g.fabric_state != "completed":
                outside.append(f"{h.host} GPU{g.index}: fabric {g.fabric_state}")
            elif g.fabric_status not in (None, 0):
                outside.append(f"{h.host} GPU{g.index}: fabric probe status {g.fabric_status}")
            else:
                outside.append(f"{h.host} GPU{g.index}: zero cluster UUID (NVSwitch inside the host only)")
    return domains, outside, unknown


def find_domain(hosts: Sequence[HostTopology], nranks: int, log: Mapping[str, Any] | None = None,
                env: Mapping[str, str] | None = None) -> NvlDomain:
    """Whether the job's hosts (each restricted to the GPUs it uses) share one NVLink domain.
    `log`: the MNNVL notes of NCCL's log (`read_line`), if captured."""
    env = env or {}
    log = log or {}
    if len(hosts) <= 1:
        return NvlDomain("none", ["one host"])
    domains, outside, unknown = _nvml_domains(hosts)
    nvml_one = len(domains) == 1 and not outside and not unknown
    nvml_text = ""
    if domains:
        uuid, clique = next(iter(domains))
        nvml_text = (f"NVML: all {len(hosts)} hosts' GPUs in NVLink fabric {uuid[:8]}.. clique {clique}" if nvml_one
                     else f"NVML: {len(domains)} NVLink fabric clique(s) over the hosts" +
                     (f", {len(outside)} GPU(s) outside any ({outside[0]})" if outside else ""))
    flags = log.get("flags", [])
    imex = log.get("imex_broken")
    if flags == [1]:
        nnodes = log.get("nnodes")
        ev = [f"NCCL's log: MNNVL 1, nNodes {nnodes}, clique size {log.get('clique_size', '?')}"]
        if nvml_text:
            ev.append(nvml_text)
        if nnodes == 1:
            return NvlDomain("one", ev, nranks)
        return NvlDomain("several", ev + [f"{nnodes} NVLink domains joined by the network"])
    if flags and 1 not in flags:
        why = "NCCL's log: MNNVL 0 (NCCL treats each host as a node and joins them over the network)"
        if imex:
            why += f"; NCCL WARN: {imex}"
        ev = [why] + ([nvml_text + ": NCCL did not use that fabric"] if nvml_one else [])
        return NvlDomain("none", ev, fabric_unused=nvml_one)
    if flags:
        return NvlDomain("unknown", [f"NCCL's log: ranks disagree on MNNVL ({sorted(flags)})"])
    off = _env_off(env)
    if off and domains:
        return NvlDomain("none", [f"{off}: NCCL does not use the NVLink fabric across hosts", nvml_text],
                         fabric_unused=True)
    if nvml_one:
        return NvlDomain("one", [nvml_text + " (NCCL's use of it not confirmed: no NCCL log)"], nranks)
    if outside and not unknown:
        first = f"NVML: {outside[0]}" + (f" and {len(outside) - 1} more GPU(s)" if len(outside) > 1 else "")
        if domains:
            first += " outside the NVLink fabric: NCCL uses multi-node NVLink only when every rank has joined it"
        return NvlDomain("none", [first])
    if len(domains) > 1 and not unknown:
        return NvlDomain("several", [nvml_text + ": several NVLink domains joined by the network"])
    parts = sorted({g.name or "" for h in hosts for g in h.gpus if any(p in (g.name or "") for p in MNNVL_PARTS)})
    if domains or parts:
        why = f"NVML fabric info: {unknown[0]}" if unknown else nvml_text or "NVML fabric info not read"
        return NvlDomain("unknown", [f"{', '.join(parts) or 'NVLink fabric'} across {len(hosts)} hosts: whether "
                                     f"they share one NVLink domain is unknown ({why}; NCCL's log said nothing "
                                     f"of MNNVL)"])
    return NvlDomain("none", [])
