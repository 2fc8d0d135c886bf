"""The path line separates what moved data from what NCCL merely initialised, and the ceiling follows
the transport NCCL used (issue 30): recorded logs of tests/fixtures/log_corpus."""

from __future__ import annotations

from pathlib import Path

from ncclbench.explain.run_explain import explain_run
from ncclbench.explain.stored import run_facts
from ncclbench.store.importers import load_file

CORPUS = Path(__file__).parent / "fixtures" / "log_corpus"


def _explain(name):
    return explain_run(run_facts(load_file(str(CORPUS / name))[0]))


def _path(ex):
    return next(line for line in ex.lines if " path" in line and line.startswith("# NCCL"))


def test_one_host_whose_connections_are_all_p2p_says_the_network_moved_nothing():
    line = _path(_explain("h100-healthy-mpirun-4.log"))
    assert line.startswith("# NCCL 2.28.9 path: network not used (no NET connection; NCCL initialised network Socket; "
                           "sockets over eth0); 24 coll channel(s); connections: P2P 96")


def test_sockets_that_carried_data_stay_on_the_path_line_inside_a_host_and_between_hosts():
    for name in ("h100-p2p-shm-disabled.log", "h100-fakehosts-2x2-sockets.log"):
        line = _path(_explain(name))
        assert line.startswith("# NCCL 2.28.9 path: network Socket; sockets over ") and "NET " in line, name


def test_p2p_and_shm_off_inside_a_host_is_judged_against_the_hosts_own_path_and_names_sockets():
    ex = _explain("h100-p2p-shm-disabled.log")
    c = ex.judgement.ceiling
    assert "TCP sockets through the kernel" in c.reasoning and "host memory" not in c.reasoning
    assert c.ceiling == 370.8 and ex.judgement.verdict.label == "below expected"
    assert "p2p_shm_disabled" in ex.judgement.traps.causes()


def test_p2p_off_alone_keeps_the_host_memory_ceiling_of_shm():
    c = _explain("h100-p2p-disabled.log").judgement.ceiling
    assert c.bound == "PCIe" and "host memory" in c.reasoning and "sockets" not in c.reasoning
