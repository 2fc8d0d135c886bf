"""Explain's expected curve (issue 30): a healthy sweep is "as expected" whatever size it stops at,
judged on recorded sweeps the curve was NOT calibrated on (H200 runs against the H100 curves and the
reverse, and the -f 2 sizes the -f 4 recordings never had), while slower copies of the same runs and
the injected causes stay below."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ncclbench.explain.ceiling import Ceiling
from ncclbench.explain.curve_data import CURVES
from ncclbench.explain.expected_curve import expected_per_size, find_expectation, gpu_class
from ncclbench.explain.run_explain import explain_run
from ncclbench.explain.stored import run_facts
from ncclbench.store.importers import parse_text_log

BENCH = Path(__file__).resolve().parents[1] / "bench"
MiB, GiB = 2**20, 2**30


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
    for cut, runs in judged.items():  # every stop judged for the collectives with a ceiling, not skipped
        assert sum(v["verdict"] == "as expected" for _, v in runs) >= 0.6 * len(runs), cut


def test_the_same_sweeps_20_percent_slower_are_below_where_the_real_ones_were_as_expected():
    with ev.calibration(("H100",)):
        for sw in (s for s in SWEEPS if s.gpu_class == "H200" and s.collective in ("all_gather", "sendrecv")):
            for nbytes in ev.CUTS.values():
                real = ev.judge_text(sw.text, sw.collective, nbytes)
                if real["verdict"] == "as expected":
                    slow = ev.judge_text(sw.text, sw.collective, nbytes, 0.8)
                    assert slow["verdict"] == "below expected", (sw.name, nbytes, slow["text"])


def test_the_issues_2x_h200_runs_are_as_expected_and_say_how_far_the_sweep_got():
    with ev.calibration(("H100",)):
        got = {(c, e): ev.judge_text(ev.issue_rows_text(c, e, f, b), c, None) for c, e, f, b in ev.ISSUE_H200}
    assert {v["verdict"] for v in got.values()} == {"as expected"}
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
    assert at1g.label == "as expected" and at1g.text.endswith("where this curve levels off")
    short = [(s, b) for s, b in CURVES[("H100", 4, "all_reduce")] if s <= 128 * MiB]
    at128 = _judge(_table("all_reduce", short, "NVIDIA H100 80GB HBM3", 4), "all_reduce").judgement.verdict
    assert at128.label == "as expected" and "the sweep stops at 128 MiB" in at128.text
    assert at128.text.endswith("run to 2 GiB or more to judge the ceiling")


def _new_machine_runs():
    """Healthy runs of the 2x H200 machine recorded 2026-11-28 (ad544b9), from its raw archive."""
    return _load("explain_curve_calibrate").runs_json("2026-11-28-2xH200-explain-curve-ad544b9.tar.xz",
                                                     "./explain/ec/runs/")


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "reduce", "gather"])
def test_a_healthy_sweep_of_another_machine_ending_at_32_mib_is_not_below(collective):
    """2x H200 2026-11-28, -b 1M -e 8G cut at 32 MiB: the plateau median over 16-32 MiB was under 90 % of the
    curve's (issue 30: "below expected" at ad544b9); per size from 32 MiB with the band of the recorded spread
    it is as expected, or not judged where healthy machines spread too far (all_gather: 73-99 % at 32 MiB)."""
    rows = next(r for c, r in _new_machine_runs() if c == collective and max(s for s, _ in r) == 8 * GiB)
    v = _judge(_table(collective, [(s, b) for s, b in rows if s <= 32 * MiB]), collective).judgement.verdict
    assert v.label in ("as expected", "unknown"), v.text
    if v.label == "unknown":
        assert "not judged at 32 MiB" in v.text and "a sweep to 64 MiB or more can be judged" in v.text


def test_a_size_whose_healthy_spread_is_too_wide_is_not_judged_and_the_next_size_is_named():
    exp, _ = find_expectation(["NVIDIA H200"] * 2, 2, "broadcast", NVLINK)
    assert exp is not None
    band32, why32 = exp.band(32 * MiB)
    assert band32 is None and "61% of the curve at 32 MiB (2x H200 2026-11-28)" in why32
    assert exp.band(GiB)[0] == 0.90  # where machines agree (>= 93 %), the plateau's band stays
    assert exp.next_judged(32 * MiB) == 64 * MiB
    slow = [(s, b) for s, b in CURVES[("H200", 2, "broadcast")] if s <= 32 * MiB]
    slow[-1] = (32 * MiB, 0.2 * slow[-1][1])  # 20 % of the curve at 32 MiB alone: still not judged there
    v = _judge(_table("broadcast", slow), "broadcast").judgement.verdict
    assert v.label == "unknown" and "a sweep to 64 MiB or more can be judged" in v.text


def test_a_slow_size_in_a_judged_range_is_below_with_each_size_stated():
    """all_reduce on 2 GPUs at 64-128 MiB, 80 % of the curve (under the 90 % band, which the spread there
    keeps): below expected, each size's ratio and band in the text."""
    pts = [(s, b * (0.8 if s >= 64 * MiB else 1)) for s, b in CURVES[("H200", 2, "all_reduce")] if s <= 128 * MiB]
    v = _judge(_table("all_reduce", pts), "all_reduce").judgement.verdict
    assert v.label == "below expected" and "64 MiB 80% (band 90%), 128 MiB 80% (band 90%)" in v.text
