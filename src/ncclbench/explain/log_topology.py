"""The topology a log states about its own run, and what public board facts add to it.

An imported nccl-tests log carries no `# Topology` lines, but it says a lot:
nccl-tests' device lines (`#  Rank  3 Group  0 Pid 1234 on node1 device  3
[0000:3b:00] NVIDIA H100 80GB HBM3`) give each rank's host, GPU model and PCI
id; NCCL's own lines give its rank and node counts (`nRanks 16 nNodes 2`),
the hosts in their prefixes, every channel's transport and the network; a
pasted launch line gives hosts and NCCL settings.  Each fact keeps its
source; a fact no line supports stays unknown (the old "single-node run"
for a 16-rank two-host log came from treating "no topology" as one node).

Link facts (NVLink count and rate, PCIe generation) are never in a log.
Where the GPU model alone decides the board -- an SXM part only ships on
NVIDIA's HGX/DGX baseboards with NVSwitch, a PCIe part is a card in a PCIe
slot -- `assumed_hosts` builds the hosts' facts from NVIDIA's published
board specifications, marked as an assumption with what it rests on, so a
ceiling can be computed and the verdict says it is assumed.  Link states
(a link down, a PCIe link trained low) cannot be assumed: those checks stay
"not checked".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.results import DeviceInfo
from .launch_line import LaunchFacts
from .nccl_log import NcclLogFacts
from .topology import GpuTopology, HostTopology, NicPort, PcieLink


@dataclass(frozen=True)
class Board:
    """Published facts of the board a GPU model ships on (NVIDIA's datasheets)."""

    pattern: str  # regex on nccl-tests' GPU name
    label: str  # what the assumption says
    cc: str
    nvswitch_links: int  # 0: no NVSwitch (a PCIe card)
    nvlink_generation: int | None
    nvlink_rate: float | None  # GB/s per link per direction
    pcie_gen: int
    source: str


# NVIDIA datasheets: HGX H100/H200 (18 NVLink4 links per GPU, 900 GB/s bidirectional, NVSwitch), H800 SXM
# (8 NVLink links, 400 GB/s), H20 (900 GB/s NVLink), HGX A100 (12 NVLink3, 600 GB/s), A800 SXM (400 GB/s:
# 8 links), DGX-2 / HGX-2 V100 (6 NVLink2 links into NVSwitch), HGX B200 (18 NVLink5, 1.8 TB/s); the PCIe
# parts' host interface (H100 PCIe Gen5 x16, A100 PCIe / L40S / L4 / A10 / A40 / RTX 3090/4090 Gen4 x16,
# T4 / V100 PCIe Gen3 x16).  Order matters: the first match wins.
BOARDS: tuple[Board, ...] = (
    Board(r"GB200|GB300", "a GB200/GB300 NVL rack (multi-node NVLink)", "10.0", 18, 5, 50.0, 5,
          "NVIDIA GB200 NVL72 specifications"),
    Board(r"\bB200|\bB100", "an HGX B200 board: NVSwitch, 18 NVLink5 links x 50 GB/s per GPU", "10.0", 18, 5, 50.0,
          5, "NVIDIA HGX B200 datasheet (1.8 TB/s NVLink per GPU)"),
    Board(r"H100 PCIe|H100 NVL|H800 PCIe", "a PCIe card (Gen5 x16), no NVSwitch", "9.0", 0, None, None, 5,
          "NVIDIA H100 PCIe datasheet"),
    Board(r"H800", "an HGX H800 board: NVSwitch, 8 NVLink4 links x 25 GB/s per GPU", "9.0", 8, 4, 25.0, 5,
          "NVIDIA H800 SXM (400 GB/s NVLink)"),
    Board(r"H100|H200|H20\b|GH200", "an HGX H100/H200 board: NVSwitch, 18 NVLink4 links x 25 GB/s per GPU", "9.0",
          18, 4, 25.0, 5, "NVIDIA HGX H100/H200 datasheet (900 GB/s NVLink per GPU)"),
    Board(r"A100.*PCI|A100 80GB PCIe|A800.*PCI", "a PCIe card (Gen4 x16), no NVSwitch", "8.0", 0, None, None, 4,
          "NVIDIA A100 PCIe datasheet"),
    Board(r"A800", "an HGX A800 board: NVSwitch, 8 NVLink3 links x 25 GB/s per GPU", "8.0", 8, 3, 25.0, 4,
          "NVIDIA A800 SXM (400 GB/s NVLink)"),
    Board(r"A100", "an HGX A100 board: NVSwitch, 12 NVLink3 links x 25 GB/s per GPU", "8.0", 12, 3, 25.0, 4,
          "NVIDIA HGX A100 datasheet (600 GB/s NVLink per GPU)"),
    Board(r"V100-SXM3|V100-SXM2-32GB-H|Tesla V100-SXM3", "an HGX-2 / DGX-2 board: NVSwitch, 6 NVLink2 links x 25 GB/s",
          "7.0", 6, 2, 25.0, 3, "NVIDIA DGX-2 datasheet"),
    Board(r"L40S|L40\b|L4\b|A10G?\b|A40|A30|RTX 3090|RTX 4090|RTX A6000|RTX 6000 Ada|A6000",
          "a PCIe card (Gen4 x16), no NVSwitch", "8.6", 0, None, None, 4, "the card's datasheet (PCIe Gen4 x16)"),
    Board(r"Tesla T4|\bT4\b|V100-PCIE|V100 PCIe|P100-PCIE", "a PCIe card (Gen3 x16), no NVSwitch", "7.5", 0, None,
          None, 3, "the card's datasheet (PCIe Gen3 x16)"),
)
# Datacenter GPUs: between two hosts of these a fabric of >= 100 Gb/s RDMA per node is the norm
# (NCCL's own NET_BW default is 12 GB/s, 100 Gb/s); a few GB/s between them is TCP-socket territory.
DATACENTER = re.compile(r"A100|A800|H100|H800|H200|H20\b|GH200|B200|B100|GB200|GB300|V100|A30|L40S")
# Compute capability of the PCIe cards that share one `Board` row (NVIDIA's CUDA GPUs list).
CC_BY_MODEL = ((re.compile(r"A10G?\b|A40|RTX 3090|A6000|RTX A"), "8.6"), (re.compile(r"L40|L4\b|RTX 4090|Ada"), "8.9"),
               (re.compile(r"A30"), "8.0"), (re.compile(r"T4\b"), "7.5"), (re.compile(r"V100"), "7.0"),
               (re.compile(r"P100"), "6.0"))


def _cc(model: str | None, board: Board) -> str:
    return next((cc for regex, cc in CC_BY_MODEL if model and regex.search(model)), board.cc)


@dataclass
class LogHost:
    name: str
    ranks: list[int] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)  # model per rank, as nccl-tests printed it
    bus_ids: list[str] = field(default_factory=list)


