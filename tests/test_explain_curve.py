"""Explain's expected curve (issue 30): a healthy sweep is never "below expected" whatever size it stops at,
and "as expected" from 64 MiB up where enough machines bound the spread (below 64 MiB the ramp is too steep
to judge: not judged, said why), judged on recorded sweeps the curve was NOT calibrated on (H200 runs against
the H100 curves and the reverse, and the -f 2 sizes the -f 4 recordings never had), while slower copies of
the same runs and the injected causes stay below."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ncclbench.explain.ceiling import Ceiling
from ncclbench.explain.curve_data import CURVES, HEALTHY_LOWEST
from ncclbench.explain.expected_curve import (
    RAMP_JUDGED_FROM_BYTES,
    RAMP_MIN_MACHINES,
    Expectation,
    expected_per_size,
    find_expectation,
    gpu_class,
)
from ncclbench.explain.run_explain import explain_run
from ncclbench.explain.stored import run_facts
from ncclbench.store.importers import parse_text_log

BENCH = Path(__file__).resolve().parents[1] / "bench"
MiB, GiB = 2**20, 2**30
STEEP = "is on the steep part of the ramp, where healthy machines were recorded up to 39% apart: judged from 64 MiB"


def _load(name):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


ev = _load("explain_curve_eval")
SWEEPS = ev.recorded_sweeps()
NVLINK = Ceiling("all_gather", 2, 1, algorithm="Ring", algorithm_source="predicted", bound="NVLink", line_rate=450.0,
                 ceiling=370.8)


def _table(collective, rows, gpu="NVIDIA H200", nranks=2):
    """An nccl-tests log of `rows` [(size, busbw)] on `nranks` GPUs of one host."""
    head = ["# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809",
            f"# Collective test starting: {collective}_perf", "# Using devices"]
    head += [f"#  Rank  {r} Group  0 Pid   {r + 1} on       box device  {r} [0000:00:0{r + 6}] {gpu}"
             for r in range(nranks)]
    head.append("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   "
                "algbw   busbw  #wrong")
    body = [f"  {s:>10}  {max(s // 4, 1):>12}     float     sum      -1   100.0  {b:6.2f}  {b:6.2f}       0   100.0  "
            f"{b:6.2f}  {b:6.2f}       0" for s, b in rows]
    return "\n".join(head + body + ["# Avg bus bandwidth    : 1.0", "#"]) + "\n"


def _judge(text, collective):
    run = parse_text_log(text, "<test>", collective)[0]
    return explain_run(run_facts(run))


@pytest.mark.parametrize("held_out", ["H100", "H200"])
def test_healthy_sweeps_of_the_held_out_class_are_never_below_at_any_stop(held_out):
    judged = {cut: [] for cut in ev.CUTS}
    with ev.calibration(("H200",) if held_out == "H100" else ("H100",)):
        for sw in (s for s in SWEEPS if s.gpu_class == held_out):
            for cut, nbytes in ev.CUTS.items():
                judged[cut].append((sw.name, ev.judge_text(sw.text, sw.collective, nbytes)))
    below = [(n, v["text"]) for runs in judged.values() for n, v in runs if v["verdict"] == "below expected"]
    assert not below
    # cut at 32 MiB: on the steep part of the ramp, nothing is judged against the curve, and the 2-GPU sweeps whose
    # healthy spread is within 20 % there say so (the 4-GPU ones: two machines, latency-bound or the spread's reason)
    at32 = judged["32M"]
    assert {v["verdict"] for _, v in at32} == {"unknown"}
    assert sum(f"not judged at 32 MiB (32 MiB {STEEP}); a sweep to " in v["text"] for _, v in at32) >= 0.6 * len(at32)
    for cut, runs in judged.items():  # judged where a band is set (or the ceiling suffices), else not judged with why
        if cut != "32M":  # from 128 MiB, as expected at least as often as before the 64 MiB rule
            assert sum(v["verdict"] == "as expected" for _, v in runs) >= 0.6 * len(runs), cut
        for _, v in runs:
            assert v["verdict"] == "as expected" or any(why in v["text"] for why in (
                STEEP, "recorded on 2 machines only: too few to bound the ramp's spread between machines",
                "recorded on 1 machine only", "spread there by more than 20% of the curve",
                "no bandwidth model for alltoallv", "latency-bound")), v["text"]


def test_the_same_sweeps_20_percent_slower_are_below_where_the_real_ones_were_as_expected():
    """Where the curve's band judged the real sweep as expected, 20 % slower is below.  Where no size had a band
    and the ceiling's verdict stood (>= 90 % of the model, or a share-per-step collective at 80-90 %), 20 % slower
    is never as expected: below, or not judged above the lowest healthy share."""
    banded = 0
    with ev.calibration(("H100",)):
        for sw in (s for s in SWEEPS if s.gpu_class == "H200" and s.collective in ("all_gather", "sendrecv")):
            for nbytes in ev.CUTS.values():
                real = ev.judge_text(sw.text, sw.collective, nbytes)
                if real["verdict"] == "as expected":
                    slow = ev.judge_text(sw.text, sw.collective, nbytes, 0.8)
                    if "against the curve" in real["text"]:
                        assert slow["verdict"] in ("below expected", "unknown"), (sw.name, nbytes, slow["text"])
                    else:
                        banded += 1
                        assert slow["verdict"] == "below expected", (sw.name, nbytes, slow["text"])
    assert banded >= 10


def test_the_issues_2x_h200_runs_are_as_expected_and_say_how_far_the_sweep_got():
    with ev.calibration(("H100",)):
        got = {(c, e): ev.judge_text(ev.issue_rows_text(c, e, f, b), c, None) for c, e, f, b in ev.ISSUE_H200}
    # -f 4 from 1 MiB: 64 and 256 MiB, -f 2 sizes that three of the four 2-GPU machines recorded: both judged
    short = got.pop(("all_reduce", 256 * MiB))
    assert short["verdict"] == "as expected" and short["text"] == (
        "for 256 MiB: 299.9 GB/s, about what a healthy 2x H100 all_reduce reaches there (298.2 GB/s, 101%); the sweep "
        "stops at 256 MiB, where a healthy 2x H100 all_reduce reaches about 80% of its 370.8 GB/s ceiling: run to "
        "2 GiB or more to judge the ceiling")
    assert {v["verdict"] for v in got.values()} == {"as expected"}
    assert not any("not judged" in v["text"] for v in got.values())
    ag = got[("all_gather", 128 * MiB)]["text"]
    assert ag.startswith("for 128 MiB: 221.7 GB/s, about what a healthy 2x H100 all_gather reaches there")
    assert "the sweep stops at 128 MiB" in ag and "run to 2 GiB or more to judge the ceiling" in ag
    assert "where this curve levels off" in got[("all_reduce", 8 * GiB)]["text"]


def test_without_a_curve_of_its_own_a_short_sweep_within_the_healthy_range_is_not_judged_and_below_it_is_below():
    """No curve for the system (here: none applied): 60 % of the ceiling at 128 MiB is what the lowest
    recorded healthy all_gather reaches there (2x H100: 62 %, less the band's 10 %), so not judged, said why; 45 % is below all."""
    with ev.calibration(None):
        v = ev.judge_text(ev.issue_rows_text("all_gather", 128 * MiB, 2, 221.7), "all_gather", None)
        low = ev.judge_text(ev.issue_rows_text("all_gather", 128 * MiB, 2, 166.9), "all_gather", None)
    assert v["verdict"] == "unknown" and v["curve"] is None
    assert "healthy systems recorded reach as little as 62% of the ceiling at 128 MiB (2x H100 all_gather)" \
        in v["text"] and "or a sweep to >= 4 GiB against the ceiling, would judge it" in v["text"]
    assert low["verdict"] == "below expected"


def test_a_capped_channel_count_on_a_calibrated_box_stays_below():
    rows = [(s, b * 0.45) for s, b in CURVES[("H100", 2, "all_reduce")] if s <= 1 * GiB]
    ex = _judge(_table("all_reduce", rows, "NVIDIA H100 80GB HBM3"), "all_reduce")
    assert ex.judgement.verdict.label == "below expected"
    assert ex.judgement.verdict.text.startswith("45% of the ") and "a healthy 2x H100 all_reduce reaches at 512 MiB" \
        in ex.judgement.verdict.text


def test_the_json_carries_the_expected_busbw_per_size_and_the_curves_source():
    rows = [(s, b) for s, b in CURVES[("H200", 2, "broadcast")] if s <= 128 * MiB]
    ex = _judge(_table("broadcast", [(4096, 1.0)] + rows), "broadcast")
    exp = ex.data["judgement"]["expected"]
    assert exp["label"] == "2x H200 broadcast" and "2a349ab" in exp["source"]
    assert exp["per_size"][0] == [4096, None]  # below the smallest recorded size: latency-bound, not modelled
    assert [s for s, _ in exp["per_size"][1:]] == [s for s, _ in rows]
    assert all(abs(e - b) < 0.01 for (_, e), (_, b) in zip(exp["per_size"][1:], rows))
    assert [r["expected_busbw"] for r in ex.data["rows"]] == [e for _, e in exp["per_size"]]
    # measured / expected from 32 MiB: the figures are the curve's own, so 100 % at each size
    assert [s for s, _ in exp["ratio"]] == [s for s, _ in rows if s >= 32 * MiB]
    assert all(r == pytest.approx(1, abs=0.001) for _, r in exp["ratio"])
    assert "#   measured / expected per size: 32 MiB 100%, 64 MiB 100%, 128 MiB 100%" in ex.lines
    assert any(line.startswith("#   expected curve: healthy 2x H200 broadcast, recorded in bench/results/raw/")
               for line in ex.lines)


def test_a_gpu_count_with_no_recording_has_no_curve_and_says_which_counts_were_recorded():
    exp, why = find_expectation(["NVIDIA H100 80GB HBM3"] * 3, 3, "all_gather", NVLINK)
    assert exp is None and why == ("no healthy all_gather curve is recorded for 3x H100 (recorded: 2 GPUs, 4 GPUs; "
                                   "GPU counts ramp differently)")


def test_the_twin_class_stands_in_and_says_so():
    only_h100 = {k: v for k, v in CURVES.items() if k[0] == "H100"}
    exp, _ = find_expectation(["NVIDIA H200"] * 2, 2, "all_gather", NVLINK, curves=only_h100)
    assert exp is not None and exp.label == "2x H100 all_gather" and "stands in" in exp.stand_in


@pytest.mark.parametrize("change", [dict(bound="NIC"), dict(nnodes=2), dict(algorithm="NVLS"), dict(ceiling=None)])
def test_no_curve_off_the_recorded_conditions(change):
    c = Ceiling(**{**NVLINK.__dict__, **change})
    exp, why = find_expectation(["NVIDIA H100 80GB HBM3"] * 2, 2, "all_gather", c)
    assert exp is None and why.startswith("no healthy curve is recorded")


@pytest.mark.parametrize("names, cls", [(["NVIDIA H100 80GB HBM3"] * 2, "H100"), (["NVIDIA H200"], "H200"),
                                        (["NVIDIA GH200 480GB"], None), (["NVIDIA H100 PCIe"], None),
                                        (["NVIDIA H100 NVL"], None), (["NVIDIA H100 80GB HBM3", "NVIDIA H200"], None),
                                        (["NVIDIA H800"], None), ([None], None)])
def test_gpu_class(names, cls):
    assert gpu_class(names) == cls


def test_the_curve_is_log_linear_between_recorded_sizes_flat_past_the_last_and_absent_below_the_first():
    exp, _ = find_expectation(["NVIDIA H100 80GB HBM3"] * 2, 2, "all_gather", NVLINK)
    assert exp is not None
    pts = dict(CURVES[("H100", 2, "all_gather")])
    mid = exp.at(64 * MiB)  # halfway in log size between 32 MiB and 128 MiB
    assert mid == pytest.approx((pts[32 * MiB] + pts[128 * MiB]) / 2)
    assert exp.at(64 * GiB) == pts[8 * GiB] and exp.at(512 * 1024) is None
    assert expected_per_size(None, [1, 2]) == [[1, None], [2, None]]
    half = find_expectation(["NVIDIA H100 80GB HBM3"] * 2, 2, "all_gather",
                            Ceiling(**{**NVLINK.__dict__, "ceiling": 185.4}))[0]
    assert half is not None and half.at(8 * GiB) == pytest.approx(pts[8 * GiB] / 2, abs=0.01)


@pytest.mark.parametrize("rows, label, why", [
    ([], "unknown", "no result row"),
    ([(128 * MiB, 229.0)], "as expected", "for 128 MiB"),  # one size, -b = -e
    ([(128 * MiB, 229.0)] * 5, "as expected", "for 128 MiB"),  # -f 1: the same size again and again
    ([(8 * MiB, 110.0)], "unknown", "latency-bound"),
    ([(128 * MiB, 100.0)], "below expected", "a healthy 2x H100 all_gather reaches at 128 MiB"),
])
def test_bad_or_odd_sweeps_get_a_verdict_for_what_was_measured_or_not_judged_with_why(rows, label, why):
    ex = _judge(_table("all_gather", rows, "NVIDIA H100 80GB HBM3"), "all_gather")
    assert ex.judgement.verdict.label == label
    assert why in ex.judgement.verdict.text or any(why in line for line in ex.lines)


def test_the_committed_calibration_table_is_what_the_recorded_archives_give():
    assert _load("explain_curve_calibrate").main(["--check"]) == 0


def test_a_sweep_that_reached_the_flat_part_is_judged_at_the_ceiling_one_short_of_it_says_where_to_go():
    """4x H100 all_reduce at 1 GiB is within 5 % of the curve's top (interpolated between 512 MiB and 2 GiB):
    the ceiling is judged; at 128 MiB the sweep stops short, and the text names the recorded size to reach."""
    full = [(s, b) for s, b in CURVES[("H100", 4, "all_reduce")] if s <= GiB] + [(GiB, 352.0)]
    at1g = _judge(_table("all_reduce", full, "NVIDIA H100 80GB HBM3", 4), "all_reduce").judgement.verdict
    assert at1g.label == "as expected" and "where this curve levels off" in at1g.text
    # 512 MiB, on the ramp, was recorded by the two 4-GPU machines only: no band there
    assert at1g.text.endswith("not judged at 512 MiB (healthy spread at 512 MiB recorded on 2 machines only: too few "
                              "to bound the ramp's spread between machines)")
    short = [(s, b) for s, b in CURVES[("H100", 2, "all_reduce")] if s <= 128 * MiB]
    at128 = _judge(_table("all_reduce", short, "NVIDIA H100 80GB HBM3", 2), "all_reduce").judgement.verdict
    assert at128.label == "as expected" and "the sweep stops at 128 MiB" in at128.text
    assert at128.text.endswith("run to 2 GiB or more to judge the ceiling")
    short4 = [(s, b) for s, b in CURVES[("H100", 4, "all_reduce")] if s <= 128 * MiB]
    at128x4 = _judge(_table("all_reduce", short4, "NVIDIA H100 80GB HBM3", 4), "all_reduce").judgement.verdict
    assert at128x4.label == "unknown" and at128x4.text.endswith("a sweep to 1 GiB or more can be judged")


def _new_machine_runs():
    """Healthy runs of the 2x H200 machine recorded 2026-11-28 (ad544b9), from its raw archive."""
    return _load("explain_curve_calibrate").runs_json("2026-11-28-2xH200-explain-curve-ad544b9.tar.xz",
                                                     "./explain/ec/runs/")


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "reduce", "gather"])
def test_a_healthy_sweep_of_another_machine_ending_at_32_mib_is_not_below(collective):
    """2x H200 2026-11-28, -b 1M -e 8G cut at 32 MiB: the plateau median over 16-32 MiB was under 90 % of the
    curve's (issue 30: "below expected" at ad544b9); 32 MiB is on the steep part of the ramp, so not judged, said
    why (all_gather: healthy machines spread too far there, 73-99 %), and the next size, 64 MiB, named.  The same
    sweep cut at 128 MiB is judged per size against the band of the recorded spread: as expected."""
    rows = next(r for c, r in _new_machine_runs() if c == collective and max(s for s, _ in r) == 8 * GiB)
    v = _judge(_table(collective, [(s, b) for s, b in rows if s <= 32 * MiB]), collective).judgement.verdict
    why = ("healthy runs reach 73% of the curve at 32 MiB (2x H200 2026-11-28): healthy 2x H200 all_gather runs "
           "spread there by more than 20% of the curve" if collective == "all_gather" else f"32 MiB {STEEP}")
    assert v.label == "unknown" and v.text == f"not judged at 32 MiB ({why}); a sweep to 64 MiB or more can be judged"
    at128 = _judge(_table(collective, [(s, b) for s, b in rows if s <= 128 * MiB]), collective).judgement.verdict
    assert at128.label == "as expected" and at128.text.startswith("for 128 MiB: ") and "not judged" not in at128.text


