"""Summaries, per-size comparison and the regression gate (`compare`, `check`)."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
from gate_helpers import one_run_limit_pct, slow_down

from ncclbench.commands import main as run_store_command
from ncclbench.commands.show import show_text
from ncclbench.core.errors import ArgumentError
from ncclbench.store import noise
from ncclbench.store import summary_stats as stats
from ncclbench.store.comparison import compare_runs
from ncclbench.store.comparison_format import format_comparison
from ncclbench.store.gate import gate
from ncclbench.store.gate_figures import LATENCY, PLATEAU, Figure, Metric
from ncclbench.store.gate_format import format_gate
from ncclbench.store.importers import load_file

FIX = Path(__file__).parent / "fixtures" / "nccl_tests_output"
AR = FIX / "all_reduce_1proc_4gpu.txt"
PER_ITER = FIX / "all_reduce_4proc_per_iter.json"
MiB = 1 << 20


def scaled(run, pred, factor: float):
    """A copy of `run` whose sizes matching pred are `factor` times slower."""
    new = copy.deepcopy(run)
    for r in new.rows:
        if pred(r.size):
            slow_down(r, factor)
    new.content_hash += f"-x{factor}"
    return new


def steady(run, n: int = 5, step: float = 0.002) -> list:
    """A history of `n` runs of a quiet machine: `run` with whole-run shifts of
    0, +-step, +-2 step (the gate measures its noise on them: about step)."""
    return [scaled(run, lambda s: True, 1 + step * (k - n // 2)) for k in range(n)]


def write_log(run, path: Path) -> Path:
    path.write_text(show_text(run))
    return path



def test_plateau_and_latency_definitions():
    doubling = [1 << k for k in range(3, 34)]  # 8 B .. 8 GiB, 31 sizes
    assert stats.plateau_sizes(doubling) == [4 << 30, 8 << 30]  # within a factor of 4 of the largest
    small_sweep = [8 * 8 ** k for k in range(8)]  # 8 B .. 16 MiB by 8
    assert stats.plateau_sizes(small_sweep) == small_sweep[-1:]
    wide = [1 << k for k in range(0, 27)] + [100 * MiB]
    assert stats.plateau_sizes(wide) == [32 * MiB, 64 * MiB, 100 * MiB]
    assert stats.latency_sizes([0, 8, 65536, 65537, MiB]) == [8, 65536]
    assert stats.plateau_sizes([0]) == []


def test_one_plateau_definition_everywhere():
    """Issue 32 item 2: the banner/explain, --metrics and history/compare/check printed two plateaus
    for one run (0.43 GB/s over 32-64 MiB, 0.72 GB/s over the top quarter).  One definition,
    core.results.plateau_sizes, and every summary computes the same figure from it."""
    from ncclbench.explain.plateau_verdict import plateau_busbw as explain_plateau
    from ncclbench.output.metrics import plateau_sizes as metrics_plateau_sizes

    for sweep in ([1 << k for k in range(3, 27)], [8 * 8 ** k for k in range(9)], [1 << k for k in range(20, 34, 3)]):
        assert stats.plateau_sizes(sweep) == metrics_plateau_sizes(sweep)
    run = load_file(AR)[0]
    (s,) = stats.series_of(run.rows)
    ex = explain_plateau([(r.size, r.out_of_place.busbw) for r in run.rows])
    assert stats.plateau_busbw(s) == pytest.approx(ex.busbw)
    assert stats.run_summary(run.rows)[0] == pytest.approx(ex.busbw)  # what history shows
    g = gate(run, run, max_drop_pct=20)
    j = next(j for j in g.judgements if j.figure == PLATEAU)
    assert j.baseline == pytest.approx(ex.busbw) and j.sizes == [4 << 30, 8 << 30]
    assert "plateau busbw = median busbw of the sizes within a factor of 4 of the largest" in format_gate(g)


def test_summary_numbers_of_a_real_log():
    run = load_file(AR)[0]
    (s,) = stats.series_of(run.rows)
    big = sorted(r.out_of_place.busbw for r in run.rows if r.size >= 4 << 30)
    assert stats.plateau_busbw(s) == pytest.approx(sum(big) / 2)  # the median of two
    small = sorted(r.out_of_place.time_us for r in run.rows if 0 < r.size <= 65536)
    assert stats.latency_us(s) == pytest.approx(small[len(small) // 2] if len(small) % 2
                                                else (small[len(small) // 2 - 1] + small[len(small) // 2]) / 2)


def test_zero_size_rows_and_repeats():
    run = load_file(FIX / "all_gather_1proc_4gpu.txt")[0]
    (s,) = stats.series_of(run.rows)
    assert 0 not in s.sizes and len(s.sizes) == len({r.size for r in run.rows}) - 1
    # -N 2: every size twice; the median of the pair, and their spread feeds the noise
    twice = copy.deepcopy(run)
    extra = copy.deepcopy(run.rows)
    for r in extra:
        r.out_of_place.time_us *= 1.10
    twice.rows += extra
    (s2,) = stats.series_of(twice.rows)
    p = s2.point(8589934592)
    assert p.repeats == 2 and p.time_us == pytest.approx(18521.8 * 1.05)
    assert p.spread_pct == pytest.approx(100 * math.sqrt(2) * 0.05 / 1.05, rel=1e-3)


def test_same_run_compares_clean():
    run = load_file(AR)[0]
    c = compare_runs(run, copy.deepcopy(run))
    assert all(d.time_delta == 0 and not d.time_beyond and not d.busbw_beyond
               for sc in c.series for d in sc.sizes)
    text = format_comparison(c)
    assert "*" not in "".join(ln for ln in text.splitlines() if re.match(r"\s+\d", ln))
    assert "plateau busbw = median busbw of the sizes within a factor of 4 of the largest" in text
    assert "Avg bus bandwidth" in text


def test_gate_passes_identical_and_small_changes():
    base = load_file(AR)[0]
    assert gate(base, base, max_drop_pct=20).ok
    g = gate(scaled(base, lambda s: s >= 64 * MiB, 1.03), base, max_drop_pct=20)
    assert g.ok and g.checked > 0
    # one GPU run carries no noise: its limit is the assumed noise's; asked for half of that, it
    # cannot see the drop asked for ("cannot confirm", never "ok"); asked for that much, it can
    seen = one_run_limit_pct()
    half = gate(base, base, max_drop_pct=seen / 2)
    assert half.status == "cannot confirm" and half.assumed
    assert gate(base, base, max_drop_pct=seen).ok


def test_gate_catches_large_size_busbw_drop_and_names_sizes():
    base = load_file(AR)[0]
    slow = scaled(base, lambda s: s >= 256 * MiB, 1 / 0.9)  # busbw -10% from 256 MiB up: 6 of the 8 plateau sizes
    # one run alone: the assumed GPU noise sets the limit (`one_run_limit_pct`); a drop beyond
    # what was asked but within that noise is "cannot confirm", never "ok"; one well beyond it fails
    seen = one_run_limit_pct()
    within = scaled(base, lambda s: s >= 256 * MiB, 1 / (1 - 0.6 * seen / 100))
    alone = gate(within, base, max_drop_pct=0.4 * seen)
    assert alone.exit_code == 9 and alone.status == "cannot confirm" and alone.assumed
    j = alone.judgements[0]
    assert j.figure == PLATEAU and j.worse_pct < j.limit_pct
    assert j.worse_pct == pytest.approx(0.6 * seen, rel=0.01)
    beyond = scaled(base, lambda s: s >= 256 * MiB, 1 / (1 - 1.5 * seen / 100))
    assert gate(beyond, base, max_drop_pct=0.4 * seen).exit_code == 7
    g = gate(slow, base, max_drop_pct=5, history=steady(base))
    assert not g.ok and g.exit_code == 7
    assert g.failing_sizes == [4 << 30, 8 << 30]  # the plateau figure: within a factor of 4 of the largest
    assert [(f.metric, f.figure) for f in g.failures] == [(Metric.BUSBW, PLATEAU)]
    assert g.failures[0].delta_pct == pytest.approx(-10, abs=0.2)


def test_gate_limit_is_respected():
    base = load_file(AR)[0]
    slow = scaled(base, lambda s: s >= 64 * MiB, 1 / 0.97)  # -3%
    hist = steady(base, step=0.001)
    assert gate(slow, base, max_drop_pct=5, history=hist).ok
    assert not gate(slow, base, max_drop_pct=2.5, history=hist).ok


def test_gate_catches_small_message_latency_rise():
    base = load_file(AR)[0]
    slow = scaled(base, lambda s: s <= 4096, 1.2)  # 10 of the 14 latency sizes
    # a history long enough to outweigh the GPU prior of small-message time (noise.PRIORS, weighed
    # as at most PRIOR_MAX_DOF: a short history keeps it, test_gate_reference)
    g = gate(slow, base, max_drop_pct=5, history=steady(base, n=100, step=0.0001))
    assert not g.ok and [(f.metric, f.figure) for f in g.failures] == [(Metric.TIME, LATENCY)]
    assert g.failing_sizes == [1 << k for k in range(3, 17)]  # the latency figure: 8 B .. 64 KiB
    assert g.failures[0].delta_pct == pytest.approx(20, abs=0.2)
    # mid sizes are neither plateau nor latency: reported by compare, not gated
    mid = scaled(base, lambda s: s == MiB, 2.0)
    assert gate(mid, base, max_drop_pct=20).ok
    c = compare_runs(base, mid)
    assert [d.size for sc in c.series for d in sc.sizes if d.time_beyond] == [MiB]


def test_gate_one_slow_size_does_not_move_a_figure():
    """A figure is the median change of its sizes: one size that wobbled (a
    preempted iteration on a busy host) is not a regression of the figure."""
    base = load_file(PER_ITER)[0]
    one = scaled(base, lambda s: s == 8, 1.30)
    assert gate(one, base, max_drop_pct=20).ok
    # judged on its own (--every-size): against the -I samples of that size (the noise of whole runs unknown)
    g = gate(one, base, max_drop_pct=5, max_rise_pct=5, every_size=True)
    p = base.rows[0].out_of_place.per_iter
    se = p.cv_pct / 100 / math.sqrt(len(p.times_us) - p.skipped_iterations)  # 14.5 % CV at 8 B
    assert g.failing_sizes == [8]
    # the baseline's standard error on both sides (never the checked run's), Student's t on its samples' dof
    dof = len(p.times_us) - p.skipped_iterations - 1
    assert g.failures[0].limit_pct == pytest.approx(100 * math.expm1(noise.noise_multiple(dof) * math.hypot(se, se)))
    j = next(j for j in g.judgements if j.figure == Figure.of_size(8))
    assert j.noise.source.startswith("the baseline's -I samples") and not j.noise.whole_run_known
    within = scaled(base, lambda s: s == 8, 1.06)  # inside that size's own jitter: beyond 5 %, within its noise
    gw = gate(within, base, max_drop_pct=5, max_rise_pct=5, every_size=True)
    assert not gw.regression and next(j for j in gw.judgements if j.figure == Figure.of_size(8)).verdict == "CANNOT CONFIRM"


def test_gate_refuses_different_collectives():
    with pytest.raises(ArgumentError, match="different collectives"):
        gate(load_file(FIX / "all_gather_1proc_4gpu.txt")[0], load_file(AR)[0])


def test_cli_check_exit_codes(tmp_path, capsys):
    db = str(tmp_path / "r.sqlite")
    base = load_file(AR)[0]
    assert run_store_command(["import", "--db", db, str(AR)]) == 0
    assert run_store_command(["baseline", "set", "h200", "1", "--db", db]) == 0
    ok_log = write_log(scaled(base, lambda s: s >= 64 * MiB, 1.01), tmp_path / "ok.txt")
    bad_log = write_log(scaled(base, lambda s: s >= 64 * MiB, 1 / 0.8), tmp_path / "bad.txt")
    capsys.readouterr()
    # asked for half the drop a one-run baseline can see: exit 9, never 0
    half = f"{one_run_limit_pct() / 2:.2f}%"
    assert run_store_command(["check", str(ok_log), "--against", "h200", "--max-drop", half, "--db", db]) == 9
    assert "cannot confirm: this baseline can only see a drop of" in capsys.readouterr().out
    assert run_store_command(["check", str(ok_log), "--against", "h200", "--max-drop", "20", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "result: OK" in out and "plateau busbw" in out
    assert run_store_command(["check", str(bad_log), "--against", "h200", "--max-drop", "5%",
                           "--db", db]) == 7
    out = capsys.readouterr().out
    assert "result: REGRESSION at sizes " + ", ".join(str(1 << k) for k in range(32, 34)) in out
    assert out.count("REGRESSION  float sum plateau busbw (4 GiB..8 GiB, 2 sizes)") == 1
    assert "20.0% lower" in out and "its noise is assumed from recorded figures" in out
    prior = noise.PRIORS[("gpu", "bandwidth")]
    assert f"{100 * prior.sigma:g}%" in out and prior.evidence in out  # the recorded figures it assumed
    # stored run, json output
    assert run_store_command(["import", "--db", db, str(bad_log)]) == 0
    capsys.readouterr()
    assert run_store_command(["check", "latest", "--against", "h200", "--db", db,
                           "--format", "json"]) == 7
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["failing_sizes"][0] == 4 << 30
    # a looser limit passes (-20% vs 25%)
    assert run_store_command(["check", "latest", "--against", "h200", "--max-drop", "25",
                           "--db", db]) == 0


@pytest.mark.parametrize("argv,needle", [
    (["check", "1", "--against", "nobase"], "no baseline named 'nobase'"),
    (["check", "1", "--against", "h200", "--max-drop", "lots"], "bad --max-drop"),
    (["check", "1", "--against", "h200", "--max-drop", "150%"], "between 0% and 100%"),
    (["check", "7", "--against", "h200"], "unknown run 7"),
    (["check", "1"], "--against"),
    (["compare", "1"], "required"),
    (["check", "2", "--against", "h200"], "different collectives"),
])
def test_cli_check_bad_arguments_exit_255(tmp_path, capsys, argv, needle):
    db = str(tmp_path / "r.sqlite")
    assert run_store_command(["import", "--db", db, str(AR), str(FIX / "alltoall_1proc_4gpu.txt")]) == 0
    assert run_store_command(["baseline", "set", "h200", "1", "--db", db]) == 0
    capsys.readouterr()
    assert run_store_command(argv + ["--db", db]) == 255
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_cli_compare_files_and_ids(tmp_path, capsys):
    db = str(tmp_path / "r.sqlite")
    base = load_file(AR)[0]
    slow = write_log(scaled(base, lambda s: s == 4 * MiB, 1.5), tmp_path / "slow.txt")
    assert run_store_command(["compare", str(AR), str(slow), "--db", db]) == 0  # no store needed
    out = capsys.readouterr().out
    flagged = [ln for ln in out.splitlines() if ln.strip().endswith("SLOWER")]
    assert len(flagged) == 1 and flagged[0].split()[0] == str(4 * MiB) and "+50.0%*" in flagged[0]
    assert run_store_command(["import", "--db", db, str(AR), str(slow)]) == 0
    capsys.readouterr()
    assert run_store_command(["compare", "1", "2", "--db", db, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    sizes = doc["series"][0]["sizes"]
    assert [s["size"] for s in sizes if s["verdict"] == "slower"] == [4 * MiB]
    assert doc["definitions"]["plateau"].startswith("plateau busbw = median busbw of the sizes within")


def test_compare_multi_test_log_needs_a_pick(tmp_path, capsys):
    combined = tmp_path / "all.log"
    combined.write_text(AR.read_text() + (FIX / "all_reduce_2proc_f4.txt").read_text())
    assert run_store_command(["compare", str(combined), str(AR)]) == 255
    assert "holds 2 tests" in capsys.readouterr().err
    assert run_store_command(["compare", f"{combined}#2", str(AR)]) == 0
    out = capsys.readouterr().out
    assert "A = all.log#2" in out and "different rank counts: 2 vs 4" in out
    assert run_store_command(["compare", f"{combined}#3", str(AR)]) == 255
