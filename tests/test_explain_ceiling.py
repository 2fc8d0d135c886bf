"""Expected ceilings: NCCL's constants as NCCL's source has them, the bound that binds for each
topology, the algorithm NCCL uses or would pick, NCCL's own table, and unknowns with reasons."""

import dataclasses

import pytest
from explain_helpers import A100, B200, H100, H200, facts, log

from ncclbench.explain.ceiling import Ceiling, expected_ceiling, nccl_algorithm, nccl_table_ceiling
from ncclbench.explain.nccl_bandwidth import nccl_nic_channel_bw, nccl_nvlink_bw, nccl_pcie_bw, nvls_channel_bw
from ncclbench.explain.nccl_env import allowed_algorithms, nccl_list_match, p2p_level
from ncclbench.simulation import hosts as S

# -- NCCL's constants --------------------------------------------------------------------------

def test_nvlink_bw_per_nccl_version():
    assert nccl_nvlink_bw((9, 0)) == 20.6 and nccl_nvlink_bw((9, 0), "2.19.4") == 20.0
    assert nccl_nvlink_bw((9, 0), "2.20.3") == 20.6
    assert nccl_nvlink_bw((10, 0)) == 40.1 and nccl_nvlink_bw((10, 0), "2.27.3") == 40.0
    assert nccl_nvlink_bw((10, 0), "2.27.5") == 40.1 and nccl_nvlink_bw((10, 0), "2.25.1") == 40.1
    assert [nccl_nvlink_bw(c) for c in ((8, 0), (8, 6), (7, 0), (6, 0))] == [20.0, 12.0, 20.0, 18.0]


def test_pcie_and_nic_bandwidth_as_nccl_computes_them():
    assert nccl_pcie_bw(3, 16) == 12.0  # PCI_BW, "PCI Gen3 x16"
    assert (nccl_pcie_bw(4, 16), nccl_pcie_bw(5, 16), nccl_pcie_bw(4, 8)) == (24.0, 48.0, 12.0)
    # speed/8000 floored to the search's inter-node speeds: the maintainers' 48/24/12 rule of thumb
    assert [nccl_nic_channel_bw(g, (9, 0)) for g in (400, 200, 100, 25)] == [48.0, 24.0, 12.0, 3.0]
    assert nccl_nic_channel_bw(800, (10, 0)) == 96.0 and nccl_nic_channel_bw(800, (9, 0)) == 48.0


def test_nvls_channel_bw_follows_the_search():
    # (n+1) x bw must fit the GPU's switch link: 8 H100 -> 40 (9 x 40 = 360 <= 370.8), 4 -> 60
    assert nvls_channel_bw(370.8, 8, (9, 0)) == 40.0
    assert nvls_channel_bw(370.8, 4, (9, 0)) == 60.0
    assert nvls_channel_bw(721.8, 8, (10, 0)) == 80.0


def test_nccl_env_semantics():
    assert nccl_list_match("mlx5", "mlx5_3", 1) is True
    assert nccl_list_match("=mlx5", "mlx5_3", 1) is False
    assert nccl_list_match("^mlx5_0,mlx5_1", "mlx5_1", 1) is False
    assert nccl_list_match("^mlx5_0", "mlx5_1", 1) is True
    assert nccl_list_match("mlx5_0:2", "mlx5_0", 1) is False and nccl_list_match("mlx5_0:1", "mlx5_0", 1)
    assert nccl_list_match("", "x", None) is None
    assert allowed_algorithms("ring,tree", "all_reduce") == {"Ring", "Tree"}
    assert allowed_algorithms("^nvls", "all_reduce") == {"Tree", "Ring", "CollNetDirect", "CollNetChain",
                                                         "NVLSTree", "PAT"}
    assert allowed_algorithms("allgather:ring", "all_reduce") is None
    assert allowed_algorithms("Ring;allreduce:NVLS", "all_reduce") == {"NVLS"}
    assert p2p_level({"NCCL_P2P_DISABLE": "1"}) == (0, "NCCL_P2P_DISABLE=1")
    assert p2p_level({"NCCL_P2P_LEVEL": "NVL"})[0] == 1 and p2p_level({"NCCL_P2P_LEVEL": "2"})[0] == 5
    assert p2p_level({"NCCL_P2P_DISABLE": "0"}) == (None, "")


# -- single node --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def h100():
    return facts(S.hgx_host("n1", *H100))