def test_a_size_whose_healthy_spread_is_too_wide_is_not_judged_and_the_next_size_is_named():
    exp, _ = find_expectation(["NVIDIA H200"] * 2, 2, "broadcast", NVLINK)
    assert exp is not None
    band32, why32 = exp.band(32 * MiB)
    assert band32 is None and "61% of the curve at 32 MiB (2x H200 2026-11-28)" in why32
    assert exp.band(GiB)[0] == 0.90  # where machines agree (>= 93 %), the plateau's band stays
    # 64 MiB: on the ramp, three machines recorded it, all at >= 99 % of the curve
    assert exp.band(64 * MiB) == (0.90, "healthy runs reach 100% of the curve at 64 MiB (2x H200 2026-11-21)")
    assert exp.next_judged(32 * MiB) == 64 * MiB
    slow = [(s, b) for s, b in CURVES[("H200", 2, "broadcast")] if s <= 32 * MiB]
    slow[-1] = (32 * MiB, 0.2 * slow[-1][1])  # 20 % of the curve at 32 MiB alone: still not judged there
    v = _judge(_table("broadcast", slow), "broadcast").judgement.verdict
    assert v.label == "unknown" and v.text == f"not judged at 32 MiB ({why32}); a sweep to 64 MiB or more can be judged"


