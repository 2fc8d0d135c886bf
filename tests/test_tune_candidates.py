"""Candidate generation for `ncclbench tune`: NCCL's rules per version, MPICH's names,
the user's typos and own settings."""

import pytest

from ncclbench.core.errors import ArgumentError, UnsupportedError
from ncclbench.tune import nccl_rules
from ncclbench.tune.candidates import (
    DEFAULT,
    Candidate,
    mpich_candidates,
    nccl_candidates,
    parse_ctas,
    preset_conflicts,
    split_names,
)


def labels(cs):
    return cs.labels


def test_all_reduce_228_single_node_matrix():
    cs = nccl_candidates("all_reduce", 22809, nnodes=1)
    assert cs.candidates[0] == DEFAULT
    # Tree and Ring with every protocol; the Simple-only algorithms once; no PAT, no NVLSTree on one node.
    assert labels(cs)[1:] == ["Tree/LL", "Tree/LL128", "Tree/Simple", "Ring/LL", "Ring/LL128", "Ring/Simple",
                              "CollNetDirect/Simple", "CollNetChain/Simple", "NVLS/Simple"]
    reasons = {s.label: s.reason for s in cs.skipped}
    assert "single node" in reasons["NVLSTree/Simple"]
    assert "no PAT AllReduce" in reasons["PAT/Simple"]
    assert "only with the Simple protocol" in reasons["NVLS/LL128"]


def test_nvls_tree_kept_on_several_nodes():
    cs = nccl_candidates("all_reduce", 22809, algos=["nvls_tree"], protos=["Simple"], nnodes=2)
    assert labels(cs) == ["default", "NVLSTree/Simple"]


