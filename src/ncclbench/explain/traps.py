"""The traps that make clusters slow, named with the evidence and the fix.

Pure functions over three inputs: the hosts' topology facts, what NCCL's own
log said (`nccl_log.NcclLogFacts`, may be None), and the environment the run had.  A
trap is raised only on evidence; a check that needs what is missing (the log,
an unreadable fact) is reported as unchecked with the reason, never raised on
a guess and never silently passed.

Each check cites the NCCL behaviour it relies on (NVIDIA/nccl v2.28.9-1):
* default P2P level PXB, AMD CPUs with <= 2 GPUs SYS; NCCL_P2P_DISABLE and
  NCCL_P2P_LEVEL override it (src/graph/paths.cc, ncclTopoCheckP2p, ncclGetLevel;
  old numeric levels 0..4 = LOC, PIX, PXB, PHB, SYS);
* GDR only when nvidia_peermem or DMA-BUF works (src/transport/net_ib.cc) and the
  GPU-NIC path is within NCCL_NET_GDR_LEVEL, default PXB (paths.cc ncclTopoCheckGdr);
* NCCL_IB_HCA / NCCL_SOCKET_IFNAME lists: '^' excludes, '=' exact, else prefix,
  'name:port' (src/misc/utils.cc parseStringList/matchIfList); the socket
  transport only takes interfaces that are up (src/misc/socket.cc findInterfaces).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .ceiling import network_in_use
from .nccl_env import PATH_RANK, env_set, host_settings, list_items, nccl_list_match, p2p_level
from .nccl_log import NcclLogFacts
from .topology import HostTopology

ERROR, WARN, INFO = "error", "warn", "info"

# The cause each trap names, in the words of the log corpus (tests/fixtures/log_corpus/manifest.json):
# one id per kind of fault, shared by live runs, imported logs and the corpus' expectations.
CAUSE_OF = {
    "net-socket-fallback": "sockets_between_hosts", "gdr-off": "gdr_off", "p2p-disabled": "p2p_disabled",
    "p2p-shm-disabled": "p2p_shm_disabled", "channels-capped": "channels_capped", "algo-forced": "algo_forced",
    "proto-forced": "proto_forced", "iface-list-empty": "iface_list_empty", "hca-list-empty": "hca_list_empty",
    "acs-iommu": "acs_iommu", "network-error-remote-exit": "network_error_remote_exit",
    "ib-completion-error": "ib_completion_error", "bootstrap-no-interface": "bootstrap_no_interface",
    "plugin-missing": "plugin_missing", "pcie-downtrained": "pcie_downtrained", "nvlink-down": "nvlink_down",
    "hang-no-table": "hang_no_table", "oom-or-alloc-failure": "oom_or_alloc_failure",
    "version-mismatch": "version_mismatch", "wrong-results": "wrong_results", "cuda-error": "cuda_error",
}


@dataclass(frozen=True)
class Trap:
    name: str
    evidence: str
    fix: str
    severity: str  # 'error': costs bandwidth for certain; 'warn': likely; 'info': worth knowing


@dataclass(frozen=True)
class Unchecked:
    name: str
    reason: str


@dataclass
class TrapReport:
    raised: list[Trap] = field(default_factory=list)
    unchecked: list[Unchecked] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrapReport:
        return cls([Trap(**t) for t in d.get("raised", [])], [Unchecked(**u) for u in d.get("unchecked", [])],
                   list(d.get("passed", [])))

    def names(self) -> list[str]:
        return [t.name for t in self.raised]

    def causes(self) -> list[str]:
        """The cause ids of the raised traps (`CAUSE_OF`), first-seen order, once each."""
        return list(dict.fromkeys(cause_of(t) for t in self.raised if cause_of(t)))

    def fails(self, severity: str = ERROR) -> bool:
        """True when a trap of `severity` or worse was raised (for an option that fails the run)."""
        order = (INFO, WARN, ERROR)
        return any(order.index(t.severity) >= order.index(severity) for t in self.raised)


def cause_of(t: Trap) -> str:
    """The cause id of a trap; nic-env-mismatch names the list it is about."""
    if t.name == "nic-env-mismatch":
        return "iface_list_empty" if "NCCL_SOCKET_IFNAME" in t.evidence else "hca_list_empty"
    return CAUSE_OF.get(t.name, "")


def _hosts_label(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more"


# -- inter-node transport -----------------------------------------------------------------

def _fabric_fix(kinds: set[str]) -> str:
    if kinds & {"efa", "slingshot"}:
        return ("this fabric needs NCCL's OFI network plugin: install aws-ofi-nccl and put its "
                "libnccl-net-ofi.so (or libnccl-net.so) on LD_LIBRARY_PATH or name it with NCCL_NET_PLUGIN; "
                "the log should then say 'Using network AWS Libfabric' / 'NET/OFI'")
    return ("unset NCCL_IB_DISABLE and NCCL_NET=Socket if set; check NCCL_NET_PLUGIN (a plugin that failed to "
            "load leaves NCCL on sockets), NCCL_IB_HCA, that libibverbs (rdma-core) is installed in the container "
            "and /dev/infiniband is mounted")


def check_socket_fallback(hosts: Sequence[HostTopology], log: NcclLogFacts | None, env: Mapping[str, str],
                          nnodes: int) -> tuple[list[Trap], Unchecked | None]:
    rdma = {h.host: [n for n in h.nics if n.rdma and n.active] for h in hosts}
    with_rdma = [h for h, ns in rdma.items() if ns]
    if not with_rdma:
        return [], None
    kinds = {n.kind for ns in rdma.values() for n in ns}
    sample = rdma[with_rdma[0]]
    have = (f"{len(sample)} active RDMA port(s) on {_hosts_label(with_rdma)} "
            f"({', '.join(sorted({n.kind for n in sample}))}: {', '.join(n.label for n in sample[:4])}"
            f"{', ...' if len(sample) > 4 else ''})")
    severity = ERROR if nnodes > 1 else WARN
    scope = "" if nnodes > 1 else " This run is on one node and does not use the network, but multi-node runs will."
    forced = [f"{k}={env[k]}" for k in ("NCCL_IB_DISABLE", "NCCL_NET") if env_set(env, k) and
              (k != "NCCL_IB_DISABLE" or env[k] != "0") and (k != "NCCL_NET" or env[k].lower() == "socket")]
    if log is None:
        if forced and kinds & {"ib", "roce"}:
            return [Trap("net-socket-fallback", f"{', '.join(forced)} while {have}.{scope}",
                         _fabric_fix(kinds), severity)], None
        return [], Unchecked("net-socket-fallback", "needs NCCL's log (NCCL_DEBUG=INFO) to see which network it used")
    net = network_in_use(log)
    if net is None:
        return [], Unchecked("net-socket-fallback", "NCCL's log names no network transport")
    if net.lower() != "socket":
        return [], None
    ev = f"NCCL used its Socket transport while {have}"
    socket_devs = [d.name for d in log.net_devices if d.transport == "Socket" and d.name]
    if socket_devs:
        ev += f"; NCCL's sockets run over {', '.join(socket_devs[:4])}"
    if forced:
        ev += f"; set: {', '.join(forced)}"
    if log.net_plugin_log:
        ev += f"; NCCL's log: '{log.net_plugin_log[0]}'"
    return [Trap("net-socket-fallback", ev + "." + scope, _fabric_fix(kinds), severity)], None


def check_gdr(hosts: Sequence[HostTopology], log: NcclLogFacts | None,
              nnodes: int | None, env: Mapping[str, str] | None = None) -> tuple[list[Trap], Unchecked | None]:
    """Without topology facts (an imported log) NCCL's own log is the evidence alone."""
    rdma_hosts = [h for h in hosts if any(n.rdma and n.active for n in h.nics)]
    if hosts and not rdma_hosts:
        return [], None
    why_topo = []
    if rdma_hosts:
        h0 = rdma_hosts[0]
        if h0.gdr.peermem is False:
            why_topo.append("nvidia_peermem is not loaded (" + h0.gdr.evidence + ")")
        far = [x for x in h0.gpu_nic if x.path in ("PHB", "NODE", "SYS")]
        near = {x.a for x in h0.gpu_nic if x.path in ("PIX", "PXB")}
        far_gpus = sorted({x.a for x in far} - near)
        if far_gpus:
            why_topo.append(f"GPU(s) {','.join(far_gpus)} on {h0.host} have no NIC within PXB (NCCL's default "
                            f"NCCL_NET_GDR_LEVEL)")
    if log is None:
        reason = "needs NCCL's log: GDR can come from DMA-BUF, which sysfs cannot see"
        if why_topo:
            reason += "; topology hints: " + "; ".join(why_topo)
        return [], Unchecked("gdr-off", reason)
    devs = [d for d in log.net_devices if d.transport != "Socket"]
    nets = [c for c in log.connections if c.kind == "NET" and c.net != "Socket"]
    if not devs and not nets:
        return [], Unchecked("gdr-off", "NCCL's log shows no RDMA network device or NET connection"
                             + (" (single-node run)" if nnodes == 1 else ""))
    # a device is off when NCCL said GDR is disabled for it, or used it only without /GDRDMA
    off = [d for d in devs if d.gdr is False or d.gdr_used is False]
    on = [d for d in devs if d.gdr_used or (d.gdr and d.gdr_used is None)]
    conns_off = [c for c in nets if c.gdr is False]
    if not off and not (nets and len(conns_off) == len(nets)):
        return [], None
    parts = []
    if off:
        parts.append(f"NCCL's NET devices without GPU Direct RDMA: {', '.join(str(d.name or d.index) for d in off[:4])}"
                     + (f" (with it: {', '.join(str(d.name or d.index) for d in on[:4])})" if on else ""))
    if conns_off:
        c = conns_off[0]
        parts.append(f"{len(conns_off)} of {len(nets)} NET connection(s) without GDRDMA (e.g. channel {c.channel} "
                     f"{c.from_rank}->{c.to_rank} via {c.detail})")
    parts += why_topo
    level = env_set(env or {}, "NCCL_NET_GDR_LEVEL")
    if level is not None and level.upper() in ("0", "LOC"):
        parts.append(f"NCCL_NET_GDR_LEVEL={level} turns GPU Direct RDMA off (a common workaround left in place)")
    everywhere = not on and (not nets or len(conns_off) == len(nets))
    return [Trap("gdr-off", "; ".join(parts),
                 "load nvidia_peermem (modprobe nvidia_peermem) or use DMA-BUF (open GPU kernel modules, kernel "
                 ">= 5.12, NCCL_DMABUF_ENABLE=1); check NCCL_NET_GDR_LEVEL and that each GPU has a NIC under "
                 "its PCIe switch; with PCIe ACS enabled on the switches GDR traffic detours through the CPU",
                 ERROR if everywhere and (nnodes or 0) > 1 else WARN)], None