def test_a_slow_size_in_a_judged_range_is_below_with_each_size_stated():
    """all_reduce on 2 GPUs at 32-128 MiB, 80 % of the curve (under the 90 % band, which the spread at 64 and
    128 MiB keeps): below expected, each judged size's ratio and band in the text; cut at 64 MiB, also why 32 MiB
    (in the plateau window there) is not judged."""
    pts = [(s, b * (0.8 if s >= 32 * MiB else 1)) for s, b in CURVES[("H200", 2, "all_reduce")] if s <= 128 * MiB]
    v = _judge(_table("all_reduce", pts), "all_reduce").judgement.verdict
    assert v.label == "below expected" and v.text.endswith(
        "measured / expected per size: 64 MiB 80% (band 90%), 128 MiB 80% (band 90%)")
    v64 = _judge(_table("all_reduce", [p for p in pts if p[0] <= 64 * MiB]), "all_reduce").judgement.verdict
    assert v64.label == "below expected" and v64.text.endswith(
        f"measured / expected per size: 64 MiB 80% (band 90%); not judged at 32 MiB (32 MiB {STEEP})")


def test_the_calibration_counts_the_machines_behind_each_sizes_spread():
    """HEALTHY_LOWEST carries how many machines had a healthy run at each size: the -f 4 host (8 B x 4^k) is counted
    at 32, 128, 512 MiB, not at the -f 2 sizes between, so the four 2-GPU machines give 4 there and 3 between; the
    4-GPU class has two machines."""
    low = {s: k for s, _, _, k in HEALTHY_LOWEST[(2, "broadcast")]}
    assert low[32 * MiB] == 4 and low[64 * MiB] == 3 and low[128 * MiB] == 4 and low[GiB] == 3
    assert {k for pts in (v for (n, _), v in HEALTHY_LOWEST.items() if n == 2) for *_, k in pts} == {3, 4}
    assert max(k for pts in (v for (n, _), v in HEALTHY_LOWEST.items() if n == 4) for *_, k in pts) == 2


