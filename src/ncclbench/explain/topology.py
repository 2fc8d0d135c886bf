"""Topology facts of one host: GPUs, NVLink, PCIe, NICs, GPUDirect RDMA, NUMA.

These are the facts the expected ceiling and the traps are computed from, so
each one is either read from the machine (NVML, sysfs) or explicitly unknown
with the reason (`unknown[field] = why`): a missing NVML, an unreadable sysfs
file, a VM that hides NVLink.  Nothing here is guessed; derived values (the
NVLink generation from the compute capability) say what they were derived
from.  The dataclasses round-trip through plain dicts (`to_dict`/`from_dict`)
so they can travel between ranks, into the run's JSON and into the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:
    from ..launch.facts import RankFacts

# NVLink generation and per-link, per-direction line rate (GB/s) by compute
# capability.  NVIDIA's product specifications: P100 4 links x 20 = 80 GB/s,
# V100 6 x 25 = 150, A100 12 x 25 = 300, A40/RTX 3090 4 x 14.0625 = 56.25,
# H100/H200 18 x 25 = 450, B200 18 x 50 = 900 (per direction; nccl #1264,
# nccl-tests #212, Azure AI-benchmarking-guide #7 for B200).
NVLINK_BY_CC: dict[tuple[int, int], tuple[int, float]] = {
    (6, 0): (1, 20.0),
    (7, 0): (2, 25.0),
    (7, 5): (2, 25.0),
    (8, 0): (3, 25.0),
    (8, 6): (3, 14.0625),
    (9, 0): (4, 25.0),
    (10, 0): (5, 50.0),
    (10, 3): (5, 50.0),
}

# NCCL probes this many NVLinks per GPU by SM version (src/graph/xml.cc, v2.28.9-1,
# ncclTopoGetXmlFromGpu: (sm < 60) ? 0 : (sm < 70) ? 4 : (sm < 80) ? 6 : (sm < 90) ? 12 : 18).
def nccl_max_nvlinks(cc: tuple[int, int]) -> int:
    sm = cc[0] * 10 + cc[1]
    return 0 if sm < 60 else 4 if sm < 70 else 6 if sm < 80 else 12 if sm < 90 else 18


# PCIe: GT/s per lane -> generation, and the line encoding of each generation.
PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
PCIE_GTS_BY_GEN = {g: s for s, g in PCIE_GEN_BY_GTS.items()}
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}


def parse_cc(text: str | None) -> tuple[int, int] | None:
    """'9.0' -> (9, 0); None for anything else."""
    if not text:
        return None
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def pcie_line_rate(gen: int | None, width: int | None) -> float | None:
    """Raw per-direction PCIe rate in GB/s: GT/s x lanes x encoding / 8 (Gen4 x16: 31.5)."""
    if not gen or not width or gen not in PCIE_GTS_BY_GEN:
        return None
    return PCIE_GTS_BY_GEN[gen] * width * PCIE_ENCODING[gen] / 8


def memory_bandwidth_gbps(bus_width_bits: int | None, clock_mhz: int | None) -> float | None:
    """Bus width (bits) x memory clock (MHz) x 2 transfers per clock / 8 bits, in GB/s; None unless
    both are positive.  NVML's memory clock is the one whose double gives the data rate for HBM and
    GDDR alike (H200: 6144 bits x 3201 MHz -> 4917 GB/s; RTX 4090: 384 x 10501 -> 1008 GB/s)."""
    if not bus_width_bits or not clock_mhz or bus_width_bits <= 0 or clock_mhz <= 0:
        return None
    return bus_width_bits * clock_mhz * 2 / 8 / 1000


def normalize_bus_id(bus_id: str | bytes | None) -> str | None:
    """NVML's '00000000:18:00.0' and sysfs' '0000:18:00.0' both -> '0000:18:00.0' (lower case)."""
    if bus_id is None:
        return None
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode(errors="replace")
    s = bus_id.strip().lower().rstrip("\x00")
    parts = s.split(":")
    if len(parts) == 3:
        dom, bus, devfn = parts
        try:
            return f"{int(dom, 16):04x}:{bus}:{devfn}"
        except ValueError:
            return s
    if len(parts) == 2:  # 'bus:dev.fn' without a domain
        return f"0000:{s}"
    return s


class _Dataclass(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Any]]


_T = TypeVar("_T", bound=_Dataclass)


def _from(cls: type[_T], d: dict[str, Any]) -> _T:
    """A dataclass from a dict that may carry keys of other versions (stored facts outlive code)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class PcieLink:
    """Current and maximum PCIe generation and width of one device's upstream link.
    `max` is what the link can train to (device and slot), not the device alone."""

    gen: int | None = None
    gen_max: int | None = None
    width: int | None = None
    width_max: int | None = None

    def describe(self) -> str:
        def one(g: int | None, w: int | None) -> str:
            return f"Gen{g if g else '?'} x{w if w else '?'}"
        cur, top = one(self.gen, self.width), one(self.gen_max, self.width_max)
        return cur if cur == top else f"{cur} (max {top})"


