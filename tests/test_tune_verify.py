"""--verify's judgement and run order, with a stand-in for the ordinary runs."""

import pytest

from ncclbench.tune.candidates import mpich_candidates
from ncclbench.tune.result import TuneResult
from ncclbench.tune.verify import band_args, judge_band, run_order, verify

CHOICES = {"auto": 0, "ring": 1, "tree": 2}


def tuned(times) -> TuneResult:
    cs = mpich_candidates("all_reduce", CHOICES)
    return TuneResult(collective="all_reduce", backend="mpi", library="MPICH", version_code=None, nranks=4,
                      nnodes=1, datatype="float", op="sum", rounds=5, iters_per_round=4,
                      candidates=cs.candidates, times_us=times)


def test_pairs_alternate_who_runs_first():
    assert run_order(3) == [False, True, True, False, False, True]


def test_band_args_last_b_e_win_and_nprocs_goes():
    assert band_args(["-b", "8", "-e", "1G", "--nprocs", "4", "-n", "50"], 64, 256) == \
        ["-b", "8", "-e", "1G", "-n", "50", "-b", "64", "-e", "256"]


def test_judge_band_confirms_only_beyond_noise():
    ok = judge_band({8: [10.0, 10.4]}, {8: [5.0, 5.2]})
    assert ok["confirmed"] and ok["gain"] == pytest.approx(10.2 / 5.1 - 1)
    assert ok["wins"] == 2 and ok["comparisons"] == 2
    lost_pairs = judge_band({8: [10.0, 10.0, 10.0]}, {8: [9.0, 11.0, 11.0]})  # median tie, 1 of 3 pairs
    assert not lost_pairs["confirmed"]
    noisy = judge_band({8: [10.0, 13.0]}, {8: [9.0, 9.5]})  # +24 % against 26 % noise
    assert noisy["gain"] > 0 and not noisy["confirmed"]
    slower = judge_band({8: [5.0, 5.0]}, {8: [6.0, 6.0]})
    assert slower["gain"] < 0 and not slower["confirmed"]
    assert judge_band({8: [1.0]}, {16: [1.0]})["confirmed"] is False


def test_verify_runs_each_won_band_with_its_env():
    r = tuned({8: {"default": [10] * 5, "ring": [5] * 5, "tree": [9.9, 10, 10, 10, 10]},
               16: {"default": [10] * 5, "ring": [11] * 5, "tree": [10, 10, 10.1, 10, 10]}})
    calls = []

    def fake_run(args, env):
        calls.append((args, env))
        fast = env.get("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM") == "ring"
        return {8: 5.0 if fast else 10.0}

    said = []
    section = verify(r, ["-b", "8", "-e", "16", "-f", "2"], 2, fake_run, said.append)
    assert [a[-4:] for a, _ in calls] == [["-b", "8", "-e", "8"]] * 4
    assert [e for _, e in calls] == [{}, {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"},
                                     {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"}, {}]
    assert section["all_confirmed"] and section["bands"][0]["winner"] == "ring"
    assert "CONFIRMED" in said[0]


def test_verify_reports_a_gain_that_does_not_hold():
    r = tuned({8: {"default": [10] * 5, "ring": [5] * 5}})
    section = verify(r, [], 1, lambda args, env: {8: 10.0}, lambda line: None)
    assert not section["all_confirmed"] and section["bands"][0]["gain"] == 0


def test_nothing_to_verify():
    r = tuned({8: {"default": [5] * 5, "ring": [10] * 5}})
    said = []
    section = verify(r, [], 2, lambda a, e: pytest.fail("no run expected"), said.append)
    assert section["bands"] == [] and "nothing to verify" in said[0]
