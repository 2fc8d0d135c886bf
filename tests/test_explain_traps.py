"""Traps: each raised only on evidence (topology facts, NCCL's own log, the environment), each
quoting that evidence and naming a fix; a check that lacks its evidence says so (unchecked),
never passes or raises on a guess."""

import dataclasses

import pytest
from explain_helpers import H100, facts, log

from ncclbench.explain.nccl_log import Connection, NcclLogFacts, NetDevice
from ncclbench.explain.traps import TrapReport, find_traps, format_trap_lines
from ncclbench.simulation import hosts as S


@pytest.fixture(scope="module")
def ib_node():
    return facts(S.hgx_host("n1", *H100))


@pytest.fixture(scope="module")
def alps_node():
    return facts(S.hgx_host("nid001", "NVIDIA GH200 480GB", (9, 0), ngpus=4, nic_kind="slingshot", nic_gbps=200,
                            nics=4))


def one(report: TrapReport, name: str):
    hits = [t for t in report.raised if t.name == name]
    assert len(hits) == 1, (name, report.raised)
    return hits[0]


def test_clean_node_raises_nothing(ib_node):
    r = find_traps([ib_node], None, {})
    assert r.raised == []
    assert {u.name for u in r.unchecked} == {"net-socket-fallback", "gdr-off"}  # both need NCCL's log
    assert {"pcie-downtrained", "nvlink-down", "p2p-disabled", "nic-env-mismatch", "algo-forced"} <= set(r.passed)


# -- the Alps case: sockets while the fabric is there ---------------------------------------------------

def test_socket_fallback_on_slingshot_from_the_log(alps_node):
    r = find_traps([alps_node, alps_node], log("nccl-2.28.9-socket-fallback.log"), {})
    t = one(r, "net-socket-fallback")
    assert t.severity == "error"
    assert "Socket transport" in t.evidence and "4 active RDMA port(s)" in t.evidence and "slingshot" in t.evidence
    assert "hsn0" in t.evidence and "Could not find: libnccl-net.so" in t.evidence
    assert "aws-ofi-nccl" in t.fix and "NCCL_NET_PLUGIN" in t.fix


def test_socket_fallback_with_ib_from_the_environment_alone(ib_node):
    r = find_traps([ib_node, ib_node], None, {"NCCL_IB_DISABLE": "1"})
    t = one(r, "net-socket-fallback")
    assert "NCCL_IB_DISABLE=1" in t.evidence and "NCCL_IB_DISABLE" in t.fix and "rdma-core" in t.fix


def test_socket_on_a_machine_without_rdma_is_no_trap():
    """The real 1-GPU VM's log says Socket; with only an Ethernet NIC there is nothing faster to use."""
    vm = facts(S.pcie_host("vm", *H100, ngpus=1))
    real = log("h100-1rank-2.28.9/ncclbench-all-subsys.log")
    assert real.net_plugin == "Socket"
    r = find_traps([vm], real, {})
    assert "net-socket-fallback" in r.passed and not r.raised


def test_socket_on_one_node_with_ib_warns(ib_node):
    real = log("h100-1rank-2.28.9/ncclbench-all-subsys.log")
    t = one(find_traps([ib_node], real, {}), "net-socket-fallback")
    assert t.severity == "warn" and "one node" in t.evidence


def test_ofi_plugin_in_use_is_fine(alps_node):
    r = find_traps([alps_node, alps_node], log("nccl-2.28.9-rank0.log"), {})  # 'AWS Libfabric', GDRDMA
    assert "net-socket-fallback" in r.passed and "gdr-off" in r.passed


# -- GDR ---------------------------------------------------------------------------------------------------

def _ib_log(gdr: bool) -> NcclLogFacts:
    detail = "NET/IB/0/GDRDMA" if gdr else "NET/IB/0"
    return NcclLogFacts(version="2.28.9", net_plugin="IB", nnodes=2, nranks=16,
                        net_devices=[NetDevice(index=0, transport="IB", name="mlx5_0", gdr=gdr, gdr_used=gdr)],
                        connections=[Connection(channel=0, from_rank=7, to_rank=8, kind="NET", detail=detail,
                                                net="IB", net_device=0, gdr=gdr)])