def test_h100_ring_nvls_off(h100):
    c = expected_ceiling([h100], "all_reduce", 8, env={"NCCL_NVLS_ENABLE": "0"})
    assert (c.algorithm, c.algorithm_source, c.bound) == ("Ring", "predicted", "NVLink")
    assert c.ceiling == pytest.approx(18 * 20.6) and c.line_rate == 450.0
    assert "18 NVLink4 links x 25 GB/s = 450 GB/s line rate; NCCL's model 18 x 20.6 = 370.8 GB/s" in c.reasoning


def test_h100_nvls_is_predicted_and_exceeds_the_line_rate(h100):
    c = expected_ceiling([h100], "all_reduce", 8)
    assert (c.algorithm, c.bound) == ("NVLS", "NVLink")
    # one baseboard: 8 channels at the switch link's share 370.8 / 9, not NCCL's 40 GB/s step (476)
    assert c.ceiling == pytest.approx(8 * 370.8 / 9 * 0.85 * 7 / 8 * 2)
    assert c.ceiling > c.line_rate and "switch reduces" in c.reasoning
    assert "8 channels x the switch link's share 370.8/9 = 41.2 GB/s x 0.85" in c.reasoning
    assert "NCCL's speed steps plan 476" in c.reasoning
    # all_gather does not gain from NVLS on one node: NCCL's model puts Ring first
    assert expected_ceiling([h100], "all_gather", 8).algorithm == "Ring"


def test_nvls_not_chosen_on_four_hopper_gpus(h100):
    """NCCL's quantised NVLS model (4 x 60 x 0.85 x 3/4 x 2 = 306) loses to Ring (370.8) at 4 GPUs;
    at 5 it wins (5 x 60 x 0.85 x 4/5 x 2 = 408): ml-engineering's H200 subsets show exactly that."""
    four = h100.only([g.pci_bus_id for g in h100.gpus[:4]])
    five = h100.only([g.pci_bus_id for g in h100.gpus[:5]])
    assert expected_ceiling([four], "all_reduce", 4).algorithm == "Ring"
    assert expected_ceiling([five], "all_reduce", 5).algorithm == "NVLS"


def test_algorithm_from_the_environment_and_the_log(h100):
    c = expected_ceiling([h100], "all_reduce", 8, env={"NCCL_ALGO": "ring"})
    assert (c.algorithm, c.algorithm_source) == ("Ring", "NCCL_ALGO")
    c = expected_ceiling([h100], "all_reduce", 8, algorithm="nvls", algorithm_source="profiler")
    assert (c.algorithm, c.algorithm_source) == ("NVLS", "profiler")
    algo, why = nccl_algorithm(log("nccl-2.28.9-rank0.log"), "all_reduce")
    assert algo == "Ring" and "128 MiB -> Ring/Simple" in why
    assert nccl_algorithm(log("nccl-2.18.6-rank0.log"), "all_reduce")[0] is None  # 2.18 prints no per-call line


def test_pcie_box_and_idle_generation():
    spec = S.pcie_host("p", "NVIDIA L40S", (8, 9))
    c = expected_ceiling([facts(spec)], "all_reduce", 4)
    assert (c.bound, c.ceiling) == ("PCIe", 24.0) and c.line_rate == pytest.approx(31.5, abs=0.1)
    # an idle GPU reads Gen1: the model keeps the link's max generation, not the power-saving one
    spec.gpus[0] = dataclasses.replace(spec.gpus[0], pcie=(1, 4, 16, 16), pstate=8)
    assert expected_ceiling([facts(spec)], "all_reduce", 4).ceiling == 24.0
    # busy (P0) and still Gen1: that is the link
    spec.gpus[0] = dataclasses.replace(spec.gpus[0], pstate=0)
    assert expected_ceiling([facts(spec)], "all_reduce", 4).ceiling == pytest.approx(16 * 15 / 80)
    # a downtrained width binds the whole ring
    spec.gpus[0] = dataclasses.replace(spec.gpus[0], pcie=(4, 4, 8, 16))
    assert expected_ceiling([facts(spec)], "all_reduce", 4).ceiling == 12.0


def test_links_down_lower_the_ring():
    spec = S.hgx_host("n1", *H100, nic_kind=None)
    spec.gpus[6] = dataclasses.replace(spec.gpus[6], links_down=(0, 1))
    c = expected_ceiling([facts(spec)], "all_reduce", 8, env={"NCCL_NVLS_ENABLE": "0"})
    assert c.ceiling == pytest.approx(16 * 20.6) and "16 NVLink4 links" in c.reasoning