# -- PCIe, NVLink ---------------------------------------------------------------------------

def check_pcie(hosts: Sequence[HostTopology]) -> tuple[list[Trap], Unchecked | None]:
    traps: list[Trap] = []
    unread: list[str] = []
    idle: list[str] = []
    for h in hosts:
        devices = [(f"GPU{g.index}", g.pci_bus_id, g.pcie, g.pstate) for g in h.gpus] + \
                  [(f"NIC {n.label}", n.pci_bus_id, n.pcie, 0) for n in h.nics if n.pci_bus_id]
        for label, bdf, link, pstate in devices:
            if link.width is None or link.width_max is None or link.gen is None or link.gen_max is None:
                unread.append(f"{h.host} {label}")
                continue
            low_width = link.width < link.width_max
            low_gen = link.gen < link.gen_max
            if low_gen and not low_width and pstate not in (0, None) and label.startswith("GPU"):
                idle.append(f"{h.host} {label} Gen{link.gen} of Gen{link.gen_max} at P{pstate}")
                continue
            if low_width or low_gen:
                traps.append(Trap(
                    "pcie-downtrained",
                    f"{h.host} {label} [{bdf}] PCIe link {link.describe()}"
                    + (f" while busy (P{pstate})" if low_gen and label.startswith("GPU") else ""),
                    "reseat the card or riser, check the slot's BIOS link setting and the cable/retimer; "
                    "a link that trains below its width is a hardware fault (lspci -vv: LnkSta vs LnkCap)",
                    WARN))
    unchecked = None
    if idle:
        unchecked = Unchecked("pcie-downtrained", "idle GPUs lower their PCIe generation to save power: "
                              + "; ".join(idle[:3]) + " (re-read under load)")
    elif unread:
        unchecked = Unchecked("pcie-downtrained", "PCIe link not readable for " + ", ".join(unread[:3]))
    return traps, unchecked