def test_gdr_off_from_the_log_with_topology_hints():
    spec = S.hgx_host("n1", *H100, peermem=False)
    node = facts(spec)
    t = one(find_traps([node, node], _ib_log(False), {}), "gdr-off")
    assert t.severity == "error"
    assert "mlx5_0" in t.evidence and "without GDRDMA" in t.evidence and "nvidia_peermem is not loaded" in t.evidence
    assert "modprobe nvidia_peermem" in t.fix
    assert "gdr-off" in find_traps([node, node], _ib_log(True), {}).passed


def test_gdr_partly_off_in_a_real_format_log(ib_node):
    """nccl-2.20.5 fixture: mlx5_0/1 with GDRDMA, the RoCE mlx5_2 connected without it."""
    t = one(find_traps([ib_node, ib_node], log("nccl-2.20.5-rank0.log"), {}), "gdr-off")
    assert t.severity == "warn" and "mlx5_2" in t.evidence and "with it: {mlx5_0,mlx5_1}" in t.evidence


def test_gdr_without_log_is_unchecked_not_raised():
    node = facts(S.hgx_host("n1", *H100, peermem=False))
    r = find_traps([node, node], None, {})
    assert "gdr-off" not in r.names()
    (u,) = [u for u in r.unchecked if u.name == "gdr-off"]
    assert "DMA-BUF" in u.reason and "nvidia_peermem is not loaded" in u.reason


# -- PCIe ----------------------------------------------------------------------------------------------------

def test_pcie_width_downtrained():
    spec = S.hgx_host("n1", *H100, nic_kind=None)
    spec.gpus[5] = dataclasses.replace(spec.gpus[5], pcie=(5, 5, 8, 16))
    t = one(find_traps([facts(spec)], None, {}), "pcie-downtrained")
    assert "GPU5" in t.evidence and "Gen5 x8 (max Gen5 x16)" in t.evidence and "LnkSta" in t.fix


def test_pcie_generation_low_only_counts_under_load():
    spec = S.pcie_host("p", "NVIDIA L40S", (8, 9), nic_kind=None)
    spec.gpus[1] = dataclasses.replace(spec.gpus[1], pcie=(1, 4, 16, 16), pstate=8)
    r = find_traps([facts(spec)], None, {})
    assert "pcie-downtrained" not in r.names()
    (u,) = [u for u in r.unchecked if u.name == "pcie-downtrained"]
    assert "GPU1 Gen1 of Gen4 at P8" in u.reason
    spec.gpus[1] = dataclasses.replace(spec.gpus[1], pstate=0)
    t = one(find_traps([facts(spec)], None, {}), "pcie-downtrained")
    assert "while busy (P0)" in t.evidence


def test_nic_link_downtrained():
    spec = S.hgx_host("n1", *H100, ngpus=2, nics=2)
    spec.nics[1] = dataclasses.replace(spec.nics[1], pcie=(4, 5, 16, 16))
    t = one(find_traps([facts(spec)], None, {}), "pcie-downtrained")
    assert "NIC mlx5_1:1" in t.evidence and "Gen4 x16 (max Gen5 x16)" in t.evidence


# -- NVLink --------------------------------------------------------------------------------------------------

def test_nvlink_links_down_against_peers():
    spec = S.hgx_host("n1", *H100, nic_kind=None)
    spec.gpus[2] = dataclasses.replace(spec.gpus[2], links_down=(7,))
    t = one(find_traps([facts(spec)], None, {}), "nvlink-down")
    assert "GPU2" in t.evidence and "17 active NVLinks, its peers 18" in t.evidence and "links 7 DISABLED" in t.evidence


def test_nvlink_all_inactive_points_at_the_fabric_manager():
    spec = S.hgx_host("n1", *H100, ngpus=4, nic_kind=None)
    spec.gpus = [dataclasses.replace(g, links_down=tuple(range(18))) for g in spec.gpus]
    t = one(find_traps([facts(spec)], None, {}), "nvlink-down")
    assert "every NVLink of all 4 GPUs is inactive" in t.evidence and "fabricmanager" in t.fix