def test_direct_nvlink_pair_and_pairs_without_a_ring():
    spec = S.pcie_host("d", "NVIDIA A100 80GB PCIe", (8, 0), ngpus=4, nic_kind=None)
    g = spec.gpus
    pairs = {0: 1, 1: 0, 2: 3, 3: 2}
    spec.gpus = [dataclasses.replace(x, nvlinks=12, nvlink_remote="gpu", nvlink_peers=((g[pairs[i]].bus_id, 12),))
                 for i, x in enumerate(g)]
    t = facts(spec)
    two = expected_ceiling([t.only([g[0].bus_id, g[1].bus_id])], "all_reduce", 2)
    assert (two.bound, two.ceiling, two.line_rate) == ("NVLink", 240.0, 300.0)
    four = expected_ceiling([t], "all_reduce", 4)  # bridged pairs: any ring of 4 crosses PCIe
    assert (four.bound, four.ceiling) == ("PCIe", 24.0) and "no NVLink ring" in four.reasoning


def test_p2p_disabled_by_env_means_pcie():
    t = facts(S.hgx_host("n1", *H100, nic_kind=None))
    c = expected_ceiling([t], "all_reduce", 8, env={"NCCL_P2P_DISABLE": "1"})
    assert c.bound == "PCIe" and "NCCL_P2P_DISABLE" in c.reasoning


def test_point_to_point_collectives(h100):
    assert expected_ceiling([h100], "alltoall", 8).ceiling == pytest.approx(370.8)
    assert expected_ceiling([h100], "sendrecv", 8).ceiling == pytest.approx(370.8)
    c = expected_ceiling([h100, h100], "alltoall", 16)
    assert (c.bound, c.ceiling) == ("NIC", pytest.approx(48 * 15 / 8)) and c.line_rate == pytest.approx(50 * 15 / 8)
    assert expected_ceiling([h100, h100], "sendrecv", 16).ceiling == pytest.approx(48)


# -- several nodes -------------------------------------------------------------------------------

def test_two_h100_nodes_ib(h100):
    c = expected_ceiling([h100, h100], "all_reduce", 16)
    # NCCL's NVLSTree (tuning.cc, v2.28.3-1+): 8 channels (one per GPU with its NIC), 40 GB/s over NVLink (9 x 42 >
    # 370.8), 48 through the NIC; per channel min(40 x 0.85 x 7/8 x 2 = 59.5, 48 x 2, Hopper's 2-node cap 57.7)
    assert c.algorithm == "NVLSTree" and c.ceiling == pytest.approx(8 * 57.7)
    assert c.bound == "NIC" and c.line_rate == pytest.approx(8 * 50) and "NCCL's NVLSTree cap" in c.reasoning
    four = expected_ceiling([h100] * 4, "all_reduce", 32, algorithm="NVLSTree")
    assert four.ceiling == pytest.approx(8 * min(40 * 0.85 * 7 / 8 * 2, 48, 45.5))  # past 2 nodes: x1, cap 45.5
    c = expected_ceiling([h100, h100], "all_reduce", 16, env={"NCCL_ALGO": "Ring"})
    assert (c.algorithm, c.bound, c.ceiling) == ("Ring", "NVLink", pytest.approx(370.8))  # 8 x 48 = 384 > 370.8
    assert "8x 400 Gb/s InfiniBand per node over IB = 400 GB/s line rate; NCCL plans 8 x 48 = 384" in c.reasoning


def test_nic_bound_nodes():
    b200 = facts(S.hgx_host("b", *B200))
    c = expected_ceiling([b200] * 4, "all_reduce", 32, env={"NCCL_ALGO": "Ring"})
    assert (c.bound, c.ceiling, c.line_rate) == ("NIC", 384.0, 400.0)
    a100 = facts(S.hgx_host("a", *A100, nvlinks=12, gpu_pcie=(4, 4, 16, 16), nic_gbps=200))
    ring = expected_ceiling([a100] * 2, "all_reduce", 16, env={"NCCL_ALGO": "Ring"})
    assert (ring.bound, ring.ceiling) == ("NIC", 192.0)
    assert expected_ceiling([a100] * 2, "all_reduce", 16).algorithm == "Ring"  # Tree is never predicted
    tree = expected_ceiling([a100] * 2, "all_reduce", 16, algorithm="Tree")  # 2 nodes: a tree halves NIC traffic
    assert (tree.bound, tree.ceiling) == ("NVLink", pytest.approx(240 * 0.92))
    four = expected_ceiling([a100] * 4, "all_reduce", 32, algorithm="Tree")
    assert (four.bound, four.ceiling) == ("NIC", 192.0)