def test_on_the_ramp_a_band_needs_three_machines_on_the_flat_part_one_is_enough():
    pts = ((64 * MiB, 200.0), (128 * MiB, 300.0), (GiB, 340.0), (8 * GiB, 350.0))  # flat (>= 95 % of top) from 1 GiB
    lowest = ((64 * MiB, 0.95, "m1", 3), (128 * MiB, 0.97, "m2", 2), (GiB, 0.99, "m1", 1))
    exp = Expectation("all_gather", "H100", 2, "test", 1.0, pts, lowest=lowest)
    assert exp.band(64 * MiB) == (0.9, "healthy runs reach 95% of the curve at 64 MiB (m1)")
    assert exp.band(128 * MiB) == (None, "healthy spread at 128 MiB recorded on 2 machines only: too few to bound "
                                         "the ramp's spread between machines")
    assert exp.band(256 * MiB)[0] is None  # read at the nearest recorded size below: 128 MiB, two machines
    assert not exp.flat(128 * MiB) and exp.flat(GiB) and exp.band(GiB)[0] == 0.9  # flat: as before, one machine will do
    assert exp.next_judged(64 * MiB) == GiB
    assert exp.to_dict()["bands"] == [[64 * MiB, 0.9, 3], [128 * MiB, None, 2], [GiB, 0.9, 1]]
    assert exp.to_dict()["ramp_min_machines"] == RAMP_MIN_MACHINES == 3