def test_same_disabled_links_on_every_gpu_is_the_platform_not_a_fault():
    spec = S.hgx_host("n1", *H100, ngpus=2, nic_kind=None)
    spec.gpus = [dataclasses.replace(g, links_down=(16, 17)) for g in spec.gpus]
    assert "nvlink-down" in find_traps([facts(spec)], None, {}).passed


def test_nvlink_unknown_is_unchecked(ib_node):
    broken = dataclasses.replace(ib_node, gpus=[dataclasses.replace(g, nvlink_active=None,
                                                                    unknown={"nvlink_active": "NVML: Unknown Error"})
                                                for g in ib_node.gpus])
    r = find_traps([broken], None, {})
    assert "nvlink-down" not in r.names()
    assert any(u.name == "nvlink-down" and "Unknown Error" in u.reason for u in r.unchecked)


# -- P2P -----------------------------------------------------------------------------------------------------

def test_p2p_disabled_by_env(ib_node):
    t = one(find_traps([ib_node], None, {"NCCL_P2P_DISABLE": "1"}), "p2p-disabled")
    assert t.severity == "error" and "NCCL_P2P_DISABLE=1" in t.evidence and "NVL" in t.evidence


def test_p2p_level_below_the_gpus_path():
    spec = S.pcie_host("p", "NVIDIA L40S", (8, 9), nic_kind=None)  # GPUs under one switch: PIX
    t = one(find_traps([facts(spec)], None, {"NCCL_P2P_LEVEL": "LOC"}), "p2p-disabled")
    assert "NCCL_P2P_LEVEL=LOC" in t.evidence and "PIX" in t.evidence
    assert "p2p-disabled" in find_traps([facts(spec)], None, {"NCCL_P2P_LEVEL": "PXB"}).passed


def test_p2p_off_by_topology_but_not_on_small_amd():
    spec = S.pcie_host("p", "NVIDIA L40S", (8, 9), same_switch=False, nic_kind=None)
    t = one(find_traps([facts(spec)], None, {}), "p2p-disabled")
    assert t.severity == "warn" and "default P2P level is PXB" in t.evidence
    amd = dataclasses.replace(S.pcie_host("a", "NVIDIA L40S", (8, 9), ngpus=2, same_switch=False, nic_kind=None),
                              cpu_vendor="AuthenticAMD")
    assert "p2p-disabled" in find_traps([facts(amd)], None, {}).passed


def test_p2p_shm_in_nccls_log(ib_node):
    real = log("h100-1rank-2.28.9/nccl-tests-forced-ring-simple-p2pdisable.txt")
    shm_log = NcclLogFacts(version="2.28.9", connections=[
        Connection(channel=0, from_rank=0, to_rank=1, kind="SHM", detail="SHM/direct/direct")])
    t = one(find_traps([ib_node], shm_log, {}), "p2p-disabled")
    assert "via SHM/direct/direct" in t.evidence and "although the GPUs have NVLink" in t.evidence
    assert real.env.get("NCCL_P2P_DISABLE") == "1"  # the real log's ENV lines reach the env check
    t = one(find_traps([ib_node], real, {}), "p2p-disabled")
    assert "NCCL_P2P_DISABLE=1" in t.evidence


# -- NIC lists -------------------------------------------------------------------------------------------------

def test_ib_hca_naming_an_absent_device(ib_node):
    t = one(find_traps([ib_node], None, {"NCCL_IB_HCA": "mlx5_0,mlx5_9"}), "nic-env-mismatch")
    assert "mlx5_9, not present" in t.evidence and "mlx5_0" in t.evidence


def test_ib_hca_selecting_a_down_port():
    spec = S.hgx_host("n1", *H100, ngpus=2, nics=2)
    spec.nics[1] = dataclasses.replace(spec.nics[1], state="DOWN")
    r = find_traps([facts(spec)], None, {"NCCL_IB_HCA": "=mlx5_1"})
    evidence = " | ".join(t.evidence for t in r.raised if t.name == "nic-env-mismatch")
    assert "selects mlx5_1:1" in evidence and "state DOWN" in evidence and "leaves no active RDMA port" in evidence
    assert "nic-env-mismatch" in find_traps([facts(spec)], None, {"NCCL_IB_HCA": "mlx5"}).passed