def check_nvlink(hosts: Sequence[HostTopology]) -> tuple[list[Trap], Unchecked | None]:
    traps, unknown = [], []
    for h in hosts:
        if len(h.gpus) < 2:
            continue
        counts = [g.nvlink_active for g in h.gpus]
        if any(c is None for c in counts):
            unknown.append(f"{h.host}: " + next(g.unknown.get("nvlink_active", "state unknown")
                                                for g in h.gpus if g.nvlink_active is None))
            continue
        top = max(c for c in counts if c is not None)
        if top == 0:
            if all(g.nvlink_down for g in h.gpus):
                traps.append(Trap(
                    "nvlink-down",
                    f"{h.host}: every NVLink of all {len(h.gpus)} GPUs is inactive (NVML reports links DISABLED)",
                    "start the fabric manager (systemctl start nvidia-fabricmanager; on B200/GB200 also nvlsm) "
                    "and check nvidia-smi nvlink -s; until then NCCL uses PCIe", ERROR))
            continue
        for g in h.gpus:
            if g.nvlink_active is not None and g.nvlink_active < top:
                down = f" (links {','.join(map(str, g.nvlink_down))} DISABLED)" if g.nvlink_down else ""
                traps.append(Trap(
                    "nvlink-down",
                    f"{h.host} GPU{g.index} [{g.pci_bus_id}] has {g.nvlink_active} active NVLinks, its peers "
                    f"{top}{down}: every ring through it runs at its {g.nvlink_active}/{top}",
                    "nvidia-smi nvlink -s / -e on that GPU; reset it or drain the node and have the links or "
                    "baseboard checked (NVLink errors in dmesg: Xid 74)", ERROR))
    return traps, Unchecked("nvlink-down", "; ".join(unknown)) if unknown else None


# -- P2P --------------------------------------------------------------------------------

def _pair_paths(h: HostTopology) -> list[tuple[str, str, str]]:
    """(gpu a, gpu b, NCCL path word) for each GPU pair on the host: NVL where NVLink joins them."""
    out = []
    for loc in h.gpu_gpu:
        a = next((g for g in h.gpus if str(g.index) == loc.a), None)
        b = next((g for g in h.gpus if str(g.index) == loc.b), None)
        if a is None or b is None:
            continue
        nvl = (a.nvlink_active and b.nvlink_active and a.nvlink_remote == "switch" and b.nvlink_remote == "switch") \
            or (b.pci_bus_id in a.nvlink_peers)
        out.append((loc.a, loc.b, "NVL" if nvl else loc.path))
    return out


