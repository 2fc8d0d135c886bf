"""Topology facts: the NVML and sysfs readers run against fake hosts (ncclbench/simulation/hosts.py builds a
fake NVML and a real-layout sysfs tree per host), against what a real H100 VM's NVML answered
(tests/fixtures/topology/h100-vm-real), and against broken inputs (no NVML, failing calls,
unreadable sysfs): every fact read, or unknown with the reason, never a crash."""

import dataclasses
import json
import os
from pathlib import Path

import pytest

from ncclbench.explain.gather_topology import gather_host_topology
from ncclbench.explain.nvml_reader import read_gpus
from ncclbench.explain.sysfs_reader import pci_locality, read_nics
from ncclbench.explain.topology import (
    HostTopology,
    format_topology_lines,
    format_topology_report,
    normalize_bus_id,
    pcie_line_rate,
)
from ncclbench.simulation import hosts as S

REAL_VM = Path(__file__).parent / "fixtures" / "topology" / "h100-vm-real"
H100 = ("NVIDIA H100 80GB HBM3", (9, 0))


def facts_of(spec, tmp_path, nvml=None):
    fake, root = S.materialise(spec, str(tmp_path / spec.host))
    return gather_host_topology(nvml if nvml is not None else fake, root, spec.host)


# -- NVSwitch 8-GPU H100 with 8x 400G InfiniBand ----------------------------------------------

