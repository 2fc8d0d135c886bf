"""A described host, materialised as a fake NVML and a fake sysfs tree.

The topology readers take an NVML module and a sysfs root as parameters; this
module supplies both for a host that is not here: an 8-GPU HGX H100, a PCIe
box with a downtrained link, a RoCE cluster node.  CPU tests and the
published-systems table (`bench/explain_published.py`) run the real readers
against these, so the facts they judge come through the same code path as a
real host's.  `FakeNvml` answers with NVML's own function names, return codes
and constant values (a test checks them against nvidia-ml-py), and the sysfs
tree has the real layout: class directories with `device` links into
/sys/devices, PCI bridges as parent directories, the same file formats.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import zlib
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

# NVML return codes and constants (nvml.h; the same values as nvidia-ml-py's).
NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
_ERROR_TEXT = {NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument", NVML_ERROR_NOT_SUPPORTED: "Not Supported",
               NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found"}


@dataclass
class GpuSpec:
    name: str
    cc: tuple[int, int]
    bus_id: str  # '0000:18:00.0'
    bridges: tuple[str, ...] = ()  # PCI functions from the root port down to the GPU's parent
    host_bridge: str = "pci0000:00"
    numa: int = 0
    nvlinks: int = 0  # links the GPU has (0: no NVLink, NVML answers NOT_SUPPORTED)
    links_down: tuple[int, ...] = ()
    nvlink_remote: str = "switch"  # 'switch' or 'gpu'
    nvlink_peers: tuple[tuple[str, int], ...] = ()  # direct links: (peer bus id, links)
    nvml_fields: tuple[int, int] | None = None  # (field 90 MB/s, field 91 count); None: NOT_SUPPORTED
    pcie: tuple[int, int, int, int] = (5, 5, 16, 16)  # gen, gen_max, width, width_max
    pstate: int = 0
    uuid: str = ""
    memory: tuple[int, int] | None = None  # (bus width bits, max memory clock MHz); None: NOT_SUPPORTED
    fabric: tuple[str, int, int] | None = None  # NVLink fabric (cluster UUID hex, clique id, state); None: NOT_SUPPORTED


@dataclass
class NicSpec:
    name: str  # RDMA device ('mlx5_0') or interface ('eth0') for Ethernet/Slingshot
    kind: str  # 'ib', 'roce', 'efa', 'ethernet', 'slingshot'
    rate_gbps: float | None
    bus_id: str
    state: str = "ACTIVE"  # RDMA: ACTIVE/DOWN; Ethernet: up/down
    bridges: tuple[str, ...] = ()
    host_bridge: str = "pci0000:00"
    numa: int = 0
    netdev: str | None = None  # RoCE/EFA interface name
    pcie: tuple[int, int, int, int] = (5, 5, 16, 16)


@dataclass
class HostSpec:
    host: str
    gpus: list[GpuSpec] = field(default_factory=list)
    nics: list[NicSpec] = field(default_factory=list)
    peermem: bool = True
    cpu_vendor: str = "GenuineIntel"
    nvml_available: bool = True


class NVMLError(Exception):
    """Raised like nvidia-ml-py's NVMLError: `.value` is the NVML return code."""

    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"error {self.value}")


class FabricInfoV(ctypes.Structure):
    """nvmlGpuFabricInfo_v2_t, laid out as nvidia-ml-py's c_nvmlGpuFabricInfo_v2_t (nvml.h)."""

    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_int),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint), ("healthMask", ctypes.c_uint32)]


