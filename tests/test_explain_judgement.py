"""A whole run judged: hosts matched to the ranks' GPUs, the summary lines, the JSON round trip."""

import json

from explain_helpers import H200, facts, log

from ncclbench.explain.run_judgement import JSON_KEY, RunJudgement, judge_run
from ncclbench.explain.topology import hosts_in_use
from ncclbench.launch.facts import GpuFact, RankFacts
from ncclbench.simulation import hosts as S

GiB = 2**30


def rank(r, host, gpus, local_rank):
    return RankFacts(rank=r, size=4, host=host, boot_id=f"b-{host}", pid=100 + r, local_rank=local_rank,
                     gpus=gpus, nccl_version="2.28.9")


def test_hosts_in_use_match_ranks_to_gpus_by_pci_address():
    t = facts(S.hgx_host("n1", *H200, nic_kind=None))
    # the launcher gave each rank its own GPU (CUDA_VISIBLE_DEVICES): ordinal 0 is a different GPU per rank
    ranks = [rank(i, "n1", [GpuFact(0, f"GPU-{i}", t.gpus[2 * i].pci_bus_id[:-2], "NVIDIA H200", 1)], i)
             for i in range(2)]
    for f in ranks:
        f.env = {"NCCL_TESTS_DEVICE": "0"}
    (used,) = hosts_in_use([t], ranks)
    assert [g.index for g in used.gpus] == [0, 2] and used.gpus_in_box == 8
    assert hosts_in_use([t], [rank(0, "other", [], 0)]) == []


def test_judge_run_lines_and_json():
    t = facts(S.hgx_host("n1", *H200, nic_kind=None))
    used = t.only([g.pci_bus_id for g in t.gpus[:4]])
    rows = [(2 * GiB, 359.7), (4 * GiB, 362.0), (8 * GiB, 365.2)]
    j = judge_run([used], "all_reduce", 4, rows, env={"NCCL_NVLS_ENABLE": "0"})
    lines = j.lines()
    assert lines[0].startswith("# Plateau bus bandwidth: 363.6 GB/s at 4 GiB-8 GiB; ceiling 370.8 GB/s (NVLink, Ring")
    assert lines[0].endswith("as expected (98% of the 370.8 GB/s ceiling)")
    assert lines[1].startswith("#   why: 4x NVIDIA H200 NVSwitch, 18 NVLink4 links")
    assert not any("NCCL_NVLS_ENABLE=0 on NVSwitch" in x for x in lines)  # 4 GPUs: NVLS would not run anyway
    doc = json.loads(json.dumps({JSON_KEY: j.to_dict()}))
    assert RunJudgement.from_dict(doc[JSON_KEY]) == j


def test_judge_run_with_nccls_log():
    t = facts(S.hgx_host("n1", *H200))
    j = judge_run([t, t], "all_reduce", 16, [(128 * 2**20, 300.0)], log=log("nccl-2.28.9-rank0.log"))
    assert j.ceiling.algorithm == "Ring" and j.ceiling.algorithm_source == "NCCL log"
    assert j.ceiling.nccl_predicted is not None
    assert any("NCCL's TUNING table" in x for x in j.lines())
    assert "net-socket-fallback" in j.traps.passed  # the log's network is the OFI plugin