def test_nvswitch_h100_with_ib(tmp_path):
    t = facts_of(S.hgx_host("n1", *H100), tmp_path)
    assert len(t.gpus) == 8 and not t.unknown
    for g in t.gpus:
        assert (g.name, g.compute_capability) == H100[0:1] + ("9.0",)
        assert (g.nvlink_active, g.nvlink_remote, g.nvlink_down) == (18, "switch", [])
        assert (g.nvlink_generation, g.nvlink_rate, g.nvlink_line_rate) == (4, 25.0, 450.0)
        assert (g.pcie.gen, g.pcie.gen_max, g.pcie.width, g.pcie.width_max) == (5, 5, 16, 16)
        assert g.pci_bus_id == normalize_bus_id(g.pci_bus_id)  # NVML's 00000000:13:00.0 normalised
    assert [g.numa_node for g in t.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [(n.name, n.kind, n.state, n.rate_gbps) for n in t.nics] == \
        [(f"mlx5_{i}", "ib", "ACTIVE", 400.0) for i in range(8)]  # IPoIB ib0..ib7 and lo/docker0 skipped
    assert all(n.active and n.rdma for n in t.nics)
    assert t.gdr.peermem is True and "nvidia_peermem" in t.gdr.evidence
    assert t.gdr.dmabuf is None and "ibverbs" in t.gdr.unknown["dmabuf"]
    paths = {(x.a, x.b): x.path for x in t.gpu_nic}
    assert all(paths[(str(i), f"mlx5_{i}:1")] == "PIX" for i in range(8))  # same PCIe switch
    assert paths[("0", "mlx5_1:1")] == "NODE" and paths[("0", "mlx5_7:1")] == "SYS"
    assert {x.path for x in t.gpu_gpu} == {"NODE", "SYS"}  # NVML common ancestor across root complexes
    assert t.cpu_vendor == "GenuineIntel"


def test_nvml_fields_90_91_cross_check_kept_when_supported(tmp_path):
    t = facts_of(S.hgx_host("n1", *H100, ngpus=2, nvlink_fields=(26562, 18)), tmp_path)
    assert (t.gpus[0].nvml_nvlink_speed_mbps, t.gpus[0].nvml_nvlink_count) == (26562, 18)
    t = facts_of(S.hgx_host("n2", *H100, ngpus=2), tmp_path)
    g = t.gpus[0]
    assert g.nvml_nvlink_speed_mbps is None and "NOT_SUPPORTED" in g.unknown["nvml_nvlink_speed_mbps"]
    assert g.nvlink_active == 18  # the count itself comes from the link states, not field 91


# -- PCIe-only 4 GPUs, downtrained links -------------------------------------------------------

def test_pcie_only_four_gpus(tmp_path):
    t = facts_of(S.pcie_host("p1", "NVIDIA L40S", (8, 9)), tmp_path)
    assert [(g.nvlink_active, g.nvlink_remote) for g in t.gpus] == [(0, "none")] * 4
    assert all("nvlink_rate" not in g.unknown for g in t.gpus)  # no link: its rate is no question
    assert {x.path for x in t.gpu_gpu} == {"PIX"}  # one PCIe switch
    assert [(n.name, n.kind, n.state, n.rate_gbps) for n in t.nics] == [("eth0", "ethernet", "up", 100.0)]
    assert t.gdr.peermem is False
    t2 = facts_of(S.pcie_host("p2", "NVIDIA L40S", (8, 9), same_switch=False), tmp_path)
    assert {x.path for x in t2.gpu_gpu} == {"PHB"}  # each GPU on its own root port


def test_downtrained_pcie_link_is_read_as_is(tmp_path):
    spec = S.pcie_host("p1", "NVIDIA L40S", (8, 9))
    spec.gpus[2] = dataclasses.replace(spec.gpus[2], pcie=(4, 4, 8, 16))
    spec.nics[0] = dataclasses.replace(spec.nics[0], pcie=(3, 4, 16, 16))
    t = facts_of(spec, tmp_path)
    assert (t.gpus[2].pcie.width, t.gpus[2].pcie.width_max) == (8, 16)
    assert t.gpus[2].pcie.describe() == "Gen4 x8 (max Gen4 x16)"
    assert (t.nics[0].pcie.gen, t.nics[0].pcie.gen_max) == (3, 4)  # from sysfs '8.0 GT/s PCIe'
    assert pcie_line_rate(4, 16) == pytest.approx(31.51, abs=0.01)


# -- NVLink links down ---------------------------------------------------------------------------

def test_nvlink_links_down(tmp_path):
    spec = S.hgx_host("n1", *H100, ngpus=4, nic_kind=None)
    spec.gpus[3] = dataclasses.replace(spec.gpus[3], links_down=(4, 5))
    t = facts_of(spec, tmp_path)
    assert [g.nvlink_active for g in t.gpus] == [18, 18, 18, 16]
    assert t.gpus[3].nvlink_down == [4, 5]
    lines = format_topology_lines([t])
    assert any("GPU3 NVLink 16/18 links, links 4,5 down" in x for x in lines)


def test_direct_nvlink_peers(tmp_path):
    spec = S.pcie_host("d1", "NVIDIA A100 80GB PCIe", (8, 0), ngpus=2, nic_kind=None)
    a, b = spec.gpus
    spec.gpus[0] = dataclasses.replace(a, nvlinks=12, nvlink_remote="gpu", nvlink_peers=((b.bus_id, 12),))
    spec.gpus[1] = dataclasses.replace(b, nvlinks=12, nvlink_remote="gpu", nvlink_peers=((a.bus_id, 12),))
    t = facts_of(spec, tmp_path)
    assert t.gpus[0].nvlink_remote == "gpu" and t.gpus[0].nvlink_peers == {b.bus_id: 12}
    assert t.gpus[1].nvlink_peers == {a.bus_id: 12}


# -- NICs: RoCE, no NIC, Slingshot, EFA ------------------------------------------------------------

def test_roce_ports_with_their_interfaces(tmp_path):
    t = facts_of(S.hgx_host("r1", *H100, ngpus=2, nic_kind="roce", nic_gbps=400, nics=2), tmp_path)
    assert [(n.name, n.kind, n.netdev, n.rate_gbps) for n in t.nics] == \
        [("mlx5_0", "roce", "ens0np0", 400.0), ("mlx5_1", "roce", "ens1np0", 400.0)]  # not listed twice
    assert t.interfaces["ens0np0"] == "up" and t.interfaces["lo"] == "unknown"


def test_no_nic(tmp_path):
    t = facts_of(S.hgx_host("x1", *H100, ngpus=2, nic_kind=None), tmp_path)
    assert t.nics == [] and "no /sys/class/infiniband" in t.unknown["nics"]
    assert format_topology_lines([t])[1].startswith("#   NICs: no NIC found")


def test_slingshot_and_efa_are_recognised(tmp_path):
    spec = S.hgx_host("a1", "NVIDIA GH200 480GB", (9, 0), ngpus=2, nic_kind="slingshot", nic_gbps=200, nics=2)
    t = facts_of(spec, tmp_path)
    assert [(n.name, n.kind, n.rate_gbps) for n in t.nics] == [("eth0", "slingshot", 200.0),
                                                                ("eth1", "slingshot", 200.0)]
    t = facts_of(S.hgx_host("e1", *H100, ngpus=2, nic_kind="efa", nic_gbps=100, nics=2), tmp_path)
    assert {n.kind for n in t.nics} == {"efa"}


def test_down_interface_speed_unknown_with_reason(tmp_path):
    spec = S.pcie_host("p1", "NVIDIA L40S", (8, 9), ngpus=1)
    spec.nics[0] = dataclasses.replace(spec.nics[0], state="down")
    t = facts_of(spec, tmp_path)
    n = t.nics[0]
    assert n.state == "down" and not n.active and n.rate_gbps is None
    assert "speed" in n.unknown["rate_gbps"] and "down" in n.unknown["rate_gbps"]


# -- bad input ----------------------------------------------------------------------------------------

def test_missing_nvml_and_unreadable_sysfs(tmp_path):
    spec = dataclasses.replace(S.hgx_host("n1", *H100, ngpus=1), nvml_available=False)
    t = facts_of(spec, tmp_path)
    assert t.gpus == [] and "NVML Shared Library Not Found" in t.unknown["nvml"]
    t = gather_host_topology(None, str(tmp_path / "nothing-here"), "void")
    assert t.unknown["nvml"] == "NVML not probed"
    assert "neither /sys/class/infiniband nor /sys/class/net" in t.unknown["nics"]
    assert t.gdr.peermem is None and "not readable" in t.gdr.unknown["peermem"]
    assert format_topology_lines([t])  # still prints, saying what is unknown


class FailingNvml(S.FakeNvml):
    """NVML calls that fail one by one, as on a lost or restricted GPU."""

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        raise S.NVMLError(S.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link == 3:
            raise S.NVMLError(15)  # GPU_IS_LOST
        return super().nvmlDeviceGetNvLinkState(h, link)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        raise RuntimeError("driver went away")


def test_failing_calls_mark_single_facts_unknown(tmp_path):
    spec = S.hgx_host("n1", *H100, ngpus=2, nic_kind=None)
    fake, root = S.materialise(spec, str(tmp_path))
    gpus, pairs, why = read_gpus(FailingNvml(spec))
    assert why == ""
    g = gpus[0]
    assert g.pcie.gen is None and "Not Supported" in g.unknown["pcie.gen"]
    assert g.pcie.width == 16  # the other PCIe facts are still read
    assert g.compute_capability is None and "driver went away" in g.unknown["compute_capability"]
    assert g.nvlink_rate is None and g.unknown["nvlink_rate"] == "compute capability unknown"
    assert g.nvlink_active == 17 and "link 3" in g.unknown["nvlink_links"]  # the lost link is not counted
    # sysfs fills what NVML did not say
    t = gather_host_topology(FailingNvml(spec), root, "n1")
    assert t.gpus[0].pcie.gen == 5 and "pcie.gen" not in t.gpus[0].unknown


def test_init_failure_is_a_reason_not_a_crash():
    class NoInit(S.FakeNvml):
        def nvmlInit(self):
            raise S.NVMLError(9)  # DRIVER_NOT_LOADED
    gpus, pairs, why = read_gpus(NoInit(S.HostSpec("h")))
    assert gpus == [] and why.startswith("nvmlInit failed")


# -- the real H100 VM, replayed ---------------------------------------------------------------------

def _vm_sysfs(root: Path):
    """The VM's sysfs as host.txt records it: a virtio eth0 (speed -1), virtual ifb0/ifb1/lo,
    no /sys/class/infiniband, no nvidia_peermem, the GPU's numa_node -1."""
    dev = root / "sys/devices/pci0000:00/0000:00:06.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("-1\n")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:06.0", root / "sys/bus/pci/devices/0000:00:06.0")
    virtio = root / "sys/devices/pci0000:00/0000:00:03.0/virtio2"
    virtio.mkdir(parents=True)
    net = root / "sys/class/net"
    for name, target, speed, oper in (("eth0", "../../../devices/pci0000:00/0000:00:03.0/virtio2", "-1", "up"),
                                      ("ifb0", None, None, "down"), ("lo", None, None, "unknown")):
        d = net / name
        d.mkdir(parents=True)
        (d / "operstate").write_text(oper + "\n")
        (d / "type").write_text("1\n")
        if speed is not None:
            (d / "speed").write_text(speed + "\n")
        if target:
            os.symlink(target, d / "device")
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "proc/cpuinfo").write_text("processor\t: 0\nvendor_id\t: GenuineIntel\n")