class FakeNvml:
    """The subset of nvidia-ml-py (`pynvml`) the topology reader calls, answering for a HostSpec."""

    NVMLError = NVMLError
    NVML_SUCCESS = NVML_SUCCESS
    NVML_ERROR_INVALID_ARGUMENT = NVML_ERROR_INVALID_ARGUMENT
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_DEVICE_TYPE_GPU = 0
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
    NVML_NVLINK_MAX_LINKS = 36  # as nvidia-ml-py 13 defines it
    NVML_TOPOLOGY_INTERNAL = 0
    NVML_TOPOLOGY_SINGLE = 10
    NVML_TOPOLOGY_MULTIPLE = 20
    NVML_TOPOLOGY_HOSTBRIDGE = 30
    NVML_TOPOLOGY_NODE = 40
    NVML_TOPOLOGY_SYSTEM = 50
    NVML_CLOCK_MEM = 2
    NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
    NVML_GPU_FABRIC_STATE_COMPLETED = 3
    c_nvmlGpuFabricInfoV_t = FabricInfoV

    def __init__(self, spec: HostSpec):
        self.spec = spec
        self.initialised = 0

    # -- library -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if not self.spec.nvml_available:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.spec.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.spec.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return index

    def _g(self, h: int) -> GpuSpec:
        return self.spec.gpus[h]

    # -- identity ------------------------------------------------------------------------
    def nvmlDeviceGetName(self, h: int) -> str:
        return self._g(h).name

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._g(h).uuid or f"GPU-{zlib.crc32(self.spec.host.encode()):08x}-0000-0000-0000-{h:012x}"

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=_nvml_bus_id(self._g(h).bus_id))

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return self._g(h).cc

    # -- PCIe ----------------------------------------------------------------------------
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._g(h).pcie[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return self._g(h).pcie[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._g(h).pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return self._g(h).pcie[3]

    def nvmlDeviceGetPerformanceState(self, h: int) -> int:
        return self._g(h).pstate

    # -- memory --------------------------------------------------------------------------
    def nvmlDeviceGetMemoryBusWidth(self, h: int) -> int:
        g = self._g(h)
        if g.memory is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g.memory[0]

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock_type: int) -> int:
        g = self._g(h)
        if clock_type != self.NVML_CLOCK_MEM:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # only the memory clock is described
        if g.memory is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g.memory[1]

    # -- NVLink fabric (multi-node NVLink) -------------------------------------------------
    def nvmlDeviceGetGpuFabricInfoV(self, h: int, ref: Any) -> int:
        g = self._g(h)
        if g.fabric is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        info = getattr(ref, "_obj", ref)  # ctypes.byref(struct), as NCCL and nvidia-ml-py's users pass it
        uuid, clique, state = g.fabric
        info.clusterUuid[:] = list(bytes.fromhex(uuid))
        info.cliqueId, info.state, info.status = clique, state, NVML_SUCCESS
        return NVML_SUCCESS

    # -- NVLink --------------------------------------------------------------------------
    def _link(self, h: int, link: int) -> GpuSpec:
        g = self._g(h)
        if g.nvlinks == 0:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < g.nvlinks:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return g

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        g = self._link(h, link)
        return self.NVML_FEATURE_DISABLED if link in g.links_down else self.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        g = self._link(h, link)
        return self.NVML_NVLINK_DEVICE_TYPE_SWITCH if g.nvlink_remote == "switch" else self.NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        g = self._link(h, link)
        if g.nvlink_remote == "switch":
            return SimpleNamespace(busId="00000000:FF:00.0")
        i = 0
        for peer, count in g.nvlink_peers:
            if link < i + count:
                return SimpleNamespace(busId=_nvml_bus_id(peer))
            i += count
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetFieldValues(self, h: int, field_ids: list[int | tuple[int, int]]) -> list[SimpleNamespace]:
        g = self._g(h)
        out = []
        for fid in field_ids:
            fid = fid[0] if isinstance(fid, tuple) else fid
            value = None
            if g.nvml_fields is not None and fid in (90, 91):
                value = g.nvml_fields[0] if fid == 90 else g.nvml_fields[1]
            out.append(SimpleNamespace(fieldId=fid, scopeId=0,
                                       nvmlReturn=NVML_SUCCESS if value is not None else NVML_ERROR_NOT_SUPPORTED,
                                       value=SimpleNamespace(uiVal=value or 0)))
        return out

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: int, h2: int) -> int:
        a, b = self._g(h1), self._g(h2)
        if a.host_bridge != b.host_bridge:
            return self.NVML_TOPOLOGY_NODE if a.numa == b.numa else self.NVML_TOPOLOGY_SYSTEM
        common = 0
        for x, y in zip(a.bridges, b.bridges):
            if x != y:
                break
            common += 1
        if common == 0:
            return self.NVML_TOPOLOGY_HOSTBRIDGE
        extra = (len(a.bridges) - common) + (len(b.bridges) - common)
        return self.NVML_TOPOLOGY_SINGLE if extra <= 2 else self.NVML_TOPOLOGY_MULTIPLE


