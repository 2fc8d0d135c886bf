"""What NCCL itself said it did, read from its INFO log (any rank's file, NCCL 2.18-2.30).

Why the log: it is NCCL's own account of the path it took -- the network
plugin and transport ("Using network Socket" is the Alps trap), GPUDirect
RDMA per NIC, the transport of every channel connection, the channel counts,
its model table (latency / algBw per algorithm x protocol: NCCL's predicted
ceiling) and, per call, the algorithm, protocol and channels it chose.
Nothing here is inferred from the hardware; a fact the log does not state
stays None and `NcclLogFacts.unknown` says why.

`parse_nccl_log` reads one text (one process's file, or an imported
terminal log) and never raises: lines in formats it does not know are
listed in `unparsed`, never turned into facts.  `merge_facts` combines the
files of several ranks.  Formats and their source lines: `nccl_log_formats`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..output.nccl_log_line import LogLine, env_setting, read_log_line
from . import mnnvl
from . import nccl_log_formats as F


@dataclass
class NetDevice:
    """A network device NCCL listed (NET/IB or NET/Socket), or saw in a connection (external plugins)."""

    index: int  # NCCL's device index ([n] in its lines; a merged vNIC's index for merged NICs)
    transport: str  # "IB" / "Socket" / the external plugin's name ("AWS Libfabric", ...)
    name: str | None = None  # "mlx5_0", "eth0", "{mlx5_0,mlx5_1}" for a merged vNIC
    host: str | None = None
    port: int | None = None
    link_layer: str | None = None  # IB devices: "IB" / "RoCE"
    address: str | None = None  # Socket devices: "10.0.0.1<0>"
    speed_mbps: int | None = None  # as NCCL printed it (NET subsystem lines, 2.26+)
    gdr: bool | None = None  # NCCL's "GPU Direct RDMA Enabled/Disabled for HCA n" (device support)
    gdr_used: bool | None = None  # any NET connection through it marked /GDRDMA (False: seen, none)


@dataclass
class Connection:
    """One channel connection line (transport/*.cc)."""

    channel: int
    from_rank: int
    to_rank: int
    kind: str  # "P2P" / "SHM" / "NET" / "CollNet"
    detail: str  # as printed: "P2P/CUMEM/read", "SHM/direct/direct", "NET/IB/0/GDRDMA"
    conn_index: int | None = None
    from_dev: str | None = None  # the [n] after the rank (NVML device index, as printed)
    to_dev: str | None = None
    direction: str | None = None  # NET / CollNet: "send" / "receive"
    net: str | None = None  # NET: the network's name ("IB", "Socket", plugin name)
    net_device: int | None = None  # NET: NCCL's device index
    gdr: bool | None = None  # NET: /GDRDMA present
    host: str | None = None


@dataclass
class CallChoice:
    """NCCL's choice for one collective call, from a per-call TUNING line (or the profiler)."""

    func: str | None  # "AllReduce" ... (None: 2.20-2.22 line without a COLL line before it)
    nbytes: int  # as NCCL printed it; see `bytes_kind`
    algo: str | None  # model-table spelling: "Ring", "Tree", "NVLS", "NVLSTree", "PAT", ...
    proto: str | None  # "LL" / "LL128" / "Simple"
    nchannels: int | None  # channel{Lo..Hi}: Hi - Lo + 1 (2.24+); profiler nChannels
    fmt: str  # which format it came from: "2.20", "2.23", "2.24", "symmetric", "copy-engine", "profiler"
    # "total": max(send, recv) bytes, all ranks' data for AllGather/ReduceScatter (2.20-2.23);
    # "count": count x type size (2.24+, the profiler), i.e. ONE rank's share for AllGather/ReduceScatter.
    bytes_kind: str = "count"
    model_time_us: float | None = None  # 2.20-2.23: NCCL's predicted time
    kernel: str | None = None  # symmetric kernels (2.27+)
    func_inferred: bool = False  # func taken from the COLL line before a nameless 2.20-2.22 line


@dataclass
class NcclLogFacts:
    """Everything one or more NCCL logs state.  None / empty: the log did not say (see `unknown`)."""

    version: str | None = None
    hosts: list[str] = field(default_factory=list)  # host names in the lines' prefixes, first-seen order
    net_plugin: str | None = None  # comm->ncclNet->name: "IB", "Socket", "AWS Libfabric", ...
    net_plugin_version: str | None = None  # an external plugin's own name and version ("aws-ofi-nccl 1.5.0aws")
    ofi_provider: str | None = None  # aws-ofi-nccl's libfabric provider ("efa", "cxi", ...)
    plugin_failures: list[str] = field(default_factory=list)  # plugin lines saying a plugin could not be used
    ib_no_device: bool | None = None  # "NET/IB : No device found." (True), an IB device list (False)
    bootstrap_ifaces: list[str] = field(default_factory=list)  # "Bootstrap : Using eth0:10.0.0.1<0>"
    rank_hosts: dict[int, str] = field(default_factory=dict)  # rank -> host, from the comm/Init COMPLETE lines
    local_ranks: int | None = None  # the largest "localRanks" any comm line gave
    # NCCL's own topology (GRAPH subsystem): per GPU {"host", "id", "rank", "pci_bw" (GB/s of the PCIe link
    # into it, NCCL's width x gen/80), "nvl_switch_bw" (to the NVSwitch), "nvl_peer_bw" {peer id: GB/s}}
    topo_gpus: list[dict] = field(default_factory=list)
    net_plugin_external: bool | None = None
    net_plugin_log: list[str] = field(default_factory=list)  # NCCL's plugin loading lines, as evidence
    net_devices: list[NetDevice] = field(default_factory=list)
    connections: list[Connection] = field(default_factory=list)
    nchannels: int | None = None  # collective channels ("%d coll channels")
    channel_counts: dict[str, int] = field(default_factory=dict)  # coll/collnet/nvls/p2p/p2p_per_peer/rings
    nranks: int | None = None
    nnodes: int | None = None
    ranks: list[int] = field(default_factory=list)  # ranks whose comm line was seen
    tuning_table: dict[str, dict[tuple[str, str], tuple[float, float]]] = field(default_factory=dict)
    per_call: list[CallChoice] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # "NCCL_X set by environment to Y"
    p2p_disabled: bool | None = None
    p2p_disabled_reason: str | None = None
    shm_disabled: bool | None = None
    nvls_available: bool | None = None
    gdr_in_rings: bool | None = None  # "Connected all rings, use ring PXN x GDR y" (2.24+)
    warnings: list[str] = field(default_factory=list)  # NCCL WARN messages
    unparsed: list[str] = field(default_factory=list)  # lines in a format this reader does not know
    unknown: list[str] = field(default_factory=list)  # what could not be determined, and why
    sources: list[str] = field(default_factory=list)  # "host:pid" of the processes read
    mnnvl: dict[str, Any] = field(default_factory=dict)  # multi-node NVLink lines, read by explain/mnnvl.py

    # ------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        """JSON-ready: tuple keys of the model table become "Algo/Proto"."""
        d = dataclasses.asdict(self)
        d["tuning_table"] = {func: {f"{a}/{p}": [lat, bw] for (a, p), (lat, bw) in cells.items()}
                             for func, cells in self.tuning_table.items()}
        return d

    @classmethod
    def from_dict(cls, data: dict) -> NcclLogFacts:
        """Inverse of `to_dict`; keys it does not know are ignored (stored facts outlive code)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        kw["net_devices"] = [_build(NetDevice, x) for x in data.get("net_devices", [])]
        kw["connections"] = [_build(Connection, x) for x in data.get("connections", [])]
        kw["per_call"] = [_build(CallChoice, x) for x in data.get("per_call", [])]
        table = {}
        for func, cells in (data.get("tuning_table") or {}).items():
            table[func] = {tuple(k.split("/", 1)): (float(v[0]), float(v[1])) for k, v in cells.items()}
        kw["tuning_table"] = table
        kw["rank_hosts"] = {int(k): v for k, v in (data.get("rank_hosts") or {}).items()}
        return cls(**kw)


_Part = TypeVar("_Part", NetDevice, Connection, CallChoice)


def _build(cls: type[_Part], data: dict) -> _Part:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in version.split(".")[:3]) if version else None
    except ValueError:
        return None


# ------------------------------------------------------------------ reading


class _Reader:
    """State while reading one text: the facts, plus what a line needs of the lines before it."""

    def __init__(self) -> None:
        self.f = NcclLogFacts()
        self.table_algos: list[str] | None = None
        self.table_protos: list[str] | None = None
        self.table_conflict = False
        self.last_coll_func: dict[tuple, str] = {}
        self.devices: dict[tuple, NetDevice] = {}
        self.speeds: dict[tuple, int] = {}
        self.conn_seen: set[tuple] = set()
        self.versions: list[str] = []
        self.plugins: list[str] = []
        self.topo_at: dict[tuple, tuple[dict, int]] = {}  # per process: the GPU whose links follow, their indent
        self.topo_seen: dict[tuple, dict] = {}

    # -- helpers
    def note(self, text: str) -> None:
        if text not in self.f.unparsed and len(self.f.unparsed) < 50:
            self.f.unparsed.append(text)

    def device(self, host: str | None, index: int, transport: str) -> NetDevice:
        key = (host, transport, index)
        if key not in self.devices:
            self.devices[key] = NetDevice(index=index, transport=transport, host=host)
        return self.devices[key]

    # -- one line
    def line(self, ln: LogLine) -> None:
        src = f"{ln.host}:{ln.pid}" if ln.host is not None else None
        if src and src not in self.f.sources:
            self.f.sources.append(src)
        if ln.host is not None and ln.host not in self.f.hosts:
            self.f.hosts.append(ln.host)
        if ln.level == "WARN":
            if ln.msg not in self.f.warnings:
                self.f.warnings.append(ln.msg)
            mnnvl.read_warning(ln.msg, self.f.mnnvl)
            return
        if ln.level == "VERSION":
            self.version(ln.msg)
            return
        if ln.level != "INFO":
            return
        msg = ln.msg
        mnnvl.read_line(msg, self.f.mnnvl)  # the comm line is also read below
        for handler in (self.version, self.network, self.net_devices, self.connection, self.channels,
                        self.table, self.per_call, self.env, self.topology):
            if handler(msg, ln):
                return

    def version(self, msg: str, ln: LogLine | None = None) -> bool:
        m = F.VERSION.match(msg)
        if m:
            self.versions.append(m.group("v"))
        return m is not None

    def network(self, msg: str, ln: LogLine) -> bool:
        """The network NCCL uses: its plugin (the plugin's events kept as they are), then the
        bootstrap interfaces and GPUDirect RDMA."""
        if F.PLUGIN_EVENT.search(msg) and msg not in self.f.net_plugin_log and len(self.f.net_plugin_log) < 20:
            self.f.net_plugin_log.append(msg)
        return self.plugin(msg) or self.net_paths(msg, ln)

    def plugin(self, msg: str) -> bool:
        """The net plugin: its name, whether it is external, its failures, OFI's version and provider."""
        if m := F.USING_NETWORK.match(msg):
            self.plugins.append(m.group("name"))
        elif F.PLUGIN_LOADED.match(msg):
            if "net plugin" in msg:
                self.f.net_plugin_external = True
        elif F.PLUGIN_LOADED_EXTERNAL.match(msg):
            self.f.net_plugin_external = True
        elif F.PLUGIN_INTERNAL.match(msg):
            if self.f.net_plugin_external is None:
                self.f.net_plugin_external = False
        elif m := F.PLUGIN_ASSIGNED.match(msg):
            if not self.plugins:
                self.plugins.append(m.group("name"))
        elif F.PLUGIN_FAILED.match(msg):
            if msg not in self.f.plugin_failures and len(self.f.plugin_failures) < 10:
                self.f.plugin_failures.append(msg)
        elif m := F.OFI_VERSION.match(msg):
            self.f.net_plugin_version = f"{m.group('name')} {m.group('version')}"
        elif m := F.OFI_PROVIDER.match(msg):
            self.f.ofi_provider = m.group("provider")
        else:
            return False
        return True

    def net_paths(self, msg: str, ln: LogLine) -> bool:
        """The bootstrap's interfaces, GPUDirect RDMA per NIC and in the rings."""
        if m := F.BOOTSTRAP_USING.match(msg):
            for item in m.group("ifs").split():
                if item not in self.f.bootstrap_ifaces:
                    self.f.bootstrap_ifaces.append(item)
        elif m := F.GDR_SUPPORT.match(msg):
            transport = "IB" if m.group("net") == "IB" else m.group("net")
            dev = self.device(ln.host, int(m.group("idx")), transport)
            dev.gdr = m.group("state") == "Enabled"
            dev.name = dev.name or m.group("name")
        elif m := F.RINGS_CONNECTED.match(msg):
            if m.group("gdr") is not None:
                self.f.gdr_in_rings = m.group("gdr") != "0"
        else:
            return False
        return True

    def net_devices(self, msg: str, ln: LogLine) -> bool:
        if m := F.IB_USING.match(msg):
            devs = m.group("devs")
            for mm in F.IB_MERGED.finditer(devs):
                members = list(F.IB_MERGED_MEMBER.finditer(mm.group("body")))
                dev = self.device(ln.host, int(mm.group("idx")), "IB")
                dev.name = "{" + ",".join(x.group("name") for x in members) + "}"
                lls = {x.group("ll") for x in members}
                dev.link_layer = lls.pop() if len(lls) == 1 else None
            for mm in F.IB_DEV.finditer(F.IB_MERGED.sub("", devs)):
                dev = self.device(ln.host, int(mm.group("idx")), "IB")
                dev.name, dev.port, dev.link_layer = mm.group("name"), int(mm.group("port")), mm.group("ll")
            if ln.truncated or m.group("oob") is None:
                self.note("NET/IB device list cut short: devices after the last one listed are unknown")
            self.f.ib_no_device = False
            return True
        if m := F.SOCKET_USING.match(msg):
            for mm in F.SOCKET_DEV.finditer(m.group("devs")):
                dev = self.device(ln.host, int(mm.group("idx")), "Socket")
                dev.name, dev.address = mm.group("name"), mm.group("addr")
            if ln.truncated:
                self.note("NET/Socket interface list cut short: interfaces after the last one listed are unknown")
            return True
        if m := F.IB_SPEED.match(msg):
            self.speeds[(ln.host, m.group("name"))] = int(m.group("speed"))
            return True
        if m := F.IB_VDEV_SPEED.match(msg):
            self.speeds[(ln.host, m.group("name"))] = int(m.group("speed"))
            return True
        if F.IB_NO_DEVICE.match(msg):
            if self.f.ib_no_device is None:
                self.f.ib_no_device = True
            return True
        return False

    def connection(self, msg: str, ln: LogLine) -> bool:
        if not msg.startswith(("Channel ", "CollNet ", "Ring ")):
            return False
        c = None
        if m := F.NET_CONN.match(msg):
            c = Connection(channel=int(m.group("ch")), conn_index=int(m.group("ci")), from_rank=int(m.group("src")),
                           to_rank=int(m.group("dst")), from_dev=m.group("sdev"), to_dev=m.group("ddev"),
                           kind="NET", detail=m.group("detail"), direction=m.group("dir"), host=ln.host)
            self.net_detail(c, ln)
        elif m := F.P2P_CONN.match(msg):
            c = Connection(channel=int(m.group("ch")), conn_index=int(m.group("ci")), from_rank=int(m.group("src")),
                           to_rank=int(m.group("dst")), from_dev=m.group("sdev"), to_dev=m.group("ddev"),
                           kind="P2P", detail=m.group("detail"), host=ln.host)
        elif m := F.SHM_CONN.match(msg):
            c = Connection(channel=int(m.group("ch")), conn_index=int(m.group("ci")) if m.group("ci") else None,
                           from_rank=int(m.group("src")), to_rank=int(m.group("dst")), from_dev=m.group("sdev"),
                           to_dev=m.group("ddev"), kind="SHM", detail=m.group("detail"), host=ln.host)
        elif m := F.COLLNET_CONN.match(msg):
            rank = int(m.group("src"))
            c = Connection(channel=int(m.group("ch")), conn_index=int(m.group("ci")), from_rank=rank, to_rank=rank,
                           kind="CollNet", detail=m.group("detail"), direction=m.group("dir"), host=ln.host)
        elif m := F.RING.match(msg):
            self.f.channel_counts["rings"] = int(m.group("n"))
            return True
        elif m := F.OLD_CONN.match(msg):
            c = self.old_connection(m, ln)
        elif F.CONN_LIKE.match(msg):
            self.note(f"connection line in an unknown format: {msg[:120]}")
            return True
        else:
            return False
        key = (c.host, c.kind, c.channel, c.conn_index, c.from_rank, c.to_rank, c.direction, c.detail)
        if key not in self.conn_seen:
            self.conn_seen.add(key)
            self.f.connections.append(c)
        return True

    def old_connection(self, m: re.Match[str], ln: LogLine) -> Connection:
        """A connection line of NCCL 2.4-2.17 (`nccl_log_formats.OLD_CONN`)."""
        detail = m.group("detail")
        kind = "SHM" if detail.startswith("SHM/") or detail == "direct shared memory" else detail.split("/", 1)[0]
        c = Connection(channel=int(m.group("ch")), conn_index=int(m.group("ci")) if m.group("ci") else None,
                       from_rank=int(m.group("src")), to_rank=int(m.group("dst")), from_dev=m.group("sdev"),
                       to_dev=m.group("ddev"), kind=kind, detail=detail, direction=m.group("dir"), host=ln.host)
        if kind == "NET":
            self.net_detail(c, ln)
        return c

    def net_detail(self, c: Connection, ln: LogLine) -> None:
        """A NET connection's network, device index and GDR (`NET/IB/0/GDRDMA`), new and old formats
        alike; the device it names learns that GDR was used on it."""
        if d := F.NET_DETAIL.match(c.detail):
            c.net, c.net_device = d.group("net"), int(d.group("dev"))
            c.gdr = "/GDRDMA" in d.group("flags")
            dev = self.device(ln.host, c.net_device, c.net)
            dev.gdr_used = bool(dev.gdr_used) or c.gdr
        else:
            self.note(f"NET connection detail not understood: {c.detail}")

    def channels(self, msg: str, ln: LogLine) -> bool:
        if m := F.CHANNELS.match(msg):
            counts = {k: int(v) for k, v in m.groupdict().items() if v is not None}
            for k, v in counts.items():
                self.f.channel_counts[k] = v
            if self.f.nchannels is not None and self.f.nchannels != counts["coll"]:
                self.note(f"communicators with different channel counts ({self.f.nchannels}, {counts['coll']}); "
                          "kept the first")
            else:
                self.f.nchannels = counts["coll"]
            return True
        if (m := F.COMM.match(msg)) or (m := F.INIT_COMPLETE.search(msg)):
            self.f.nranks = max(self.f.nranks or 0, int(m.group("nranks")))
            if "nnodes" in m.groupdict():
                self.f.nnodes = max(self.f.nnodes or 0, int(m.group("nnodes")))
                self.f.local_ranks = max(self.f.local_ranks or 0, int(m.group("local")))
            rank = int(m.group("rank"))
            if ln.host is not None:
                self.f.rank_hosts.setdefault(rank, ln.host)
            if rank not in self.f.ranks:
                self.f.ranks.append(rank)
            return True
        if m := F.NVLS_SUPPORT.match(msg):
            self.f.nvls_available = bool(self.f.nvls_available) or m.group("not") is None
            return True
        if F.P2P_DISABLED.match(msg):
            self.f.p2p_disabled = True
            self.f.p2p_disabled_reason = self.f.p2p_disabled_reason or msg
            return True
        return False

    def table(self, msg: str, ln: LogLine) -> bool:
        if m := F.TABLE_ALGOS.match(msg):
            names = m.group("names").replace("|", " ").split()
            algos = [a for a in names if a in F.ALGOS_BY_ID]
            self.table_algos = algos if names else None
            if not names or len(algos) != len(names):
                self.note(f"model table header with unknown algorithms: {msg.strip()[:120]}")
                self.table_algos = None
            self.table_protos = None
            return True
        if m := F.TABLE_PROTOS.match(msg):
            names = [p.strip() for p in m.group("names").split("|") if p.strip()]
            protos: list[str] = []
            for p in names:
                if p in protos:
                    break
                protos.append(p)
            self.table_protos = protos if all(p in F.PROTOS_BY_ID for p in protos) and protos else None
            return True
        if F.TABLE_THREADS.match(msg):
            return True
        if self.table_algos is None or self.table_protos is None:
            return False
        m = F.TABLE_ROW.match(msg)
        if not m or m.group("func") not in F.NCCL_FUNCS:
            self.table_algos = None  # the block ended
            return False
        cells = F.TABLE_CELL.findall(m.group("cells"))
        want = len(self.table_algos) * len(self.table_protos)
        if len(cells) != want or m.group("rest").strip():
            self.note(f"model table row with {len(cells)} cells, expected {want}: {msg.strip()[:120]}")
            return True
        row = self.f.tuning_table.setdefault(m.group("func"), {})
        for i, (lat, bw) in enumerate(cells):
            key = (self.table_algos[i // len(self.table_protos)], self.table_protos[i % len(self.table_protos)])
            try:
                value = (float(lat), float(bw))
            except ValueError:
                self.note(f"model table cell not a number: {lat}/{bw}")
                continue
            if key in row and row[key] != value:
                self.table_conflict = True
                continue
            row[key] = value
        return True

    def per_call(self, msg: str, ln: LogLine) -> bool:
        if m := F.COLL_CALL.match(msg):
            self.last_coll_func[ln.source] = m.group("func")
            return True
        if not F.CALL_LIKE.search(msg):
            return False
        choice = None
        if m := F.CALL_V224.match(msg):
            lo, hi = int(m.group("lo")), int(m.group("hi"))
            choice = CallChoice(func=m.group("func"), nbytes=int(m.group("nbytes")),
                                algo=self.algo_name(m.group("algo")), proto=self.proto_name(m.group("proto")),
                                nchannels=hi - lo + 1 if hi >= lo >= 0 else None, fmt="2.24", bytes_kind="count")
        elif m := F.CALL_V223.match(msg):
            choice = CallChoice(func=m.group("func"), nbytes=int(m.group("nbytes")),
                                algo=self.algo_id(m.group("algo")), proto=self.proto_id(m.group("proto")),
                                nchannels=None, fmt="2.23", bytes_kind="total", model_time_us=float(m.group("time")))
        elif m := F.CALL_V220.match(msg):
            func = self.last_coll_func.get(ln.source)
            choice = CallChoice(func=func, nbytes=int(m.group("nbytes")),
                                algo=self.algo_id(m.group("algo")), proto=self.proto_id(m.group("proto")),
                                nchannels=None, fmt="2.20", bytes_kind="total", model_time_us=float(m.group("time")),
                                func_inferred=func is not None)
        elif m := F.CALL_SYMMETRIC.match(msg):
            choice = CallChoice(func=m.group("func"), nbytes=int(m.group("nbytes")), algo="Symmetric", proto=None,
                                nchannels=int(m.group("nch")), fmt="symmetric", bytes_kind="count",
                                kernel=m.group("kernel"))
        elif m := F.CALL_CE.match(msg):
            choice = CallChoice(func=m.group("func"), nbytes=int(m.group("nbytes")), algo="CopyEngine", proto=None,
                                nchannels=None, fmt="copy-engine", bytes_kind="count",
                                kernel="cudaMemcpy" + m.group("kind"))
        else:
            self.note(f"per-call line in an unknown format: {msg[:120]}")
            return True
        self.f.per_call.append(choice)
        return True

    def algo_name(self, name: str) -> str | None:
        algo = F.canonical_algo(name)
        if algo is None:
            self.note(f"unknown algorithm name {name!r}")
        return algo

    def proto_name(self, name: str) -> str | None:
        proto = F.canonical_proto(name)
        if proto is None:
            self.note(f"unknown protocol name {name!r}")
        return proto

    def algo_id(self, text: str) -> str | None:
        i = int(text)
        if 0 <= i < len(F.ALGOS_BY_ID):
            return F.ALGOS_BY_ID[i]
        self.note(f"algorithm id {i} is not one NCCL 2.20-2.23 defines")
        return None

    def proto_id(self, text: str) -> str | None:
        i = int(text)
        if 0 <= i < len(F.PROTOS_BY_ID):
            return F.PROTOS_BY_ID[i]
        self.note(f"protocol id {i} is not one NCCL 2.20-2.23 defines")
        return None

    def env(self, msg: str, ln: LogLine) -> bool:
        kv = env_setting(msg)
        if kv is None:
            return False
        key, value = kv
        if key in self.f.env and self.f.env[key] != value:
            self.note(f"{key} reported with different values ({self.f.env[key]!r}, {value!r}); kept the first")
        else:
            self.f.env[key] = value
        return True

    def topology(self, msg: str, ln: LogLine) -> bool:
        """NCCL's topology print (`nccl_log_formats.TOPO_GPU` / `TOPO_LINK`): each GPU's PCIe and NVLink bw."""
        if m := F.TOPO_GPU.match(msg):
            key = (ln.host, m.group("id").lower())
            gpu = self.topo_seen.get(key)
            if gpu is None:
                gpu = {"host": ln.host, "id": m.group("id").lower(), "rank": int(m.group("rank")), "pci_bw": None,
                       "nvl_switch_bw": None, "nvl_peer_bw": {}}
                self.topo_seen[key] = gpu
                self.f.topo_gpus.append(gpu)
            if m.group("ltype") == "PCI":
                gpu["pci_bw"] = float(m.group("lbw"))
            self.topo_at[ln.source] = (gpu, len(m.group("lead")))
            return True
        if m := F.TOPO_LINK.match(msg):
            at = self.topo_at.get(ln.source)
            if at is not None and len(m.group("indent")) == at[1]:
                gpu, bw = at[0], float(m.group("bw"))
                if m.group("ltype") == "NVL" and m.group("rtype") == "NVS":
                    gpu["nvl_switch_bw"] = bw
                elif m.group("ltype") == "NVL" and m.group("rtype") == "GPU":
                    gpu["nvl_peer_bw"][m.group("rid").lower()] = bw
            elif at is not None and len(m.group("indent")) < at[1]:
                self.topo_at.pop(ln.source, None)
            return bool(at is not None) or msg.lstrip().startswith("+ ")
        return False

    # -- the end
    def finish(self) -> NcclLogFacts:
        f = self.f
        for (host, name), speed in self.speeds.items():
            for dev in self.devices.values():
                if dev.host == host and dev.name == name:
                    dev.speed_mbps = speed
        f.net_devices = sorted(self.devices.values(), key=lambda d: (d.host or "", d.transport, d.index))
        for dev in f.net_devices:
            if dev.gdr_used is None and any(c.kind == "NET" and c.net == dev.transport and c.net_device == dev.index
                                            and c.host == dev.host for c in f.connections):
                dev.gdr_used = False
        versions = list(dict.fromkeys(self.versions))
        if len(versions) == 1:
            f.version = versions[0]
        elif versions:
            self.note(f"several NCCL versions in one text: {', '.join(versions)}")
        plugins = list(dict.fromkeys(self.plugins))
        if len(plugins) == 1:
            f.net_plugin = plugins[0]
        elif plugins:
            self.note(f"communicators used different networks: {', '.join(plugins)}")
        if self.table_conflict:
            self.note("several model tables with different values (several communicators); kept the first")
        _env_hints(f)
        f.unknown = _unknown(f)
        return f


def _env_hints(f: NcclLogFacts) -> None:
    """P2P/SHM switched off by the environment, as NCCL reported the variables."""
    if f.env.get("NCCL_P2P_DISABLE", "0") not in ("0", ""):
        f.p2p_disabled, f.p2p_disabled_reason = True, f"NCCL_P2P_DISABLE={f.env['NCCL_P2P_DISABLE']}"
    elif f.env.get("NCCL_P2P_LEVEL", "").upper() in ("LOC", "0"):
        f.p2p_disabled, f.p2p_disabled_reason = True, f"NCCL_P2P_LEVEL={f.env['NCCL_P2P_LEVEL']}"
    elif f.p2p_disabled is None and any(c.kind == "P2P" for c in f.connections):
        f.p2p_disabled = False
    if f.env.get("NCCL_SHM_DISABLE", "0") not in ("0", ""):
        f.shm_disabled = True
    elif any(c.kind == "SHM" for c in f.connections):
        f.shm_disabled = False


def _version_unknown(f: NcclLogFacts, vt: tuple[int, ...] | None) -> list[str]:
    """What the version says about the reading: no version line, or one outside the formats read."""
    if vt is None:
        return ["NCCL version: no 'NCCL version' line (printed once per process at the first init)"]
    if vt[:2] > F.NEWEST_READ:
        return [f"NCCL {f.version} is newer than the formats read from its source "
                f"({F.OLDEST_READ[0]}.{F.OLDEST_READ[1]}-{F.NEWEST_READ[0]}.{F.NEWEST_READ[1]}): "
                "lines in changed formats are missed, not guessed"]
    if vt[:2] < F.OLDEST_CONNECTIONS_READ:
        return [f"NCCL {f.version} is older than 2.4: its formats were not checked"]
    if vt[:2] < F.OLDEST_READ:
        return [f"NCCL {f.version} is older than 2.18: its connection, channel and plugin lines were read "
                "from its source, its model table and per-call lines were not"]
    return []


def _choices_unknown(f: NcclLogFacts, vt: tuple[int, ...] | None) -> list[str]:
    """Why the model table and the per-call choices are missing (one rank, an old release build,
    TUNING off) or nameless."""
    out = []
    one_rank = f.nranks == 1
    if not f.tuning_table:
        if one_rank:
            out.append("model table: none with one rank (graph/tuning.cc returns before the table when nRanks <= 1)")
        else:
            out.append("model table: no TUNING table (printed at init by each communicator's rank 0 when "
                       "NCCL_DEBUG_SUBSYS includes TUNING)")
    if not f.per_call:
        if one_rank:
            out.append("per-call algorithm: none with one rank (NCCL copies locally, no algorithm is chosen)")
        elif vt is not None and vt[:2] < (2, 20):
            out.append(f"per-call algorithm: NCCL {f.version} release builds print no per-call choice")
        else:
            out.append("per-call algorithm: no per-call TUNING line (printed by rank 0 while TUNING is on)")
    elif any(c.func is None for c in f.per_call):
        out.append("per-call algorithm: NCCL 2.20-2.22 lines name no collective and no COLL line preceded "
                   "them: their function is unknown")
    return out


def _unknown(f: NcclLogFacts) -> list[str]:
    """Why each fact that stayed empty is unknown (recomputed after a merge)."""
    if not f.sources and f.version is None:
        return ["no NCCL log line found (NCCL_DEBUG was not INFO, or the log was not captured)"]
    vt = _version_tuple(f.version)
    out = _version_unknown(f, vt)
    if f.net_plugin is None:
        out.append("network: no 'Using network' line (printed at communicator init with the INIT subsystem)")
    if not f.net_devices:
        out.append("network devices: no NET/IB, NET/Socket or NET connection line (NET subsystem off, "
                   "or NCCL never set up its network)")
    if f.nchannels is None:
        out.append("channels: no '<n> coll channels' line (INIT subsystem)")
    out += _choices_unknown(f, vt)
    if f.unparsed:
        out.append(f"{len(f.unparsed)} line kind(s) in formats this reader does not know (see unparsed)")
    return out


def parse_nccl_log(text: str) -> NcclLogFacts:
    """Facts from one NCCL log text (one rank's file or any text with NCCL lines in it)."""
    r = _Reader()
    for raw in text.splitlines():
        ln = read_log_line(raw)
        if ln is not None:
            try:
                r.line(ln)
            except (ValueError, IndexError, KeyError) as e:  # a damaged line never stops the reader
                r.note(f"line not read ({type(e).__name__}): {raw[:120]}")
    return r.finish()


def parse_nccl_lines(lines: Iterable[str]) -> NcclLogFacts:
    return parse_nccl_log("\n".join(lines))


# ------------------------------------------------------------------ stored with a run


def facts_from_stored(stored: dict) -> NcclLogFacts:
    """The facts of a log kept with a run: read from its raw lines (imports keep those, up to a cap,
    so a newer reader finds more), or as stored (`{"facts": NcclLogFacts.to_dict()}`, live runs)."""
    lines = list(stored.get("lines") or [])
    omitted = int(stored.get("omitted_lines") or 0)
    if lines and not (omitted and stored.get("facts")):
        facts = parse_nccl_lines(lines)
        if omitted:
            facts.unknown.append(f"{omitted} NCCL log line(s) after the first {len(lines)} were not kept with the "
                                 "run: what only they said is missing")
        return facts
    return NcclLogFacts.from_dict(stored.get("facts") or {})


# ------------------------------------------------------------------ several ranks


def _agreed(parts: list[NcclLogFacts], name: str, notes: list[str]) -> str | None:
    """The one value the processes give for a str field, or None with a note where they disagree."""
    values = list(dict.fromkeys(getattr(p, name) for p in parts if getattr(p, name) is not None))
    if len(values) > 1:
        notes.append(f"ranks disagree on {name}: {', '.join(map(str, values))}")
        return None
    return values[0] if values else None


def _merge_hosts(out: NcclLogFacts, parts: list[NcclLogFacts]) -> None:
    """The hosts, their ranks and GPUs, plugin failures and bootstrap interfaces, each once."""
    for p in parts:
        out.hosts += [h for h in p.hosts if h not in out.hosts]
        out.plugin_failures += [x for x in p.plugin_failures if x not in out.plugin_failures]
        out.bootstrap_ifaces += [x for x in p.bootstrap_ifaces if x not in out.bootstrap_ifaces]
        for rank, host in p.rank_hosts.items():
            out.rank_hosts.setdefault(rank, host)
    no_dev = [p.ib_no_device for p in parts if p.ib_no_device is not None]
    out.ib_no_device = all(no_dev) if no_dev else None
    out.local_ranks = max((p.local_ranks for p in parts if p.local_ranks), default=None)
    topo_keys = set()
    for p in parts:
        for g in p.topo_gpus:
            if (g.get("host"), g.get("id")) not in topo_keys:
                topo_keys.add((g.get("host"), g.get("id")))
                out.topo_gpus.append(g)
    ext = [p.net_plugin_external for p in parts if p.net_plugin_external is not None]
    out.net_plugin_external = any(ext) if ext else None


def _merged_net_devices(parts: list[NcclLogFacts]) -> list[NetDevice]:
    """One entry per (host, transport, index): the first process's, its gaps filled from the
    others', GPUDirect RDMA used where any process used it."""
    devices: dict[tuple, NetDevice] = {}
    for p in parts:
        for d in p.net_devices:
            key = (d.host, d.transport, d.index)
            if key not in devices:
                devices[key] = dataclasses.replace(d)
                continue
            have = devices[key]
            for fld in dataclasses.fields(NetDevice):
                if getattr(have, fld.name) is None:
                    setattr(have, fld.name, getattr(d, fld.name))
            if d.gdr_used:
                have.gdr_used = True
    return sorted(devices.values(), key=lambda d: (d.host or "", d.transport, d.index))


def _merge_links(out: NcclLogFacts, parts: list[NcclLogFacts], notes: list[str]) -> None:
    """The connections (each once) and the collective channel count (the first, with a note where
    processes differ)."""
    seen = set()
    for p in parts:
        for c in p.connections:
            key = dataclasses.astuple(c)
            if key not in seen:
                seen.add(key)
                out.connections.append(c)
    counts = [p.nchannels for p in parts if p.nchannels is not None]
    if counts:
        out.nchannels = counts[0]
        if len(set(counts)) > 1:
            notes.append(f"ranks report different collective channel counts {sorted(set(counts))}; kept the first")


def _merge_per_process(out: NcclLogFacts, parts: list[NcclLogFacts], notes: list[str]) -> None:
    """What each process adds: channel counts, ranks, TUNING cells, per-call lines, MNNVL facts,
    settings (a note where two differ), warnings, plugin log, unread lines, sources."""
    for p in parts:
        for k, v in p.channel_counts.items():
            out.channel_counts.setdefault(k, v)
        out.ranks += [r for r in p.ranks if r not in out.ranks]
        for func, cells in p.tuning_table.items():
            row = out.tuning_table.setdefault(func, {})
            for cell, value in cells.items():
                row.setdefault(cell, value)
        out.per_call += p.per_call
        mnnvl.merge(out.mnnvl, p.mnnvl)
        for name, setting in p.env.items():
            if name in out.env and out.env[name] != setting:
                notes.append(f"ranks report different {name}: {out.env[name]!r}, {setting!r}")
            out.env.setdefault(name, setting)
        out.warnings += [w for w in p.warnings if w not in out.warnings]
        out.net_plugin_log += [w for w in p.net_plugin_log if w not in out.net_plugin_log]
        out.unparsed += [u for u in p.unparsed if u not in out.unparsed]
        out.sources += [s for s in p.sources if s not in out.sources]


def _merge_counts_and_flags(out: NcclLogFacts, parts: list[NcclLogFacts]) -> None:
    """The largest rank and node counts; P2P/SHM off, NVLS, GDR where any process says so."""
    out.nranks = max((p.nranks for p in parts if p.nranks), default=None)
    out.nnodes = max((p.nnodes for p in parts if p.nnodes), default=None)
    for name in ("p2p_disabled", "shm_disabled", "nvls_available", "gdr_in_rings"):
        values = [getattr(p, name) for p in parts if getattr(p, name) is not None]
        if values:
            setattr(out, name, any(values))
    out.p2p_disabled_reason = next((p.p2p_disabled_reason for p in parts if p.p2p_disabled_reason), None)


def merge_facts(parts: list[NcclLogFacts]) -> NcclLogFacts:
    """One view of several processes' logs: agreeing facts kept, disagreements said, not resolved."""
    out = NcclLogFacts()
    notes: list[str] = []
    out.version = _agreed(parts, "version", notes)
    out.net_plugin = _agreed(parts, "net_plugin", notes)
    out.net_plugin_version = _agreed(parts, "net_plugin_version", notes)
    out.ofi_provider = _agreed(parts, "ofi_provider", notes)
    _merge_hosts(out, parts)
    out.net_devices = _merged_net_devices(parts)
    _merge_links(out, parts, notes)
    _merge_per_process(out, parts, notes)
    _merge_counts_and_flags(out, parts)
    out.unparsed += [n for n in notes if n not in out.unparsed]
    out.unknown = _unknown(out)
    return out


# ------------------------------------------------------------------ per-size view


def per_size_choices(facts: NcclLogFacts, func: str | None) -> list[tuple[int, int, str, str | None, int | None]]:
    """NCCL's choices for `func` ("AllReduce"; None: the nameless 2.20-2.22 lines) as size ranges.

    Consecutive sizes (in NCCL's own byte count, see `CallChoice.bytes_kind`)
    with the same (algorithm, protocol, channels) collapse into one
    (lo_bytes, hi_bytes, algo, proto, nchannels).  A size seen with two
    different choices gives two entries: nothing is averaged away.
    """
    calls = [c for c in facts.per_call if c.func == func and c.algo is not None]
    by_size: dict[int, list[tuple]] = {}
    for c in calls:
        choice = (c.algo, c.proto, c.nchannels)
        if choice not in by_size.setdefault(c.nbytes, []):
            by_size[c.nbytes].append(choice)
    out: list[list] = []
    last_single = False  # the last entry ends at a size NCCL treated one way only
    for size in sorted(by_size):
        choices = by_size[size]
        single = len(choices) == 1
        if single and last_single and tuple(out[-1][2:]) == choices[0]:
            out[-1][1] = size
        else:
            out += [[size, size, *choice] for choice in choices]
        last_single = single
    return [tuple(x) for x in out]


def format_bytes(n: int) -> str:
    """8 B, 64 KiB, 1.5 MiB: binary units, as sizes are given on the command line."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:g} {unit}" if v == int(v) or v >= 100 else f"{v:.3g} {unit}"
    return f"{n} B"


def choice_lines(label: str, ranges: list[tuple[int, int, str, str | None, int | None]]) -> list[str]:
    """`# all_reduce 8 B - 64 KiB: Ring/LL, 2 channels` lines for the text after the table."""
    out = []
    for lo, hi, algo, proto, nch in ranges:
        span = format_bytes(lo) if lo == hi else f"{format_bytes(lo)} - {format_bytes(hi)}"
        what = algo + (f"/{proto}" if proto else "")
        if nch is not None:
            what += f", {nch} channel" + ("" if nch == 1 else "s")
        out.append(f"# {label} {span}: {what}")
    return out