def test_real_h100_vm_answers(tmp_path):
    dump = json.loads((REAL_VM / "nvml.json").read_text())
    _vm_sysfs(tmp_path)
    t = gather_host_topology(S.RecordedNvml(dump), str(tmp_path), "vm")
    (g,) = t.gpus
    # what nvidia-smi -q / topo -m said on that machine
    smi = (REAL_VM / "nvidia-smi-q.txt").read_text()
    assert g.name == "NVIDIA H100 80GB HBM3" and "NVIDIA H100 80GB HBM3" in smi
    assert g.pci_bus_id == "0000:00:06.0" and "00000000:00:06.0" in smi
    assert (g.pcie.gen, g.pcie.gen_max, g.pcie.width, g.pcie.width_max) == (5, 5, 16, 16)
    assert (g.nvlink_active, g.nvlink_remote) == (0, "none")  # every NVLink call: NOT_SUPPORTED in the VM
    assert g.numa_node is None and "no NUMA node" in g.unknown["numa_node"]  # topo -m: GPU NUMA ID N/A
    assert "not recorded" in g.unknown["pstate"]
    (eth0,) = t.nics
    assert (eth0.name, eth0.kind, eth0.state, eth0.pci_bus_id) == ("eth0", "ethernet", "up", "0000:00:03.0")
    assert eth0.rate_gbps is None and "'-1'" in eth0.unknown["rate_gbps"]
    assert t.gdr.peermem is False