def test_env_lines_use_per_function_prefix_from_2_24():
    new = nccl_candidates("all_reduce", 22400, algos=["ring"], protos=["ll128"])
    old = nccl_candidates("all_reduce", 22304, algos=["ring"], protos=["ll128"])
    assert new.candidates[1].env == (("NCCL_ALGO", "allreduce:Ring"), ("NCCL_PROTO", "allreduce:LL128"))
    assert old.candidates[1].env == (("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "LL128"))


def test_broadcast_is_ring_only():
    cs = nccl_candidates("broadcast", 22809, algos=["ring", "tree"], protos=["Simple"])
    assert labels(cs) == ["default", "Ring/Simple"]
    assert cs.skipped[0].label == "Tree/Simple" and "only with Ring" in cs.skipped[0].reason


def test_all_gather_algorithms_grow_with_versions():
    def algos(code):
        return [c.algo for c in nccl_candidates("all_gather", code, protos=["Simple"]).candidates[1:]]

    assert algos(21806) == ["Ring"]
    assert algos(21904) == ["Ring", "NVLS"]
    assert algos(22203) == ["Ring", "CollNetDirect", "NVLS"]
    assert algos(22809) == ["Ring", "CollNetDirect", "NVLS", "PAT"]


def test_pat_needs_2_23_and_simple():
    cs = nccl_candidates("reduce_scatter", 22203, algos=["PAT", "ring"], protos=["LL", "Simple"])
    assert labels(cs) == ["default", "Ring/LL", "Ring/Simple"]
    assert all("2.23" in s.reason for s in cs.skipped if s.label.startswith("PAT"))
    cs = nccl_candidates("reduce_scatter", 22809, algos=["pat"], protos=["LL", "Simple"])
    assert labels(cs) == ["default", "PAT/Simple"]


def test_auto_axis_leaves_choice_to_nccl():
    cs = nccl_candidates("all_reduce", 22809, algos=["auto"], protos=["LL", "Simple"])
    assert labels(cs) == ["default", "auto/LL", "auto/Simple"]
    assert cs.candidates[1].env == (("NCCL_PROTO", "allreduce:LL"),)
    # auto x auto would be the default itself: not measured twice
    cs = nccl_candidates("all_reduce", 22809, algos=["auto", "ring"], protos=["auto"])
    assert labels(cs) == ["default", "Ring/auto"]


def test_ctas_are_config_fields_and_need_2_17():
    cs = nccl_candidates("all_reduce", 22809, algos=["ring"], protos=["Simple"], ctas=[4, 16])
    assert [c.config for c in cs.candidates[1:]] == [(("minCTAs", 4), ("maxCTAs", 4)),
                                                     (("minCTAs", 16), ("maxCTAs", 16))]
    assert labels(cs)[1:] == ["Ring/Simple/ctas=4", "Ring/Simple/ctas=16"]
    old = nccl_candidates("all_reduce", 21605, algos=["ring"], protos=["Simple"], ctas=[4])
    assert labels(old) == ["default", "Ring/Simple"]
    assert "2.17" in old.skipped[0].reason


def test_unknown_names_are_one_line_errors():
    with pytest.raises(ArgumentError, match="unknown NCCL algorithm 'rnig'.*Ring"):
        nccl_candidates("all_reduce", 22809, algos=["rnig"])
    with pytest.raises(ArgumentError, match="unknown NCCL protocol 'LL64'"):
        nccl_candidates("all_reduce", 22809, protos=["LL64"])
    with pytest.raises(ArgumentError, match="--ctas"):
        parse_ctas("4,x")
    with pytest.raises(ArgumentError):
        split_names(" , ", "--algos")


def test_point_to_point_collectives_have_no_nccl_choice():
    for coll in ("alltoall", "sendrecv", "gather", "scatter", "hypercube"):
        with pytest.raises(UnsupportedError, match="point-to-point"):
            nccl_candidates(coll, 22809)


def test_nothing_left_is_an_error_with_the_reasons():
    with pytest.raises(UnsupportedError, match="nothing to tune.*only with Ring"):
        nccl_candidates("reduce", 22809, algos=["tree"], protos=["Simple"])


def test_names_accept_plugin_spellings_and_case():
    assert nccl_rules.canonical_algorithm("collnet_direct") == "CollNetDirect"
    assert nccl_rules.canonical_algorithm("NVLSTREE") == "NVLSTree"
    assert nccl_rules.canonical_protocol("simple") == "Simple"
    assert nccl_rules.canonical_algorithm("bogus") is None


MPICH_ALLREDUCE = {"auto": 0, "nb": 1, "smp": 2, "recursive_doubling": 3, "ring": 8}


def test_mpich_candidates_one_per_choice_default_is_auto():
    cs = mpich_candidates("all_reduce", MPICH_ALLREDUCE)
    assert labels(cs) == ["default", "nb", "smp", "recursive_doubling", "ring"]
    assert cs.candidates[4].env == (("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM", "ring"),)
    cs = mpich_candidates("all_reduce", MPICH_ALLREDUCE, ["ring", "auto", "ring"])
    assert labels(cs) == ["default", "ring"]


def test_mpich_bad_names_and_collectives():
    with pytest.raises(ArgumentError, match="unknown MPICH algorithm 'rign'.*recursive_doubling"):
        mpich_candidates("all_reduce", MPICH_ALLREDUCE, ["rign"])
    with pytest.raises(UnsupportedError, match="point-to-point"):
        mpich_candidates("sendrecv", MPICH_ALLREDUCE)
    with pytest.raises(UnsupportedError, match="needs MPICH"):
        mpich_candidates("all_reduce", {})
    with pytest.raises(UnsupportedError, match="nothing to tune"):
        mpich_candidates("all_reduce", MPICH_ALLREDUCE, ["auto"])


def test_preset_conflicts_name_the_variable():
    lines = preset_conflicts({"NCCL_ALGO": "ring", "PATH": "/bin"}, ["NCCL_ALGO", "NCCL_PROTO"])
    assert len(lines) == 1 and lines[0].startswith("NCCL_ALGO=ring is set") and "unset NCCL_ALGO" in lines[0]
    assert preset_conflicts({}, ["NCCL_ALGO"]) == []


def test_candidate_json_round_trip():
    c = Candidate("Ring/LL", (("NCCL_ALGO", "allreduce:Ring"),), (("maxCTAs", 4),), "Ring", "LL", 4)
    assert Candidate.from_json(c.to_json()) == c
    assert DEFAULT.is_default and not c.is_default
