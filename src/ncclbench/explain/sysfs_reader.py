"""NIC, PCIe, NUMA and GPUDirect RDMA facts from sysfs, under a root directory.

Every function takes `root` ('/' on a real host, a temporary tree in tests) and
reads only files: no ibverbs, no ethtool, no root privileges.  A file that is
missing or unreadable makes that one fact unknown with the path and the error.

What is read, and why there:
* RDMA ports: /sys/class/infiniband/<dev>/ports/<p>/{rate,state,link_layer}
  (InfiniBand, RoCE when link_layer is Ethernet, EFA by its driver), the
  same devices NCCL's IB transport enumerates through ibverbs.
* Ethernet: /sys/class/net/<if>/{speed,operstate}; only interfaces with a
  PCI device (virtual ones - lo, docker0, veth - carry no collective traffic
  NCCL would choose); IPoIB interfaces are the IB ports again and are skipped.
  A virtual interface NCCL's socket transport does use (NCCL_SOCKET_IFNAME names
  it, or it is all there is: a container's or a network namespace's veth) is read
  by `read_virtual_nic`, kind 'virtual', its speed unknown: a veth's sysfs speed
  is a made-up figure, and a tc shaping on it is not in sysfs.
  Slingshot (HPE) interfaces are recognised by a /sys/class/cxi device on
  the same PCI function.
* PCIe links: /sys/bus/pci/devices/<bdf>/{current,max}_link_{speed,width},
  as NCCL's topology detection reads them (src/graph/xml.cc).
* Locality: the PCI path of two devices under /sys/devices, classified the
  way nvidia-smi topo -m names it (PIX, PXB, PHB, NODE, SYS).
* GPUDirect RDMA: the three files NCCL tests (src/transport/net_ib.cc,
  v2.28.9-1, ibGdrSupportInitOnce).
"""

from __future__ import annotations

import os
import re

from .topology import PCIE_GEN_BY_GTS, GdrFacts, Locality, NicPort, PcieLink, normalize_bus_id

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

GDR_MODULE_FILES = ("sys/kernel/mm/memory_peers/nv_mem/version",
                    "sys/kernel/mm/memory_peers/nv_mem_nc/version",
                    "sys/module/nvidia_peermem/version")


def _p(root: str, rel: str) -> str:
    return os.path.join(root, rel.lstrip("/"))


def read_text(root: str, rel: str) -> tuple[str | None, str]:
    """(stripped contents, '') or (None, why)."""
    path = _p(root, rel)
    try:
        with open(path) as f:
            return f.read().strip(), ""
    except OSError as exc:
        return None, f"/{rel.lstrip('/')}: {exc.strerror or exc}"


def _listdir(root: str, rel: str) -> list[str] | None:
    try:
        return sorted(os.listdir(_p(root, rel)))
    except OSError:
        return None


def _link_target(root: str, rel: str) -> str | None:
    """Resolved path of a sysfs symlink, relative to root (starts with 'sys/devices/...')."""
    path = _p(root, rel)
    if not os.path.exists(path):
        return None
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    rel_real = os.path.relpath(real, base)
    return None if rel_real.startswith("..") else rel_real


def device_bdf(root: str, rel_device_link: str) -> str | None:
    """The PCI function a class device's `device` link leads to - itself, or the nearest PCI
    parent for a device on a bus below PCI (virtio2 under 0000:00:03.0) - or None (virtual)."""
    target = _link_target(root, rel_device_link)
    if target is None or "/virtual/" in f"/{target}/":
        return None
    return next((p for p in reversed(target.split(os.sep)) if _BDF.match(p)), None)


def numa_node(root: str, bdf: str) -> tuple[int | None, str]:
    text, why = read_text(root, f"sys/bus/pci/devices/{bdf}/numa_node")
    if text is None:
        return None, why
    try:
        n = int(text)
    except ValueError:
        return None, f"numa_node of {bdf} reads {text!r}"
    if n < 0:
        return None, f"the firmware gives {bdf} no NUMA node (numa_node = {n})"
    return n, ""


def _gen(speed: str) -> int | None:
    """'16.0 GT/s PCIe' or '16 GT/s' -> 4."""
    m = re.match(r"\s*([0-9.]+)\s*GT/s", speed)
    if not m:
        return None
    return PCIE_GEN_BY_GTS.get(float(m.group(1)))


def read_pci_link(root: str, bdf: str) -> tuple[PcieLink, dict[str, str]]:
    link, unknown = PcieLink(), {}
    for attr, fname, conv in (("gen", "current_link_speed", _gen), ("gen_max", "max_link_speed", _gen),
                              ("width", "current_link_width", int), ("width_max", "max_link_width", int)):
        text, why = read_text(root, f"sys/bus/pci/devices/{bdf}/{fname}")
        if text is None:
            unknown[f"pcie.{attr}"] = why
            continue
        try:
            value = conv(text)
        except ValueError:
            value = None
        if value is None or value == 0:
            unknown[f"pcie.{attr}"] = f"{fname} of {bdf} reads {text!r}"
            continue
        setattr(link, attr, value)
    return link, unknown