def test_below_64_mib_the_ramp_is_not_judged_however_many_machines_agree_a_flat_size_there_is():
    """On the ramp (not `flat`), a size under RAMP_JUDGED_FROM_BYTES has no band even where more machines than
    RAMP_MIN_MACHINES agree closely; where the curve has already flattened below 64 MiB, the size is judged as
    before (one machine will do), and the next judged size is named."""
    assert RAMP_JUDGED_FROM_BYTES == 64 * MiB
    # the real calibration: 2x H200 all_reduce at 32 MiB, four machines, lowest 93 % (a band of 83 % would be set)
    real, _ = find_expectation(["NVIDIA H200"] * 2, 2, "all_reduce", NVLINK)
    assert real is not None and (32 * MiB, 0.929, "2x H200 2026-11-28", 4) in real.lowest
    assert not real.flat(32 * MiB) and real.band(32 * MiB) == (None, f"32 MiB {STEEP}")
    assert real.band(48 * MiB) == (None, f"48 MiB {STEEP}")  # between recorded sizes: the size itself is named
    assert real.band(64 * MiB)[0] == 0.9 and real.next_judged(32 * MiB) == 64 * MiB
    # synthetic: flat (>= 95 % of the top, 350) from 32 MiB; 16 MiB on the ramp with six machines at 97 %
    pts = ((16 * MiB, 300.0), (32 * MiB, 340.0), (GiB, 345.0), (8 * GiB, 350.0))
    lowest = ((16 * MiB, 0.97, "m1", 6), (32 * MiB, 0.96, "m2", 1), (GiB, 0.99, "m1", 1))
    exp = Expectation("all_gather", "H100", 2, "test", 1.0, pts, lowest=lowest)
    assert not exp.flat(16 * MiB) and exp.band(16 * MiB) == (None, f"16 MiB {STEEP}")
    assert not exp.flat(24 * MiB) and exp.band(24 * MiB) == (None, f"24 MiB {STEEP}")  # 323 GB/s: not yet flat
    assert exp.flat(32 * MiB) and exp.band(32 * MiB) == (0.9, "healthy runs reach 96% of the curve at 32 MiB (m2)")
    assert exp.next_judged(16 * MiB) == 32 * MiB
    assert exp.to_dict()["bands"] == [[16 * MiB, None, 6], [32 * MiB, 0.9, 1], [GiB, 0.9, 1]]