def _intra_host_net(log: NcclLogFacts) -> list[Any]:
    """NET connections whose two ranks NCCL's log places on one host (its rank lines, or nNodes 1)."""
    out = []
    for c in log.connections:
        if c.kind != "NET":
            continue
        a, b = log.rank_hosts.get(c.from_rank), log.rank_hosts.get(c.to_rank)
        if (a is not None and a == b) or (log.nnodes == 1 and (a is None or b is None)):
            out.append(c)
    return out


def _shm_off(env: Mapping[str, str], log: NcclLogFacts | None) -> bool:
    return (env_set(env, "NCCL_SHM_DISABLE") or "0") not in ("0", "") or bool(log is not None and log.shm_disabled)


def _socket_path_text(log: NcclLogFacts | None) -> str:
    nets = _intra_host_net(log) if log is not None else []
    if nets:
        c = nets[0]
        return (f"NCCL connected GPUs of one host through its network transport ({len(nets)} NET connection(s), "
                f"e.g. channel {c.channel} {c.from_rank}->{c.to_rank} via {c.detail})")
    return ("NCCL moves data between GPUs of one host through its network transport (TCP sockets unless an "
            "RDMA NIC loops it back), not through host memory")


def check_p2p(hosts: Sequence[HostTopology], log: NcclLogFacts | None,
              env: Mapping[str, str]) -> tuple[list[Trap], Unchecked | None]:
    """P2P off (the SHM path through host memory), or P2P and SHM both off (the network path: sockets)."""
    multi = [h for h in hosts if len(h.gpus) >= 2]
    traps: list[Trap] = []
    level, setting = p2p_level(env)
    shm_off = _shm_off(env, log)
    for h in multi:
        pairs = _pair_paths(h)
        if level is not None:
            blocked = [(a, b, p) for a, b, p in pairs if p in PATH_RANK and PATH_RANK[p] > level]
            if blocked:
                a, b, p = blocked[0]
                link = "NVLink" if p == "NVL" else "PCIe peer-to-peer"
                if shm_off:
                    traps.append(Trap(
                        "p2p-shm-disabled",
                        f"{setting} and NCCL_SHM_DISABLE={env_set(env, 'NCCL_SHM_DISABLE') or '1'} on {h.host}: "
                        f"GPU{a}-GPU{b} are joined by {p}, but {_socket_path_text(log)} instead of {link} "
                        f"({len(blocked)} GPU pair(s) affected)",
                        f"unset {setting.split('=')[0]} and NCCL_SHM_DISABLE (common leftovers from debugging)",
                        ERROR))
                else:
                    traps.append(Trap(
                        "p2p-disabled",
                        f"{setting} on {h.host}: GPU{a}-GPU{b} are joined by {p}, so NCCL copies through host "
                        f"memory (SHM) instead of {link} ({len(blocked)} GPU pair(s) affected)",
                        f"unset {setting.split('=')[0]} unless it works around a known fault (it is a common "
                        f"leftover from debugging)", ERROR))
                break
        else:
            amd_small = (h.cpu_vendor == "AuthenticAMD" and len(h.gpus) <= 2)
            far = [(a, b, p) for a, b, p in pairs if p in ("PHB", "NODE", "SYS") and not amd_small]
            if far:
                a, b, p = far[0]
                traps.append(Trap(
                    "p2p-disabled",
                    f"{h.host}: GPU{a}-GPU{b} are joined only through {p}; NCCL's default P2P level is PXB, so "
                    f"they exchange through host memory (SHM) ({len(far)} GPU pair(s))",
                    "expected on this topology; NCCL_P2P_LEVEL=SYS enables P2P through the CPU where the "
                    "platform supports it (measure both)", WARN))
    if not multi and not traps and level is not None and (log is None or not log.sources):
        # no host facts and no NCCL log: the setting alone (the launch line, the run's environment)
        name = "p2p-shm-disabled" if shm_off else "p2p-disabled"
        path = _socket_path_text(None) if shm_off else ("NCCL copies between GPUs of one host through host "
                                                        "memory (SHM) instead of NVLink or PCIe peer-to-peer")
        traps.append(Trap(name, f"{setting} was set{' with NCCL_SHM_DISABLE' if shm_off else ''}: {path}",
                          f"unset {setting.split('=')[0]}" + (" and NCCL_SHM_DISABLE" if shm_off else "")
                          + " unless it works around a known fault (a common leftover from debugging)", ERROR))
    if log is not None and not traps:
        shm = [c for c in log.connections if c.kind == "SHM"]
        nvlink_host = any(g.nvlink_active for h in multi for g in h.gpus)
        intra_net = _intra_host_net(log)
        if (log.p2p_disabled or level is not None) and shm_off and (intra_net or not shm):
            why = ", ".join(x for x in (log.p2p_disabled_reason or (setting if level is not None else ""),
                                        "NCCL_SHM_DISABLE set" if _shm_off(env, None) else "") if x)
            traps.append(Trap(
                "p2p-shm-disabled",
                f"P2P and SHM both disabled ({why or 'NCCL said so'}): {_socket_path_text(log)}",
                "unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL and NCCL_SHM_DISABLE (common leftovers from debugging); "
                "if P2P was disabled on purpose, keep SHM", ERROR))
        elif shm or log.p2p_disabled:
            ev = (f"NCCL connected {len(shm)} intra-node channel(s) via SHM (e.g. channel {shm[0].channel} "
                  f"{shm[0].from_rank}->{shm[0].to_rank} via {shm[0].detail})" if shm else "NCCL's log: P2P disabled")
            if log.p2p_disabled_reason:
                ev += f" ({log.p2p_disabled_reason})"
            traps.append(Trap(
                "p2p-disabled",
                ev + (" although the GPUs have NVLink" if nvlink_host else ""),
                "check NCCL_P2P_DISABLE/NCCL_P2P_LEVEL, that the ranks of one node see each other's GPUs "
                "(containers need a shared IPC namespace and all GPUs visible), and IOMMU/ACS settings",
                ERROR if nvlink_host else WARN))
    return traps, None