@dataclass
class LogTopology:
    """What the log says about the job's layout, each count with its source; None: unknown."""

    hosts: list[LogHost] = field(default_factory=list)
    nranks: int | None = None
    nranks_source: str = ""
    nnodes: int | None = None
    nnodes_source: str = ""
    gpu_model: str | None = None
    launch: LaunchFacts | None = None
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* from NCCL's ENV lines and the launch line
    env_source: dict[str, str] = field(default_factory=dict)
    board: Board | None = None
    assumptions: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @property
    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts]

    @property
    def ranks_per_host(self) -> int | None:
        if self.nranks and self.nnodes and self.nranks >= self.nnodes:
            return max(1, self.nranks // self.nnodes)
        return None

    def lines(self) -> list[str]:
        """`#` lines: the layout and where each part comes from, the assumption, the launch line."""
        out = []
        if self.nnodes is not None:
            names = self.host_names
            where = f" ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})" if names else ""
            per = f", {self.ranks_per_host} rank(s) per host" if self.ranks_per_host else ""
            out.append(f"# Topology from the log: {self.nnodes} host(s){where}{per}, {self.nranks or '?'} rank(s) "
                       f"[hosts: {self.nnodes_source}; ranks: {self.nranks_source or 'unknown'}]"
                       + (f"; GPU {self.gpu_model}" if self.gpu_model else "; GPU model unknown"))
        else:
            out.append(f"# Topology from the log: hosts unknown ({'; '.join(self.unknown) or 'no device line'})"
                       + (f"; {self.nranks} rank(s) [{self.nranks_source}]" if self.nranks else "")
                       + (f"; GPU {self.gpu_model}" if self.gpu_model else ""))
        for a in self.assumptions:
            out.append(f"#   assumed: {a}")
        if self.launch is not None:
            out.append(f"#   launch line: {self.launch.describe()}")
        shown = {k: v for k, v in self.env.items()  # NCCL_VERSION: a container image's label, not a setting
                 if k not in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_VERSION")}
        if shown:
            by_source: dict[str, list[str]] = {}
            for k, v in shown.items():
                by_source.setdefault(self.env_source.get(k, "?"), []).append(f"{k}={v}")
            out.append("#   NCCL settings: " + "; ".join(f"{' '.join(kv)} ({src})" for src, kv in by_source.items()))
        with_ids = [h for h in self.hosts if any(h.bus_ids)]
        if with_ids:
            out.append("#   GPUs by PCI id: " + "; ".join(
                f"{h.name} " + " ".join(f"r{r}={b}" for r, b in list(zip(h.ranks, h.bus_ids))[:8])
                + (" ..." if len(h.ranks) > 8 else "") for h in with_ids[:3]) + ("; ..." if len(with_ids) > 3 else ""))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": [h.__dict__ for h in self.hosts], "nranks": self.nranks, "nranks_source": self.nranks_source,
                "nnodes": self.nnodes, "nnodes_source": self.nnodes_source, "gpu_model": self.gpu_model,
                "launch": None if self.launch is None else self.launch.__dict__, "env": dict(self.env),
                "env_source": dict(self.env_source), "board": None if self.board is None else self.board.label,
                "assumptions": list(self.assumptions), "unknown": list(self.unknown)}


def board_of(model: str | None) -> Board | None:
    if not model:
        return None
    return next((b for b in BOARDS if re.search(b.pattern, model)), None)


def is_datacenter(model: str | None) -> bool:
    return bool(model and DATACENTER.search(model))


def _hosts_from_devices(t: LogTopology, devices: Sequence[DeviceInfo]) -> None:
    """The hosts, their ranks and GPUs from nccl-tests' device lines (first group only), and the
    GPU model where all ranks name one."""
    first_group = devices[0].group if devices else 0
    by_host: dict[str, LogHost] = {}
    for d in devices:
        if d.group != first_group:
            continue
        h = by_host.setdefault(d.hostname, LogHost(d.hostname))
        h.ranks.append(d.rank)
        h.gpus.append(d.device_info.strip())
        h.bus_ids.append(d.device_hex)
    t.hosts = list(by_host.values())
    models = list(dict.fromkeys(g for h in t.hosts for g in h.gpus if g))
    if len(models) == 1:
        t.gpu_model = models[0]
    elif models:
        t.unknown.append(f"GPU models differ between ranks: {', '.join(models)}")


def _independent_jobs(t: LogTopology, devices: Sequence[DeviceInfo]) -> bool:
    """Whether every process printed its own banner and rank 0: an nccl-tests built without MPI=1
    under a launcher runs one independent job per process (then the counts say so and nothing
    else is read)."""
    first_group = devices[0].group if devices else 0
    firsts = [(d.rank, d.hostname, d.pid) for d in devices if d.group == first_group]
    twice = sorted({r for r, _, _ in firsts if sum(1 for x in firsts if x[0] == r) > 1})
    if not (twice and len({(h, p) for r, h, p in firsts if r == twice[0]}) > 1):
        return False
    t.nranks, t.nranks_source = len({(h, p) for r, h, p in firsts if r == twice[0]}) and 1, (
        f"rank {twice[0]} printed by {len([x for x in firsts if x[0] == twice[0]])} processes: each ran "
        "alone (nccl-tests built without MPI=1, started by a launcher); every figure is one process's own")
    t.nnodes, t.nnodes_source = len(t.hosts), "nccl-tests' device lines (each process ran alone)"
    t.unknown.append(t.nranks_source)
    t.board = board_of(t.gpu_model)
    return True


def _launched_ranks(launch: LaunchFacts | None) -> tuple[int, str] | None:
    """(ranks, source) the launch line starts: -np x -g x -t, or one process's -g x -t."""
    if launch is not None and launch.nprocs:
        return (launch.nprocs * (launch.ngpus or 1) * (launch.nthreads or 1),
                "the launch line (-np" + (" x -g" if launch.ngpus else "") + ")")
    if launch is not None and launch.launcher is None and launch.ngpus:
        return (launch.ngpus * (launch.nthreads or 1), "the launch line (one process, -g)")
    return None


def _count_ranks(t: LogTopology, devices: Sequence[DeviceInfo], log: NcclLogFacts | None,
                 launch: LaunchFacts | None, table_nranks: int | None) -> bool:
    """The rank count: nccl-tests' device lines list every rank; else NCCL's own count; the launch
    line where it starts more (the paste lost some); else the table's ratios.  Returns whether the
    device lines are partial."""
    partial = False
    if devices:
        t.nranks, t.nranks_source = sum(len(h.ranks) for h in t.hosts), "nccl-tests' device lines"
    if log is not None and log.nranks:
        if t.nranks is None:
            t.nranks, t.nranks_source = log.nranks, "NCCL's comm lines (nRanks)"
        elif t.nranks != log.nranks:
            t.unknown.append(f"the device lines list {t.nranks} rank(s), NCCL's comm lines {log.nranks} "
                             "(several communicators, -g or NCCL_TESTS_SPLIT)")
    launched = _launched_ranks(launch)
    if launched is not None and (t.nranks is None or launched[0] > t.nranks):
        if t.nranks is not None:
            t.unknown.append(f"the device lines show {t.nranks} of the {launched[0]} ranks the launch line starts "
                             "(the paste lost some): hosts counted from them are a lower bound")
            partial = True
        t.nranks, t.nranks_source = launched
    if t.nranks is None and table_nranks:
        t.nranks, t.nranks_source = table_nranks, "the table's busbw/algbw and size/count ratios"
    return partial


def _count_hosts(t: LogTopology, devices: Sequence[DeviceInfo], log: NcclLogFacts | None,
                 launch: LaunchFacts | None, partial: bool) -> None:
    """The host count: NCCL's nNodes is its own count (unless one host runs processes NCCL takes for
    nodes); else the device lines; else the launch line; else the distinct hosts in NCCL's line
    prefixes (a lower bound when only some ranks logged)."""
    names = set(t.host_names) | set(log.hosts if log is not None else [])
    split = (log is not None and (log.nnodes or 0) > 1 and len(names) == 1 and bool(log.p2p_disabled)
             and bool(log.shm_disabled) and "NCCL_HOSTID" not in log.env)
    if split and log is not None:
        t.nnodes, t.nnodes_source = 1, "one host name in the device lines and NCCL's own lines"
        t.unknown.append(f"NCCL counts {log.nnodes} nodes of {log.local_ranks or '?'} rank(s) each on host "
                         f"{next(iter(names))}: with P2P and SHM both off it treats each process as its own node")
    elif log is not None and log.nnodes:
        t.nnodes, t.nnodes_source = log.nnodes, "NCCL's comm lines (nNodes)"
        if t.hosts and len(t.hosts) != log.nnodes:
            t.unknown.append(f"the device lines name {len(t.hosts)} host name(s), NCCL counts {log.nnodes} node(s) "
                             "(containers with one host name, or NCCL_HOSTID)")
    elif t.hosts and not partial:
        t.nnodes, t.nnodes_source = len(t.hosts), "nccl-tests' device lines"
    elif launch is not None and (launch.hosts or launch.nnodes):
        t.nnodes = launch.nnodes or len(launch.hosts)
        t.nnodes_source = "the launch line"
        seen = {h.name: h for h in t.hosts}
        t.hosts = [seen.get(name, LogHost(name)) for name in launch.hosts] or t.hosts
    elif launch is not None and launch.launcher is None and launch.ngpus and not devices:
        t.nnodes, t.nnodes_source = 1, "the launch line (one process)"
    elif t.hosts:
        pass  # some ranks' device lines are missing: their hosts are unknown
    elif log is not None and len(log.hosts) > 1:
        t.nnodes, t.nnodes_source = len(log.hosts), "the host names in NCCL's lines (at least)"
        t.hosts = [LogHost(name) for name in log.hosts]
    elif not partial:
        t.unknown.append("no device line, no NCCL node count, no launch line naming hosts"
                         + (f" (NCCL's lines come from {log.hosts[0]} only)" if log is not None and log.hosts else ""))
    if not t.hosts and log is not None and log.hosts and t.nnodes == len(log.hosts):
        t.hosts = [LogHost(name) for name in log.hosts]


def _collect_env(t: LogTopology, log: NcclLogFacts | None, launch: LaunchFacts | None,
                 run_env: Mapping[str, str] | None) -> None:
    """The environment NCCL read, then what the launch line passed, then the run's own, each
    setting from the first that has it."""
    differ = {m.group(1) for u in (log.unparsed if log is not None else [])
              if (m := re.match(r"(NCCL_\w+) reported with different values", u))}
    for k, v in (log.env if log is not None else {}).items():
        t.env[k], t.env_source[k] = v, "NCCL's ENV line"
        if k in differ:  # per host or per rank (NCCL_HOSTID): the first value is not the job's
            t.env[k], t.env_source[k] = f"{v},...", "NCCL's ENV lines, different per rank"
    if launch is not None:
        for k, v in launch.env.items():
            if k.startswith("NCCL_") and k not in t.env:
                t.env[k], t.env_source[k] = v, "the launch line"
    for k, v in (run_env or {}).items():
        if k.startswith("NCCL_") and k not in t.env:
            t.env[k], t.env_source[k] = v, "the run's environment"


def _board_assumption(t: LogTopology, log: NcclLogFacts | None) -> None:
    """The published board of the GPU model, with the links NCCL's topology lines give where it
    printed them."""
    t.board = board_of(t.gpu_model)
    if t.board is not None and log is not None and log.topo_gpus:
        nvl = sorted({g["nvl_switch_bw"] for g in log.topo_gpus if g.get("nvl_switch_bw")})
        pci = sorted({g["pci_bw"] for g in log.topo_gpus if g.get("pci_bw")})
        t.assumptions.append(f"{t.gpu_model} ({t.board.source}) with the links NCCL's own topology lines give: "
                             + (f"NVL[{'/'.join(f'{x:g}' for x in nvl)}] to the NVSwitch" if nvl else "no NVLink")
                             + (f", PCI[{'/'.join(f'{x:g}' for x in pci)}]" if pci else ""))
    elif t.board is not None:
        t.assumptions.append(f"{t.gpu_model} -> {t.board.label} ({t.board.source}; the log states no link facts, "
                             "so link states are not checked)")
    elif t.gpu_model:
        t.unknown.append(f"no published board facts for {t.gpu_model!r}: links unknown")


def log_topology(devices: Sequence[DeviceInfo], log: NcclLogFacts | None, launch: LaunchFacts | None = None,
                 run_env: Mapping[str, str] | None = None, table_nranks: int | None = None) -> LogTopology:
    """The layout an imported log states (module docstring); nothing the log does not support.
    `table_nranks`: the rank count the table's busbw/algbw or size/count ratios solve for."""
    t = LogTopology(launch=launch)
    _hosts_from_devices(t, devices)
    if _independent_jobs(t, devices):
        return t
    partial = _count_ranks(t, devices, log, launch, table_nranks)
    _count_hosts(t, devices, log, launch, partial)
    _collect_env(t, log, launch, run_env)
    _board_assumption(t, log)
    return t


def assumed_hosts(t: LogTopology, log: NcclLogFacts | None) -> tuple[list[HostTopology], str]:
    """Host facts for the ceiling, built from the board assumption and the log's NICs; ([], why) where
    the assumption cannot be made (model unknown, no board facts, hosts unknown, a multi-node NVLink rack)."""
    b = t.board
    if b is None:
        return [], ("the GPU model is unknown" if not t.gpu_model else
                    f"no published board facts for {t.gpu_model}") + ": no ceiling can be assumed"
    if t.nnodes is None or not t.nranks:
        return [], "the number of hosts or ranks is unknown: no ceiling can be assumed"
    if b.pattern.startswith("GB200"):
        return [], "GB200/GB300 racks join hosts by NVLink (MNNVL): not modelled from a log"
    ppn = max(1, t.nranks // t.nnodes)
    names = t.host_names or [f"host{i}" for i in range(t.nnodes)]
    links, pci_bw = _links_from_nccl(log, b)
    hosts = []
    for i in range(t.nnodes):
        name = names[i] if i < len(names) else f"host{i}"
        bus = t.hosts[i].bus_ids if i < len(t.hosts) else []
        gpus = []
        for g in range(ppn):
            gpu = GpuTopology(index=g, name=t.gpu_model, pci_bus_id=bus[g] if g < len(bus) else f"assumed:{g}",
                              compute_capability=_cc(t.gpu_model, b), pstate=0,
                              pcie=PcieLink(b.pcie_gen, b.pcie_gen, 16, 16))
            if pci_bw:  # NCCL's own PCIe figure (width x gen / 80) as the link's width at the board's generation
                gen_bw = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}.get(b.pcie_gen, 24.0) / 16
                width = max(1, round(pci_bw / gen_bw))
                gpu.pcie = PcieLink(b.pcie_gen, b.pcie_gen, width, width)
            nv = links if links is not None else b.nvswitch_links
            if nv and (b.nvswitch_links or links):
                gpu.nvlink_active, gpu.nvlink_remote = nv, "switch"
                gpu.nvlink_generation = b.nvlink_generation or {7: 2, 8: 3, 9: 4, 10: 5}.get(int(b.cc.split(".")[0]))
                gpu.nvlink_rate = b.nvlink_rate or (50.0 if b.cc.startswith("10") else 25.0)
            else:
                gpu.nvlink_active, gpu.nvlink_remote = 0, "none"
            gpus.append(gpu)
        nics, borrowed = _nics_from_log(log, name)
        if borrowed and nics:
            note = (f"the NICs of hosts whose lines the log lacks ({name}, ...) are taken to be the ones NCCL "
                    f"listed on the others ({', '.join(n.name for n in nics[:4])})")
            if not any(a.startswith("the NICs of hosts whose lines") for a in t.assumptions):
                t.assumptions.append(note)
        hosts.append(HostTopology(host=name, gpus=gpus, nics=nics, gpus_in_box=max(ppn, 1)))
    return hosts, ""


def _links_from_nccl(log: NcclLogFacts | None, b: Board) -> tuple[int | None, float | None]:
    """(NVLinks per GPU to the NVSwitch, the smallest PCIe bandwidth) from NCCL's own topology print, where the
    log has it: a fact, which then stands in for the board's figure.  NVLinks = NVL bw / NCCL's per-link bw."""
    if log is None or not log.topo_gpus:
        return None, None
    from .nccl_bandwidth import nccl_nvlink_bw

    cc = tuple(int(x) for x in b.cc.split("."))
    per_link = nccl_nvlink_bw((cc[0], cc[1]), log.version)
    nvl = [g["nvl_switch_bw"] for g in log.topo_gpus if g.get("nvl_switch_bw")]
    pci = [g["pci_bw"] for g in log.topo_gpus if g.get("pci_bw")]
    links = round(min(nvl) / per_link) if nvl else (0 if pci else None)
    return links, (min(pci) if pci else None)


def _nics_from_log(log: NcclLogFacts | None, host: str) -> tuple[list[NicPort], bool]:
    """(the RDMA devices NCCL listed on `host`, borrowed): with no line from `host`, the NICs NCCL listed on
    the other hosts (said as an assumption).  A speed only where NCCL printed it (NET lines, 2.26+): a NIC's
    speed is never assumed."""
    if log is None:
        return [], False
    devs = [d for d in log.net_devices if d.transport != "Socket" and (d.host in (host, None))]
    borrowed = not devs
    if borrowed:
        by_name = {d.name: d for d in log.net_devices if d.transport != "Socket"}
        devs = list(by_name.values())
    out = []
    for d in devs:
        kind = "roce" if d.link_layer == "RoCE" else "ib" if d.transport == "IB" else "efa"
        out.append(NicPort(name=d.name or f"net{d.index}", port=d.port, kind=kind, state="ACTIVE",
                           rate_gbps=d.speed_mbps / 1000 if d.speed_mbps else None))
    return out, borrowed and bool(out)