def _nvml_bus_id(bus_id: str) -> str:
    """'0000:1a:00.0' -> NVML's '00000000:1A:00.0'."""
    dom, rest = bus_id.split(":", 1)
    return f"{int(dom, 16):08X}:{rest.upper()}"


# -- sysfs --------------------------------------------------------------------------------

_GTS = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe",
        6: "64.0 GT/s PCIe"}
_IB_NAMES = {100: "4X EDR", 200: "4X HDR", 400: "4X NDR", 800: "4X XDR", 25: "1X EDR", 50: "1X HDR"}


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")


def _symlink(root: str, link_rel: str, target_rel: str) -> None:
    """A relative symlink, as sysfs has them, so the tree resolves inside `root`."""
    link = os.path.join(root, link_rel)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(os.path.relpath(os.path.join(root, target_rel), os.path.dirname(link)), link)


def _pci_device(root: str, host_bridge: str, bridges: tuple[str, ...], bdf: str, numa: int,
                pcie: tuple[int, int, int, int], driver: str | None) -> str:
    dev_rel = os.path.join("sys/devices", host_bridge, *bridges, bdf)
    d = os.path.join(root, dev_rel)
    _write(os.path.join(d, "numa_node"), str(numa))
    _write(os.path.join(d, "current_link_speed"), _GTS[pcie[0]])
    _write(os.path.join(d, "max_link_speed"), _GTS[pcie[1]])
    _write(os.path.join(d, "current_link_width"), str(pcie[2]))
    _write(os.path.join(d, "max_link_width"), str(pcie[3]))
    if not os.path.lexists(os.path.join(root, "sys/bus/pci/devices", bdf)):
        _symlink(root, os.path.join("sys/bus/pci/devices", bdf), dev_rel)
    if driver:
        os.makedirs(os.path.join(root, "sys/bus/pci/drivers", driver), exist_ok=True)
        if not os.path.lexists(os.path.join(d, "driver")):
            _symlink(root, os.path.join(dev_rel, "driver"), os.path.join("sys/bus/pci/drivers", driver))
    return dev_rel


def build_sysfs(spec: HostSpec, root: str) -> str:
    """Write the host's /sys and /proc/cpuinfo under `root`; returns root."""
    os.makedirs(os.path.join(root, "sys/class/net"), exist_ok=True)
    os.makedirs(os.path.join(root, "sys/module/nvidia"), exist_ok=True)
    _write(os.path.join(root, "proc/cpuinfo"), f"processor\t: 0\nvendor_id\t: {spec.cpu_vendor}\n")
    if spec.peermem:
        _write(os.path.join(root, "sys/module/nvidia_peermem/version"), "1.0")
    for g in spec.gpus:
        _pci_device(root, g.host_bridge, g.bridges, g.bus_id, g.numa, g.pcie, "nvidia")
    # virtual interfaces: no PCI device, never a NIC NCCL would pick
    for virt in ("lo", "docker0"):
        _write(os.path.join(root, "sys/class/net", virt, "operstate"), "unknown")
        _write(os.path.join(root, "sys/class/net", virt, "type"), "772" if virt == "lo" else "1")
    for n in spec.nics:
        driver = {"ib": "mlx5_core", "roce": "mlx5_core", "efa": "efa", "ethernet": "ice", "slingshot": "cxi_ss1"}
        dev_rel = _pci_device(root, n.host_bridge, n.bridges, n.bus_id, n.numa, n.pcie, driver.get(n.kind))
        if n.kind in ("ib", "roce", "efa"):
            base = os.path.join("sys/class/infiniband", n.name)
            _symlink(root, os.path.join(base, "device"), dev_rel)
            port = os.path.join(root, base, "ports/1")
            rate = n.rate_gbps or 0
            _write(os.path.join(port, "rate"), f"{rate:g} Gb/sec ({_IB_NAMES.get(int(rate), '4X')})")
            up = n.state.upper() == "ACTIVE"
            _write(os.path.join(port, "state"), "4: ACTIVE" if up else "1: DOWN")
            _write(os.path.join(port, "phys_state"), "5: LinkUp" if up else "3: Disabled")
            _write(os.path.join(port, "link_layer"),
                   {"ib": "InfiniBand", "roce": "Ethernet", "efa": "Unspecified"}[n.kind])
            if n.kind == "ib":  # IPoIB interface of the HCA: type 32, skipped by the reader
                ipoib = f"ib{n.name.rsplit('_', 1)[-1]}"
                _write(os.path.join(root, "sys/class/net", ipoib, "type"), "32")
                _write(os.path.join(root, "sys/class/net", ipoib, "operstate"), "up" if up else "down")
                _symlink(root, os.path.join("sys/class/net", ipoib, "device"), dev_rel)
            if n.netdev:
                _write(os.path.join(port, "gid_attrs/ndevs/0"), n.netdev)
                ifbase = os.path.join("sys/class/net", n.netdev)
                _write(os.path.join(root, ifbase, "type"), "1")
                _write(os.path.join(root, ifbase, "operstate"), "up" if up else "down")
                _write(os.path.join(root, ifbase, "speed"), str(int(rate * 1000)) if up else "-1")
                _symlink(root, os.path.join(ifbase, "device"), dev_rel)
        else:
            ifbase = os.path.join("sys/class/net", n.name)
            up = n.state.lower() == "up"
            _write(os.path.join(root, ifbase, "type"), "1")
            _write(os.path.join(root, ifbase, "operstate"), "up" if up else "down")
            if up and n.rate_gbps:
                _write(os.path.join(root, ifbase, "speed"), str(int(n.rate_gbps * 1000)))
            _symlink(root, os.path.join(ifbase, "device"), dev_rel)
            if n.kind == "slingshot":
                _symlink(root, os.path.join("sys/class/cxi", f"cxi{n.name[-1]}", "device"), dev_rel)
    return root


