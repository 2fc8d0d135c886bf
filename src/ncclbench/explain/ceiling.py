"""Expected bus bandwidth per collective, from the topology and NCCL's own bandwidth model.

The model is physical: links, their rates, and the constants NCCL itself uses
to plan (read in NCCL's source at the tags named; nothing here is fitted to
measurements).  For each run it names the binding bound - NVLink, PCIe, or the
NICs of a node - its physical line rate, and the realistic ceiling NCCL can
reach through it with the algorithm it uses (or would pick), with the
reasoning in one line.


NCCL's constants and per-channel formulas live in `nccl_bandwidth.py` (with their sources).
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from .mnnvl import find_domain
from .nccl_bandwidth import (
    BASEBOARD_GPUS,
    NVLS_EFFICIENCY,
    PAT_EFFICIENCY,
    POINT_TO_POINT,
    RING_LIKE,
    ROOTED,
    TREE_ALLREDUCE_EFFICIENCY,
    NvlsModel,
    NvlsNetGraph,
    NvlsTreeModel,
    _version,
    fmt_gbps,
    nccl_nic_channel_bw,
    nccl_nvlink_bw,
    nccl_pcie_bw,
    nvls_baseboard,
    nvls_channel_bw,
    nvls_channels,
    nvls_model,
    nvls_net_graph,
    nvls_tree_channel_cap,
    nvls_tree_model,
)
from .nccl_env import ALGORITHMS, NCCL_FUNC, allowed_algorithms, env_set, host_settings, nccl_list_match
from .nccl_log import NcclLogFacts, format_bytes, per_size_choices
from .topology import GpuTopology, HostTopology, NicPort, pcie_line_rate

# -- NCCL's constants -------------------------------------------------------------------

# -- results ----------------------------------------------------------------------------

@dataclass
class Bound:
    """One physical limit per GPU, in busbw units (GB/s per direction)."""

    kind: str  # 'NVLink', 'PCIe', 'NIC', 'memory' (a lone GPU)
    line_rate: float  # physical
    model: float  # NCCL's bandwidth for it
    text: str  # how both were computed
    transport: str = ""  # NIC bounds: NCCL's network transport ('IB', 'Socket', a plugin's name)
    ports: int = 0  # NIC bounds: the NICs NCCL uses per node (per NVLink domain: all its trays')
    port_model: float = 0.0  # NIC bounds: NCCL's plan for one of them per channel (the slowest)
    port_line: float = 0.0  # NIC bounds: one NIC's line rate, GB/s (the slowest)
    scope: str = "node"  # NVLink bounds: what the GPUs share, 'node' or 'NVLink domain' (several hosts)


@dataclass
class Ceiling:
    collective: str
    nranks: int
    nnodes: int
    algorithm: str | None = None
    algorithm_source: str = ""  # 'NCCL log', 'NCCL_ALGO', 'predicted'
    bound: str | None = None  # the binding bound: 'NVLink', 'PCIe', 'NIC'
    line_rate: float | None = None  # GB/s, physical line rate of the binding bound
    ceiling: float | None = None  # GB/s busbw, realistic
    nccl_predicted: float | None = None  # GB/s busbw from NCCL's own TUNING table
    nccl_predicted_text: str = ""
    reasoning: str = ""
    unknown: str = ""  # why `ceiling` is None
    nvlink_domain: str = ""  # several hosts: whether they share one NVLink domain (MNNVL), and the evidence

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Ceiling:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# -- bounds -----------------------------------------------------------------------------


def _ring_over_nvlink(gpus: Sequence[GpuTopology]) -> bool:
    """True when the GPUs can be put in a ring that only uses direct NVLinks."""
    ids = [g.pci_bus_id for g in gpus]
    if len(ids) == 2:
        return ids[1] in gpus[0].nvlink_peers
    first, rest = gpus[0], gpus[1:]
    for perm in itertools.permutations(rest):
        order = [first, *perm]
        if all(order[(i + 1) % len(order)].pci_bus_id in order[i].nvlink_peers for i in range(len(order))):
            return True
    return False


def intra_bound(host: HostTopology, ngpus: int, nccl_version: str | None,
                env: Mapping[str, str]) -> tuple[Bound | None, str]:
    """The per-GPU bound inside one host for `ngpus` GPUs of it, or (None, why)."""
    gpus = host.gpus[:ngpus] if len(host.gpus) >= ngpus else host.gpus
    if len(gpus) < ngpus:
        return None, f"{host.host}: facts for {len(host.gpus)} GPU(s), {ngpus} in use"
    ccs = [g.cc for g in gpus]
    if any(c is None for c in ccs):
        return None, f"{host.host}: compute capability unknown"
    cc = min(c for c in ccs if c is not None)
    model_name = gpus[0].name or "GPU"
    p2p_off = env.get("NCCL_P2P_DISABLE", "0") not in ("", "0")
    if p2p_off and env.get("NCCL_SHM_DISABLE", "0") not in ("", "0"):
        return _sockets_inside_host(host, ngpus, nccl_version, env)
    unknown_nv = [g for g in gpus if g.nvlink_active is None]
    if unknown_nv and not p2p_off:
        g = unknown_nv[0]
        return None, f"{host.host} GPU{g.index}: NVLink state unknown ({g.unknown.get('nvlink_active', '?')})"
    nv = [g for g in gpus if g.nvlink_active]
    if not p2p_off and len(nv) == len(gpus) and all(g.nvlink_remote == "switch" for g in gpus):
        active = min(g.nvlink_active or 0 for g in gpus)  # every one is known and non-zero here (nv)
        per_link = gpus[0].nvlink_rate
        nccl_link = nccl_nvlink_bw(cc, nccl_version)
        nvgen = f"NVLink{gpus[0].nvlink_generation}" if gpus[0].nvlink_generation else "NVLink"
        if per_link is None:
            return None, f"{host.host}: NVLink rate unknown ({gpus[0].unknown.get('nvlink_rate', '?')})"
        line = active * per_link
        text = (f"{ngpus}x {model_name} NVSwitch, {active} {nvgen} links x {fmt_gbps(per_link)} GB/s = {fmt_gbps(line)} GB/s "
                f"line rate; NCCL's model {active} x {nccl_link:g} = {fmt_gbps(active * nccl_link)} GB/s")
        return Bound("NVLink", line, active * nccl_link, text), ""
    if not p2p_off and len(nv) == len(gpus) and all(g.nvlink_remote == "gpu" for g in gpus) \
            and _ring_over_nvlink(gpus):
        used = {g.pci_bus_id for g in gpus}
        links = min(sum(c for p, c in g.nvlink_peers.items() if p in used) for g in gpus)
        per_link = gpus[0].nvlink_rate
        if per_link is None:
            return None, f"{host.host}: NVLink rate unknown"
        nccl_link = nccl_nvlink_bw(cc, nccl_version)
        text = (f"{ngpus}x {model_name} direct NVLink, {links} links to the GPUs in use x {fmt_gbps(per_link)} GB/s = "
                f"{fmt_gbps(links * per_link)} GB/s line rate; NCCL's model {links} x {nccl_link:g} = "
                f"{fmt_gbps(links * nccl_link)} GB/s (an upper bound: rings on an uneven mesh may not use every link)")
        return Bound("NVLink", links * per_link, links * nccl_link, text), ""
    # PCIe: the slowest GPU link.  Idle GPUs lower their generation to save power, so
    # the model uses the maximum generation unless the GPU was busy (P0) when read.
    best: tuple[float, float, str] | None = None
    for g in gpus:
        gen = g.pcie.gen if g.pstate == 0 else g.pcie.gen_max
        width = g.pcie.width
        if gen is None or width is None:
            return None, f"{host.host} GPU{g.index}: PCIe link unknown"
        model, line = nccl_pcie_bw(gen, width), pcie_line_rate(gen, width) or 0.0
        if best is None or model < best[0]:
            best = (model, line, f"Gen{gen} x{width}")
    assert best is not None
    why = ("NCCL_P2P_DISABLE set: GPUs exchange through host memory" if p2p_off else
           "no NVLink ring" if nv else "no NVLink")
    text = (f"{ngpus}x {model_name} over PCIe ({why}), {best[2]} = {fmt_gbps(best[1])} GB/s line rate; "
            f"NCCL's model {fmt_gbps(best[0])} GB/s")
    return Bound("PCIe", best[1], best[0], text), ""


def _sockets_inside_host(host: HostTopology, ngpus: int, nccl_version: str | None,
                         env: Mapping[str, str]) -> tuple[Bound | None, str]:
    """P2P and SHM both off: NCCL moves the data between the GPUs of one host over its NET transport, TCP
    sockets through the kernel (loopback), which no NIC bounds and NCCL does not model inside a host
    (its socket figure is the NIC's speed, 10 Gb/s where unknown, while loopback moves 2.7-3.5 GB/s:
    bench/results/gpu-h100x4-2026-11-26/README.md, tests/fixtures/log_corpus/h100-p2p-shm-disabled.log).
    So the ceiling is what this host's GPUs reach when NCCL may use its own path, and the text says the
    transport that moved the data."""
    free = {k: v for k, v in env.items() if k not in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")}
    b, why = intra_bound(host, ngpus, nccl_version, free)
    if b is None:
        return None, why
    return Bound(b.kind, b.line_rate, b.model, (
        "NCCL_P2P_DISABLE and NCCL_SHM_DISABLE set: NCCL moved the data over TCP sockets through the kernel, "
        "which has no line rate inside a host; the ceiling is what these GPUs reach when NCCL may use its own "
        f"path: {b.text}"), transport="Socket"), ""


def domain_bound(hosts: Sequence[HostTopology], nranks: int, nccl_version: str | None,
                 env: Mapping[str, str]) -> tuple[Bound | None, str]:
    """The per-GPU bound of one NVLink domain that spans `hosts` (GB200/GB300 NVL racks): every GPU's
    NVSwitch link, the weakest one binding, as NCCL's fused topology sees it (one node of all the
    domain's GPUs).  (None, why) when a GPU's links are unknown or not on the switch."""
    gpus = [(h, g) for h in hosts for g in h.gpus]
    if len(gpus) < nranks:
        return None, f"facts for {len(gpus)} GPU(s) over {len(hosts)} hosts, {nranks} in use"
    for h, g in gpus:
        if g.nvlink_active is None:
            return None, f"{h.host} GPU{g.index}: NVLink state unknown ({g.unknown.get('nvlink_active', '?')})"
        if g.nvlink_remote != "switch" or not g.nvlink_active:
            return None, f"{h.host} GPU{g.index}: not on the NVLink switch ({g.nvlink_remote or 'unknown'})"
        if g.nvlink_rate is None or g.cc is None:
            return None, f"{h.host} GPU{g.index}: NVLink rate unknown ({g.unknown.get('nvlink_rate', '?')})"
    h0, weakest = min(gpus, key=lambda hg: (hg[1].nvlink_active or 0) * (hg[1].nvlink_rate or 0))
    active, per_link = weakest.nvlink_active or 0, weakest.nvlink_rate or 0.0
    cc = min(g.cc for _, g in gpus if g.cc is not None)
    nccl_link = nccl_nvlink_bw(cc, nccl_version)
    gen = f"NVLink{weakest.nvlink_generation}" if weakest.nvlink_generation else "NVLink"
    names = sorted({g.name or "GPU" for _, g in gpus})
    text = (f"{nranks}x {'/'.join(names)} in one NVLink domain over {len(hosts)} hosts (multi-node NVLink), "
            f"{active} {gen} links x {fmt_gbps(per_link)} GB/s = {fmt_gbps(active * per_link)} GB/s line rate per GPU"
            f"{f' (weakest: {h0.host} GPU{weakest.index})' if any(g.nvlink_active != active for _, g in gpus) else ''}"
            f"; NCCL's model {active} x {nccl_link:g} = {fmt_gbps(active * nccl_link)} GB/s")
    return Bound("NVLink", active * per_link, active * nccl_link, text, scope="NVLink domain"), ""


def _domain_groups(hosts: Sequence[HostTopology], mnnvl_log: Mapping[str, Any] | None
                   ) -> list[list[HostTopology]] | None:
    """The job's hosts grouped by NVLink domain: NVML's fabric cliques, else NCCL's nNodes splitting the hosts
    in order into equal domains (the launcher's order is the rack's); None when neither groups them evenly."""
    by: dict[tuple[str, int], list[HostTopology]] = {}
    for h in hosts:
        d = next((g.fabric_domain for g in h.gpus if g.fabric_domain is not None), None)
        if d is None:
            by = {}
            break
        by.setdefault(d, []).append(h)
    if len(by) > 1:
        return list(by.values())
    k = int((mnnvl_log or {}).get("nnodes") or 0)
    if k > 1 and len(hosts) % k == 0:
        n = len(hosts) // k
        return [list(hosts[i * n:(i + 1) * n]) for i in range(k)]
    return None


def domains_joined(hosts: Sequence[HostTopology], nranks: int, domain: Any, mnnvl_log: Mapping[str, Any] | None,
                   nccl_version: str | None, env: Mapping[str, str], net: str | None, cc: tuple[int, int] | None
                   ) -> tuple[tuple[Bound, Bound, int, int] | None, str]:
    """Several NVLink domains (GB200/GB300 racks) joined by their NICs, as NCCL sees them: each domain one
    node of all its GPUs (its NVLink bound, `domain_bound`), the domains joined by every tray's NICs
    (the domain's NIC bound is the sum of its trays').  ((intra, inter, NCCL's nodes, GPUs per node), "")
    or (None, why) when the domains are not known or not even."""
    groups = _domain_groups(hosts, mnnvl_log)
    if groups is None or len({len(g) for g in groups}) != 1 or nranks % len(groups):
        return None, "the hosts of each NVLink domain are not known (or the domains are uneven): not modelled"
    k, per = len(groups), nranks // len(groups)
    intra, why = domain_bound(groups[0], per, nccl_version, env)
    if intra is None:
        return None, why
    trays = []
    for h in groups[0]:
        b, why = inter_bound(h, max(1, per // len(groups[0])), env, net, cc)
        if b is None:
            return None, why
        trays.append(b)
    inter = Bound("NIC", sum(b.line_rate for b in trays), sum(b.model for b in trays),
                  f"{len(trays)} trays x ({trays[0].text}) = {fmt_gbps(sum(b.model for b in trays))} GB/s per domain",
                  trays[0].transport, ports=sum(b.ports for b in trays), port_model=min(b.port_model for b in trays),
                  port_line=min(b.port_line for b in trays))
    intra.text += f" ({domain.text}; {k} such domains joined by their NICs)"
    return (intra, inter, k, per), ""


def memory_bandwidth_bound(gpu: GpuTopology) -> tuple[Bound | None, str]:
    """A lone GPU's bound: its device memory, from NVML (bus width x max memory clock x 2 / 8), as a
    `Bound` of kind 'memory' whose line rate and model are both that peak (NVIDIA's own figure for
    the part: H100 SXM 3.35 TB/s), or (None, why NVML could not tell).  A one-rank collective is a
    device copy that reads and writes each byte once, so its algbw is at most half of this."""
    bw = gpu.memory_bandwidth
    if bw is None:
        missing = [k for k in ("memory_bus_width", "memory_clock_max_mhz") if getattr(gpu, k) is None]
        why = "; ".join(f"{k}: {gpu.unknown.get(k, 'not read')}" for k in missing) or "NVML gave zero"
        return None, f"GPU{gpu.index}: memory bandwidth unknown ({why})"
    text = (f"{gpu.name or 'GPU'} memory: {gpu.memory_bus_width}-bit bus x {gpu.memory_clock_max_mhz} MHz max "
            f"memory clock x 2 (DDR) / 8 = {fmt_gbps(bw)} GB/s (NVML nvmlDeviceGetMemoryBusWidth, "
            f"nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM))")
    return Bound("memory", bw, bw, text), ""


def nics_for_nccl(host: HostTopology, env: Mapping[str, str], net: str | None) -> tuple[list[NicPort], str]:
    """The NICs NCCL's transport would use on this host, and the transport ('IB', 'Socket', ...).
    `net`: the transport NCCL reported in its log, if known."""
    socket_forced = (net or "").lower() == "socket" or (env_set(env, "NCCL_NET") or "").lower() == "socket" \
        or (env_set(env, "NCCL_IB_DISABLE") or "0") != "0"
    rdma = [n for n in host.rdma_ports() if n.active and n.kind != "slingshot"]
    hca = env.get("NCCL_IB_HCA", "")
    if hca:
        rdma = [n for n in rdma if nccl_list_match(hca, n.name, n.port)]
    if net and net.lower() not in ("ib", "socket"):  # an external plugin (OFI, ...): it drives the fabric
        fabric = [n for n in host.nics if n.active and n.rdma]
        return fabric, net
    if rdma and not socket_forced:
        return rdma, "IB"
    eth = [n for n in host.nics if n.active and n.kind in ("ethernet", "slingshot", "roce", "virtual")]
    ifname = env.get("NCCL_SOCKET_IFNAME", "")
    if ifname:
        eth = [n for n in eth if nccl_list_match(ifname, n.netdev or n.name, None)]
    return eth, "Socket"


def inter_bound(host: HostTopology, ppn: int, env: Mapping[str, str], net: str | None,
                cc: tuple[int, int] | None) -> tuple[Bound | None, str]:
    nics, transport = nics_for_nccl(host, env, net)
    if not nics:
        why = host.unknown.get("nics", "")
        return None, f"{host.host}: no active NIC for NCCL's {transport} transport" + (f" ({why})" if why else "")
    rated = [n for n in nics if n.rate_gbps]
    if len(rated) < len(nics):
        n = next(n for n in nics if not n.rate_gbps)
        why = " (a virtual interface: no line rate; sockets are bound by the CPUs and TCP)" if n.kind == "virtual" else ""
        return None, f"{host.host}: speed of {n.label} unknown{why}"
    in_box = host.gpus_in_box or len(host.gpus) or ppn
    used_count = max(1, min(len(rated), round(ppn * len(rated) / max(1, in_box))))
    used = sorted(rated, key=lambda n: -(n.rate_gbps or 0))[:used_count]
    line = sum((n.rate_gbps or 0) / 8 for n in used)
    model = sum(nccl_nic_channel_bw(n.rate_gbps or 0, cc) for n in used)
    kinds = {"ib": "InfiniBand", "roce": "RoCE", "efa": "EFA", "slingshot": "Slingshot", "ethernet": "Ethernet"}
    rates = sorted({n.rate_gbps or 0.0 for n in used})  # all rated (checked above)
    rate = "/".join(fmt_gbps(r) for r in rates if r)
    kind = kinds.get(used[0].kind, used[0].kind)
    per_nic = nccl_nic_channel_bw(used[0].rate_gbps or 0, cc)
    text = (f"{used_count}x {rate} Gb/s {kind} per node over {transport} = {fmt_gbps(line)} GB/s line rate; NCCL plans "
            f"{used_count} x {fmt_gbps(per_nic)} = {fmt_gbps(model)} GB/s")
    if used_count < len(rated):
        text += f" ({used_count} of {len(rated)} NICs for {ppn} GPU(s) of {in_box})"
    return Bound("NIC", line, model, text, transport, ports=used_count,
                 port_model=min(nccl_nic_channel_bw(n.rate_gbps or 0, cc) for n in used),
                 port_line=min((n.rate_gbps or 0) / 8 for n in used)), ""


# -- algorithms -------------------------------------------------------------------------

def _nvls_capable(hosts: Sequence[HostTopology], ppn: int, env: Mapping[str, str],
                  nccl_version: str | None) -> tuple[bool, str]:
    if env.get("NCCL_NVLS_ENABLE", "") == "0":
        return False, "NCCL_NVLS_ENABLE=0"
    v = _version(nccl_version)
    if v is not None and v < (2, 17):
        return False, f"NCCL {nccl_version} has no NVLS"
    if ppn < 2:
        return False, "one GPU per node"
    for h in hosts:
        gpus = h.gpus[:ppn]
        if not gpus or not all(g.nvlink_remote == "switch" and g.nvlink_active for g in gpus):
            return False, "no NVSwitch"
        if any((g.cc or (0, 0)) < (9, 0) for g in gpus):
            return False, "NVLS needs sm 9.0+"
    return True, ""


def network_in_use(log: NcclLogFacts) -> str | None:
    """NCCL's network transport from its log: 'Socket', 'IB', or a plugin's name ('AWS Libfabric')."""
    if log.net_plugin:
        return log.net_plugin
    kinds = sorted({d.transport for d in log.net_devices if d.transport})
    if kinds:
        return kinds[0]
    return next((c.net for c in log.connections if c.kind == "NET" and c.net), None)


def nccl_algorithm(log: NcclLogFacts, collective: str) -> tuple[str | None, str]:
    """(the algorithm NCCL's per-call lines show at the largest size logged, evidence) or (None, why)."""
    func = NCCL_FUNC.get(collective)
    if func is None:
        return None, f"NCCL logs no algorithm for {collective}"
    ranges = per_size_choices(log, func)
    if not ranges:
        return None, f"no per-call {func} line in NCCL's log"
    top = max(r[1] for r in ranges)
    at_top = [r for r in ranges if r[1] == top]
    algos = sorted({r[2] for r in at_top})
    if len(algos) != 1:
        return None, f"NCCL's log shows {', '.join(algos)} at {format_bytes(top)}"
    r = at_top[0]
    return algos[0], f"NCCL's log: {func} {format_bytes(top)} -> {r[2]}/{r[3]}"


@dataclass(frozen=True)
class _Facts:
    """What `expected_ceiling` was given, completed from NCCL's log where the caller left it out."""

    log: NcclLogFacts | None
    algorithm: str | None
    algorithm_source: str
    env: dict[str, str]  # the caller's settings, then NCCL's ENV lines
    log_env: dict[str, str]
    net: str | None
    nccl_version: str | None
    tuning_table: Mapping | None
    host_env: Mapping[str, Mapping[str, str]] | None

    @property
    def mnnvl(self) -> Any:
        return self.log.mnnvl if self.log is not None else None


def _facts(collective: str, log: NcclLogFacts | None, algorithm: str | None, algorithm_source: str,
           env: Mapping[str, str] | None, nccl_version: str | None, net: str | None, tuning_table: Mapping | None,
           host_env: Mapping[str, Mapping[str, str]] | None) -> _Facts:
    """The given facts, with the log's algorithm at the largest size, network transport, version,
    TUNING table and settings where not given."""
    env_ = dict(env or {})
    log_env = dict(log.env) if log is not None else {}
    if log is not None:
        if algorithm is None:
            algorithm, _ = nccl_algorithm(log, collective)
            algorithm_source = "NCCL log"
        net = net or network_in_use(log)
        nccl_version = nccl_version or log.version
        tuning_table = tuning_table or log.tuning_table
        for k, v in log.env.items():
            env_.setdefault(k, v)
    return _Facts(log, algorithm, algorithm_source, env_, log_env, net, nccl_version, tuning_table, host_env)


def _no_model(collective: str, nnodes: int, hosts: Sequence[HostTopology]) -> str | None:
    """Why no bandwidth model applies (a collective or layout it lacks, no topology), or None."""
    if collective in ROOTED and nnodes > 1:
        return f"no bandwidth model for {collective} across hosts"
    if collective not in RING_LIKE + POINT_TO_POINT + ROOTED:
        return f"no bandwidth model for {collective}"
    if not hosts:
        return "no topology facts"
    return None


@dataclass
class _Layout:
    """The bounds found so far and the layout NCCL sees: its nodes (hosts, or NVLink domains where
    hosts share one: MNNVL) and ranks per node."""

    ppn: int
    nccl_nodes: int
    intra: Bound | None = None
    inter: Bound | None = None
    unused_fabric: str = ""  # said after the reasoning: the hosts share an NVLink fabric NCCL did not use


def _nvlink_domain(out: Ceiling, lay: _Layout, hosts: Sequence[HostTopology], nranks: int, f: _Facts,
                   cc: tuple[int, int] | None) -> bool:
    """Several hosts: whether they share NVLink domains, and the bounds and layout that gives.
    False where the domain leaves the ceiling unknown (`out.unknown` says why)."""
    domain = find_domain(hosts, nranks, f.mnnvl, f.env)
    if domain.fabric_unused:
        lay.unused_fabric = f"; multi-node NVLink not used: {domain.text}"
    out.nvlink_domain = domain.text
    if domain.kind == "several":
        joined, why = domains_joined(hosts, nranks, domain, f.mnnvl, f.nccl_version, f.env, f.net, cc)
        if joined is None:
            out.unknown = f"{domain.text}; {why}"
            return False
        lay.intra, lay.inter, lay.nccl_nodes, lay.ppn = joined
    if domain.kind == "unknown":
        out.unknown = domain.text
        return False
    if domain.kind == "one":
        # GB200/GB300 NVL racks: the hosts' GPUs are one NVSwitch node to NCCL; its NICs are no bound
        intra, why = domain_bound(hosts, nranks, f.nccl_version, f.env)
        if intra is None:
            out.unknown = why
            return False
        intra.text += f" ({domain.text})"
        lay.intra, lay.nccl_nodes, lay.ppn = intra, 1, nranks
    return True


def _intra_node(out: Ceiling, lay: _Layout, hosts: Sequence[HostTopology], f: _Facts) -> bool:
    """The slowest host's bound between its GPUs, each host read with its own settings.  False
    where one is unknown (`out.unknown` says why)."""
    bounds = []
    for h in hosts:
        b, why = intra_bound(h, lay.ppn, f.nccl_version, host_settings(h.host, f.env, f.host_env, f.log_env))
        if b is None:
            out.unknown = why
            return False
        bounds.append(b)
    lay.intra = min(bounds, key=lambda b: b.model)
    return True


def _inter_node(out: Ceiling, lay: _Layout, hosts: Sequence[HostTopology], f: _Facts,
                cc: tuple[int, int] | None) -> bool:
    """The slowest host's bound through its NICs.  False where one is unknown or NCCL uses its
    Socket transport, which has no ceiling model (`out` says why)."""
    bounds = []
    for h in hosts:
        b, why = inter_bound(h, lay.ppn, host_settings(h.host, f.env, f.host_env, f.log_env), f.net, cc)
        if b is None:
            out.unknown = why
            return False
        bounds.append(b)
    inter = lay.inter = min(bounds, key=lambda b: b.model)
    if inter.transport == "Socket":
        # NCCL's model plans sockets at the NIC's speed, but its Socket transport is bound by host
        # copies and TCP, far below it (Alps: 5 GB/s over Socket where the OFI plugin gave 122).
        out.bound, out.line_rate = "NIC", inter.line_rate
        out.unknown = ("NCCL's Socket transport is bound by host CPU copies and TCP, not by the NICs' "
                       "line rate: no ceiling model")
        out.reasoning = inter.text
        return False
    return True


def _bounds(out: Ceiling, lay: _Layout, hosts: Sequence[HostTopology], nranks: int, nnodes: int, f: _Facts,
            cc: tuple[int, int] | None) -> bool:
    """The bounds of the layout: the NVLink domains of several hosts, then the links between a node's
    GPUs and its NICs where the domains did not give them.  False where the ceiling is unknown."""
    if nnodes > 1 and not _nvlink_domain(out, lay, hosts, nranks, f, cc):
        return False
    if lay.ppn > 1 and lay.intra is None and not _intra_node(out, lay, hosts, f):
        return False
    if lay.nccl_nodes > 1 and lay.inter is None and not _inter_node(out, lay, hosts, f, cc):
        return False
    if lay.intra is None and lay.inter is None:
        out.unknown = "a single rank moves no data between GPUs"
        return False
    return True


def _algorithm_and_ceiling(out: Ceiling, lay: _Layout, hosts: Sequence[HostTopology], collective: str, nranks: int,
                           f: _Facts, cc: tuple[int, int] | None) -> None:
    """The algorithm (the one given, else the one NCCL would pick) and its ceiling over the bounds."""
    intra, inter = lay.intra, lay.inter
    if f.algorithm:
        algo, source = _canonical_algo(f.algorithm), f.algorithm_source
    else:
        algo, source = _choose_algorithm(hosts, collective, nranks, lay.nccl_nodes, lay.ppn, intra, inter, f.env,
                                         f.nccl_version, cc)
    out.algorithm, out.algorithm_source = algo, source
    value, kind, line, why = _algorithm_ceiling(algo, collective, nranks, lay.nccl_nodes, lay.ppn, intra, inter, cc,
                                                f.nccl_version)
    parts = [b.text for b in (intra, inter) if b is not None]
    if value is None:
        out.unknown = why
        out.reasoning = "; ".join(parts) + lay.unused_fabric
        return
    out.ceiling, out.bound, out.line_rate = value, kind, line
    out.reasoning = "; ".join(parts) + f" -> {why}" + lay.unused_fabric


def expected_ceiling(hosts: Sequence[HostTopology], collective: str, nranks: int, *,
                     log: NcclLogFacts | None = None, algorithm: str | None = None,
                     algorithm_source: str = "NCCL log", env: Mapping[str, str] | None = None,
                     nccl_version: str | None = None, net: str | None = None,
                     tuning_table: Mapping | None = None,
                     host_env: Mapping[str, Mapping[str, str]] | None = None) -> Ceiling:
    """The expected busbw ceiling of `collective` over `nranks` ranks on `hosts` (each restricted
    to the GPUs the job uses, see HostTopology.only).  `log`: what NCCL said (fills in the
    algorithm at the largest size, the network transport, the version and its TUNING table
    where not given).  Without an algorithm: NCCL_ALGO, else the one NCCL's model would pick.
    `host_env`: host -> its ranks' NCCL settings, where gathered: each host's bounds (which NICs
    NCCL_SOCKET_IFNAME / NCCL_IB_HCA pick there, P2P there) are read with its own."""
    f = _facts(collective, log, algorithm, algorithm_source, env, nccl_version, net, tuning_table, host_env)
    nnodes = max(1, len(hosts))
    out = Ceiling(collective=collective, nranks=nranks, nnodes=nnodes)
    if f.tuning_table:
        pred = nccl_table_ceiling(f.tuning_table, collective, nranks, f.algorithm)
        if pred:
            out.nccl_predicted, out.nccl_predicted_text = pred
    if (why := _no_model(collective, nnodes, hosts)) is not None:
        out.unknown = why
        return out
    lay = _Layout(ppn=max(1, nranks // nnodes), nccl_nodes=nnodes)
    cc = min((g.cc for h in hosts for g in h.gpus if g.cc), default=None)
    if _bounds(out, lay, hosts, nranks, nnodes, f, cc):
        _algorithm_and_ceiling(out, lay, hosts, collective, nranks, f, cc)
    return out


def _canonical_algo(name: str) -> str:
    for a in ALGORITHMS:
        if a.lower() == name.strip().lower():
            return a
    return name.strip()


def _choose_algorithm(hosts: Sequence[HostTopology], collective: str, nranks: int, nnodes: int, ppn: int,
                      intra: Bound | None, inter: Bound | None, env: Mapping[str, str], nccl_version: str | None,
                      cc: tuple[int, int] | None) -> tuple[str, str]:
    allowed = allowed_algorithms(env.get("NCCL_ALGO", ""), collective)
    source = "NCCL_ALGO" if allowed is not None else "predicted"
    if collective in POINT_TO_POINT + ROOTED:
        return "P2P", "NCCL's send/recv"
    if collective != "all_reduce":
        return "Ring", source
    candidates = ["Ring"]
    nvls_ok, _ = _nvls_capable(hosts, ppn, env, nccl_version)
    if nnodes == 1 and nvls_ok and intra is not None:
        # NCCL picks NVLS only where its stepped model beats Ring (not on 2-4 Hopper GPUs); the same
        # figure is NVLS's ceiling below (_algorithm_ceiling), so choice and size agree
        nvls, _ = nvls_model(intra.model, ppn, cc, nccl_version)
        if nvls is not None and nvls.busbw > intra.model:
            candidates.append("NVLS")
    # Tree is not predicted: whether NCCL prefers it to Ring on several nodes depends on the bandwidths
    # its graph search settles on (tuning.cc lets a 2-node tree plan up to 2x the ring's NIC bandwidth),
    # which sysfs does not show.  Predicting Ring keeps a tree's extra speed from being called a fault;
    # the verdict names a tree when the busbw passes the NICs' line rate.
    if nnodes > 1 and nvls_ok and cc is not None and cc[0] in NVLS_EFFICIENCY:
        candidates.append("NVLSTree")
    if allowed is not None:
        candidates = [a for a in candidates if a in allowed] or [a for a in ALGORITHMS if a in allowed][:1] \
            or ["Ring"]
    best, best_value = candidates[0], -1.0
    for a in candidates:
        v = _algorithm_ceiling(a, collective, nranks, nnodes, ppn, intra, inter, cc, nccl_version)[0]
        if v is not None and v > best_value:
            best, best_value = a, v
    return best, source


_AlgoCeiling = tuple[float | None, str | None, float | None, str]


def _lower(*bs: tuple[float, Bound]) -> tuple[float, Bound]:
    return min(bs, key=lambda x: x[0])


def _ring_ceiling(algo: str, collective: str, nranks: int, nnodes: int, ppn: int, intra: Bound | None,
                  inter: Bound | None, cc: tuple[int, int] | None, nccl_version: str | None) -> _AlgoCeiling:
    """Ring, PAT (Ring times NCCL's PAT factor) and one node's P2P: the slower bound."""
    v, b = _lower(*[(x.model, x) for x in (intra, inter) if x is not None])
    if algo == "P2P":
        return v, b.kind, b.line_rate, f"{collective}: each GPU's own link, {fmt_gbps(v)} GB/s"
    if algo == "PAT":
        return v * PAT_EFFICIENCY, b.kind, b.line_rate, (
            f"PAT: the slower bound {fmt_gbps(v)} x {PAT_EFFICIENCY} (NCCL's PAT factor) = "
            f"{fmt_gbps(v * PAT_EFFICIENCY)} GB/s")
    return v, b.kind, b.line_rate, f"Ring: the slower bound, {fmt_gbps(v)} GB/s"


def _p2p_ceiling(algo: str, collective: str, nranks: int, nnodes: int, ppn: int, intra: Bound | None,
                 inter: Bound | None, cc: tuple[int, int] | None, nccl_version: str | None) -> _AlgoCeiling:
    """Send/receive across nodes: each GPU's share of its node's NICs (alltoall's part that
    leaves the node), unless the GPU's own link is slower; on one node, as Ring."""
    if inter is None:
        return _ring_ceiling(algo, collective, nranks, nnodes, ppn, intra, inter, cc, nccl_version)
    share, line_share = inter.model / ppn, inter.line_rate / ppn
    if collective == "alltoall":
        # busbw = S/t x (n-1)/n; the part leaving the node, (n-ppn)/n of S, crosses this GPU's NIC share
        k = (nranks - 1) / max(1, nranks - ppn)
        v, line = share * k, line_share * k
        why = (f"alltoall: NIC share per GPU {fmt_gbps(share)} GB/s x (n-1)/(n-ppn) = {fmt_gbps(v)} GB/s "
               f"(alltoall cannot aggregate a node's NICs)")
    else:
        v, line, why = share, line_share, f"sendrecv: one GPU's NIC share, {fmt_gbps(share)} GB/s"
    if intra is not None and intra.model < v:
        return intra.model, intra.kind, intra.line_rate, f"{collective}: the GPU's own link, {fmt_gbps(intra.model)} GB/s"
    return v, inter.kind, line, why


def _nvls_ceiling(algo: str, collective: str, nranks: int, nnodes: int, ppn: int, intra: Bound | None,
                  inter: Bound | None, cc: tuple[int, int] | None, nccl_version: str | None) -> _AlgoCeiling:
    """NVLS: one node's all_reduce through the NVSwitch, which reduces (busbw can pass the line rate)."""
    if intra is None or nnodes > 1 or collective != "all_reduce":
        return None, None, None, "NVLS: no model for this topology" + (
            "" if collective == "all_reduce" else f" and {collective}")
    m, why = nvls_model(intra.model, ppn, cc, nccl_version)
    if m is None:
        return None, None, None, why
    if ppn <= BASEBOARD_GPUS:
        v, text = nvls_baseboard(m, intra.model)
        return v, intra.kind, intra.line_rate, f"{text}; busbw can pass the line rate because the switch reduces"
    return m.busbw, intra.kind, intra.line_rate, (
        f"{m.text}; busbw can pass the line rate because the switch reduces")


def _nvls_tree_ceiling(algo: str, collective: str, nranks: int, nnodes: int, ppn: int, intra: Bound | None,
                       inter: Bound | None, cc: tuple[int, int] | None, nccl_version: str | None) -> _AlgoCeiling:
    """NVLSTree: NVLS inside each node, a tree between the nodes through the NVLS heads' NICs (`nvls_tree_model`);
    the part that binds is named: NVLink within the node (or NVLink domain), or the network between them."""
    if intra is None or inter is None or not inter.ports:
        return None, None, None, "NVLSTree: no model for this topology"
    if collective != "all_reduce":
        return None, None, None, f"NVLSTree: all_reduce only (tuning.cc), not {collective}"
    m, why = nvls_tree_model(intra.model, ppn, inter.ports, inter.port_model, nnodes, cc, nccl_version)
    if m is None:
        return None, None, None, why
    if m.bound == "NVLink":
        return m.busbw, intra.kind, intra.line_rate, m.text(intra.scope)
    return m.busbw, inter.kind, m.graph.channels * inter.port_line, m.text(intra.scope)


def _tree_ceiling(algo: str, collective: str, nranks: int, nnodes: int, ppn: int, intra: Bound | None,
                  inter: Bound | None, cc: tuple[int, int] | None, nccl_version: str | None) -> _AlgoCeiling:
    """Tree across nodes: the NICs (twice on 2 nodes) or the GPUs' links at the tree's efficiency."""
    if inter is None:
        return None, None, None, "Tree on one node: no separate model (NCCL's tree is a chain there)"
    k = 2 if nnodes == 2 else 1
    cands = [(inter.model * k, inter)]
    if intra is not None:
        cands.append((intra.model * TREE_ALLREDUCE_EFFICIENCY, intra))
    v, b = _lower(*cands)
    two = " x 2 (2 nodes: each node is a leaf of one of the two trees)" if k == 2 else ""
    return v, b.kind, b.line_rate, f"Tree: min(intra x {TREE_ALLREDUCE_EFFICIENCY}, NICs{two}) = {fmt_gbps(v)} GB/s"


def _collnet_ceiling(algo: str, collective: str, nranks: int, nnodes: int, ppn: int, intra: Bound | None,
                     inter: Bound | None, cc: tuple[int, int] | None, nccl_version: str | None) -> _AlgoCeiling:
    """CollNet (SHARP): the switch reduces, so each byte crosses a NIC once each way."""
    if inter is None:
        return None, None, None, f"{algo}: needs several nodes"
    cands = [(inter.model * 2, inter)] + ([(intra.model, intra)] if intra is not None else [])
    v, b = _lower(*cands)
    return v, b.kind, b.line_rate, (
        f"{algo} (SHARP): the switch reduces, each byte crosses a NIC once each way: min(NVLink, 2 x NICs) "
        f"= {fmt_gbps(v)} GB/s")


_ALGORITHM_CEILINGS: dict[str, Callable[..., _AlgoCeiling]] = {
    "Ring": _ring_ceiling, "PAT": _ring_ceiling, "P2P": _p2p_ceiling, "NVLS": _nvls_ceiling,
    "NVLSTree": _nvls_tree_ceiling, "Tree": _tree_ceiling, "CollNetDirect": _collnet_ceiling,
    "CollNetChain": _collnet_ceiling,
}


def _algorithm_ceiling(algo: str, collective: str, nranks: int, nnodes: int, ppn: int, intra: Bound | None,
                       inter: Bound | None, cc: tuple[int, int] | None,
                       nccl_version: str | None = None) -> _AlgoCeiling:
    """(ceiling, binding bound's kind, its line rate in the same busbw units, one-line reason)
    for one algorithm."""
    model = _ALGORITHM_CEILINGS.get(algo)
    if model is None:
        return None, None, None, f"no bandwidth model for algorithm {algo}"
    return model(algo, collective, nranks, nnodes, ppn, intra, inter, cc, nccl_version)


# -- NCCL's own table -------------------------------------------------------------------

def nccl_table_ceiling(table: Mapping, collective: str, nranks: int,
                       algorithm: str | None = None) -> tuple[float, str] | None:
    """NCCL's own predicted busbw: the best algBw of its init TUNING table for the collective
    (of `algorithm` if known) times nccl-tests' bus factor.  `table`: {func: {(algo, proto):
    (latency_us, algbw_GBps)}} as the NCCL-log parser gives it."""
    from ..collectives import lookup

    func = NCCL_FUNC.get(collective)
    coll = lookup(collective)
    if func is None or coll is None:
        return None
    row = next((v for k, v in table.items() if str(k).lower() == func.lower()), None)
    if not row:
        return None
    best: tuple[float, str, str] | None = None
    for key, value in row.items():
        a, p = key
        bw = value[1]
        if algorithm and str(a).lower() != algorithm.lower():
            continue
        if bw and bw > 0 and (best is None or bw > best[0]):
            best = (float(bw), str(a), str(p))
    if best is None:
        return None
    factor = coll.bus_bandwidth_factor(nranks)
    v = best[0] * factor
    return v, (f"NCCL's TUNING table: {func} {best[1]}/{best[2]} algBw {fmt_gbps(best[0])} GB/s x bus factor "
               f"{factor:.3f} = {fmt_gbps(v)} GB/s")


def summarise_bound(c: Ceiling) -> str:
    """'370.8 GB/s (NVLink, Ring predicted)' or 'unknown (why)'."""
    if c.ceiling is None:
        return f"unknown ({c.unknown})"
    return f"{fmt_gbps(c.ceiling)} GB/s ({c.bound}, {c.algorithm} {c.algorithm_source})"


__all__ = ["Bound", "Ceiling", "expected_ceiling", "nccl_table_ceiling", "nccl_nvlink_bw", "nccl_pcie_bw",
           "nccl_nic_channel_bw", "nvls_channel_bw", "nvls_channels", "nvls_model", "NvlsModel", "nvls_net_graph",
           "NvlsNetGraph", "nvls_tree_channel_cap", "nvls_tree_model", "NvlsTreeModel", "domain_bound",
           "intra_bound", "inter_bound", "nics_for_nccl", "memory_bandwidth_bound",
           "summarise_bound"]