def test_held_out_the_2026_11_28_machine_is_not_below_on_the_steep_part_of_the_ramp_and_causes_stay_below():
    """Issue 30's open point: judged with bands built without it, the 2x H200 2026-11-28 machine was "below expected"
    at the 32 MiB cut (0.61-0.89 of the curve on six collectives) where the three other 2-GPU machines agreed at
    0.93-0.98.  Held out, 32 MiB is on the steep part of the ramp (judged from 64 MiB): not judged, said why, and the
    next judged size, 128 MiB (the held-out -f 2 sizes: 64 MiB rests on two machines), named; no healthy run of any
    machine is below at any cut (772 judgements), and the injected causes (no band at 1 GiB held out either) are
    below every healthy recording's share of the ceiling, so still below."""
    ho = _load("explain_curve_heldout")
    doc = ho.evaluate()
    assert len(doc["healthy"]) == 772
    assert [r for r in doc["healthy"] if r["verdict"] == "below expected"] == []
    mine = [r for r in doc["healthy"] if r["machine"] == "2x H200 2026-11-28" and r["cut"] == "32M"]
    for coll in ("all_gather", "broadcast", "reduce_scatter", "gather", "all_reduce", "reduce"):
        runs = [r for r in mine if r["collective"] == coll]
        assert runs and all(r["verdict"] == "unknown" and r["text"] == (
            f"not judged at 32 MiB (32 MiB {STEEP}); a sweep to 128 MiB or more can be judged") for r in runs), coll
    # from 128 MiB the same machine is judged against the others' bands: as expected, never below
    at128 = [r["verdict"] for r in doc["healthy"] if r["machine"] == "2x H200 2026-11-28" and r["cut"] == "128M"]
    assert at128.count("as expected") >= 0.6 * len(at128)
    causes = {c["run"]: c["verdict"] for c in doc["causes"]}
    assert len(causes) == 7 and causes.pop("cause-proto_simple") != "below expected"  # healthy busbw: its trap catches it
    assert set(causes.values()) == {"below expected"}
    # the 2026-11-21 host, held out, is judged without its own curves (the 2x H100 ones stand in)
    own = {r["curve"] for r in doc["healthy"] if r["machine"] == "2x H200 2026-11-21" and r["curve"]}
    assert own and all(c.startswith("2x H100 ") for c in own)