# -- NIC selection by environment ---------------------------------------------------------------

def check_nic_env(hosts: Sequence[HostTopology], env: Mapping[str, str]) -> tuple[list[Trap], Unchecked | None]:
    traps = []
    hca = env_set(env, "NCCL_IB_HCA")
    ifname = env_set(env, "NCCL_SOCKET_IFNAME")
    for h in hosts:
        if hca:
            ports = [n for n in h.nics if n.rdma]
            picked = [n for n in ports if nccl_list_match(hca, n.name, n.port)]
            exclude, exact, names = list_items(hca)
            if not exclude:
                absent = [x for x in names if not any(n.name == x if exact else n.name.startswith(x) for n in ports)]
                if absent:
                    traps.append(Trap(
                        "nic-env-mismatch",
                        f"NCCL_IB_HCA={hca} names {', '.join(absent)}, not present on {h.host} (RDMA devices: "
                        f"{', '.join(sorted({n.name for n in ports})) or 'none'})",
                        "fix NCCL_IB_HCA (names from ibv_devices; '=' for exact names, '^' to exclude) or "
                        "unset it", ERROR))
            # NCCL skips ports that are not ACTIVE: a name is a trap when everything it selects is down
            down = [] if exclude else [
                n for x in names for n in ports if (n.name == x if exact else n.name.startswith(x)) and not n.active
                and not any(m.active for m in ports if (m.name == x if exact else m.name.startswith(x)))]
            if down:
                traps.append(Trap(
                    "nic-env-mismatch",
                    f"NCCL_IB_HCA={hca} selects {', '.join(n.label for n in down)} on {h.host}, "
                    f"state {down[0].state}",
                    "bring the port up (ibstat; check the cable and the subnet manager) or leave it out of "
                    "NCCL_IB_HCA", ERROR))
            if ports and not [n for n in picked if n.active]:
                traps.append(Trap(
                    "nic-env-mismatch",
                    f"NCCL_IB_HCA={hca} leaves no active RDMA port on {h.host}: NCCL falls back to sockets",
                    "fix or unset NCCL_IB_HCA", ERROR))
        if ifname:
            up = {name for name, state in h.interfaces.items() if state in ("up", "unknown")}
            picked_ifs = [name for name in h.interfaces if nccl_list_match(ifname, name, None)]
            running = [name for name in picked_ifs if name in up]
            if not running:
                names_ = sorted(h.interfaces.items())
                seen = ", ".join(f"{n} ({s})" for n, s in names_[:12]) + (", ..." if len(names_) > 12 else "") \
                    or "none readable"
                traps.append(Trap(
                    "nic-env-mismatch",
                    f"NCCL_SOCKET_IFNAME={ifname} matches no interface that is up on {h.host}"
                    + (f" ({', '.join(picked_ifs)} down)" if picked_ifs else "") + f"; interfaces: {seen}",
                    "name an interface that is up on every host (prefix match; '=' exact, '^' exclude); "
                    "NCCL bootstrap fails or picks another network otherwise", ERROR))
    if (hca or ifname) and not hosts:
        return [], Unchecked("nic-env-mismatch", "no topology facts")
    return traps, None


def check_forced(hosts: Sequence[HostTopology], env: Mapping[str, str]) -> list[Trap]:
    traps = []
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        v = env_set(env, name)
        if v:
            traps.append(Trap(
                "algo-forced" if name == "NCCL_ALGO" else "proto-forced",
                f"{name}={v}: NCCL does not choose freely; the figures show that "
                f"{'algorithm' if name == 'NCCL_ALGO' else 'protocol'} only",
                f"unset {name} to measure what applications get (keep it only to isolate one path, e.g. "
                f"NCCL_ALGO=Ring to measure the network)", INFO))
    nvls = env_set(env, "NCCL_NVLS_ENABLE")
    if nvls == "0" and any(len(h.gpus) >= 5 and all(g.nvlink_remote == "switch" and (g.cc or (0, 0)) >= (9, 0)
                                                  for g in h.gpus) for h in hosts):
        traps.append(Trap(
            "algo-forced", "NCCL_NVLS_ENABLE=0 on NVSwitch GPUs: all_reduce stays at Ring level "
            "(~370 GB/s on H100/H200 instead of ~480 with NVLink SHARP)",
            "expected where NVLS must stay off; otherwise unset it", INFO))
    return traps


