"""One host's topology facts: NVML for the GPUs, sysfs for everything else.

Cheap enough to run on every rank at start, beside the preflight facts (NVML
init plus a few hundred small file reads; no CUDA context, no collective), and
the function behind `ncclbench topo`.  The NVML module and the sysfs
root are parameters so that tests and the published-systems table run the very
same code against fakes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..launch.hostid import host_label
from . import nvml_reader, sysfs_reader
from .nccl_env import nccl_list_match
from .topology import HostTopology, NicPort

_DEFAULT = object()


def socket_virtual_nics(nics: Sequence[NicPort], interfaces: Mapping[str, str],
                        environ: Mapping[str, str]) -> list[str]:
    """The virtual interfaces (no PCI device, so not in `nics`) NCCL's socket transport would
    use: those NCCL_SOCKET_IFNAME selects, or, when it is unset and no physical NIC is there,
    the ones NCCL's default takes (any but lo and docker*).  A fake host's veth in a network
    namespace, a container's eth0: the NIC the run used, named as virtual, not hidden."""
    physical = {n.netdev or n.name for n in nics}
    virtual = [i for i in interfaces if i not in physical]
    spec = environ.get("NCCL_SOCKET_IFNAME", "")
    if spec:
        return [i for i in virtual if nccl_list_match(spec, i, None)]
    if any(n.active for n in nics):
        return []
    return [i for i in virtual if i != "lo" and not i.startswith("docker") and interfaces[i] != "down"]


def gather_host_topology(nvml: Any = _DEFAULT, root: str = "/", host: str | None = None,
                         environ: Mapping[str, str] | None = None) -> HostTopology:
    """Read this host's facts.  `nvml`: the pynvml module (default: import it; None: skip
    NVML and say so), `root`: where /sys and /proc are, `environ`: NCCL's settings (default:
    this process's; NCCL_SOCKET_IFNAME picks virtual interfaces)."""
    facts = HostTopology(host=host or host_label())  # the host as NCCL groups ranks (NCCL_HOSTID)
    if nvml is _DEFAULT:
        nvml, why = nvml_reader.load_nvml()
        if nvml is None:
            facts.unknown["nvml"] = why
    elif nvml is None:
        facts.unknown["nvml"] = "NVML not probed"
    if nvml is not None:
        facts.gpus, facts.gpu_gpu, why = nvml_reader.read_gpus(nvml)
        if why:
            facts.unknown["nvml"] = why
    for g in facts.gpus:
        if g.pci_bus_id is None:
            continue
        node, why = sysfs_reader.numa_node(root, g.pci_bus_id)
        g.numa_node = node
        if why:
            g.unknown["numa_node"] = why
        if any(v is None for v in (g.pcie.gen, g.pcie.gen_max, g.pcie.width, g.pcie.width_max)):
            link, _ = sysfs_reader.read_pci_link(root, g.pci_bus_id)  # NVML did not say: sysfs may
            for attr in ("gen", "gen_max", "width", "width_max"):
                if getattr(g.pcie, attr) is None and getattr(link, attr) is not None:
                    setattr(g.pcie, attr, getattr(link, attr))
                    g.unknown.pop(f"pcie.{attr}", None)
    facts.nics, why = sysfs_reader.read_nics(root)
    if why:
        facts.unknown["nics"] = why
    facts.interfaces = sysfs_reader.read_interfaces(root)
    for ifname in socket_virtual_nics(facts.nics, facts.interfaces, os.environ if environ is None else environ):
        facts.nics.append(sysfs_reader.read_virtual_nic(root, ifname))
    facts.gdr = sysfs_reader.read_gdr(root)
    facts.gpu_nic = sysfs_reader.gpu_nic_localities(root, facts.gpus, facts.nics)
    facts.cpu_vendor = sysfs_reader.cpu_vendor(root)
    return facts


def read_topology(gpus: bool = True) -> tuple[dict | None, str]:
    """This host's facts as plain data for a gather to rank 0, or (None, why) when reading failed
    (a reader bug, a broken host): the benchmark and preflight go on without them.  `gpus=False`
    (the CPU backend) leaves NVML alone and says so."""
    try:
        if gpus:
            return gather_host_topology().to_dict(), ""
        facts = gather_host_topology(nvml=None)
        facts.unknown["nvml"] = "not read: the CPU backend uses no GPU"
        return facts.to_dict(), ""
    except Exception as exc:
        return None, f"reading the topology failed: {type(exc).__name__}: {exc}"
