"""Multi-node NVLink (GB200/GB300 NVL72): the domain found from NVML's fabric info, NCCL's log and the
GPU model, and Ring/NVLS modelled over the whole domain with one bounded NVLS model.  The racks are
described as real trays (4 GPUs per compute tray, 18 trays, 18 NVLink5 links per GPU) and read back
through the real NVML and sysfs readers."""

import dataclasses

import pytest
from explain_helpers import H100, facts

from ncclbench.explain.ceiling import Ceiling, expected_ceiling
from ncclbench.explain.mnnvl import find_domain
from ncclbench.explain.nccl_bandwidth import nvls_model, nvls_net_graph, nvls_tree_model
from ncclbench.explain.nccl_log import merge_facts, parse_nccl_log
from ncclbench.explain.plateau_verdict import Plateau, judge
from ncclbench.explain.topology import HostTopology, format_topology_lines, format_topology_report
from ncclbench.simulation import hosts as S

GiB = 2**30
NVL72_NVLS = 32 * 20 * 0.74 * 31 / 32 * 2  # NCCL's 32 channels x 20 GB/s: 917.6


@pytest.fixture(scope="module")
def rack():
    """One GB200 NVL72 rack: 18 hosts of 4 GPUs, one fabric clique."""
    specs = S.nvl72_rack()
    first = facts(specs[0])
    # the trays are alike: read one through the readers, name the others after their hosts
    return [dataclasses.replace(first, host=s.host) for s in specs]


def _log(*msgs, host="tray00"):
    return "\n".join(f"{host}:100:100 [0] NCCL INFO {m}" for m in msgs)


MNNVL_ON = _log("comm 0x5 rank 0 nRanks 72 nNodes 1 localRanks 72 localRank 0 MNNVL 1",
                "MNNVL 1 cliqueId 1 cliqueSize 72 cliqueRank 0")


def test_the_fabric_is_read_from_nvml(rack):
    g = rack[0].gpus[0]
    assert (g.name, g.nvlink_active, g.nvlink_remote, g.nvlink_line_rate) == ("NVIDIA GB200", 18, "switch", 900.0)
    assert g.fabric_state == "completed" and g.fabric_status == 0 and g.fabric_clique_id == 1
    assert g.fabric_domain == ("4e564c3732000000000000000000a001", 1)
    back = HostTopology.from_dict(rack[0].to_dict()).gpus[0]  # travels to rank 0 and into the store
    assert back.fabric_domain == g.fabric_domain
    assert any("NVLink fabric: completed, cluster 4e564c37" in line for line in format_topology_report(rack[0]))
    banner = format_topology_lines(rack)
    assert banner[0].startswith("# Topology tray00 and 17 more host(s) alike: 4x NVIDIA GB200 (sm 10.0)")
    assert "NVLink fabric 4e564c37.. clique 1" in banner[0]


def test_nvl72_rack_is_one_nvswitch_node(rack):
    d = find_domain(rack, 72)
    assert d.kind == "one" and d.gpus == 72 and "NCCL's use of it not confirmed" in d.text
    c = expected_ceiling(rack, "all_reduce", 72)
    assert (c.algorithm, c.algorithm_source, c.bound) == ("NVLS", "predicted", "NVLink")
    assert c.ceiling == pytest.approx(NVL72_NVLS) and c.line_rate == 900.0
    assert "72x NVIDIA GB200 in one NVLink domain over 18 hosts" in c.reasoning
    assert "32 channels x 20 GB/s x 0.74" in c.reasoning and c.nnodes == 18
    ring = expected_ceiling(rack, "all_reduce", 72, env={"NCCL_NVLS_ENABLE": "0"})
    assert (ring.algorithm, ring.ceiling, ring.bound) == ("Ring", pytest.approx(18 * 40.1), "NVLink")
    ag = expected_ceiling(rack, "all_gather", 72)  # not the trays' 4 x 400G NICs
    assert (ag.algorithm, ag.bound, ag.ceiling) == ("Ring", "NVLink", pytest.approx(721.8))


def test_published_nvl72_rack_is_as_expected(rack):
    """coreweave/nccl-tests README.md @0120901, GB200 single rack (72 GPUs, NCCL 2.26.2): all_reduce
    out-of-place busbw 757.78 / 839.16 / 834.57 GB/s at 2 / 4 / 8 GiB."""
    c = expected_ceiling(rack, "all_reduce", 72, nccl_version="2.26.2")
    assert c.ceiling == pytest.approx(32 * 20 * 0.74 * 31 / 32 * 2)  # 2.26's 40.0 GB/s links: the same step
    v = judge(Plateau(834.57, 2 * GiB, 8 * GiB, 3), c)
    assert v.label == "as expected" and 0.90 <= v.fraction <= 0.93