# NCCL's channel limits (src/init.cc / graph/connect.cc, every tag v2.18.6-1 .. v2.30.7-1): NCCL_MAX_NCHANNELS
# (NCCL_MAX_NRINGS before 2.5) and NCCL_MAX_CTAS (2.17+) cap the channels, hence the SMs and links, a
# collective uses; NCCL_MIN_NCHANNELS / NCCL_MIN_CTAS raise the floor.
CHANNEL_CAPS = ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MAX_NRINGS")


def check_channels(env: Mapping[str, str], log: NcclLogFacts | None,
                   per_call_channels: Sequence[int] = ()) -> list[Trap]:
    """Channels capped by the environment.  Evidence: the variable (the run's, or NCCL's own ENV line), and
    what NCCL then did: its '<n> coll channels' line or the channels of its per-call choices (log or
    profiler plugin)."""
    caps = [(k, env_set(env, k)) for k in CHANNEL_CAPS if env_set(env, k)]
    if not caps:
        return []
    name, value = caps[0]
    try:
        cap = int(str(value).strip())
    except ValueError:
        return []
    used = []
    if log is not None and log.nchannels is not None:
        used.append(f"NCCL's log: {log.nchannels} coll channel(s)")
    chans = sorted({c.nchannels for c in (log.per_call if log is not None else []) if c.nchannels} |
                   set(per_call_channels))
    if chans:
        used.append(f"per call {chans[0]}" + (f"-{chans[-1]}" if chans[-1] != chans[0] else "") + " channel(s)")
    severity = WARN if cap <= 8 else INFO
    return [Trap(
        "channels-capped",
        f"{name}={value}: NCCL may use at most {cap} channel(s) per collective"
        + (f" ({'; '.join(used)})" if used else "")
        + "; each channel is one ring/tree with its own SMs and links, so large messages lose bandwidth",
        f"unset {name} (a 2-channel cap cost 86 % of all_reduce's busbw on 4x H100: 50 of 356 GB/s, issue 26); "
        "keep it only where the application needs the SMs", severity)]


def check_socket_between_hosts(log: NcclLogFacts | None, nnodes: int | None,
                               hosts: Sequence[str] = ()) -> tuple[list[Trap], Unchecked | None]:
    """Without topology facts (an imported log): NCCL's own log says which network carried the data
    between hosts.  Sockets between hosts of GPU servers are the classic slow path."""
    if log is None:
        return [], Unchecked("net-socket-fallback", "needs NCCL's log (NCCL_DEBUG=INFO) to see which network it used")
    net = network_in_use(log)
    socket_conns = [c for c in log.connections if c.kind == "NET" and (c.net or "").lower() == "socket"]
    multi = (nnodes or 0) > 1
    if not multi:
        why = "one host" if nnodes == 1 else "the number of hosts is unknown"
        return [], Unchecked("net-socket-fallback", f"{why}: no traffic between hosts to judge")
    if net is None and not socket_conns:
        return [], Unchecked("net-socket-fallback", "NCCL's log names no network transport")
    if (net or "").lower() != "socket" and not socket_conns:
        return [], None
    where = f" between {', '.join(hosts[:4])}{' ...' if len(hosts) > 4 else ''}" if hosts else ""
    ev = f"NCCL moved data{where} ({nnodes} hosts) over its Socket transport (TCP)"
    if socket_conns:
        c = socket_conns[0]
        ev += f": {len(socket_conns)} NET connection(s) via NET/Socket, e.g. channel {c.channel} " \
              f"{c.from_rank}->{c.to_rank} via {c.detail}"
    if log.net_plugin:
        ev += f"; 'Using network {log.net_plugin}'"
    socks = [d.name for d in log.net_devices if d.transport == "Socket" and d.name]
    if socks:
        ev += f"; sockets over {', '.join(dict.fromkeys(socks))}"
    if log.plugin_failures:
        ev += f"; NCCL's plugin lines: '{log.plugin_failures[0][:160]}'"
    forced = [f"{k}={log.env[k]}" for k in ("NCCL_NET", "NCCL_IB_DISABLE", "NCCL_NET_PLUGIN") if k in log.env]
    if forced:
        ev += f"; set: {', '.join(forced)}"
    efa = any(x in " ".join(log.hosts + log.net_plugin_log + log.plugin_failures).lower()
              for x in ("efa", "ofi", "libfabric", "ip-1"))
    fix = _fabric_fix({"efa"} if efa else {"ib"})
    return [Trap("net-socket-fallback", ev, fix + "; NCCL_DEBUG=INFO then shows 'Using network IB' (or the plugin's "
                 "name) and NET/IB or NET/OFI connections", ERROR)], None