# -- serialisation, selection, formatting ----------------------------------------------------------

def test_round_trip_through_json(tmp_path):
    spec = S.hgx_host("n1", *H100, ngpus=4, nic_kind="roce", nics=2)
    spec.gpus[1] = dataclasses.replace(spec.gpus[1], links_down=(0,))
    t = facts_of(spec, tmp_path)
    back = HostTopology.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back == t
    assert HostTopology.from_dict({**t.to_dict(), "a_field_from_the_future": 1}) == t


def test_only_keeps_the_gpus_in_use(tmp_path):
    t = facts_of(S.hgx_host("n1", *H100), tmp_path)
    ids = [t.gpus[1].pci_bus_id, t.gpus[5].pci_bus_id[:-2]]  # full id and preflight's domain:bus:device
    sub = t.only(ids)
    assert [g.index for g in sub.gpus] == [1, 5] and sub.gpus_in_box == 8
    assert [(x.a, x.b) for x in sub.gpu_gpu] == [("1", "5")]
    assert {x.a for x in sub.gpu_nic} == {"1", "5"} and len(sub.nics) == 8


def test_banner_lines_are_compact_and_group_alike_hosts(tmp_path):
    a = facts_of(S.hgx_host("n1", *H100), tmp_path)
    b = facts_of(S.hgx_host("n2", *H100), tmp_path)
    lines = format_topology_lines([a, b])
    assert lines == [
        "# Topology n1 and 1 more host(s) alike: 8x NVIDIA H100 80GB HBM3 (sm 9.0), NVSwitch, NVLink4 18 links "
        "x 25 GB/s = 450 GB/s/GPU, PCIe 8x Gen5 x16",
        "#   NICs: 8x InfiniBand 400 Gb/s ACTIVE; GPUDirect RDMA: nvidia_peermem loaded; nearest NIC per GPU: 8x PIX"]
    c = facts_of(S.pcie_host("p1", "NVIDIA L40S", (8, 9)), tmp_path)
    assert len(format_topology_lines([a, c])) == 4
    report = format_topology_report(a)
    assert report[0] == "# Host n1" and sum(x.startswith("GPU") and "NVLink 18 active" in x for x in report) == 8
    assert report[-9].startswith("GPU\\NIC")