def test_socket_ifname(ib_node):
    t = one(find_traps([ib_node], None, {"NCCL_SOCKET_IFNAME": "eth"}), "nic-env-mismatch")
    assert "matches no interface that is up" in t.evidence and "lo (unknown)" in t.evidence
    assert "nic-env-mismatch" in find_traps([ib_node], None, {"NCCL_SOCKET_IFNAME": "ib"}).passed
    assert "nic-env-mismatch" in find_traps([ib_node], None, {"NCCL_SOCKET_IFNAME": "^docker,lo"}).passed


# -- forced algorithms, formatting -----------------------------------------------------------------------------

def test_forced_algorithm_and_nvls_off(ib_node):
    r = find_traps([ib_node], None, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_NVLS_ENABLE": "0"})
    forced = [t for t in r.raised if t.name in ("algo-forced", "proto-forced")]
    assert [t.name for t in forced] == ["algo-forced", "proto-forced", "algo-forced"]
    assert all(t.severity == "info" for t in forced) and r.causes() == ["algo_forced", "proto_forced"]
    assert any("NVLS_ENABLE=0" in t.evidence and "~480" in t.evidence for t in forced)


def test_report_round_trip_and_lines(ib_node):
    r = find_traps([ib_node], None, {"NCCL_P2P_DISABLE": "1"})
    assert TrapReport.from_dict(r.to_dict()) == r
    lines = format_trap_lines(r)
    assert lines[0].startswith("# TRAP ERROR p2p-disabled: NCCL_P2P_DISABLE=1") and "Fix: unset" in lines[0]
    assert lines[-1].startswith("# Not checked: net-socket-fallback (needs NCCL's log")


def test_fails_by_severity(ib_node):
    assert not find_traps([ib_node], None, {"NCCL_ALGO": "Ring"}).fails()
    assert find_traps([ib_node], None, {"NCCL_ALGO": "Ring"}).fails("info")
    assert find_traps([ib_node], None, {"NCCL_P2P_DISABLE": "1"}).fails()


def test_host_settings_are_each_hosts_own_and_nccls_lines_fill_only_what_no_rank_set():
    from ncclbench.explain.nccl_env import host_settings

    per_host = {"node0": {"NCCL_SOCKET_IFNAME": "=fhv0"}, "node1": {"NCCL_SOCKET_IFNAME": "=fhv1"}}
    log_env = {"NCCL_SOCKET_IFNAME": "=fhv0", "NCCL_IB_DISABLE": "1"}  # rank 0's value first; one from nccl.conf
    job = {"NCCL_SOCKET_IFNAME": "=fhv0"}
    assert host_settings("node1", job, per_host, log_env) == {"NCCL_SOCKET_IFNAME": "=fhv1", "NCCL_IB_DISABLE": "1"}
    assert host_settings("node0", job, per_host, log_env) == {"NCCL_SOCKET_IFNAME": "=fhv0", "NCCL_IB_DISABLE": "1"}
    assert host_settings("node9", job, per_host, log_env) == {**job, "NCCL_IB_DISABLE": "1"}  # not gathered: the job's
    assert host_settings("node1", job, None, log_env) == {**job, "NCCL_IB_DISABLE": "1"}


def test_a_setting_each_host_has_its_own_of_splits_only_the_checks_that_read_it(ib_node):
    """NCCL_HOSTID differs on every host (fake hosts, containers): the socket and P2P checks still judge the
    hosts as one (one trap, not one per host); a NIC list each host sets for itself is judged per host."""
    other = dataclasses.replace(ib_node, host="n2")
    per_host = {ib_node.host: {"NCCL_HOSTID": "a", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "ib"},
                "n2": {"NCCL_HOSTID": "b", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "nosuch"}}
    r = find_traps([ib_node, other], None, per_host[ib_node.host], host_env=per_host)
    assert len([t for t in r.raised if t.name == "net-socket-fallback"]) == 1
    nic = [t for t in r.raised if t.name == "nic-env-mismatch"]
    assert len(nic) == 1 and "NCCL_SOCKET_IFNAME=nosuch" in nic[0].evidence and "on n2" in nic[0].evidence