def check_plugin(log: NcclLogFacts | None, env: Mapping[str, str], nnodes: int | None) -> list[Trap]:
    """A network plugin asked for (NCCL_NET_PLUGIN) or needed (sockets between hosts) that did not load.
    "No plugin found ... using internal implementation" alone is normal on InfiniBand (NCCL's own IB
    transport needs none), so it counts only with one of those two."""
    if log is None or not log.plugin_failures:
        return []
    asked = env_set(env, "NCCL_NET_PLUGIN") or env_set(env, "NCCL_NET")
    net = (network_in_use(log) or "").lower()
    sockets_between = (nnodes or 0) > 1 and net == "socket"
    if not asked and not sockets_between:
        return []
    efa = any(x in " ".join(log.hosts + log.net_plugin_log).lower() for x in ("efa", "ofi", "libfabric", "ip-1"))
    return [Trap(
        "plugin-missing",
        ("" if asked else "possible: ") + f"NCCL's plugin lines: '{log.plugin_failures[0][:200]}'"
        + (f" with {'NCCL_NET_PLUGIN' if env_set(env, 'NCCL_NET_PLUGIN') else 'NCCL_NET'}={asked}" if asked else "")
        + ("; NCCL then used its Socket transport between hosts" if sockets_between else ""),
        ("install aws-ofi-nccl (libnccl-net-ofi.so / libnccl-net.so) and put it on LD_LIBRARY_PATH or name it with "
         "NCCL_NET_PLUGIN; its start line 'NET/OFI Initializing aws-ofi-nccl <version>' shows it loaded" if efa else
         "put the network plugin your fabric needs on LD_LIBRARY_PATH (or NCCL_NET_PLUGIN=<path>), or unset "
         "NCCL_NET_PLUGIN to use NCCL's own IB transport; check the container has libibverbs and /dev/infiniband"),
        ERROR if asked else WARN)]


def check_log_links(log: NcclLogFacts, kind: str) -> list[Trap]:
    """An imported log's link facts: NCCL's own topology print (GRAPH subsystem) gives each GPU's NVLink
    bandwidth to the NVSwitch (links x NCCL's per-link figure) and its PCIe link (width x gen / 80).  A GPU
    with less than its peers on the same host has a link down or trained low; a uniform figure is not judged
    here (it may be the board's)."""
    traps = []
    by_host: dict[Any, list[dict]] = {}
    for g in log.topo_gpus:
        by_host.setdefault(g.get("host"), []).append(g)
    field_, name = ("nvl_switch_bw", "nvlink-down") if kind == "nvlink" else ("pci_bw", "pcie-downtrained")
    for host, gpus in by_host.items():
        values = [g[field_] for g in gpus if g.get(field_)]
        if len(values) < 2:
            continue
        top = max(values)
        low = [g for g in gpus if g.get(field_) and g[field_] < top * 0.99]
        if not low:
            continue
        g = low[0]
        where = f"{host + ' ' if host else ''}GPU {g['id']} (rank {g['rank']})"
        if kind == "nvlink":
            traps.append(Trap(
                name, f"NCCL's topology: {where} has NVL[{g[field_]:g}] to the NVSwitch, its peers {top:g} "
                f"({len(low)} GPU(s) short): NVLinks down, so every ring through it runs at its {g[field_] / top:.0%}",
                "nvidia-smi nvlink -s / -e on that GPU; reset it or drain the node and have the links or baseboard "
                "checked (NVLink errors in dmesg: Xid 74)", ERROR))
        else:
            traps.append(Trap(
                name, f"NCCL's topology: {where} has PCI[{g[field_]:g}] (NCCL's width x gen / 80), its peers "
                f"{top:g}: its PCIe link trained lower ({len(low)} GPU(s))",
                "reseat the card or riser, check the slot's BIOS link setting and the cable/retimer "
                "(lspci -vv: LnkSta vs LnkCap)", WARN))
    return traps


TOPOLOGY_CHECKS = ("net-socket-fallback", "pcie-downtrained", "nvlink-down", "nic-env-mismatch")


# The checks that judge each host's facts with the NCCL settings in force there, and the settings each
# reads: hosts are grouped by those alone, so a setting that differs but does not matter to a check
# (NCCL_HOSTID on every host) does not split it into one trap per host.
PER_HOST_ENV_CHECKS: dict[str, tuple[str, ...]] = {
    "net-socket-fallback": ("NCCL_IB_DISABLE", "NCCL_NET"),
    "p2p-disabled": ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE"),
    "nic-env-mismatch": ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"),
    "algo-forced": ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE"),
}


def _host_env_groups(hosts: Sequence[HostTopology], env: Mapping[str, str],
                     host_env: Mapping[str, Mapping[str, str]] | None, log_env: Mapping[str, str],
                     keys: Sequence[str]) -> list[tuple[list[HostTopology], dict[str, str]]]:
    """The hosts grouped by the values of `keys` in the NCCL settings in force on each
    (`nccl_env.host_settings`), with the first host's settings for the group."""
    groups: dict[tuple, tuple[list[HostTopology], dict[str, str]]] = {}
    for h in hosts:
        e = host_settings(h.host, env, host_env, log_env)
        groups.setdefault(tuple(e.get(k) for k in keys), ([], e))[0].append(h)
    return list(groups.values())