def test_pci_locality_words(tmp_path):
    spec = S.HostSpec("l1", nics=[
        S.NicSpec("eth0", "ethernet", 100, "0000:05:00.0", state="up", bridges=("0000:00:01.0", "0000:02:00.0",
                                                                                "0000:03:01.0", "0000:04:00.0",
                                                                                "0000:04:01.0"))])
    spec.gpus = [S.GpuSpec("G", (9, 0), "0000:06:00.0", bridges=("0000:00:01.0", "0000:02:00.0", "0000:03:01.0",
                                                                 "0000:04:00.0", "0000:04:02.0")),
                 S.GpuSpec("G", (9, 0), "0000:07:00.0", bridges=("0000:00:01.0", "0000:02:00.0", "0000:03:02.0")),
                 S.GpuSpec("G", (9, 0), "0000:08:00.0", bridges=("0000:00:02.0",)),
                 S.GpuSpec("G", (9, 0), "0000:91:00.0", host_bridge="pci0000:90", numa=1, bridges=("0000:90:01.0",))]
    S.build_sysfs(spec, str(tmp_path))
    r = str(tmp_path)
    assert pci_locality(r, "0000:06:00.0", "0000:05:00.0", 0, 0) == "PIX"  # one switch between them
    assert pci_locality(r, "0000:07:00.0", "0000:05:00.0", 0, 0) == "PXB"  # two levels of switches
    assert pci_locality(r, "0000:08:00.0", "0000:05:00.0", 0, 0) == "PHB"  # only the host bridge shared
    assert pci_locality(r, "0000:91:00.0", "0000:05:00.0", 1, 0) == "SYS"
    assert pci_locality(r, "0000:91:00.0", "0000:05:00.0", None, 0) == "unknown"
    assert pci_locality(r, "0000:99:00.0", "0000:05:00.0", 0, 0) == "unknown"  # no such device


def test_real_sysfs_of_this_machine_does_not_crash():
    nics, why = read_nics("/")
    assert isinstance(nics, list) and isinstance(why, str)
    t = gather_host_topology(None, "/", "here")
    assert t.host == "here" and format_topology_report(t)


def test_fake_nvml_speaks_nvidia_ml_py():
    """The fake answers with nvidia-ml-py's own names and codes, so the reader cannot pass against a
    fake that the real library would not match."""
    pynvml = pytest.importorskip("pynvml")
    for name in dir(S.FakeNvml):
        if name.startswith("nvml"):
            assert callable(getattr(pynvml, name, None)), name
        if name.startswith("NVML_"):
            assert getattr(pynvml, name) == getattr(S.FakeNvml, name), name
    assert pynvml.NVML_ERROR_NOT_SUPPORTED == S.NVML_ERROR_NOT_SUPPORTED
    assert pynvml.NVML_ERROR_INVALID_ARGUMENT == S.NVML_ERROR_INVALID_ARGUMENT
    assert pynvml.NVML_ERROR_LIBRARY_NOT_FOUND == S.NVML_ERROR_LIBRARY_NOT_FOUND
    assert pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON == 90 and pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT == 91