# -- common layouts ------------------------------------------------------------------------

def hgx_host(host: str, gpu_name: str, cc: tuple[int, int], *, ngpus: int = 8, nvlinks: int = 18,
             nvlink_fields: tuple[int, int] | None = None, gpu_pcie: tuple[int, int, int, int] = (5, 5, 16, 16),
             nic_kind: str | None = "ib", nic_gbps: float = 400, nics: int = 8,
             nic_pcie: tuple[int, int, int, int] = (5, 5, 16, 16), peermem: bool = True) -> HostSpec:
    """An HGX/DGX-style node: GPUs on NVSwitch, one NIC beside each GPU under a shared PCIe
    switch (GPU i and NIC i are PIX), half of them on each NUMA node."""
    spec = HostSpec(host=host, peermem=peermem)
    for i in range(ngpus):
        numa = 0 if i < max(1, ngpus // 2) else 1
        hb = f"pci0000:{0x10 * (i + 1):02x}"
        up = f"0000:{0x10 * (i + 1) + 1:02x}:00.0"
        sw = (f"0000:{0x10 * (i + 1):02x}:01.0", up)
        spec.gpus.append(GpuSpec(
            name=gpu_name, cc=cc, bus_id=f"0000:{0x10 * (i + 1) + 3:02x}:00.0", host_bridge=hb,
            bridges=sw + (f"0000:{0x10 * (i + 1) + 2:02x}:00.0",), numa=numa, nvlinks=nvlinks,
            nvlink_remote="switch", nvml_fields=nvlink_fields, pcie=gpu_pcie))
        if nic_kind and i < nics:
            spec.nics.append(NicSpec(
                name=f"mlx5_{i}" if nic_kind in ("ib", "roce") else f"rdmap{i}s0" if nic_kind == "efa" else f"eth{i}",
                kind=nic_kind, rate_gbps=nic_gbps, bus_id=f"0000:{0x10 * (i + 1) + 5:02x}:00.0", host_bridge=hb,
                bridges=sw + (f"0000:{0x10 * (i + 1) + 2:02x}:01.0",), numa=numa,
                netdev=f"ens{i}np0" if nic_kind == "roce" else None, pcie=nic_pcie,
                state="ACTIVE" if nic_kind in ("ib", "roce", "efa") else "up"))
    return spec


NVL72_TRAYS = 18  # GB200/GB300 NVL72: 18 compute trays of 4 GPUs on one NVLink switch fabric


def nvl72_rack(prefix: str = "tray", gpu_name: str = "NVIDIA GB200", cc: tuple[int, int] = (10, 0), *,
               trays: int = NVL72_TRAYS, cluster_uuid: str = "4e564c3732000000000000000000a001",
               clique: int = 1, fabric_state: int = 3, nic_gbps: float = 400,
               nic_pcie: tuple[int, int, int, int] = (5, 5, 16, 16)) -> list[HostSpec]:
    """A GB200/GB300 NVL72 rack as its hosts see it: `trays` compute trays (hosts) of 4 GPUs, each GPU
    with 18 NVLink5 links (50 GB/s per direction each: 900 GB/s, 1.8 TB/s both ways) to the rack's
    NVLink switch trays, one InfiniBand NIC per GPU (GB200: ConnectX-7, 400 Gb/s on PCIe Gen5 x16; GB300:
    ConnectX-8, 800 Gb/s on Gen6 x16, `nic_gbps=800, nic_pcie=(6, 6, 16, 16)`); every GPU reports the same
    fabric cluster UUID and clique (NVIDIA GB200 NVL72 specification: 72 GPUs, 130 TB/s NVLink; fabric state
    3 = completed)."""
    specs = []
    for t in range(trays):
        spec = hgx_host(f"{prefix}{t:02d}", gpu_name, cc, ngpus=4, nvlinks=18, nic_kind="ib", nic_gbps=nic_gbps,
                        nics=4, nic_pcie=nic_pcie)
        spec.gpus = [dataclasses.replace(g, fabric=(cluster_uuid, clique, fabric_state)) for g in spec.gpus]
        specs.append(spec)
    return specs


def pcie_host(host: str, gpu_name: str, cc: tuple[int, int], *, ngpus: int = 4,
              gpu_pcie: tuple[int, int, int, int] = (4, 4, 16, 16), same_switch: bool = True,
              nic_kind: str | None = "ethernet", nic_gbps: float = 100, peermem: bool = False) -> HostSpec:
    """A PCIe-only server: GPUs without NVLink, behind one PCIe switch (or each on its own root
    port), one NIC on the first root complex."""
    spec = HostSpec(host=host, peermem=peermem)
    for i in range(ngpus):
        bridges = ("0000:00:01.0", "0000:01:00.0", f"0000:02:{i:02x}.0") if same_switch else (f"0000:00:{i + 1:02x}.0",)
        spec.gpus.append(GpuSpec(name=gpu_name, cc=cc, bus_id=f"0000:{0x10 + i:02x}:00.0", bridges=bridges,
                                 numa=0, nvlinks=0, pcie=gpu_pcie))
    if nic_kind:
        spec.nics.append(NicSpec(name="eth0" if nic_kind == "ethernet" else "mlx5_0", kind=nic_kind,
                                 rate_gbps=nic_gbps, bus_id="0000:40:00.0", bridges=("0000:00:10.0",),
                                 state="up" if nic_kind == "ethernet" else "ACTIVE", pcie=(4, 4, 16, 16),
                                 netdev="ens40np0" if nic_kind == "roce" else None))
    return spec


def materialise(spec: HostSpec, root: str) -> tuple[FakeNvml, str]:
    """(the fake NVML, the sysfs root) for `gather_host_topology(nvml, root, spec.host)`."""
    return FakeNvml(spec), build_sysfs(spec, root)


# -- a real NVML's answers, replayed ---------------------------------------------------------

_ERROR_CODES = {"InvalidArgument": NVML_ERROR_INVALID_ARGUMENT, "NotSupported": NVML_ERROR_NOT_SUPPORTED,
                "LibraryNotFound": NVML_ERROR_LIBRARY_NOT_FOUND, "NoPermission": 4, "NotFound": 6,
                "GpuIsLost": 15, "Unknown": 999}
NOT_RECORDED = -1


class _Recorded(NVMLError):
    def __str__(self) -> str:
        return "not recorded in the dump" if self.value == NOT_RECORDED else super().__str__()


class RecordedNvml(FakeNvml):
    """Answers what a real NVML answered, from `bench/nvml_dump.py`'s JSON: values as recorded,
    recorded errors ('error: NVMLError_NotSupported: ...') raised with their NVML code, and calls
    the dump did not record raise 'not recorded' (so the reader marks them unknown)."""

    NVMLError = NVMLError

    def __init__(self, dump: dict[str, Any]):
        super().__init__(HostSpec(host="recorded"))
        self.dump = dump

    def _dev(self, h: int) -> dict[str, Any]:
        dev: dict[str, Any] = self.dump["devices"][h]
        return dev

    def _answer(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith("error:"):
            cls = value.split(":")[1].strip().replace("NVMLError_", "")
            text = value.split(":", 2)[-1].strip()
            by_text = {t: code for code, t in _ERROR_TEXT.items()}  # a FakeNvml's NVMLError, recorded
            raise _Recorded(_ERROR_CODES.get(cls, by_text.get(text, 999)))
        return value

    def _get(self, h: int, key: str) -> Any:
        dev = self._dev(h)
        if key not in dev:
            raise _Recorded(NOT_RECORDED)
        return self._answer(dev[key])

    def _get_int(self, h: int, key: str) -> int:
        value: int = self._get(h, key)  # as recorded: NVML answers it with an int
        return value

    def _get_str(self, h: int, key: str) -> str:
        value: str = self._get(h, key)
        return value

    def nvmlDeviceGetCount(self) -> int:
        return len(self.dump["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.dump["devices"]):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetName(self, h: int) -> str:
        return self._get_str(h, "name")

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._get_str(h, "uuid")

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._get(h, "pci_bus_id"))

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        v = self._get(h, "cuda_cc")
        if isinstance(v, str):  # recorded as repr: '(9, 0)'
            major, minor = (int(x) for x in v.strip("()[] ").split(","))
            return major, minor
        major, minor = (int(x) for x in v)
        return major, minor

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._get_int(h, "pcie_gen_cur")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return self._get_int(h, "pcie_gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._get_int(h, "pcie_width_cur")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return self._get_int(h, "pcie_width_max")

    def nvmlDeviceGetPerformanceState(self, h: int) -> int:
        return self._get_int(h, "pstate")

    def nvmlDeviceGetMemoryBusWidth(self, h: int) -> int:
        return self._get_int(h, "memory_bus_width")

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock_type: int) -> int:
        if clock_type != self.NVML_CLOCK_MEM:
            raise _Recorded(NOT_RECORDED)
        return self._get_int(h, "max_clock_mem")

    def nvmlDeviceGetGpuFabricInfoV(self, h: int, ref: Any) -> int:
        rec = self._get(h, "fabric")
        info = getattr(ref, "_obj", ref)
        info.clusterUuid[:] = list(bytes.fromhex(rec["uuid"]))
        info.cliqueId, info.state, info.status = rec["clique"], rec["state"], rec.get("status", 0)
        return NVML_SUCCESS

    def _link_entry(self, h: int, link: int, key: str) -> Any:
        links = self._dev(h).get("nvlinks", {})
        entry = links.get(str(link), links.get(link))
        if entry is None:
            raise _Recorded(NVML_ERROR_INVALID_ARGUMENT)
        if key not in entry:
            raise _Recorded(NOT_RECORDED)
        return self._answer(entry[key])

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        state: int = self._link_entry(h, link, "state")
        return state

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        kind: int = self._link_entry(h, link, "remote_type")
        return kind

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        return SimpleNamespace(busId=self._link_entry(h, link, "remote_pci_bus_id"))

    def nvmlDeviceGetFieldValues(self, h: int, field_ids: list[int | tuple[int, int]]) -> list[SimpleNamespace]:
        fields_ = self._dev(h).get("fields", {})
        out = []
        for fid in field_ids:
            fid = fid[0] if isinstance(fid, tuple) else fid
            rec = fields_.get(str(fid))
            if not isinstance(rec, dict):
                out.append(SimpleNamespace(fieldId=fid, nvmlReturn=999, value=SimpleNamespace(uiVal=0)))
                continue
            out.append(SimpleNamespace(fieldId=fid, nvmlReturn=rec.get("nvmlReturn", 999),
                                       value=SimpleNamespace(uiVal=rec.get("value", 0))))
        return out

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: int, h2: int) -> int:
        a, b = sorted((h1, h2))
        value = self.dump.get("topology", {}).get(f"{a},{b}")
        if value is None:
            raise _Recorded(NOT_RECORDED)
        level: int = self._answer(value)
        return level