def find_traps(hosts: Sequence[HostTopology], log: NcclLogFacts | None, env: Mapping[str, str] | None = None,
               *, nnodes: int | None = None, no_topology: str = "no topology facts",
               host_names: Sequence[str] = (), per_call_channels: Sequence[int] = (),
               host_env: Mapping[str, Mapping[str, str]] | None = None) -> TrapReport:
    """Every check, over the job's hosts (restricted to the GPUs in use where known).  With no hosts
    at all the checks that need them are reported unchecked (`no_topology` says why), never passed;
    the ones NCCL's log or the environment can settle alone still run.  `nnodes`: the job's host
    count where known (an imported log's device lines or NCCL's nNodes; None: unknown), `host_names`
    its hosts; `per_call_channels`: the channels of NCCL's per-call choices (the profiler plugin).
    `env`: the job's NCCL settings (rank 0's); `host_env`: host -> the settings its ranks run with,
    where gathered: each host is judged with its own (`PER_HOST_ENV_CHECKS`), since one host's
    NCCL_SOCKET_IFNAME says nothing about another's interfaces."""
    log_env = dict(log.env or {}) if log is not None else {}
    job_env = dict(env or {})
    env = dict(job_env)
    for k, v in log_env.items():
        env.setdefault(k, v)  # what NCCL said was set; the run's own environment wins
    if nnodes is None and hosts:
        nnodes = max(len(hosts), (log.nnodes or 1) if log is not None else 1)
    elif nnodes is None and log is not None and log.nnodes:
        nnodes = log.nnodes
    report = TrapReport()
    checks = [
        ("net-socket-fallback", lambda: check_socket_fallback(hosts, log, env, nnodes or 1) if hosts
         else check_socket_between_hosts(log, nnodes, host_names)),
        ("gdr-off", lambda: check_gdr(hosts, log, nnodes, env)),
        ("pcie-downtrained", lambda: check_pcie(hosts)),
        ("nvlink-down", lambda: check_nvlink(hosts)),
        ("p2p-disabled", lambda: check_p2p(hosts, log, env)),
        ("nic-env-mismatch", lambda: check_nic_env(hosts, env)),
        ("algo-forced", lambda: (check_forced(hosts, env), None)),
        ("channels-capped", lambda: (check_channels(env, log, per_call_channels), None)),
        ("plugin-missing", lambda: (check_plugin(log, env, nnodes), None)),
    ]
    for name, run in checks:
        if not hosts and name in ("pcie-downtrained", "nvlink-down") and log is not None and log.topo_gpus:
            found = check_log_links(log, "nvlink" if name == "nvlink-down" else "pcie")
            report.raised.extend(found)
            if not found:
                report.passed.append(name)
            continue
        if not hosts and name in TOPOLOGY_CHECKS and not (name == "net-socket-fallback" and log is not None
                                                         and nnodes is not None):
            net = network_in_use(log) if log is not None and name == "net-socket-fallback" else None
            report.unchecked.append(Unchecked(name, no_topology + (f" (NCCL's log: network {net})" if net else "")))
            continue
        if name in PER_HOST_ENV_CHECKS and hosts and host_env:
            by_env = _host_env_groups(hosts, job_env, host_env, log_env, PER_HOST_ENV_CHECKS[name])
            traps, unchecked = _per_env_group(name, by_env, log, nnodes)
        else:
            traps, unchecked = run()
        report.raised.extend(traps)
        if unchecked is not None:
            report.unchecked.append(unchecked)
        elif not traps:
            report.passed.append(name)
    return report


def _per_env_group(name: str, by_env: list[tuple[list[HostTopology], dict[str, str]]], log: NcclLogFacts | None,
                   nnodes: int | None) -> tuple[list[Trap], Unchecked | None]:
    """One host check run once per group of hosts that share their NCCL settings; a trap or a reason
    two groups give alike is said once."""
    traps: list[Trap] = []
    whys: list[str] = []
    for group, e in by_env:
        if name == "net-socket-fallback":
            found, u = check_socket_fallback(group, log, e, nnodes or 1)
        elif name == "p2p-disabled":
            found, u = check_p2p(group, log, e)
        elif name == "nic-env-mismatch":
            found, u = check_nic_env(group, e)
        else:
            found, u = check_forced(group, e), None
        traps += [t for t in found if t not in traps]
        if u is not None and u.reason not in whys:
            whys.append(u.reason)
    return traps, Unchecked(name, "; ".join(whys)) if whys else None


def format_trap_lines(report: TrapReport) -> list[str]:
    """`#` lines: one per raised trap (with the fix), one summarising what was not checked."""
    lines = [f"# TRAP {t.severity.upper()} {t.name}: {t.evidence}. Fix: {t.fix}" for t in report.raised]
    if report.unchecked:
        by_reason: dict[str, list[str]] = {}  # checks held back by one reason share it
        for u in report.unchecked:
            by_reason.setdefault(u.reason, []).append(u.name)
        lines.append("# Not checked: " + "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items()))
    return lines