@dataclass
class GpuTopology:
    index: int  # NVML index (PCI order; not necessarily the CUDA ordinal)
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None  # '0000:18:00.0'
    compute_capability: str | None = None  # '9.0'
    nvlink_active: int | None = None  # links NVML reports ENABLED
    nvlink_down: list[int] = field(default_factory=list)  # link indices NVML reports DISABLED
    nvlink_remote: str | None = None  # 'switch', 'gpu', 'mixed', 'cpu', 'none', 'unknown'
    nvlink_peers: dict[str, int] = field(default_factory=dict)  # direct links: remote GPU bus id -> links
    nvlink_generation: int | None = None  # from the compute capability (NVLINK_BY_CC)
    nvlink_rate: float | None = None  # GB/s per link per direction, from the generation
    nvml_nvlink_speed_mbps: int | None = None  # NVML field 90, where supported
    nvml_nvlink_count: int | None = None  # NVML field 91, where supported
    pcie: PcieLink = field(default_factory=PcieLink)
    pstate: int | None = None  # 0 = P0 (busy); idle GPUs drop the PCIe generation to save power
    numa_node: int | None = None
    memory_bus_width: int | None = None  # bits (nvmlDeviceGetMemoryBusWidth)
    # NVLink fabric (nvmlDeviceGetGpuFabricInfoV): GPUs of several hosts that share a non-zero cluster
    # UUID and clique id, with the fabric state 'completed', form one NVLink domain (GB200/GB300 NVL racks;
    # NCCL's ncclMnnvlCheck, src/mnnvl.cc v2.28.9-1).  A zero UUID: NVSwitch in one box, no MNNVL.
    fabric_cluster_uuid: str | None = None  # 32 hex digits
    fabric_clique_id: int | None = None
    fabric_state: str | None = None  # 'not supported', 'not started', 'in progress', 'completed'
    fabric_status: int | None = None  # NVML return code of the fabric probe (0: success)
    memory_clock_max_mhz: int | None = None  # nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)
    unknown: dict[str, str] = field(default_factory=dict)  # field -> why it is unknown

    @property
    def cc(self) -> tuple[int, int] | None:
        return parse_cc(self.compute_capability)

    @property
    def memory_bandwidth(self) -> float | None:
        """Peak device-memory bandwidth in GB/s: bus width x max memory clock x 2 (DDR) / 8
        (H100 SXM: 5120 bits x 2619 MHz -> 3352 GB/s, NVIDIA's 3.35 TB/s).  None when either
        NVML figure is unknown (`unknown['memory_bus_width' / 'memory_clock_max_mhz']` says why)."""
        return memory_bandwidth_gbps(self.memory_bus_width, self.memory_clock_max_mhz)

    @property
    def nvlink_line_rate(self) -> float | None:
        """Active links x per-link rate, GB/s per direction (H100: 18 x 25 = 450)."""
        if self.nvlink_active is None or self.nvlink_rate is None:
            return None
        return self.nvlink_active * self.nvlink_rate

    @property
    def fabric_domain(self) -> tuple[str, int] | None:
        """(cluster UUID, clique id) when this GPU has joined a multi-node NVLink fabric, else None."""
        if self.fabric_state != "completed" or self.fabric_status not in (None, 0):
            return None
        if not self.fabric_cluster_uuid or not self.fabric_cluster_uuid.strip("0-"):
            return None
        return self.fabric_cluster_uuid, self.fabric_clique_id or 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GpuTopology:
        d = dict(d)
        d["pcie"] = _from(PcieLink, d.get("pcie") or {})
        return _from(cls, d)