def test_fewer_gpus_than_the_box_use_their_share_of_nics(h100):
    two = h100.only([h100.gpus[0].pci_bus_id, h100.gpus[1].pci_bus_id])
    c = expected_ceiling([two, two], "all_reduce", 4, env={"NCCL_ALGO": "Ring"})
    assert (c.bound, c.ceiling) == ("NIC", 96.0) and "2 of 8 NICs" in c.reasoning


def test_nccl_ib_hca_limits_the_nics(h100):
    c = expected_ceiling([h100, h100], "all_reduce", 16, env={"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "=mlx5_0,mlx5_1"})
    assert (c.bound, c.ceiling) == ("NIC", 96.0)


def test_socket_transport_has_no_ceiling_model():
    spec = S.hgx_host("a", "NVIDIA GH200 480GB", (9, 0), ngpus=4, nic_kind="slingshot", nic_gbps=200, nics=4)
    t = facts(spec)
    c = expected_ceiling([t, t], "all_reduce", 8, log=log("nccl-2.28.9-socket-fallback.log"))
    assert c.ceiling is None and "Socket transport" in c.unknown and c.line_rate == pytest.approx(100.0)


# -- NCCL's own table, bad input ------------------------------------------------------------------

def test_nccl_table_ceiling_from_a_log(h100):
    facts_ = log("nccl-2.28.9-rank0.log")
    v, text = nccl_table_ceiling(facts_.tuning_table, "all_reduce", 16)
    assert v == pytest.approx(74.8 * 2 * 15 / 16) and "NVLSTree/Simple algBw 74.8" in text
    v, text = nccl_table_ceiling(facts_.tuning_table, "all_reduce", 16, algorithm="Ring")
    assert v == pytest.approx(57.4 * 2 * 15 / 16)
    c = expected_ceiling([h100, h100], "all_reduce", 16, log=facts_)
    assert c.algorithm == "Ring" and c.algorithm_source == "NCCL log"
    assert c.nccl_predicted == pytest.approx(57.4 * 2 * 15 / 16)
    assert nccl_table_ceiling(facts_.tuning_table, "alltoall", 16) is None
    assert nccl_table_ceiling({}, "all_reduce", 16) is None


def test_unknowns_say_why(h100):
    assert "no bandwidth model for hypercube" in expected_ceiling([h100], "hypercube", 8).unknown
    assert "no bandwidth model for gather across hosts" in expected_ceiling([h100, h100], "gather", 16).unknown
    g = expected_ceiling([h100], "gather", 8)  # one host: the root's own link
    assert (g.algorithm, g.bound, g.ceiling) == ("P2P", "NVLink", pytest.approx(370.8))
    assert expected_ceiling([], "all_reduce", 8).unknown == "no topology facts"
    assert "single rank" in expected_ceiling([h100.only([h100.gpus[0].pci_bus_id])], "all_reduce", 1).unknown
    broken = dataclasses.replace(h100, gpus=[dataclasses.replace(g, nvlink_active=None,
                                                                 unknown={"nvlink_active": "NVML: GPU is lost"})
                                             for g in h100.gpus])
    c = expected_ceiling([broken], "all_reduce", 8)
    assert c.ceiling is None and "GPU is lost" in c.unknown
    no_nic = facts(S.hgx_host("x", *H200, nic_kind=None))
    c = expected_ceiling([no_nic, no_nic], "all_reduce", 16)
    assert c.ceiling is None and "no active NIC" in c.unknown
    c = expected_ceiling([h100], "all_reduce", 8, algorithm="MagicAlgo")
    assert c.ceiling is None and "no bandwidth model for algorithm MagicAlgo" in c.unknown


def test_ceiling_round_trip(h100):
    c = expected_ceiling([h100], "all_reduce", 8)
    assert Ceiling.from_dict(c.to_dict()) == c


def test_gb200_trays_without_a_shared_fabric_are_ordinary_nodes():
    """GB200 trays whose NVML says the fabric is not supported: NCCL cannot use MNNVL, so its nodes are
    the hosts and the NICs bind (the model of any multi-node job); the evidence is kept."""
    gb = facts(S.hgx_host("g", "NVIDIA GB200", (10, 0), ngpus=4, nic_kind="ib", nics=4))
    c = expected_ceiling([gb, gb], "all_reduce", 8, env={"NCCL_ALGO": "Ring"})
    assert c.bound == "NIC" and c.ceiling == pytest.approx(4 * 48)
    assert "fabric not supported" in c.nvlink_domain
    assert expected_ceiling([gb], "all_reduce", 4).ceiling is not None  # one tray alone is modelled