def _rate_gbps(text: str) -> float | None:
    """'400 Gb/sec (4X NDR)' -> 400.0; '25 Gb/sec (1X EDR)' -> 25.0."""
    m = re.match(r"\s*([0-9.]+)\s*Gb/sec", text)
    return float(m.group(1)) if m else None


def _driver(root: str, rel_device: str) -> str | None:
    target = _link_target(root, f"{rel_device}/driver")
    return os.path.basename(target) if target else None


def _fill_pci(root: str, nic: NicPort) -> None:
    if nic.pci_bus_id is None:
        nic.unknown["pci_bus_id"] = "no PCI device behind it"
        return
    nic.numa_node, why = numa_node(root, nic.pci_bus_id)
    if why:
        nic.unknown["numa_node"] = why
    nic.pcie, unknown = read_pci_link(root, nic.pci_bus_id)
    nic.unknown.update(unknown)


def _cxi_bdfs(root: str) -> set[str]:
    out = set()
    for dev in _listdir(root, "sys/class/cxi") or []:
        bdf = device_bdf(root, f"sys/class/cxi/{dev}/device")
        if bdf:
            out.add(bdf)
    return out


def _rdma_port(root: str, dev: str, port: str, bdf: str | None, driver: str) -> NicPort:
    """One port of an RDMA device: its kind (EFA, or IB / RoCE by the link layer), state, rate,
    its netdev and PCI facts."""
    base = f"sys/class/infiniband/{dev}"
    nic = NicPort(name=dev, port=int(port), pci_bus_id=bdf)
    pbase = f"{base}/ports/{port}"
    layer, why = read_text(root, f"{pbase}/link_layer")
    if layer is None:
        nic.unknown["kind"] = why
    nic.kind = ("efa" if driver == "efa" or dev.startswith("efa") else
                "ib" if layer == "InfiniBand" else "roce" if layer == "Ethernet" else "unknown")
    state, why = read_text(root, f"{pbase}/state")
    if state is None:
        nic.unknown["state"] = why
    else:
        nic.state = state.split(":")[-1].strip()  # '4: ACTIVE' -> 'ACTIVE'
    rate, why = read_text(root, f"{pbase}/rate")
    if rate is None:
        nic.unknown["rate_gbps"] = why
    else:
        nic.rate_gbps = _rate_gbps(rate)
        if nic.rate_gbps is None:
            nic.unknown["rate_gbps"] = f"/{pbase}/rate reads {rate!r}"
    ndev, _ = read_text(root, f"{pbase}/gid_attrs/ndevs/0")
    nic.netdev = ndev or None
    _fill_pci(root, nic)
    return nic


def _rdma_ports(root: str, ib_devs: list[str] | None) -> tuple[list[NicPort], set[str]]:
    """(the ports of every RDMA device, the PCI ids of those devices)."""
    nics: list[NicPort] = []
    rdma_bdfs: set[str] = set()
    for dev in ib_devs or []:
        base = f"sys/class/infiniband/{dev}"
        bdf = device_bdf(root, f"{base}/device")
        if bdf:
            rdma_bdfs.add(bdf)
        driver = _driver(root, f"{base}/device") or ""
        for port in _listdir(root, f"{base}/ports") or []:
            if port.isdigit():
                nics.append(_rdma_port(root, dev, port, bdf, driver))
    return nics, rdma_bdfs


def _net_port(root: str, ifname: str, bdf: str, cxi: set[str]) -> NicPort:
    """An Ethernet (or Slingshot) interface: its state and speed, and its PCI facts."""
    base = f"sys/class/net/{ifname}"
    nic = NicPort(name=ifname, kind="slingshot" if bdf in cxi else "ethernet", netdev=ifname, pci_bus_id=bdf)
    oper, why = read_text(root, f"{base}/operstate")
    if oper is None:
        nic.unknown["state"] = why
    else:
        nic.state = oper
    speed, why = read_text(root, f"{base}/speed")
    if speed is None:
        nic.unknown["rate_gbps"] = why + (" (the kernel reports no speed for a link that is down)"
                                         if oper and oper != "up" else "")
    else:
        try:
            mbps = int(speed)
        except ValueError:
            mbps = -1
        if mbps > 0:
            nic.rate_gbps = mbps / 1000
        else:
            nic.unknown["rate_gbps"] = f"/{base}/speed reads {speed!r}"
    _fill_pci(root, nic)
    return nic


def _net_ports(root: str, net_ifs: list[str] | None, nics: list[NicPort], rdma_bdfs: set[str]) -> None:
    """The network interfaces on a PCI device that are no RDMA port: added to `nics`.  An RDMA
    device's own interface names its port's netdev instead; virtual ones and IPoIB are skipped."""
    cxi = _cxi_bdfs(root)
    for ifname in net_ifs or []:
        bdf = device_bdf(root, f"sys/class/net/{ifname}/device")
        if bdf is None:
            continue  # virtual interface
        iftype, _ = read_text(root, f"sys/class/net/{ifname}/type")
        if iftype == "32":
            continue  # IPoIB: the IB port again
        if bdf in rdma_bdfs:
            for n in nics:  # the RoCE/EFA port's interface: name it there, do not list it twice
                if n.pci_bus_id == bdf and not n.netdev:
                    n.netdev = ifname
            continue
        nics.append(_net_port(root, ifname, bdf, cxi))


