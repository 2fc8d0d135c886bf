"""The CPU-testable parts of tune's NCCL path: the environment NCCL reads at
each communicator init is set for one set-up only, the candidate's
ncclConfig_t fields reach the config the set-up builds (laid out for the
loaded library's version), and the command's refusals before any GPU work."""

import os
import subprocess
import sys

import pytest

from ncclbench.nccl import config_struct, runmodel
from ncclbench.tune.candidates import nccl_candidates
from ncclbench.tune.job import nccl_conflict_names
from ncclbench.tune.nccl_job import scoped_env
from ncclbench.tune.options import parse_tune_args


def test_scoped_env_sets_and_restores(monkeypatch):
    monkeypatch.setenv("NCCL_PROTO", "before")
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    with scoped_env((("NCCL_ALGO", "allreduce:Ring"), ("NCCL_PROTO", "allreduce:LL"))):
        assert os.environ["NCCL_ALGO"] == "allreduce:Ring" and os.environ["NCCL_PROTO"] == "allreduce:LL"
        import ctypes

        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_char_p
        assert libc.getenv(b"NCCL_ALGO") == b"allreduce:Ring"  # what NCCL's getenv sees
    assert "NCCL_ALGO" not in os.environ and os.environ["NCCL_PROTO"] == "before"


def test_candidate_config_fields_reach_the_set_up_config():
    """What create_nccl_workers(..., config_overrides) builds its ncclConfig_t from."""
    cand = nccl_candidates("all_reduce", 22809, algos=["ring"], protos=["Simple"], ctas=[8]).candidates[1]
    values = runmodel.comm_config_values(22809, None, "all_reduce", dict(cand.config))
    cfg = config_struct.make_config(22809, **values)
    got = config_struct.config_values(cfg)
    assert got["minCTAs"] == 8 and got["maxCTAs"] == 8 and got["nvlinkCentricSched"] == 1
    assert got["cgaClusterSize"] == config_struct.NCCL_CONFIG_UNDEF_INT
    # without overrides the run's own fields only
    assert runmodel.comm_config_values(22809, None, "all_reduce") == {"nvlinkCentricSched": 1}


def test_candidate_config_fields_refused_by_an_old_library():
    with pytest.raises(ValueError, match="needs NCCL >= 2.17"):
        config_struct.make_config(21605, **runmodel.comm_config_values(21605, None, "all_reduce", {"minCTAs": 4}))


def test_ctas_make_channel_variables_conflicts():
    topts = parse_tune_args("all_reduce", ["--ctas", "4,8"])
    assert topts.ctas == (4, 8)
    assert "NCCL_MAX_CTAS" in nccl_conflict_names(topts)
    assert nccl_conflict_names(parse_tune_args("all_reduce", [])) == ["NCCL_ALGO", "NCCL_PROTO"]


def test_tune_options_split_from_nccl_tests_options():
    t = parse_tune_args("all_reduce_perf", ["-b", "8", "--algos=ring,tree", "-e", "1M", "--verify",
                                            "--rounds", "3", "--out", "/tmp/x"])
    assert t.algos == ("ring", "tree") and t.verify and t.rounds == 3 and t.out == "/tmp/x"
    assert t.bench.min_bytes == 8 and t.bench.max_bytes == 1 << 20
    assert t.bench_args == ("-b", "8", "-e", "1M")
    assert t.child_args()[:6] == ["tune", "all_reduce_perf", "-b", "8", "-e", "1M"]
    assert "--verify" not in t.child_args()  # the parent verifies, not the ranks


def test_user_nccl_algo_is_refused_before_anything_starts(ncclbench_env):
    env = {**ncclbench_env, "NCCL_ALGO": "ring"}
    p = subprocess.run([sys.executable, "-m", "ncclbench", "tune", "all_reduce", "--backend", "nccl", "-b", "8",
                        "-e", "64"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 255
    assert p.stderr.strip() == ("ncclbench: NCCL_ALGO=ring is set in the environment; tune measures the library's "
                                "default against each candidate, so unset NCCL_ALGO first")


def test_config_fields_reach_the_real_library_object():
    """The override works on the NcclLibrary the set-up uses (loaded without a GPU)."""
    from ncclbench.core.errors import BenchError
    from ncclbench.nccl.binding import get_library

    try:
        lib = get_library(None)
    except BenchError as exc:
        pytest.skip(f"no libnccl to load here: {exc.message}")
    cfg = lib.make_config(**runmodel.comm_config_values(lib.version_code, None, "all_reduce",
                                                        {"minCTAs": 4, "maxCTAs": 4}))
    values = config_struct.config_values(cfg)
    assert (values["minCTAs"], values["maxCTAs"], values["version"]) == (4, 4, lib.version_code)


def test_newer_library_than_the_rules_gets_a_note():
    from ncclbench.tune.nccl_rules import newer_than_rules_note

    assert newer_than_rules_note(22809) is None
    assert "2.32.3 is newer" in newer_than_rules_note(23203)