def test_nvls_model_is_bounded_in_the_gpu_count():
    """One NVLS model, NCCL's stepped figures: never more than 2 x efficiency x the GPU's NVLink, and
    flat from 32 GPUs (NCCL_MAX_NVLS_ARITY) on - a rack faked as one 72-GPU host gets the same."""
    for gpu_bw, cc, eff in ((721.8, (10, 0), 0.74), (370.8, (9, 0), 0.85)):
        values = [m.busbw for n in range(2, 600) if (m := nvls_model(gpu_bw, n, cc)[0]) is not None]
        assert values and max(values) < 2 * eff * gpu_bw
        assert len({nvls_model(gpu_bw, n, cc)[0].busbw for n in (32, 72, 576)}) == 1
    assert nvls_model(721.8, 72, (10, 0))[0].busbw == pytest.approx(NVL72_NVLS)
    assert nvls_model(370.8, 8, (9, 0))[0].busbw == pytest.approx(476.0)  # 8x H100: NCCL's 8 x 40 GB/s
    assert nvls_model(721.8, 8, (10, 0))[0].busbw == pytest.approx(8 * 80 * 0.74 * 7 / 8 * 2)  # 8x B200: 828.8
    assert nvls_model(370.8, 8, (8, 0)) == (None, "NVLS: no NVLS efficiency for this GPU generation "
                                                  "(NCCL: Hopper and Blackwell)")
    big = facts(S.hgx_host("big", "NVIDIA GB200", (10, 0), ngpus=72, nic_kind=None))
    assert expected_ceiling([big], "all_reduce", 72, algorithm="NVLS").ceiling == pytest.approx(NVL72_NVLS)


def test_nccl_log_confirms_the_domain(rack):
    log = parse_nccl_log(MNNVL_ON)
    assert log.mnnvl["flags"] == [1] and log.mnnvl["nnodes"] == 1 and log.mnnvl["clique_size"] == 72
    assert log.nnodes == 1  # the comm line is still read by the log reader
    d = find_domain(rack, 72, log.mnnvl)
    assert d.kind == "one" and d.text.startswith("NCCL's log: MNNVL 1, nNodes 1, clique size 72")
    # NCCL said so, NVML could not (no fabric info read): the log is what NCCL did
    plain = [facts(S.hgx_host(f"t{i}", "NVIDIA GB200", (10, 0), ngpus=4, nics=4)) for i in range(2)]
    c = expected_ceiling(plain, "all_reduce", 8, log=parse_nccl_log(MNNVL_ON.replace("nRanks 72", "nRanks 8")))
    assert c.bound == "NVLink" and "one NVLink domain over 2 hosts" in c.reasoning


def test_nccl_did_not_use_the_fabric(rack):
    """NVML shows one clique, but NCCL's log says MNNVL 0 and warns about IMEX: NCCL's nodes are the
    trays, joined by their NICs - the ceiling says so instead of promising NVLink."""
    text = _log("comm 0x5 rank 0 nRanks 72 nNodes 18 localRanks 4 localRank 0 MNNVL 0") + (
        "\ntray00:100:100 [0] mnnvl.cc:67 NCCL WARN MNNVL (cliqueSize 72) is available but not working on this "
        "system. Check the IMEX channel configuration (/dev/nvidia-caps-imex-channels).")
    log = parse_nccl_log(text)
    c = expected_ceiling(rack, "all_reduce", 72, log=log, env={"NCCL_ALGO": "Ring"})
    assert c.bound == "NIC" and c.ceiling == pytest.approx(4 * 48)
    assert "MNNVL 0" in c.nvlink_domain and "IMEX" in c.nvlink_domain and "did not use that fabric" in c.nvlink_domain
    assert "; multi-node NVLink not used: NCCL's log: MNNVL 0" in c.reasoning  # printed on the '#   why:' line
    off = find_domain(rack, 72, env={"NCCL_MNNVL_ENABLE": "0"})
    assert off.kind == "none" and "NCCL_MNNVL_ENABLE=0" in off.text