def read_nics(root: str = "/") -> tuple[list[NicPort], str]:
    """(ports, '' or a note when neither class directory is readable)."""
    ib_devs = _listdir(root, "sys/class/infiniband")
    nics, rdma_bdfs = _rdma_ports(root, ib_devs)
    net_ifs = _listdir(root, "sys/class/net")
    _net_ports(root, net_ifs, nics, rdma_bdfs)
    if ib_devs is None and net_ifs is None:
        return nics, "neither /sys/class/infiniband nor /sys/class/net is readable"
    if ib_devs is None and not nics:
        return nics, "no /sys/class/infiniband (no RDMA device, or none visible in this container)"
    return nics, ""


def read_virtual_nic(root: str, ifname: str) -> NicPort:
    """A virtual interface (no PCI device) as the NIC NCCL's socket transport uses: named,
    its state read, its speed unknown with the reason."""
    nic = NicPort(name=ifname, kind="virtual", netdev=ifname)
    oper, why = read_text(root, f"sys/class/net/{ifname}/operstate")
    if oper is None:
        nic.unknown["state"] = why
    else:
        nic.state = oper
    nic.unknown["rate_gbps"] = (f"{ifname} is a virtual interface (no PCI device): no line rate in sysfs, "
                                "and a tc shaping on it is not read")
    return nic


def read_interfaces(root: str = "/") -> dict[str, str]:
    """Every net interface (virtual ones too: NCCL_SOCKET_IFNAME may name lo or a bond) -> operstate."""
    out = {}
    for ifname in _listdir(root, "sys/class/net") or []:
        state, _ = read_text(root, f"sys/class/net/{ifname}/operstate")
        out[ifname] = state or "unknown"
    return out


def read_gdr(root: str = "/") -> GdrFacts:
    facts = GdrFacts()
    found = [f for f in GDR_MODULE_FILES if os.path.exists(_p(root, f))]
    if found:
        facts.peermem, facts.evidence = True, f"/{found[0]} exists"
    elif os.path.isdir(_p(root, "sys/module")):
        facts.peermem = False
        facts.evidence = "none of " + ", ".join("/" + f for f in GDR_MODULE_FILES) + " exists"
    else:
        facts.unknown["peermem"] = "/sys/module is not readable"
    facts.unknown["dmabuf"] = ("NCCL probes DMA-BUF through ibverbs (ibv_reg_dmabuf_mr); sysfs cannot tell. "
                               "NCCL's log line 'GPU Direct RDMA Enabled' / '/GDRDMA' on NET connections says")
    return facts


def cpu_vendor(root: str = "/") -> str | None:
    text, _ = read_text(root, "proc/cpuinfo")
    if text:
        m = re.search(r"^vendor_id\s*:\s*(\S+)", text, re.M)
        if m:
            return m.group(1)
    return None


def pci_path(root: str, bdf: str) -> list[str] | None:
    """['pci0000:17', '0000:17:01.0', '0000:18:00.0', ...]: the host bridge then every PCI
    function from the root port down to the device."""
    target = _link_target(root, f"sys/bus/pci/devices/{bdf}")
    if target is None:
        return None
    parts = target.split(os.sep)
    try:
        start = next(i for i, p in enumerate(parts) if p.startswith("pci"))
    except StopIteration:
        return None
    return [p for p in parts[start:] if p.startswith("pci") or _BDF.match(p)]


def pci_locality(root: str, bdf_a: str, bdf_b: str, numa_a: int | None, numa_b: int | None) -> str:
    """nvidia-smi topo -m's word for the path between two PCI devices:
    PIX (one PCIe switch between them), PXB (several switches, no host bridge),
    PHB (through a host bridge), NODE (host bridges of one NUMA node), SYS (across
    NUMA nodes), or 'unknown'."""
    a, b = pci_path(root, bdf_a), pci_path(root, bdf_b)
    if a is None or b is None:
        return "unknown"
    if a[0] != b[0]:  # different host bridges
        if numa_a is None or numa_b is None:
            return "unknown"
        return "NODE" if numa_a == numa_b else "SYS"
    common = 0
    for x, y in zip(a[1:-1], b[1:-1]):
        if x != y:
            break
        common += 1
    if common == 0:
        return "PHB"  # they share only the host bridge
    extra = (len(a) - 2 - common) + (len(b) - 2 - common)  # bridges below the shared one
    return "PIX" if extra <= 2 else "PXB"


def gpu_nic_localities(root: str, gpus: list, nics: list[NicPort]) -> list[Locality]:
    out = []
    for g in gpus:
        bdf = normalize_bus_id(g.pci_bus_id)
        for n in nics:
            if not n.rdma and n.kind != "ethernet":
                continue
            if bdf is None or n.pci_bus_id is None:
                path = "unknown"
            else:
                path = pci_locality(root, bdf, n.pci_bus_id, g.numa_node, n.numa_node)
            out.append(Locality(str(g.index), n.label, path, "sysfs"))
    return out