@dataclass
class NicPort:
    """One network port NCCL could use: an RDMA port (InfiniBand, RoCE, EFA) or an Ethernet interface."""

    name: str  # 'mlx5_0' (RDMA device) or 'eth0' / 'hsn0' (net interface)
    port: int | None = None  # RDMA port number
    kind: str = "unknown"  # 'ib', 'roce', 'efa', 'slingshot', 'ethernet', 'unknown'
    state: str | None = None  # 'ACTIVE', 'DOWN', 'INIT' (RDMA) or 'up', 'down' (net)
    rate_gbps: float | None = None  # Gb/s (sysfs rate or speed)
    netdev: str | None = None  # the net interface of a RoCE/EFA port, or the interface itself
    pci_bus_id: str | None = None
    numa_node: int | None = None
    pcie: PcieLink = field(default_factory=PcieLink)
    unknown: dict[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return (self.state or "").upper() in ("ACTIVE", "UP")

    @property
    def rdma(self) -> bool:
        return self.kind in ("ib", "roce", "efa", "slingshot")

    @property
    def label(self) -> str:
        return f"{self.name}:{self.port}" if self.port is not None else self.name

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NicPort:
        d = dict(d)
        d["pcie"] = _from(PcieLink, d.get("pcie") or {})
        return _from(cls, d)


@dataclass
class Locality:
    """PCIe distance between two devices, in nvidia-smi topo -m's words (PIX, PXB, PHB, NODE, SYS)."""

    a: str  # GPU index as text, or a NIC name
    b: str
    path: str  # 'PIX', 'PXB', 'PHB', 'NODE', 'SYS', or 'unknown'
    source: str = ""  # 'nvml' (GPU pairs) or 'sysfs' (PCI paths)


@dataclass
class GdrFacts:
    """GPUDirect RDMA: the kernel side NCCL checks (src/transport/net_ib.cc, v2.28.9-1,
    ibGdrSupportInitOnce: /sys/kernel/mm/memory_peers/nv_mem/version,
    .../nv_mem_nc/version, /sys/module/nvidia_peermem/version).  DMA-BUF, the other
    route, is probed by NCCL through ibverbs and is not visible from sysfs."""

    peermem: bool | None = None
    evidence: str = ""
    dmabuf: bool | None = None
    unknown: dict[str, str] = field(default_factory=dict)


@dataclass
class HostTopology:
    host: str
    gpus: list[GpuTopology] = field(default_factory=list)
    nics: list[NicPort] = field(default_factory=list)
    gpu_gpu: list[Locality] = field(default_factory=list)
    gpu_nic: list[Locality] = field(default_factory=list)
    gdr: GdrFacts = field(default_factory=GdrFacts)
    cpu_vendor: str | None = None  # 'GenuineIntel', 'AuthenticAMD', ... (NCCL's P2P level depends on it)
    gpus_in_box: int | None = None  # set by only(): how many GPUs the host has (NICs are shared among them)
    interfaces: dict[str, str] = field(default_factory=dict)  # every net interface -> operstate (incl. virtual)
    unknown: dict[str, str] = field(default_factory=dict)  # 'nvml', 'nics', ... -> why

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostTopology:
        d = dict(d)
        d["gpus"] = [GpuTopology.from_dict(g) for g in d.get("gpus", [])]
        d["nics"] = [NicPort.from_dict(n) for n in d.get("nics", [])]
        d["gpu_gpu"] = [_from(Locality, x) for x in d.get("gpu_gpu", [])]
        d["gpu_nic"] = [_from(Locality, x) for x in d.get("gpu_nic", [])]
        d["gdr"] = _from(GdrFacts, d.get("gdr") or {})
        return _from(cls, d)

    def only(self, bus_ids: list[str]) -> HostTopology:
        """A copy with just the GPUs a job uses, matched by PCI address.  Accepts preflight's
        'domain:bus:device' as well as full bus ids; the ceiling must be computed over the
        GPUs that run, not every GPU in the box."""
        wanted = {(normalize_bus_id(b) or "").split(".")[0] for b in bus_ids}
        keep = [g for g in self.gpus if (g.pci_bus_id or "").split(".")[0] in wanted]
        idx = {str(g.index) for g in keep}
        return HostTopology(
            host=self.host, gpus=keep, nics=list(self.nics),
            gpu_gpu=[x for x in self.gpu_gpu if x.a in idx and x.b in idx],
            gpu_nic=[x for x in self.gpu_nic if x.a in idx], gdr=self.gdr,
            cpu_vendor=self.cpu_vendor, gpus_in_box=self.gpus_in_box or len(self.gpus),
            interfaces=dict(self.interfaces), unknown=dict(self.unknown))

    def rdma_ports(self) -> list[NicPort]:
        return [n for n in self.nics if n.rdma]


def hosts_from_gathered(gathered: list[tuple[dict | None, str] | None]) -> tuple[list[HostTopology], list[str]]:
    """The hosts' facts as ranks sent them (`gather_topology.read_topology`; None from ranks that did not
    read), each host once, and the reasons some could not be read."""
    hosts: dict[str, HostTopology] = {}
    whys: list[str] = []
    for item in gathered:
        if item is None:
            continue
        facts, why = item
        if facts is None:
            if why and why not in whys:
                whys.append(why)
            continue
        h = HostTopology.from_dict(facts)
        hosts.setdefault(h.host, h)
    return list(hosts.values()), whys


def hosts_in_use(topologies: Sequence[HostTopology], facts: Sequence[RankFacts],
                 gpus_per_rank: int = 1) -> list[HostTopology]:
    """Each host's topology restricted to the GPUs its ranks use (matched by PCI address, since
    NVML numbers GPUs in PCI order and CUDA by its own), in the order hosts first appear."""
    from ..launch.preflight_checks import assigned_gpus

    used: dict[str, list[str]] = {}
    for f, ordinals in zip(facts, assigned_gpus(facts, gpus_per_rank)):
        for o in ordinals:
            if 0 <= o < len(f.gpus):
                used.setdefault(f.host_label, []).append(f.gpus[o].pci)
    by_host = {t.host: t for t in topologies}
    return [by_host[h].only(ids) for h, ids in used.items() if h in by_host]


# -- the banner's lines ---------------------------------------------------------------------

def _counts(items: list[str]) -> str:
    seen: dict[str, int] = {}
    for it in items:
        seen[it] = seen.get(it, 0) + 1
    return ", ".join(f"{n}x {k}" if n > 1 else k for k, n in seen.items())


def _gpu_summary(h: HostTopology) -> tuple[str, list[str]]:
    """('8x NVIDIA H100 ... (sm 9.0), NVSwitch, NVLink4 18 links x 25 GB/s = 450 GB/s/GPU, PCIe Gen5 x16',
    [deviations per GPU])."""
    if not h.gpus:
        return f"no GPU facts ({h.unknown.get('nvml', 'none found')})", []
    names = _counts([f"{g.name or '?'} (sm {g.compute_capability or '?'})" for g in h.gpus])
    parts = [names]
    actives = [g.nvlink_active for g in h.gpus]
    top = max((a for a in actives if a is not None), default=None)
    g0 = next((g for g in h.gpus if g.nvlink_active == top), h.gpus[0])
    if top is None:
        parts.append(f"NVLink unknown ({g0.unknown.get('nvlink_active', 'not read')})")
    elif top == 0:
        parts.append("no active NVLink")
    else:
        remote = {"switch": "NVSwitch", "gpu": "direct NVLink", "mixed": "NVLink to GPUs and switches"}.get(
            g0.nvlink_remote or "", "NVLink")
        gen = f"NVLink{g0.nvlink_generation}" if g0.nvlink_generation else "NVLink"
        rate = f" x {g0.nvlink_rate:g} GB/s = {top * g0.nvlink_rate:g} GB/s/GPU" if g0.nvlink_rate else ""
        parts.append(f"{remote}, {gen} {top} links{rate}")
        domains = {g.fabric_domain for g in h.gpus}
        if len(domains) == 1 and None not in domains:
            uuid, clique = next(iter(d for d in domains if d is not None))
            parts.append(f"NVLink fabric {uuid[:8]}.. clique {clique}")
    pcie = _counts([g.pcie.describe() for g in h.gpus])
    parts.append(f"PCIe {pcie}")
    dev: list[str] = []
    for g in h.gpus:
        notes = []
        if g.nvlink_active is not None and top and g.nvlink_active < top:
            notes.append(f"NVLink {g.nvlink_active}/{top} links")
        if g.nvlink_down and top:
            notes.append(f"links {','.join(map(str, g.nvlink_down))} down")
        if notes:
            dev.append(f"GPU{g.index} {', '.join(notes)}")
    return ", ".join(parts), dev


def _nic_summary(h: HostTopology) -> str:
    if not h.nics:
        why = h.unknown.get("nics")
        return "no NIC found" + (f" ({why})" if why else "")
    rdma = h.rdma_ports()
    shown = rdma or [n for n in h.nics if n.kind in ("ethernet", "virtual")]
    kinds = {"ib": "InfiniBand", "roce": "RoCE", "efa": "EFA", "slingshot": "Slingshot", "ethernet": "Ethernet"}
    items = [f"virtual {n.name} (speed unknown) {n.state or '?'}" if n.kind == "virtual" else
             f"{kinds.get(n.kind, n.kind)} {n.rate_gbps:g} Gb/s {n.state or '?'}" if n.rate_gbps
             else f"{kinds.get(n.kind, n.kind)} ? Gb/s {n.state or '?'}" for n in shown]
    text = _counts(items)
    if rdma:
        g = h.gdr
        gdr = ("GPUDirect RDMA: nvidia_peermem loaded" if g.peermem else
               "GPUDirect RDMA: nvidia_peermem not loaded (DMA-BUF unknown)" if g.peermem is False else
               f"GPUDirect RDMA unknown ({g.unknown.get('peermem', '?')})")
        text += f"; {gdr}"
        paths = _counts(sorted(x.path for x in h.gpu_nic if _nearest(h, x)))
        if paths:
            text += f"; nearest NIC per GPU: {paths}"
    return text


def _nearest(h: HostTopology, loc: Locality) -> bool:
    """True for the closest NIC of each GPU (to summarise GPU<->NIC locality in one phrase)."""
    order = ["PIX", "PXB", "PHB", "NODE", "SYS"]
    mine = [x for x in h.gpu_nic if x.a == loc.a and x.path in order]
    if loc.path not in order or not mine:
        return False
    best = min(order.index(x.path) for x in mine)
    first = next(x for x in mine if order.index(x.path) == best)
    return first is loc


def format_topology_lines(hosts: list[HostTopology]) -> list[str]:
    """The banner's `#` lines: two per distinct host layout, plus one per GPU that deviates
    (links down, fewer links).  Hosts with the same summary share one pair of lines."""
    groups: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
    for h in hosts:
        gpu, dev = _gpu_summary(h)
        groups.setdefault((gpu, _nic_summary(h), tuple(dev)), []).append(h.host)
    lines = []
    for (gpu, nic, deviations), names in groups.items():
        who = names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more host(s) alike"
        lines.append(f"# Topology {who}: {gpu}")
        lines.append(f"#   NICs: {nic}")
        for d in deviations:
            lines.append(f"#   {d}")
    return lines


def format_topology_report(host: HostTopology) -> list[str]:
    """Everything known about one host, one device per line (for `ncclbench topo`)."""
    out = [f"# Host {host.host}"]
    for key, why in host.unknown.items():
        out.append(f"#   unknown {key}: {why}")
    for g in host.gpus:
        nv = ("unknown" if g.nvlink_active is None else
              f"{g.nvlink_active} active" + (f" x {g.nvlink_rate:g} GB/s" if g.nvlink_rate and g.nvlink_active else "") +
              (f" to {g.nvlink_remote}" if g.nvlink_remote and g.nvlink_active else "") +
              (f", down: {','.join(map(str, g.nvlink_down))}" if g.nvlink_down else ""))
        nvml = ""
        if g.nvml_nvlink_speed_mbps is not None or g.nvml_nvlink_count is not None:
            nvml = f" (NVML: {g.nvml_nvlink_count} links at {g.nvml_nvlink_speed_mbps} MB/s)"
        out.append(f"GPU{g.index} {g.pci_bus_id or '?'} {g.name or '?'} sm {g.compute_capability or '?'}: "
                   f"NVLink {nv}{nvml}; PCIe {g.pcie.describe()}; P{g.pstate if g.pstate is not None else '?'}; "
                   f"NUMA {g.numa_node if g.numa_node is not None else '?'}"
                   + (f"; memory {g.memory_bandwidth:.0f} GB/s ({g.memory_bus_width}-bit x "
                      f"{g.memory_clock_max_mhz} MHz x 2)" if g.memory_bandwidth else ""))
        if g.fabric_state is not None:
            fab = g.fabric_domain
            out.append(f"    NVLink fabric: {g.fabric_state}" + (
                f", cluster {fab[0]} clique {fab[1]}" if fab else
                " (no multi-node NVLink domain: zero cluster UUID or not completed)"))
        for k, why in g.unknown.items():
            out.append(f"    unknown {k}: {why}")
    for n in host.nics:
        out.append(f"NIC {n.label} ({n.kind}{', ' + n.netdev if n.netdev and n.netdev != n.name else ''}) "
                   f"{n.state or '?'} {n.rate_gbps if n.rate_gbps is not None else '?'} Gb/s, "
                   f"{n.pci_bus_id or '?'}, PCIe {n.pcie.describe()}, "
                   f"NUMA {n.numa_node if n.numa_node is not None else '?'}")
    gdr = host.gdr
    out.append(f"GPUDirect RDMA: peermem {'loaded' if gdr.peermem else 'not loaded' if gdr.peermem is False else 'unknown'}"
               f"{' (' + gdr.evidence + ')' if gdr.evidence else ''}; DMA-BUF "
               f"{'yes' if gdr.dmabuf else 'no' if gdr.dmabuf is False else 'unknown'}")
    if host.gpu_nic:
        nic_names = list(dict.fromkeys(x.b for x in host.gpu_nic))
        out.append("GPU\\NIC " + " ".join(f"{n:>8}" for n in nic_names))
        for gi in dict.fromkeys(x.a for x in host.gpu_nic):
            row = {x.b: x.path for x in host.gpu_nic if x.a == gi}
            out.append(f"GPU{gi:<4}" + " ".join(f"{row.get(n, '-'):>8}" for n in nic_names))
    return out