def test_several_domains_are_joined_by_their_nics_and_unknown_ones_not_judged(rack):
    # NCCL: two NVLink domains (2 racks) joined by the network
    two = parse_nccl_log(MNNVL_ON.replace("nRanks 72 nNodes 1", "nRanks 144 nNodes 2"))
    c = expected_ceiling(rack + rack, "all_reduce", 144, log=two)
    assert c.ceiling == pytest.approx(NVL72_NVLS) and "2 NVLink domains joined by the network" in c.nvlink_domain
    assert "72 trays x (" not in c.reasoning and "18 trays x (4x 400 Gb/s InfiniBand" in c.reasoning
    assert "2 such domains joined by their NICs" in c.reasoning
    odd = parse_nccl_log(MNNVL_ON.replace("nRanks 72 nNodes 1", "nRanks 144 nNodes 5"))
    c = expected_ceiling(rack + rack, "all_reduce", 144, log=odd)  # 36 hosts do not split into 5 domains
    assert c.ceiling is None and "not modelled" in c.unknown
    # NVML: the second rack is another clique
    other = [dataclasses.replace(h, host=f"r2-{h.host}", gpus=[
        dataclasses.replace(g, fabric_clique_id=2) for g in h.gpus]) for h in rack]
    assert find_domain(rack + other, 144).kind == "several"
    # GB200 across hosts, fabric not readable, no NCCL log: unknown, never guessed
    blind = [dataclasses.replace(h, gpus=[dataclasses.replace(g, fabric_state=None, unknown={
        "fabric_state": "this nvidia-ml-py has no nvmlDeviceGetGpuFabricInfo(V)"}) for g in h.gpus]) for h in rack]
    c = expected_ceiling(blind, "all_reduce", 72)
    assert c.ceiling is None and "whether they share one NVLink domain is unknown" in c.unknown
    assert "no nvmlDeviceGetGpuFabricInfo" in c.unknown
    # one tray still joining the fabric: NCCL needs every rank COMPLETED, so no MNNVL
    late = list(rack)
    late[5] = dataclasses.replace(late[5], gpus=[dataclasses.replace(late[5].gpus[0], fabric_state="in progress"),
                                                 *late[5].gpus[1:]])
    d = find_domain(late, 72)
    assert d.kind == "none" and "tray05 GPU0: fabric in progress" in d.text


def _racks(tray, d):
    """`d` racks of 18 trays like `tray`, rack r in NVML fabric clique r+1 (NCCL's nodes are the racks)."""
    return [dataclasses.replace(tray, host=f"r{r}t{t:02d}", gpus=[dataclasses.replace(g, fabric_clique_id=r + 1)
                                                              for g in tray.gpus])
            for r in range(d) for t in range(S.NVL72_TRAYS)]


def test_nvls_graph_with_nics_follows_nccls_search():
    """search.cc: nCh = min(32, GPUs, GPUs with their own NIC) channels, each at the node's own NVLS speed (the
    largest intra speed with (nCh+1) x it within the GPU's NVLink), the head's NIC at its plan."""
    g, _ = nvls_net_graph(720.0, 72, 72, 48.0, (10, 0))  # NVL72, 4x 400G per tray: 33 x 24 = 792 > 720
    assert (g.channels, g.bw_intra, g.bw_inter) == (32, 20.0, 48.0)
    g, _ = nvls_net_graph(720.0, 72, 18, 48.0, (10, 0))  # one NIC per tray: 18 heads, 19 x 30 <= 720 < 19 x 40
    assert (g.channels, g.bw_intra, g.bw_inter) == (18, 30.0, 48.0)
    g, _ = nvls_net_graph(370.8, 8, 8, 48.0, (9, 0))  # 8x H100, 8x 400G: 9 x 40 <= 370.8 < 9 x 50
    assert (g.channels, g.bw_intra, g.bw_inter) == (8, 40.0, 48.0)
    # 8x B200: 9 x 80 <= 721.8; NCCL's search would cap it at the NIC path's 48 (a plan of 497 GB/s on 2 nodes,
    # where coreweave/nccl-tests#92 publishes 690)
    g, _ = nvls_net_graph(721.8, 8, 8, 48.0, (10, 0), "2.28.3")
    assert (g.channels, g.bw_intra, g.bw_inter) == (8, 80.0, 48.0)
    g, _ = nvls_net_graph(720.0, 16, 16, 48.0, (10, 0))  # a 16-GPU domain: 17 x 40 <= 720 < 17 x 45
    assert (g.channels, g.bw_intra) == (16, 40.0)
    assert nvls_net_graph(720.0, 72, 1, 48.0, (10, 0))[0] is None  # one head: NCCL needs 2 channels