def test_reader_uses_pynvml_error_classes():
    """With the real module's error type (NVMLError subclasses per code), NOT_SUPPORTED on link 0
    still means 'no NVLink' and other codes still become reasons."""
    pynvml = pytest.importorskip("pynvml")

    class RealErrors(S.FakeNvml):
        NVMLError = pynvml.NVMLError

        def nvmlDeviceGetNvLinkState(self, h, link):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

        def nvmlDeviceGetMaxPcieLinkWidth(self, h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    gpus, _, _ = read_gpus(RealErrors(S.hgx_host("n", *H100, ngpus=1)))
    assert (gpus[0].nvlink_active, gpus[0].nvlink_remote) == (0, "none")
    assert "Insufficient Permissions" in gpus[0].unknown["pcie.width_max"]


@pytest.mark.gpu
def test_real_gpu_facts_match_nvidia_smi():
    """On a GPU machine: what the reader says equals nvidia-smi's view."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi")
    t = gather_host_topology(host="real")
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,pci.bus_id,pcie.link.gen.max,pcie.link.width.current,"
                          "pcie.link.width.max,compute_cap", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()
    assert len(out) == len(t.gpus)
    for g, line in zip(t.gpus, out):
        name, bus, gen_max, width, width_max, cc = [x.strip() for x in line.split(",")]
        assert g.name == name and g.pci_bus_id == normalize_bus_id(bus) and g.compute_capability == cc
        assert (g.pcie.gen_max, g.pcie.width, g.pcie.width_max) == (int(gen_max), int(width), int(width_max))
    topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
    for g in t.gpus:
        row = next((ln for ln in topo.splitlines() if ln.startswith(f"GPU{g.index}")), "")
        nv = [int(x[2:]) for x in row.split() if x.startswith("NV") and x[2:].isdigit()]
        if g.nvlink_remote == "switch" and len(t.gpus) > 1:
            assert nv and max(nv) == g.nvlink_active  # topo -m prints NV18 for NVSwitch pairs
        elif not g.nvlink_active:
            assert not nv


def test_nvml_dump_replays_to_the_same_facts(tmp_path, monkeypatch, capsys):
    """bench/nvml_dump.py records what NVML answers; RecordedNvml replays it: a dump of a fake host
    read back gives the facts the live fake gave (so dumps from GPU machines become fixtures)."""
    import importlib.util
    import sys

    spec = S.hgx_host("n1", *H100, ngpus=4, nic_kind=None, nvlink_fields=(26562, 18))
    spec.gpus[1] = dataclasses.replace(spec.gpus[1], links_down=(3,))

    class Dumpable(S.FakeNvml):
        def nvmlSystemGetDriverVersion(self):
            return "580.159.04"

        def nvmlSystemGetNVMLVersion(self):
            return "13.580.159.04"

        def nvmlSystemGetCudaDriverVersion_v2(self):
            return 13000

        def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
            return self._g(h).pcie[1]

        def nvmlDeviceGetNvLinkVersion(self, h, link):
            self._link(h, link)
            return 5

    live = Dumpable(spec)
    monkeypatch.setitem(sys.modules, "pynvml", live)
    mod_spec = importlib.util.spec_from_file_location("nvml_dump", Path(__file__).parents[1] / "bench/nvml_dump.py")
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    assert mod.main() == 0
    dump = json.loads(capsys.readouterr().out)
    assert dump["topology"]["0,1"] == 40 and dump["devices"][1]["nvlinks"]["3"]["state"] == 0
    _, root = S.materialise(spec, str(tmp_path))
    want = gather_host_topology(Dumpable(spec), root, "n1")
    got = gather_host_topology(S.RecordedNvml(dump), root, "n1")
    assert got == want