@pytest.mark.parametrize("gpu_bw, gpus, heads, nic, domains, cc, version, busbw, bound", [
    # GB200 NVL72 racks, 400G per GPU: min(20 x 0.74 x 31/32 x 2 = 28.675, 40 x 2 / 40, cap 96 / 80) = 28.675
    (720.0, 72, 72, 48.0, 2, (10, 0), "2.26.2", 32 * 20 * 0.74 * 31 / 32 * 2, "NVLink"),
    (720.0, 72, 72, 48.0, 20, (10, 0), "2.26.2", 32 * 20 * 0.74 * 31 / 32 * 2, "NVLink"),
    # GB300 NVL72, 800G CX-8: bwInter stops at 2 x 20 = 40 either way, so the same figure
    (721.8, 72, 72, 96.0, 3, (10, 3), None, 32 * 20 * 0.74 * 31 / 32 * 2, "NVLink"),
    # 200G NICs: the heads' NICs bind past 2 racks (32 x 24), not on 2 (24 x 2 = 48 > 28.675)
    (720.0, 72, 72, 24.0, 4, (10, 0), None, 32 * 24, "NIC"),
    (720.0, 72, 72, 24.0, 2, (10, 0), None, 32 * 20 * 0.74 * 31 / 32 * 2, "NVLink"),
    # 16-GPU domains: 16 x min(40 x 0.74 x 15/16 x 2 = 55.5, 48, 80) on 3 domains, the NVLink part on 2
    (720.0, 16, 16, 48.0, 3, (10, 0), None, 16 * 48, "NIC"),
    (720.0, 16, 16, 48.0, 2, (10, 0), None, 16 * 40 * 0.74 * 15 / 16 * 2, "NVLink"),
    (720.0, 16, 16, 48.0, 3, (10, 0), "2.28.3", 16 * 43.1, "NIC"),  # Blackwell's > 2-node cap in 2.28.3 .. 2.28.7
    (720.0, 16, 16, 48.0, 3, (10, 0), "2.29.2", 16 * 43.8, "NIC"),  # .. and in 2.28.9 .. 2.29.7
    # 8x B200 nodes, 8x 400G: min(80 x 0.74 x 7/8 x 2 = 103.6, 48 x 2, cap 96) on 2 nodes; 48 past 2
    (721.8, 8, 8, 48.0, 2, (10, 0), "2.28.3", 8 * 96, "NIC"),
    (721.8, 8, 8, 48.0, 4, (10, 0), "2.28.3", 8 * min(48, 43.1), "NIC"),
    # 8x H100 nodes: Hopper's caps, 57.7 on 2 nodes and 45.5 past 2, below 40 x 0.85 x 7/8 x 2 = 59.5
    (370.8, 8, 8, 48.0, 2, (9, 0), None, 8 * 57.7, "NIC"),
    (370.8, 8, 8, 48.0, 4, (9, 0), None, 8 * 45.5, "NIC"),
])
def test_nvls_tree_over_domains_is_nccls_formula(gpu_bw, gpus, heads, nic, domains, cc, version, busbw, bound):
    m, why = nvls_tree_model(gpu_bw, gpus, heads, nic, domains, cc, version)
    assert m is not None, why
    assert (m.busbw, m.bound) == (pytest.approx(busbw), bound)


def test_racks_joined_by_their_nics_say_which_part_binds(rack):
    """D NVL72 racks: each rack one NCCL node of 72 GPUs; NVLSTree bound by NVLink within each rack with
    400G per GPU (the tree between racks rides 32 heads' NICs at 48 GB/s each), by the network with 200G."""
    three = expected_ceiling(_racks(rack[0], 3), "all_reduce", 216)
    assert (three.algorithm, three.ceiling, three.bound) == ("NVLSTree", pytest.approx(NVL72_NVLS), "NVLink")
    assert "NVLSTree over 3 NVLink domains: NCCL's NVLS graph 32 channels" in three.reasoning
    assert "bound by NVLink within each NVLink domain" in three.reasoning and three.line_rate == 900.0
    ring = expected_ceiling(_racks(rack[0], 3), "all_reduce", 216, env={"NCCL_ALGO": "Ring"})
    assert (ring.ceiling, ring.bound) == (pytest.approx(18 * 40.1), "NVLink")  # 72 x 48 of NICs per rack is more
    slow = facts(S.nvl72_rack(trays=1, nic_gbps=200)[0])
    c = expected_ceiling(_racks(slow, 4), "all_reduce", 288)
    assert (c.algorithm, c.ceiling, c.bound) == ("NVLSTree", pytest.approx(32 * 24), "NIC")
    assert c.line_rate == pytest.approx(32 * 25)  # the 32 heads' NICs, 200 Gb/s each
    assert "bound by the network between the NVLink domains (the heads' NICs)" in c.reasoning
    assert expected_ceiling(_racks(slow, 2), "all_reduce", 144).bound == "NVLink"  # 2 racks: 24 x 2 > 28.7
    gb300 = facts(S.nvl72_rack(gpu_name="NVIDIA GB300", cc=(10, 3), trays=1, nic_gbps=800, nic_pcie=(6, 6, 16, 16))[0])
    c = expected_ceiling(_racks(gb300, 2), "all_reduce", 144, nccl_version="2.28.9")
    assert (c.ceiling, c.bound) == (pytest.approx(NVL72_NVLS), "NVLink") and "4x 800 Gb/s InfiniBand" in c.reasoning
    v = judge(Plateau(405.74, 16 * GiB, 16 * GiB, 1), three)
    assert v.label == "unknown" and "not by the fabric that joins them" in v.text


def test_ordinary_multi_node_keeps_its_model():
    """H100 nodes (NVSwitch inside each box: zero cluster UUID) are not an NVLink domain."""
    spec = S.hgx_host("n1", *H100)
    spec.gpus = [dataclasses.replace(g, fabric=("0" * 32, 0, 3)) for g in spec.gpus]
    h = facts(spec)
    assert h.gpus[0].fabric_state == "completed" and h.gpus[0].fabric_domain is None
    c = expected_ceiling([h, h], "all_reduce", 16, env={"NCCL_ALGO": "Ring"})
    assert (c.bound, c.ceiling) == ("NVLink", pytest.approx(370.8)) and "zero cluster UUID" in c.nvlink_domain
    assert Ceiling.from_dict(c.to_dict()) == c


def test_rank_logs_merge_their_mnnvl_lines():
    a = parse_nccl_log(MNNVL_ON)
    b = parse_nccl_log(_log("comm 0x5 rank 4 nRanks 72 nNodes 1 localRanks 72 localRank 4 MNNVL 1",
                            "MNNVL busId 0x1000 fabric UUID 4e564c3732000000.a001 cliqueId 0x1 state 3 healthMask 0x0",
                            host="tray01"))
    m = merge_facts([a, b]).mnnvl
    assert m["flags"] == [1] and m["clique_size"] == 72
    assert m["fabric"] == {"1000": ["4e564c3732000000000000000000a001", 1, 3]}


def test_bench_script_records_model_vs_published(tmp_path, capsys):
    """bench/mnnvl_model.py (bench/results/mnnvl-model-*.md): the rack judged as expected against its
    cited figure, multi-rack runs not judged with the reason, the NVLS table bounded."""
    import importlib.util
    import json
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "mnnvl_model.py"
    spec = importlib.util.spec_from_file_location("mnnvl_model", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mnnvl_model"] = mod
    spec.loader.exec_module(mod)
    assert mod.main(["--out", str(tmp_path / "m")]) == 0
    doc = json.loads((tmp_path / "m.json").read_text())
    first = doc["cases"][0]
    assert first["ceiling"]["ceiling"] == pytest.approx(NVL72_NVLS) and first["verdict"]["label"] == "as expected"
    assert "coreweave/nccl-tests README.md @0120901" in first["source"]
    multi = [c for c in doc["cases"] if c["nranks"] > 72]
    # several racks (GB200 with 400G, GB300 with 800G NICs): NCCL's NVLSTree, bound by NVLink within each rack;
    # the published figures sit on the ramp (114 MiB and 11 MiB per rank), so not judged below the band, with why
    assert len(multi) == 3 and all(c["ceiling"]["ceiling"] == pytest.approx(NVL72_NVLS) for c in multi)
    assert all("bound by NVLink within each NVLink domain" in c["ceiling"]["reasoning"] for c in multi)
    judged = [c for c in multi if c["published"]]
    assert len(judged) == 2 and all(c["verdict"]["label"] == "unknown" and "MiB per rank, short of" in
                                    c["verdict"]["text"] for c in judged)
    assert all(b["busbw"] is None or b["busbw"] < b["limit"] for b in doc["nvls_bounded"])
    assert "## What is not modelled" in (tmp_path / "m.md").read_text()
